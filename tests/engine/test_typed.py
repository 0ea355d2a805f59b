"""Typed answers (DESIGN §12), engine side with the scripted model: the run is done when its
answer validates against `output_schema`. The stop tool's `answer` parameter is the schema; a
plain answer (stop tool off) must be JSON that validates; an invalid answer is shown its
errors and the run goes on, `max_output_retries` times, then ends with `invalid_output`; the
degraded final answer and the answer at `nudge_limit` are checked too."""

from __future__ import annotations

import json
from typing import Any

from app.engine.loop import run_react
from app.engine.policies import InterventionKind, Limits, StopReason
from app.engine.ports import Reply, ToolSpec
from app.engine.prompts import EN
from app.engine.state import RunState
from app.engine.steps import Checkpoint, Intervention, Observation
from app.engine.typed import MAX_OUTPUT_ERRORS, finish_parameters
from app.llm.scripted import FunctionModel, ScriptedModel
from app.output import output_schema
from tests.engine.kit import call, collect, echo_tool, ending, of_type, says

SCHEMA = {
    "type": "object",
    "properties": {
        "verdict": {"enum": ["yes", "no"]},
        "evidence": {"type": "array", "items": {"type": "string"}, "minItems": 1},
    },
    "required": ["verdict", "evidence"],
    "additionalProperties": False,
}
VALID = {"verdict": "yes", "evidence": ["the page says so"]}
INVALID = {"verdict": "maybe", "evidence": []}
OUTPUT = output_schema(SCHEMA)


def answers(value: Any) -> Reply:
    return says(None, call("task_finished", {"answer": value}))


def observations(steps: list[Any]) -> list[Observation]:
    return of_type(steps, Observation)


def rejections(steps: list[Any]) -> list[Intervention]:
    return [i for i in of_type(steps, Intervention) if i.kind == InterventionKind.INVALID_OUTPUT]


async def test_task_finished_takes_the_schema_as_its_answer_parameter() -> None:
    seen: list[list[ToolSpec]] = []

    def reply(messages: list[Any], tools: list[ToolSpec]) -> Reply:
        seen.append(tools)
        return answers(VALID)

    await collect(run_react(task="t", model=FunctionModel(reply), output=OUTPUT))
    (finish,) = [t for t in seen[0] if t.name == "task_finished"]
    answer = finish.parameters["properties"]["answer"]
    assert {k: v for k, v in answer.items() if k != "description"} == SCHEMA
    assert finish.parameters["required"] == ["answer"]


def test_the_schemas_definitions_move_to_the_parameters_root_where_refs_find_them() -> None:
    schema = {
        "type": "object",
        "properties": {"item": {"$ref": "#/$defs/item"}, "again": {"$ref": "#/properties/item"}},
        "$defs": {"item": {"type": "string"}},
    }
    parameters = finish_parameters(schema, EN)
    assert parameters["$defs"] == {"item": {"type": "string"}}
    answer = parameters["properties"]["answer"]
    assert "$defs" not in answer
    assert answer["properties"]["item"] == {"$ref": "#/$defs/item"}
    assert answer["properties"]["again"] == {"$ref": "#/properties/answer/properties/item"}
    # the tool's parameters validate an answer as the schema does
    tool = output_schema(parameters)
    assert tool.errors({"answer": {"item": "a", "again": "b"}}) == []
    assert [e.path for e in tool.errors({"answer": {"item": 1, "again": 2}})] == [
        "$.answer.item",
        "$.answer.again",
    ]


async def test_a_valid_answer_ends_the_run_with_its_value_and_its_json_text() -> None:
    model = ScriptedModel([answers(VALID)])
    end = ending(await collect(run_react(task="t", model=model, output=OUTPUT)))
    assert end.reason == StopReason.FINISHED
    assert end.output == VALID
    assert json.loads(end.answer or "") == VALID
    assert end.output_errors is None
    assert not end.degraded


async def test_an_invalid_answer_is_an_error_observation_with_every_error_and_the_run_goes_on() -> (
    None
):
    model = ScriptedModel([answers(INVALID), answers(VALID)])
    steps = await collect(run_react(task="t", model=model, output=OUTPUT))
    (rejected,) = observations(steps)
    assert (rejected.tool, rejected.is_error) == ("task_finished", True)
    assert "- $.verdict: 'maybe' is not one of ['yes', 'no']" in rejected.content
    assert "- $.evidence: [] should be non-empty" in rejected.content
    assert "(2 tries left)" in rejected.content
    (marked,) = rejections(steps)
    assert marked.message == rejected.content
    # the model saw its errors as the result of its call
    tool_message = model.calls[1].messages[-1]
    assert (tool_message["role"], tool_message["content"]) == ("tool", rejected.content)
    end = ending(steps)
    assert (end.reason, end.output) == (StopReason.FINISHED, VALID)


