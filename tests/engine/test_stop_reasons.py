"""One test per StopReason the engine produces."""

from __future__ import annotations

import asyncio

from app.engine.errors import LLMStatusError
from app.engine.loop import run_react
from app.engine.policies import InterventionKind, Limits, StopReason
from app.engine.ports import Reply
from app.engine.steps import Intervention, LLMCalled, Thought
from app.llm.scripted import FunctionModel, ScriptedModel
from tests.engine.kit import call, collect, echo_tool, ending, finish, of_type, says


async def test_run_ends_finished_when_model_calls_task_finished_alone() -> None:
    model = ScriptedModel([says("thinking", call("echo", {"text": "hi"})), finish("42")])
    steps = await collect(run_react(task="t", model=model, tools=[echo_tool()]))
    end = ending(steps)
    assert (end.reason, end.answer, end.degraded) == (StopReason.FINISHED, "42", False)
    assert end.usage.steps == 2
    assert end.usage.llm_calls == 2
    assert end.usage.tool_calls == 1


async def test_run_ends_answered_on_plain_reply_when_stop_tool_is_off() -> None:
    model = ScriptedModel([says("the answer")])
    steps = await collect(run_react(task="t", model=model, limits=Limits(stop_tool=False)))
    end = ending(steps)
    assert (end.reason, end.answer, end.degraded) == (StopReason.ANSWERED, "the answer", False)
    assert model.calls[0].tools == []


async def test_run_ends_with_nudge_limit_when_model_never_calls_finish() -> None:
    model = ScriptedModel([says("a"), says("b"), says("c")])
    steps = await collect(run_react(task="t", model=model, limits=Limits(max_nudges=2)))
    end = ending(steps)
    assert (end.reason, end.answer, end.degraded) == (StopReason.NUDGE_LIMIT, "c", True)
    nudges = [s for s in of_type(steps, Intervention) if s.kind == InterventionKind.STOP_PROMPT]
    assert len(nudges) == 2
    assert len(model.calls) == 3


async def test_run_ends_with_max_steps_and_a_degraded_answer_from_a_call_without_tools() -> None:
    replies = [says(None, call("echo", {"text": str(i)})) for i in range(3)] + [says("best effort")]
    model = ScriptedModel(replies)
    steps = await collect(
        run_react(task="t", model=model, tools=[echo_tool()], limits=Limits(max_steps=3))
    )
    end = ending(steps)
    assert (end.reason, end.answer, end.degraded) == (StopReason.MAX_STEPS, "best effort", True)
    assert end.usage.steps == 3
    assert end.usage.llm_calls == 4
    assert model.calls[-1].tools == []
    assert model.calls[-1].messages[-1]["role"] == "user"
    limit = of_type(steps, Intervention)[-1]
    assert limit.kind == InterventionKind.MAX_STEPS
    assert of_type(steps, LLMCalled)[-1].final is True


async def test_run_ends_with_timeout_when_the_deadline_passes() -> None:
    async def slow(messages: list, tools: list) -> Reply:
        if tools:
            await asyncio.Event().wait()
        return says("late answer")

    limits = Limits(max_time_s=0.2, final_answer_timeout_s=1)
    steps = await collect(run_react(task="t", model=FunctionModel(slow), limits=limits))
    end = ending(steps)
    assert (end.reason, end.answer, end.degraded) == (StopReason.TIMEOUT, "late answer", True)


async def test_run_ends_with_token_budget_once_usage_reaches_it() -> None:
    replies = [says(None, call("echo", {"text": str(i)}), tokens=(60, 20)) for i in range(5)]
    model = ScriptedModel([*replies[:2], says("summary")])
    limits = Limits(max_total_tokens=150)
    steps = await collect(run_react(task="t", model=model, tools=[echo_tool()], limits=limits))
    end = ending(steps)
    assert (end.reason, end.answer, end.degraded) == (StopReason.TOKEN_BUDGET, "summary", True)
    assert end.usage.steps == 2
    assert end.usage.total_tokens >= 160


async def test_run_ends_cancelled_when_cancel_is_set_before_it_starts() -> None:
    cancel = asyncio.Event()
    cancel.set()
    model = ScriptedModel([finish()])
    steps = await collect(run_react(task="t", model=model, cancel=cancel))
    assert ending(steps).reason == StopReason.CANCELLED
    assert model.calls == []


async def test_run_ends_with_error_when_the_model_fails_for_good() -> None:
    def refuse(messages: list, tools: list) -> Reply:
        raise LLMStatusError(401, "invalid api key")

    steps = await collect(run_react(task="t", model=FunctionModel(refuse)))
    end = ending(steps)
    assert end.reason == StopReason.ERROR
    assert end.error is not None
    assert end.error.type == "llm_status"
    assert "invalid api key" in end.error.message
    assert end.answer is None


async def test_run_that_outlasts_its_script_fails_with_a_clear_error() -> None:
    model = ScriptedModel([says(None, call("echo", {"text": "x"}))])
    steps = await collect(run_react(task="t", model=model, tools=[echo_tool()]))
    end = ending(steps)
    assert end.reason == StopReason.ERROR
    assert end.error is not None
    assert end.error.type == "script_exhausted"
    assert "1 replies" in end.error.message


async def test_every_reply_with_text_is_a_thought_and_every_call_is_logged() -> None:
    model = ScriptedModel(
        [says("first", call("echo", {"text": "x"})), finish("ok", content="last")]
    )
    steps = await collect(run_react(task="t", model=model, tools=[echo_tool()]))
    assert [t.text for t in of_type(steps, Thought)] == ["first", "last"]
    assert len(of_type(steps, LLMCalled)) == ending(steps).usage.llm_calls == 2
