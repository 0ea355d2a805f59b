"""A pattern cannot stall the service (issue #34, item 2): a schema's `pattern` and
`patternProperties` are matched by RE2, in time linear in the text, so `^(a+)+$` against a
long answer or tool argument (minutes with Python's backtracking `re` at 35 characters) is
checked at once while `/healthz` keeps answering; a construct RE2 does not support is a 422 at
POST naming it; patterns read as ECMA-262 (JSON Schema's dialect), not as Python's `re`."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from app.tools.base import compiled_schema
from tests.api.kit import cancel, error_of, finishing, scripted, settings
from tests.fakes.service import served_app, sse_events

EVIL = "^(a+)+$"
LONG = "a" * 20_000 + "!"  # (Python's re: 2**20000 ways to fail)
HANG = {"content": "thinking it over", "delay_s": 600}


def _answer(value: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": "task_finished", "arguments": {"answer": value}}]}


def _lookup(arguments: dict[str, Any]) -> dict[str, Any]:
    return {"tool_calls": [{"name": "lookup", "arguments": arguments}]}


TOOL = {
    "name": "lookup",
    "description": "Look up.",
    "url": "https://api.example.com/lookup",
    "parameters": {
        "type": "object",
        "properties": {"q": {"type": "string", "pattern": EVIL}},
        "patternProperties": {"^(b+)+$": {"type": "integer"}},
    },
}


@pytest.mark.parametrize(
    ("body", "seen"),
    [
        (
            scripted(
                _answer({"code": LONG}),
                HANG,
                output_schema={
                    "type": "object",
                    "properties": {"code": {"type": "string", "pattern": EVIL}},
                },
            ),
            "does not match",
        ),
        (scripted(_lookup({"q": LONG}), HANG, http_tools=[TOOL]), "for lookup: at 'q'"),
        (
            scripted(_lookup({"b" * 20_000 + "!": 1, "bb": "x"}), HANG, http_tools=[TOOL]),
            "at 'bb': 'x' is not of type 'integer'",
        ),
    ],
    ids=["answer", "tool-argument", "property-name"],
)
async def test_a_pathological_pattern_is_checked_while_healthz_answers(
    body: dict[str, Any], seen: str
) -> None:
    config = settings(http_tool_allow_hosts=["api.example.com"])
    async with served_app(config) as (_, client):
        created = await client.post("/runs", json=body)
        assert created.status_code == 202, created.text
        run_id = created.json()["id"]
        got: list[str] = []
        with anyio.fail_after(60):  # Python's re would hold the loop for longer than the universe
            async for event in sse_events(client, f"/runs/{run_id}/events"):
                got.append(str(event.data))
                if event.event == "step.started" and event.data["step"] == 2:
                    break
        assert seen in "".join(got)
        # the check is done and the run goes on (its next model call hangs): the service is
        # free, /healthz answers as usual
        with anyio.fail_after(10):
            health = await client.get("/healthz")
        assert health.status_code == 200
        await cancel(client, run_id)


@pytest.mark.parametrize(
    ("pattern", "named"),
    [
        (r"^(a)\1$", "invalid escape sequence: \\1"),
        (r"^(?=a)", "(?="),
        (r"^(?!a)", "(?!"),
        (r"(?<=a)b", "(?<="),
        (r"(?<!a)b", "(?<!"),
        (r"(?<x>a)\k<x>", "\\k"),
    ],
    ids=[
        "backreference",
        "lookahead",
        "negative-lookahead",
        "lookbehind",
        "neg-lookbehind",
        "named-backref",
    ],
)
async def test_a_construct_re2_does_not_support_is_422_at_post_naming_it(
    pattern: str, named: str
) -> None:
    schema = {"type": "object", "properties": {"code": {"type": "string", "pattern": pattern}}}
    tool = {**TOOL, "parameters": {"type": "object", "patternProperties": {pattern: {}}}}
    async with served_app(settings(http_tool_allow_hosts=["api.example.com"])) as (_, client):
        output = await client.post("/runs", json=finishing(output_schema=schema))
        tools = await client.post("/runs", json=finishing(http_tools=[tool]))

    error = error_of(output, 422, "validation_error")
    assert error["details"]["field"] == "output_schema"
    assert "at 'properties.code.pattern'" in error["message"]
    assert named in error["message"]
    assert "backreferences and lookaround are not supported" in error["message"]
    error = error_of(tools, 422, "validation_error")
    assert error["details"]["field"] == "http_tools[0].parameters"
    assert named in error["message"]


@pytest.mark.parametrize(
    ("pattern", "text", "matches"),
    [
        (r"^\u0041+$", "AAA", True),  # ECMA's \uXXXX
        (r"^\u{1F600}$", "\U0001f600", True),
        (r"^\uD83D\uDE00$", "\U0001f600", True),  # a surrogate pair: one character
        (r"^\cJ$", "\n", True),
        (r"^a$", "a\n", False),  # ECMA's $ is the end (Python's also before a final newline)
        (r"^\d+$", "١٢", False),  # ECMA's \d is ASCII (Python's str patterns: any digit)
        (r"^\w+$", "é", False),
        (r"^(?<year>\d{4})-\d\d$", "2026-12", True),
        (r"\p{Lu}", "É", True),
        (r"^a\/b$", "a/b", True),
        (r"colou?r", "my colour", True),  # unanchored: found anywhere, as ECMA's test()
    ],
)
def test_patterns_read_as_ecma_262(pattern: str, text: str, matches: bool) -> None:
    validator = compiled_schema({"type": "string", "pattern": pattern}).validator
    assert validator is not None
    assert validator.is_valid(text) is matches


def test_additional_and_unevaluated_properties_see_pattern_properties_through_re2() -> None:
    long_name = "b" * 20_000 + "!"
    additional = compiled_schema(
        {"patternProperties": {"^(b+)+$": {}}, "additionalProperties": False}
    ).validator
    unevaluated = compiled_schema(
        {"allOf": [{"patternProperties": {"^(b+)+$": {}}}], "unevaluatedProperties": False}
    ).validator
    assert additional is not None
    assert unevaluated is not None
    # (Python's re would not end: pytest's timeout is the bound)
    assert additional.is_valid({"bbb": 1})
    assert not additional.is_valid({long_name: 1})
    assert unevaluated.is_valid({"bbb": 1})
    assert not unevaluated.is_valid({long_name: 1})