async def test_the_answer_after_max_output_retries_invalid_ones_ends_the_run_invalid_output() -> (
    None
):
    model = ScriptedModel([answers(INVALID)] * 3)
    steps = await collect(run_react(task="t", model=model, output=OUTPUT))
    assert len(rejections(steps)) == 3  # the default: 2 more tries after the first
    assert "(1 tries left)" in observations(steps)[1].content
    assert "(0 tries left)" in observations(steps)[2].content
    end = ending(steps)
    assert end.reason == StopReason.INVALID_OUTPUT
    assert end.degraded
    assert end.output is None
    assert json.loads(end.answer or "") == INVALID
    assert [(e.path, e.message) for e in end.output_errors or ()] == [
        ("$.verdict", "'maybe' is not one of ['yes', 'no']"),
        ("$.evidence", "[] should be non-empty"),
    ]


async def test_max_output_retries_zero_ends_the_run_at_the_first_invalid_answer() -> None:
    limits = Limits(max_output_retries=0)
    model = ScriptedModel([answers(INVALID)])
    end = ending(await collect(run_react(task="t", model=model, output=OUTPUT, limits=limits)))
    assert end.reason == StopReason.INVALID_OUTPUT
    assert len(model.calls) == 1


async def test_a_string_answer_holding_json_that_validates_is_taken_as_that_json() -> None:
    model = ScriptedModel([answers(json.dumps(VALID))])
    end = ending(await collect(run_react(task="t", model=model, output=OUTPUT)))
    assert (end.reason, end.output) == (StopReason.FINISHED, VALID)


async def test_task_finished_without_an_answer_is_a_bad_call_not_an_invalid_answer() -> None:
    model = ScriptedModel([says(None, call("task_finished", {})), answers(VALID)])
    steps = await collect(run_react(task="t", model=model, output=OUTPUT))
    assert "'answer' is a required property" in observations(steps)[0].content
    assert rejections(steps) == []
    assert ending(steps).reason == StopReason.FINISHED


async def test_of_two_finishing_calls_a_valid_answer_ends_the_run() -> None:
    reply = says(
        None, call("task_finished", {"answer": INVALID}), call("task_finished", {"answer": VALID})
    )
    end = ending(await collect(run_react(task="t", model=ScriptedModel([reply]), output=OUTPUT)))
    assert (end.reason, end.output) == (StopReason.FINISHED, VALID)


async def test_an_answer_json_cannot_carry_on_is_invalid() -> None:
    reply = says(None, call("task_finished", '{"answer": {"verdict": "yes", "evidence": [NaN]}}'))
    model = ScriptedModel([reply, answers(VALID)])
    steps = await collect(run_react(task="t", model=model, output=OUTPUT))
    assert "$.evidence[0]: is not a finite number" in observations(steps)[0].content


async def test_at_most_fifty_errors_are_listed_and_the_rest_counted() -> None:
    many = output_schema({"type": "array", "items": {"type": "integer"}})
    model = ScriptedModel([answers(["x"] * 60)])
    limits = Limits(max_output_retries=0)
    end = ending(await collect(run_react(task="t", model=model, output=many, limits=limits)))
    assert len(end.output_errors or ()) == MAX_OUTPUT_ERRORS
    assert end.output_errors is not None
    assert end.output_errors[-1].path == "$[49]"


async def test_the_errors_note_how_many_more_there_were() -> None:
    many = output_schema({"type": "array", "items": {"type": "integer"}})
    model = ScriptedModel([answers(["x"] * 60), answers([1])])
    steps = await collect(run_react(task="t", model=model, output=many))
    assert "(60 errors)" in observations(steps)[0].content
    assert "- (and 10 more)" in observations(steps)[0].content


# -- the stop tool off: the reply's text is the answer ------------------------------------------


async def test_without_the_stop_tool_a_json_reply_that_validates_is_the_answer() -> None:
    limits = Limits(stop_tool=False)
    model = ScriptedModel([says("```json\n" + json.dumps(VALID) + "\n```")])
    steps = await collect(run_react(task="t", model=model, output=OUTPUT, limits=limits))
    end = ending(steps)
    assert (end.reason, end.output, end.degraded) == (StopReason.ANSWERED, VALID, False)
    # asked for as response_format, and given in the system prompt
    assert model.calls[0].answer_schema == SCHEMA
    system = model.calls[0].messages[0]
    assert system["role"] == "system"
    assert json.dumps(SCHEMA, separators=(",", ":")) in system["content"]
    # the conversation keeps the answer's JSON text (what a follow-up starts from)
    final = [s for s in steps if isinstance(s, Checkpoint)][-1].state["messages"][-1]
    assert final == {"role": "assistant", "content": json.dumps(VALID)}


