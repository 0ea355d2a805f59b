"""Semantic-boundary and JSON-aware truncation of tool results (DESIGN.md §4).

`truncate(result, max_chars)` keeps at most `max_chars` characters of a result and appends a
note (at most 300 characters) saying how much is shown. `max_chars == 0` turns truncation off,
and a result of at most `max_chars` characters is returned unchanged. So `truncated` is exactly
`0 < max_chars < len(result)`, and `len(text) <= max_chars + 300` always.

JSON. When the stripped result parses as a JSON object or array (and `max_chars >= 2`), `kept`
is compact JSON (`ensure_ascii=False`, no spaces) that still parses: the leading array items or
object members, in order, that fit whole. When not even the first one fits, it is descended
into: containers recursively, a long string cut at a word boundary and ended with "…" inside
its quotes. A document that fits once made compact is shown compact, with nothing dropped, but
still counts as truncated: the model did not see the result as it was. Parsing is linear in
the input; the encoder stops as soon as the budget is passed, so the cut costs about the
budget per level descended. Text that does not parse, or nests too deep to walk, is cut as text.

Text. The cut is the last boundary inside the budget of the best kind that keeps at least half
the budget (positions rounded down): a paragraph break (a blank line), else a line break, else
a sentence end (`.`, `!`, `?` before whitespace, or `。`, `！`, `？`), else whitespace between
words. With no such boundary in the upper half, the text is cut hard at the budget: a lower
boundary would throw away more than the cut word is worth. Trailing whitespace is stripped.

Fenced code blocks (``` or ~~~ indented at most 3 spaces, closed by a fence of the same
character at least as long, as in CommonMark) are never cut inside. A boundary inside a closed
block is skipped. When the budget ends inside a block, the cut goes before its opening fence if
that keeps at least half the budget; otherwise (a result that opens with a huge block) the block
is cut after its last whole line that fits and closed with its own fence, so the kept text is
still a well-formed block. A single code line too long to fit is cut hard; a block whose
opening line and closing fence do not fit at all is dropped (the cut goes before it).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from app.engine import jsontext
from app.engine.prompts import EN

NOTE_MAX_CHARS = 300
"""The note as appended is cut to this many characters."""

ELLIPSIS = "…"

_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
_FENCE = re.compile(r"^ {0,3}(?P<fence>`{3,}|~{3,})(?P<info>[^\n]*)$", re.MULTILINE)
_BOUNDARIES: tuple[tuple[re.Pattern[str], bool], ...] = (
    # (pattern, cut after the match rather than before it), best kind first
    (re.compile(r"\n[ \t]*\n"), False),
    (re.compile(r"\n"), False),
    (re.compile(r"[.!?](?=\s)|[。！？]"), True),
    (re.compile(r"\s"), False),
)


@dataclass(slots=True)
class Truncation:
    """A result as the model sees it, and what was kept of it. Immutable by contract, not
    frozen: one is made per tool result (see `app.engine.steps`)."""

    text: str
    """What the model sees: `kept` and the note when truncated, else the whole result."""
    kept: str
    """The part of the result that was kept, without the note."""
    truncated: bool
    original_chars: int
    """len(result)."""
    shown_chars: int
    """len(kept)."""


def truncate(result: str, max_chars: int, note: str = EN.truncation_note) -> Truncation:
    """Fit `result` into `max_chars` characters (0: no limit); `note` has {shown} and {total}."""
    if max_chars < 0:
        raise ValueError(f"max_chars must be 0 (no limit) or positive, not {max_chars}")
    total = len(result)
    if max_chars == 0 or total <= max_chars:
        return Truncation(result, result, False, total, total)
    kept = _cut_json(result, max_chars)
    if kept is None:
        kept = _cut_text(result, max_chars)
    shown = len(kept)
    appended = note.format(shown=shown, total=total)[:NOTE_MAX_CHARS]
    return Truncation(kept + appended, kept, True, total, shown)


# --- JSON ---------------------------------------------------------------------------------


class _Overflow(Exception):
    """The JSON being written would pass its budget."""


def _cut_json(result: str, budget: int) -> str | None:
    """Compact JSON of at most `budget` chars, or None when `result` is not an object/array."""
    stripped = result.strip()
    if budget < 2 or stripped[:1] not in ("[", "{"):
        return None
    try:
        return _fit(jsontext.loads(stripped), budget)
    except ValueError:  # not JSON, or nested too deep to walk (jsontext)
        return None


def _fit(value: object, room: int) -> str | None:
    """The longest leading part of `value` whose compact JSON fits `room`, or None."""
    if isinstance(value, list):
        if room < 2:
            return None
        items: list[str] = []
        used = 2
        for item in value:
            encoded = _dump_within(item, room - used - bool(items))
            if encoded is None:
                break
            items.append(encoded)
            used += len(encoded) + (len(items) > 1)
        if not items and value:
            first = _fit(value[0], room - 2)
            items = [first] if first is not None else []
        return "[" + ",".join(items) + "]"
    if isinstance(value, dict):
        if room < 2:
            return None
        members: list[str] = []
        used = 2
        for key, item in value.items():
            encoded = _dump_within({key: item}, room - used + 2 - bool(members))
            if encoded is None:
                break
            members.append(encoded[1:-1])
            used += len(encoded) - 2 + (len(members) > 1)
        if not members and value:
            key, item = next(iter(value.items()))
            name = _JSON.encode(key) + ":"
            first = _fit(item, room - 2 - len(name))
            members = [name + first] if first is not None else []
        return "{" + ",".join(members) + "}"
    whole = _dump_within(value, room)
    if whole is None and isinstance(value, str):
        return _cut_string(value, room)
    return whole


def _dump_within(value: object, room: int) -> str | None:
    """Compact JSON of `value` if it is at most `room` chars; stops early when it is not."""
    out: list[str] = []
    try:
        _write(value, room, out)
    except _Overflow:
        return None
    return "".join(out)


def _write(value: object, room: int, out: list[str]) -> int:
    """Append compact JSON of `value` to `out`; return the room left, or raise _Overflow."""
    if isinstance(value, list):
        room = _put("[", room, out)
        for index, item in enumerate(value):
            if index:
                room = _put(",", room, out)
            room = _write(item, room, out)
        return _put("]", room, out)
    if isinstance(value, dict):
        room = _put("{", room, out)
        for index, (key, item) in enumerate(value.items()):
            room = _put(("," if index else "") + _JSON.encode(key) + ":", room, out)
            room = _write(item, room, out)
        return _put("}", room, out)
    if isinstance(value, str) and len(value) + 2 > room:
        raise _Overflow  # escaping never makes a string shorter
    return _put(_JSON.encode(value), room, out)


def _put(piece: str, room: int, out: list[str]) -> int:
    if len(piece) > room:
        raise _Overflow
    out.append(piece)
    return room - len(piece)


def _cut_string(value: str, room: int) -> str | None:
    """A JSON string of at most `room` chars: a word-boundary prefix of `value` and "…"."""
    space = room - 3  # the quotes and the ellipsis
    if space < 0:
        return None
    end = min(len(value), space)
    excess = len(_JSON.encode(value[:end])) - 2 - space
    while excess > 0:  # escapes made it longer: give back characters from the end
        end -= 1
        excess -= len(_JSON.encode(value[end])) - 2
    for index in range(end - 1, end // 2 - 1, -1):
        if value[index].isspace():
            end = index
            break
    return _JSON.encode(value[:end].rstrip())[:-1] + ELLIPSIS + '"'


# --- text ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Block:
    """A fenced code block: the opening line starts at `start` and ends at `body`."""

    start: int
    body: int
    fence: str
    end: int  # just after the closing fence line; past the text when never closed


def _cut_text(text: str, budget: int) -> str:
    floor = max(1, budget // 2)
    blocks = _blocks(text, budget)
    if blocks and blocks[-1].start < budget < blocks[-1].end:
        block = blocks[-1]
        if block.start < floor:
            inside = _cut_inside(text, block, budget)
            if inside is not None:
                return inside
        return text[: block.start].rstrip()
    cut = _last_boundary(text, floor, budget, blocks)
    return text[: budget if cut is None else cut].rstrip()


def _blocks(text: str, budget: int) -> list[_Block]:
    """The fenced blocks that start at or before `budget`, in order."""
    line_end = text.find("\n", budget)
    scan_to = len(text) if line_end < 0 else line_end
    blocks: list[_Block] = []
    opened: re.Match[str] | None = None
    for match in _FENCE.finditer(text, 0, scan_to):
        fence, info = match["fence"], match["info"]
        if opened is None:
            if not (fence[0] == "`" and "`" in info):  # backtick info has no backticks
                opened = match
            continue
        marker = opened["fence"]
        if fence[0] == marker[0] and len(fence) >= len(marker) and not info.strip():
            blocks.append(_Block(opened.start(), opened.end(), marker, match.end()))
            opened = None
    if opened is not None:
        blocks.append(_Block(opened.start(), opened.end(), opened["fence"], len(text) + 1))
    return blocks


def _cut_inside(text: str, block: _Block, budget: int) -> str | None:
    """Cut inside `block` after its last whole line that fits, and close it; None if none."""
    closing = "\n" + block.fence
    limit = budget - len(closing)
    if limit < block.body:
        return None
    cut = text.rfind("\n", block.body + 1, limit + 1)
    kept = text[: limit if cut < 0 else cut].rstrip()
    return kept + closing


def _last_boundary(text: str, floor: int, budget: int, blocks: list[_Block]) -> int | None:
    """The last cut position in [floor, budget] of the best kind, outside every block."""
    segments: list[tuple[int, int]] = []
    low = floor
    for block in blocks:
        if block.end <= low:
            continue
        if block.start >= low:
            segments.append((low, block.start))
        low = block.end
    if low <= budget:
        segments.append((low, budget))
    for pattern, after in _BOUNDARIES:
        for low, high in reversed(segments):
            best = None
            for match in pattern.finditer(text, low, min(len(text), high + 2)):
                cut = match.end() if after else match.start()
                if cut <= high:
                    best = cut
            if best is not None:
                return best
    return None
