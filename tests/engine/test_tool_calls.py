"""Tool calls: finish beside others, model mistakes, repetition, truncation, concurrency."""

from __future__ import annotations

import asyncio
import json

import anyio
import pytest

from app.engine.loop import run_react
from app.engine.policies import InterventionKind, Limits, StopReason
from app.engine.ports import ToolContext
from app.engine.steps import Action, Intervention, Observation
from app.engine.toolcalls import parse_arguments
from app.llm.scripted import ScriptedModel
from tests.engine.kit import FnTool, call, collect, echo_tool, ending, finish, of_type, says


async def test_finish_beside_other_calls_runs_the_others_and_asks_for_finish_alone() -> None:
    tool = echo_tool()
    model = ScriptedModel(
        [
            says(None, call("echo", {"text": "a"}), call("task_finished", {"answer": "early"})),
            finish("late"),
        ]
    )
    steps = await collect(run_react(task="t", model=model, tools=[tool]))
    end = ending(steps)
    assert (end.reason, end.answer) == (StopReason.FINISHED, "late")
    assert tool.calls == [{"text": "a"}]
    by_tool = {o.tool: o for o in of_type(steps, Observation)}
    assert by_tool["echo"].is_error is False
    second = by_tool["task_finished"]
    assert second.is_error
    assert "call task_finished alone, after reading these results" in second.content
    tool_messages = [m for m in model.calls[1].messages if m["role"] == "tool"]
    assert [m["content"] for m in tool_messages] == ["echo: a", second.content]


async def test_task_finished_without_an_answer_is_an_error_the_model_can_fix() -> None:
    model = ScriptedModel([says(None, call("task_finished", {})), finish("fixed")])
    steps = await collect(run_react(task="t", model=model))
    assert ending(steps).answer == "fixed"
    (observation,) = of_type(steps, Observation)
    assert observation.is_error
    assert "'answer' is a required property" in observation.content


async def test_task_finished_is_an_unknown_tool_when_stop_tool_is_off() -> None:
    model = ScriptedModel([says(None, call("task_finished", {"answer": "x"})), says("plain")])
    steps = await collect(run_react(task="t", model=model, limits=Limits(stop_tool=False)))
    assert ending(steps).reason == StopReason.ANSWERED
    (observation,) = of_type(steps, Observation)
    assert "Unknown tool 'task_finished'" in observation.content


async def test_bad_json_arguments_are_shown_to_the_model_and_the_run_goes_on() -> None:
    model = ScriptedModel([says(None, call("echo", '{"text": "unclosed')), finish()])
    steps = await collect(run_react(task="t", model=model, tools=[echo_tool()]))
    assert ending(steps).reason == StopReason.FINISHED
    action = of_type(steps, Action)[0]
    assert action.arguments == '{"text": "unclosed'
    (observation,) = of_type(steps, Observation)
    assert observation.is_error
    assert "not a valid JSON object" in observation.content


@pytest.mark.parametrize(
    "raw",
    ['{"text": "a"} x', '{"text": "a"}\n\t {}', "nul", '{"text":', "\ufeff{}", '{"a": 1,}', "1 2"],
)
def test_bad_json_errors_name_the_problem_and_position_as_json_loads_does(raw: str) -> None:
    with pytest.raises(json.JSONDecodeError) as expected:
        json.loads(raw.strip())
    arguments, shown, error = parse_arguments(raw)
    assert (arguments, shown) == (None, raw)
    assert error == f"{expected.value.msg} at position {expected.value.pos}"


async def test_non_object_json_arguments_are_refused() -> None:
    model = ScriptedModel([says(None, call("echo", "[1, 2]")), finish()])
    steps = await collect(run_react(task="t", model=model, tools=[echo_tool()]))
    (observation,) = of_type(steps, Observation)
    assert "expected a JSON object, got list" in observation.content


async def test_unknown_tool_lists_the_available_tools() -> None:
    model = ScriptedModel([says(None, call("serach", {"q": "x"})), finish()])
    steps = await collect(
        run_react(task="t", model=model, tools=[echo_tool(), echo_tool("search")])
    )
    (observation,) = of_type(steps, Observation)
    assert observation.is_error
    assert "Unknown tool 'serach'" in observation.content
    assert "echo, search, task_finished" in observation.content


async def test_arguments_failing_the_schema_get_a_precise_message() -> None:
    tool = echo_tool(required=("text",))
    model = ScriptedModel([says(None, call("echo", {"text": 3})), finish()])
    steps = await collect(run_react(task="t", model=model, tools=[tool]))
    (observation,) = of_type(steps, Observation)
    assert observation.is_error
    assert "at 'text': 3 is not of type 'string'" in observation.content
    assert tool.calls == []


