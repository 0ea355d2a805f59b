"""truncate(): semantic boundaries, code fences, structural JSON cuts and the note."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.engine.prompts import ZH
from app.engine.truncate import NOTE_MAX_CHARS, Truncation, truncate

PLAIN = "[{shown} of {total}]"


def kept(result: str, max_chars: int) -> str:
    return truncate(result, max_chars, note=PLAIN).kept


# --- budget -------------------------------------------------------------------------------


def test_returns_result_unchanged_when_it_fits_the_budget() -> None:
    assert truncate("hello world", 11) == Truncation("hello world", "hello world", False, 11, 11)


def test_zero_max_chars_means_no_truncation() -> None:
    result = "word " * 10_000
    assert truncate(result, 0) == Truncation(result, result, False, len(result), len(result))


def test_negative_max_chars_is_rejected() -> None:
    with pytest.raises(ValueError, match="max_chars"):
        truncate("abc", -1)


def test_text_is_kept_part_and_note_when_truncated() -> None:
    cut = truncate("one two three four", 9, note=PLAIN)
    assert cut == Truncation("one two[7 of 18]", "one two", True, 18, 7)


# --- text boundaries ----------------------------------------------------------------------


def test_cuts_at_last_paragraph_break_inside_budget() -> None:
    result = "First paragraph here.\nStill first.\n\nSecond paragraph.\n\nThird one is long."
    assert kept(result, 60) == "First paragraph here.\nStill first.\n\nSecond paragraph."


def test_treats_a_line_of_spaces_as_a_paragraph_break() -> None:
    result = "First paragraph. Still it goes on.\n   \nSecond paragraph, which is long."
    assert kept(result, 50) == "First paragraph. Still it goes on."


def test_prefers_line_break_when_paragraph_break_keeps_under_half_the_budget() -> None:
    result = "Short.\n\nA much longer second paragraph\nwith a second line that goes on and on."
    assert kept(result, 60) == "Short.\n\nA much longer second paragraph"


def test_cuts_at_last_line_break_when_there_is_no_paragraph_break() -> None:
    result = "line one is here\nline two is here\nline three is here"
    assert kept(result, 40) == "line one is here\nline two is here"


def test_cuts_after_last_sentence_end_when_there_is_no_line_break() -> None:
    result = "One sentence here. Another one here! And a question? And more words follow"
    assert kept(result, 60) == "One sentence here. Another one here! And a question?"


def test_does_not_take_a_dot_inside_a_word_for_a_sentence_end() -> None:
    result = "Version 3.11 of the tool is out and the words keep going on"
    assert kept(result, 16) == "Version 3.11 of"


def test_cuts_after_cjk_sentence_end() -> None:
    result = "这是第一句。这是第二句！这是第三句？这是没有结尾的第四句话"
    assert kept(result, 20) == "这是第一句。这是第二句！这是第三句？"


def test_cuts_cjk_text_without_punctuation_hard_at_the_budget() -> None:
    assert kept("中文字符" * 10, 7) == "中文字符中文字"


def test_cuts_at_word_boundary_when_there_is_no_sentence_end() -> None:
    result = "alpha beta gamma delta epsilon zeta"
    assert kept(result, 20) == "alpha beta gamma"


def test_cuts_hard_at_budget_when_there_is_no_boundary() -> None:
    assert kept("x" * 500, 40) == "x" * 40


def test_cuts_hard_rather_than_keep_less_than_half_the_budget() -> None:
    result = "a " + "b" * 500
    assert kept(result, 40) == "a " + "b" * 38


def test_strips_trailing_whitespace_of_the_kept_part() -> None:
    result = "Sentence one.   \t\n\nSentence two is rather longer than the first"
    assert kept(result, 30) == "Sentence one."


# --- code fences --------------------------------------------------------------------------


def test_cuts_before_the_opening_fence_when_the_budget_ends_inside_a_code_block() -> None:
    result = "Here is the code you asked for.\n```python\nprint(1)\n\nprint(2)\n```\nDone."
    assert kept(result, 55) == "Here is the code you asked for."


def test_cuts_before_a_tilde_fence_that_backticks_do_not_close() -> None:
    result = "Some prose that goes first.\n~~~\na\n```\nb\n\nc\n~~~\nAfter."
    assert kept(result, 45) == "Some prose that goes first."


def test_skips_boundaries_inside_a_closed_code_block() -> None:
    result = "Intro line.\n```\ncode line one\n\ncode line two\n```\nand then some trailing words"
    assert kept(result, 60) == "Intro line.\n```\ncode line one\n\ncode line two\n```"


def test_closes_a_huge_leading_code_block_after_its_last_whole_line() -> None:
    result = "Code:\n```py\n" + "".join(f"x{i} = {i}\n" for i in range(1000)) + "```\n"
    assert kept(result, 40) == "Code:\n```py\nx0 = 0\nx1 = 1\nx2 = 2\n```"


def test_closes_a_leading_block_with_its_own_longer_fence() -> None:
    result = "~~~~\n" + "line\n" * 100 + "~~~~\n"
    assert kept(result, 24) == "~~~~\nline\nline\nline\n~~~~"


def test_cuts_a_single_overlong_code_line_hard_and_closes_the_block() -> None:
    result = "```\n" + "y" * 500 + "\n```"
    assert kept(result, 20) == "```\n" + "y" * 12 + "\n```"


def test_drops_a_leading_block_whose_fences_alone_do_not_fit() -> None:
    result = "```a-very-long-info-string\ncode\n```\n"
    assert kept(result, 20) == ""


# --- JSON ---------------------------------------------------------------------------------


def test_json_array_keeps_leading_items_that_fit() -> None:
    result = json.dumps(list(range(100)))
    assert kept(result, 20) == "[0,1,2,3,4,5,6,7,8]"


def test_json_object_keeps_leading_members_in_order() -> None:
    result = json.dumps({"b": 1, "a": [1, 2, 3], "c": "x" * 100}, indent=2)
    assert kept(result, 30) == '{"b":1,"a":[1,2,3]}'


def test_indented_json_that_fits_compact_is_shown_whole_but_counts_as_truncated() -> None:
    value = {"name": "中文", "items": [1, 2, 3]}
    result = json.dumps(value, indent=4)
    cut = truncate(result, 40, note=PLAIN)
    assert cut.kept == '{"name":"中文","items":[1,2,3]}'
    assert cut.truncated
    assert cut.original_chars == len(result)


def test_descends_into_nested_json_when_the_first_item_does_not_fit() -> None:
    result = json.dumps([{"rows": [[1, 2, 3], [4, 5, 6]], "more": True}, 7])
    assert kept(result, 22) == '[{"rows":[[1,2,3]]}]'


def test_cuts_a_long_json_string_at_a_word_boundary_with_an_ellipsis() -> None:
    result = json.dumps([{"text": "hello world " * 20}])
    assert kept(result, 40) == '[{"text":"hello world hello world…"}]'


def test_counts_escapes_when_cutting_a_json_string() -> None:
    result = json.dumps({"k": '"' * 100})
    cut = kept(result, 20)
    assert len(cut) <= 20
    assert json.loads(cut) == {"k": '"' * 5 + "…"}


def test_json_too_large_for_its_first_member_keeps_an_empty_container() -> None:
    assert kept(json.dumps({"key": 12345678901234567890}), 12) == "{}"


def test_falls_back_to_text_when_the_budget_is_too_small_for_json() -> None:
    assert kept("[1, 2, 3]", 1) == "["


def test_cuts_json_looking_text_that_does_not_parse_as_text() -> None:
    assert kept("[not json] and some words after it", 20) == "[not json] and some"


def test_cuts_deeply_nested_json_as_text() -> None:
    result = "[" * 100_000 + "]" * 100_000
    assert kept(result, 10) == "[" * 10


# --- the note -----------------------------------------------------------------------------


def test_note_shows_shown_and_total_chars_and_how_to_get_more() -> None:
    cut = truncate("word " * 1000, 2000)
    note = cut.text[len(cut.kept) :]
    assert "showing 1,999 of 5,000 chars" in note
    assert "narrow the query" in note


def test_note_follows_the_given_template() -> None:
    cut = truncate("字" * 5000, 1000, note=ZH.truncation_note)
    assert cut.text.endswith(ZH.truncation_note.format(shown=1000, total=5000))


def test_note_is_cut_to_300_chars() -> None:
    cut = truncate("x" * 100, 10, note="{shown}/{total} " * 100)
    assert cut.text == "x" * 10 + ("10/100 " * 100)[:NOTE_MAX_CHARS]


# --- properties ---------------------------------------------------------------------------

PROPERTY = settings(max_examples=200, deadline=None)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30),
    lambda children: (
        st.lists(children, max_size=6) | st.dictionaries(st.text(max_size=8), children, max_size=6)
    ),
    max_leaves=12,
)
json_documents = st.lists(json_values, max_size=8) | st.dictionaries(
    st.text(max_size=8), json_values, max_size=8
)
pieces = st.sampled_from(
    ["word", " ", "\n", "\n\n", ". ", "!", "。", "```", "```py\n", "~~~", "~~~~\n", "\t", "{", "["]
)
texts = st.lists(pieces | st.text(max_size=5), max_size=60).map("".join)
fenced_texts = st.lists(
    st.sampled_from(["```", "```", "", "Some words here.", "more, and more", "x = 1"]), max_size=40
).map("\n".join)
notes = st.text(st.characters(exclude_characters="{}"), max_size=400).map(
    lambda text: text + "{shown:,} of {total}"
)


def budget_for(result: str, data: st.DataObject) -> int:
    """Mostly a budget the result is over, sometimes 0 (no limit) or one it fits."""
    return data.draw(st.just(0) | st.integers(min_value=1, max_value=len(result) + 5))


@PROPERTY
@given(result=texts, note=notes, data=st.data())
def test_kept_fits_the_budget_and_note_fits_its_cap(
    result: str, note: str, data: st.DataObject
) -> None:
    max_chars = budget_for(result, data)
    cut = truncate(result, max_chars, note=note)
    assert cut.truncated == (0 < max_chars < len(result))
    if cut.truncated:
        assert len(cut.kept) <= max_chars
        assert len(cut.text) <= max_chars + NOTE_MAX_CHARS
        assert cut.text.startswith(cut.kept)
    assert (cut.original_chars, cut.shown_chars) == (len(result), len(cut.kept))


@PROPERTY
@given(result=texts, data=st.data())
def test_text_within_the_budget_is_returned_unchanged(result: str, data: st.DataObject) -> None:
    max_chars = data.draw(st.integers(min_value=len(result), max_value=len(result) + 50))
    assert truncate(result, max_chars) == Truncation(
        result, result, False, len(result), len(result)
    )


@PROPERTY
@given(result=st.text(st.characters(exclude_characters="`~[{")), data=st.data())
def test_text_without_fences_or_json_is_cut_to_a_prefix(result: str, data: st.DataObject) -> None:
    assert result.startswith(truncate(result, budget_for(result, data)).kept)


@PROPERTY
@given(result=fenced_texts, data=st.data())
def test_kept_text_never_leaves_a_code_block_open(result: str, data: st.DataObject) -> None:
    cut = truncate(result, budget_for(result, data))
    assert cut.kept.split("\n").count("```") % 2 == 0 or not cut.truncated


@PROPERTY
@given(value=json_documents, indent=st.sampled_from([None, 2]), data=st.data())
def test_kept_json_always_parses(value: object, indent: int | None, data: st.DataObject) -> None:
    result = json.dumps(value, indent=indent)
    max_chars = data.draw(st.just(0) | st.integers(min_value=2, max_value=len(result) + 5))
    parsed = json.loads(truncate(result, max_chars).kept)
    compact = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    if max_chars == 0 or len(compact) <= max_chars:
        assert parsed == value  # nothing was dropped
