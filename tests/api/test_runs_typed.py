"""Typed answers over HTTP (DESIGN §12): `output_schema` on POST /runs, checked at creation (a
422 naming the problem), `result.output` and `result.output_errors` on the run and its terminal
event, the run ending `incomplete` with `invalid_output`, `max_output_retries` within its cap,
and results of runs without a schema as they always were."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.api.kit import (
    error_of,
    finish,
    finishing,
    json_events,
    run_to_end,
    scripted,
    settings,
)
from tests.fakes.service import api_client

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "population": {"type": "integer", "minimum": 1}},
    "required": ["city", "population"],
}
VALID = {"city": "Paris", "population": 2_100_000}


def answering(value: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": "task_finished", "arguments": {"answer": value}}]}


async def test_a_valid_answer_is_the_runs_output_and_its_json_text_the_answer() -> None:
    async with api_client(settings()) as client:
        run = await run_to_end(client, scripted(answering(VALID), output_schema=SCHEMA))
        events = (await json_events(client, run["id"]))["events"]

    assert run["status"] == "completed"
    assert run["output_schema"] == SCHEMA
    result = run["result"]
    assert (result["output"], result["output_errors"]) == (VALID, None)
    assert json.loads(result["answer"]) == VALID
    assert (result["reason"], result["degraded"]) == ("finished", False)
    assert events[-1]["type"] == "run.completed"
    assert events[-1]["result"] == result


async def test_invalid_answers_are_shown_their_errors_then_end_the_run_invalid_output() -> None:
    wrong = {"city": "Paris", "population": 0}
    body = scripted(
        answering(wrong),
        answering("Paris"),
        output_schema=SCHEMA,
        settings={"max_output_retries": 1},
    )
    async with api_client(settings()) as client:
        run = await run_to_end(client, body)
        events = (await json_events(client, run["id"]))["events"]

    assert run["status"] == "incomplete"
    result = run["result"]
    assert (result["reason"], result["degraded"], result["output"]) == (
        "invalid_output",
        True,
        None,
    )
    assert result["answer"] == '"Paris"'
    assert result["output_errors"] == [{"path": "$", "message": "'Paris' is not of type 'object'"}]
    kinds = [e["kind"] for e in events if e["type"] == "intervention"]
    assert kinds == ["invalid_output", "invalid_output"]
    first = next(e for e in events if e["type"] == "observation")
    assert (first["tool"], first["is_error"]) == ("task_finished", True)
    assert "- $.population: 0 is less than the minimum of 1" in first["content"]
    assert events[-1]["type"] == "run.incomplete"
    assert events[-1]["result"]["output_errors"] == result["output_errors"]


async def test_a_run_without_a_schema_has_the_result_it_always_had() -> None:
    async with api_client(settings()) as client:
        run = await run_to_end(client, finishing("42"))
    assert run["result"] == {"answer": "42", "reason": "finished", "degraded": False}
    assert run["output_schema"] is None


async def test_a_typed_run_without_an_answer_shows_a_null_output() -> None:
    body = scripted({"content": "x"}, output_schema=SCHEMA, settings={"max_steps": 1})
    body["settings"]["final_answer_on_limit"] = False
    async with api_client(settings()) as client:
        run = await run_to_end(client, body)
    assert run["result"] == {
        "answer": None,
        "output": None,
        "output_errors": None,
        "reason": "max_steps",
        "degraded": False,
    }


@pytest.mark.parametrize(
    ("schema", "problem"),
    [
        ({"type": "objekt"}, "at 'type'"),
        ({"properties": {"a": {"minimum": "one"}}}, "at 'properties.a.minimum'"),
        ({"$ref": "#/$defs/missing"}, "the reference '#/$defs/missing' points to nothing"),
    ],
    ids=["bad-type", "bad-keyword-value", "dangling-ref"],
)
async def test_an_invalid_schema_is_422_naming_the_problem(
    schema: dict[str, Any], problem: str
) -> None:
    async with api_client(settings()) as client:
        response = await client.post("/runs", json=finishing(output_schema=schema))

    error = error_of(response, 422, "validation_error")
    assert error["details"]["field"] == "output_schema"
    assert "is not a valid JSON Schema (draft 2020-12)" in error["message"]
    assert problem in error["message"]


@pytest.mark.parametrize("schema", [True, [], "object"], ids=["boolean", "array", "string"])
async def test_a_schema_that_is_not_an_object_is_422(schema: Any) -> None:
    async with api_client(settings()) as client:
        response = await client.post("/runs", json=finishing(output_schema=schema))
    error = error_of(response, 422, "validation_error")
    assert error["details"]["errors"][0]["field"] == "output_schema"


async def test_a_schema_nesting_too_deep_is_422() -> None:
    deep: dict[str, Any] = {"type": "object"}
    for _ in range(40):
        deep = {"type": "object", "properties": {"a": deep}}
    async with api_client(settings()) as client:
        response = await client.post("/runs", json=finishing(output_schema=deep))
    error = error_of(response, 422, "validation_error")
    assert "nests deeper than" in error["message"]


async def test_max_output_retries_over_its_cap_is_422_naming_the_cap() -> None:
    async with api_client(settings()) as client:
        body = finishing(output_schema=SCHEMA, settings={"max_output_retries": 11})
        response = await client.post("/runs", json=body)
        error = error_of(response, 422, "validation_error")
        assert error["details"]["field"] == "settings.max_output_retries"
        assert error["details"]["cap"] == 10
        # and the server's cap can be lowered
    async with api_client(settings(max_output_retries=1, max_output_retries_limit=1)) as client:
        body = finishing(output_schema=SCHEMA, settings={"max_output_retries": 2})
        error = error_of(await client.post("/runs", json=body), 422, "validation_error")
        assert error["details"]["cap"] == 1


async def test_max_output_retries_defaults_to_the_servers_setting() -> None:
    async with api_client(settings(max_output_retries=0)) as client:
        run = await run_to_end(client, scripted(answering("no"), output_schema=SCHEMA))
    assert run["settings"]["max_output_retries"] == 0
    assert run["result"]["reason"] == "invalid_output"


async def test_without_the_stop_tool_a_json_reply_is_the_answer() -> None:
    body = scripted(
        {"content": "It is Paris."},
        {"content": json.dumps(VALID)},
        output_schema=SCHEMA,
        settings={"stop_tool": False},
    )
    async with api_client(settings()) as client:
        run = await run_to_end(client, body)
        events = (await json_events(client, run["id"]))["events"]
    assert (run["result"]["reason"], run["result"]["output"]) == ("answered", VALID)
    kinds = [e["kind"] for e in events if e["type"] == "intervention"]
    assert kinds == ["invalid_output"]


async def test_a_degraded_answer_at_a_limit_is_validated() -> None:
    body = scripted(
        {"content": "thinking"},
        {"content": json.dumps(VALID)},
        output_schema=SCHEMA,
        settings={"max_steps": 1, "max_nudges": 5},
    )
    async with api_client(settings()) as client:
        run = await run_to_end(client, body)
    result = run["result"]
    assert (result["reason"], result["degraded"], result["output"]) == ("max_steps", True, VALID)


async def test_the_run_list_carries_the_output() -> None:
    async with api_client(settings()) as client:
        run = await run_to_end(client, scripted(answering(VALID), output_schema=SCHEMA))
        listed = (await client.get("/runs")).json()["runs"]
    (row,) = [r for r in listed if r["id"] == run["id"]]
    assert row["result"]["output"] == VALID


async def test_a_follow_up_of_a_typed_run_has_a_schema_only_if_it_gives_one() -> None:
    async with api_client(settings()) as client:
        first = await run_to_end(client, scripted(answering(VALID), output_schema=SCHEMA))
        body = scripted(finish("thanks"), previous_run_id=first["id"])
        second = await run_to_end(client, body)
    assert second["result"] == {"answer": "thanks", "reason": "finished", "degraded": False}
    assert second["output_schema"] is None