async def test_a_tool_that_raises_is_reported_and_the_run_goes_on() -> None:
    def boom(args: dict, ctx: ToolContext) -> str:
        raise KeyError("missing")

    model = ScriptedModel([says(None, call("boom")), finish()])
    steps = await collect(run_react(task="t", model=model, tools=[FnTool("boom", boom)]))
    assert ending(steps).reason == StopReason.FINISHED
    (observation,) = of_type(steps, Observation)
    assert observation.is_error
    assert "The tool boom failed: KeyError: 'missing'" in observation.content


async def test_repeated_call_with_reordered_keys_gets_the_hint_instead_of_running() -> None:
    tool = FnTool("search", lambda a, c: "result for " + a["q"])
    model = ScriptedModel(
        [
            says(None, call("search", '{"q": "x", "n": 1}')),
            says(None, call("search", '{"n": 1, "q": "x"}')),
            finish(),
        ]
    )
    steps = await collect(run_react(task="t", model=model, tools=[tool]))
    assert len(tool.calls) == 1
    first, second = of_type(steps, Observation)
    assert (first.repeated, second.repeated) == (False, True)
    assert "already called search 1 times" in second.content
    assert "result for x" in second.content
    assert "different tool, different arguments" in second.content
    assert [i.kind for i in of_type(steps, Intervention)] == [InterventionKind.REPETITION]


async def test_different_arguments_are_not_a_repetition() -> None:
    tool = FnTool("search", lambda a, c: "r")
    model = ScriptedModel(
        [says(None, call("search", {"q": "a"})), says(None, call("search", {"q": "b"})), finish()]
    )
    await collect(run_react(task="t", model=model, tools=[tool]))
    assert len(tool.calls) == 2


@pytest.mark.parametrize(("threshold", "runs"), [(0, 4), (2, 1), (3, 2), (4, 3)])
async def test_repetition_threshold_sets_which_identical_call_gets_the_hint(
    threshold: int, runs: int
) -> None:
    tool = FnTool("search", lambda a, c: "r")
    model = ScriptedModel([says(None, call("search", {"q": "a"}))] * 4 + [finish()])
    limits = Limits(repetition_threshold=threshold)
    await collect(run_react(task="t", model=model, tools=[tool], limits=limits))
    assert len(tool.calls) == runs


async def test_a_non_idempotent_tool_runs_again_and_gets_the_hint_only_past_the_threshold() -> None:
    tool = FnTool("job_status", lambda a, c: "running", idempotent=False)
    model = ScriptedModel([says(None, call("job_status", {"id": "7"}))] * 3 + [finish()])
    steps = await collect(run_react(task="t", model=model, tools=[tool]))
    assert len(tool.calls) == 2
    assert [o.repeated for o in of_type(steps, Observation)] == [False, False, True]


async def test_long_results_are_truncated_for_the_model_but_kept_whole_on_the_step() -> None:
    text = "\n\n".join(f"Paragraph {i}. " + "word " * 60 for i in range(40))
    model = ScriptedModel([says(None, call("read")), finish()])
    steps = await collect(
        run_react(task="t", model=model, tools=[FnTool("read", lambda a, c: text)])
    )
    (observation,) = of_type(steps, Observation)
    assert observation.truncated
    assert observation.content == text
    assert observation.original_chars == len(text)
    assert observation.shown_chars <= 2000
    seen = model.calls[1].messages[-1]["content"]
    assert seen == observation.model_content
    assert len(seen) <= 2000 + 300
    assert f"showing {observation.shown_chars:,} of {len(text):,} chars" in seen


async def test_max_tool_result_chars_zero_means_no_truncation() -> None:
    text = "x " * 5000
    model = ScriptedModel([says(None, call("read")), finish()])
    limits = Limits(max_tool_result_chars=0)
    steps = await collect(
        run_react(task="t", model=model, tools=[FnTool("read", lambda a, c: text)], limits=limits)
    )
    (observation,) = of_type(steps, Observation)
    assert not observation.truncated
    assert model.calls[1].messages[-1]["content"] == text


async def test_parallel_calls_run_concurrently_and_are_appended_in_call_order() -> None:
    b_started = asyncio.Event()

    async def a(args: dict, ctx: ToolContext) -> str:
        with anyio.fail_after(2):
            await b_started.wait()  # only returns if b runs while a is still running
        return "A"

    def b(args: dict, ctx: ToolContext) -> str:
        b_started.set()
        return "B"

    model = ScriptedModel([says(None, call("a", call_id="1"), call("b", call_id="2")), finish()])
    steps = await collect(run_react(task="t", model=model, tools=[FnTool("a", a), FnTool("b", b)]))
    observations = of_type(steps, Observation)
    assert sorted(o.content for o in observations) == ["A", "B"]
    messages = model.calls[1].messages
    assert [(m["tool_call_id"], m["content"]) for m in messages if m["role"] == "tool"] == [
        ("1", "A"),
        ("2", "B"),
    ]
    assert ending(steps).usage.tool_calls == 2