async def test_without_the_stop_tool_other_text_is_an_invalid_answer_not_a_nudge() -> None:
    limits = Limits(stop_tool=False)
    model = ScriptedModel([says("I think yes."), says(json.dumps(VALID))])
    steps = await collect(run_react(task="t", model=model, output=OUTPUT, limits=limits))
    (marked,) = rejections(steps)
    assert "- $: is not JSON" in marked.message
    assert model.calls[1].messages[-1] == {"role": "user", "content": marked.message}
    assert not [i for i in of_type(steps, Intervention) if i.kind == InterventionKind.STOP_PROMPT]
    assert ending(steps).reason == StopReason.ANSWERED


async def test_without_the_stop_tool_invalid_replies_end_the_run_invalid_output() -> None:
    limits = Limits(stop_tool=False, max_output_retries=1)
    model = ScriptedModel([says(json.dumps(INVALID)), says("no JSON here")])
    end = ending(await collect(run_react(task="t", model=model, output=OUTPUT, limits=limits)))
    assert (end.reason, end.answer, end.output) == (StopReason.INVALID_OUTPUT, "no JSON here", None)
    assert [e.path for e in end.output_errors or ()] == ["$"]


async def test_with_the_stop_tool_the_models_turns_are_not_asked_for_json() -> None:
    model = ScriptedModel([says("thinking", call("echo", {"text": "a"})), answers(VALID)])
    await collect(run_react(task="t", model=model, tools=[echo_tool()], output=OUTPUT))
    assert [c.answer_schema for c in model.calls] == [None, None]


async def test_without_a_schema_nothing_changes() -> None:
    model = ScriptedModel([says(None, call("task_finished", {"answer": "42"}))])
    end = ending(await collect(run_react(task="t", model=model)))
    assert (end.answer, end.output, end.output_errors) == ("42", None, None)
    assert model.calls[0].answer_schema is None


# -- answers at a limit ----------------------------------------------------------------------


async def test_the_degraded_final_answer_asks_for_json_matching_the_schema_and_is_validated() -> (
    None
):
    limits = Limits(max_steps=1)
    model = ScriptedModel([says("working", call("echo", {"text": "a"})), says(json.dumps(VALID))])
    steps = await collect(
        run_react(task="t", model=model, tools=[echo_tool()], output=OUTPUT, limits=limits)
    )
    final = model.calls[-1]
    assert final.answer_schema == SCHEMA
    prompt = final.messages[-1]["content"]
    assert "max_steps" in prompt
    assert json.dumps(SCHEMA, separators=(",", ":")) in prompt
    end = ending(steps)
    assert (end.reason, end.degraded, end.output) == (StopReason.MAX_STEPS, True, VALID)


async def test_an_invalid_degraded_answer_leaves_the_output_null_with_its_errors() -> None:
    limits = Limits(max_steps=1)
    model = ScriptedModel([says("working", call("echo", {"text": "a"})), says("sorry")])
    steps = await collect(
        run_react(task="t", model=model, tools=[echo_tool()], output=OUTPUT, limits=limits)
    )
    end = ending(steps)
    assert (end.reason, end.answer, end.output) == (StopReason.MAX_STEPS, "sorry", None)
    assert [e.path for e in end.output_errors or ()] == ["$"]


async def test_the_last_reply_at_nudge_limit_is_validated_too() -> None:
    limits = Limits(max_nudges=0)
    model = ScriptedModel([says(json.dumps(VALID))])
    end = ending(await collect(run_react(task="t", model=model, output=OUTPUT, limits=limits)))
    assert (end.reason, end.output, end.degraded) == (StopReason.NUDGE_LIMIT, VALID, True)


# -- resuming -----------------------------------------------------------------------------------


async def test_the_count_of_invalid_answers_survives_a_checkpoint() -> None:
    model = ScriptedModel([answers(INVALID), says("x", call("echo", {"text": "a"}))])
    limits = Limits(max_steps=2, final_answer_on_limit=False)
    steps = await collect(
        run_react(task="t", model=model, tools=[echo_tool()], output=OUTPUT, limits=limits)
    )
    state = [s for s in steps if isinstance(s, Checkpoint)][-1].state
    assert state["invalid_answers"] == 1
    resumed = RunState.from_checkpoint(state)
    assert resumed.invalid_answers == 1
    resumed.model_state = None  # a model of its own, from its first reply
    # two more invalid answers end it: the first one counted before the resume
    again = ScriptedModel([answers(INVALID)] * 2)
    limits = Limits(max_steps=5)
    end = ending(
        await collect(run_react(task="t", model=again, output=OUTPUT, limits=limits, state=resumed))
    )
    assert end.reason == StopReason.INVALID_OUTPUT
    assert len(again.calls) == 2
