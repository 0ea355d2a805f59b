"""The deadline and cancellation interrupt in-flight LLM and tool calls, not only the next step."""

from __future__ import annotations

import asyncio
import time

import anyio

from app.engine.loop import run_react
from app.engine.policies import Limits, StopReason
from app.engine.ports import Reply, ToolContext
from app.engine.steps import Observation, Step
from app.llm.scripted import FunctionModel, ScriptedModel
from tests.engine.kit import FnTool, call, collect, ending, finish, of_type, says

SLACK_S = 0.5


async def hang(*_: object) -> Reply:
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


def hanging_tool(started: asyncio.Event | None = None) -> FnTool:
    async def wait_forever(args: dict, ctx: ToolContext) -> str:
        if started is not None:
            started.set()
        await asyncio.Event().wait()
        return "never"

    return FnTool("stuck", wait_forever)


async def test_deadline_interrupts_a_hanging_llm_call_within_max_time_plus_final_timeout() -> None:
    limits = Limits(max_time_s=0.3, final_answer_timeout_s=0.3, llm_timeout_s=60)
    began = time.monotonic()
    steps = await collect(run_react(task="t", model=FunctionModel(hang), limits=limits))
    elapsed = time.monotonic() - began
    end = ending(steps)
    assert end.reason == StopReason.TIMEOUT
    assert end.answer is None  # the final call hung too, and was cut at its own timeout
    assert elapsed < limits.max_time_s + limits.final_answer_timeout_s + SLACK_S


async def test_deadline_interrupts_a_hanging_tool_and_reports_it_interrupted() -> None:
    model = ScriptedModel([says(None, call("stuck")), says("best I can do")])
    limits = Limits(max_time_s=0.3, final_answer_timeout_s=0.3, tool_timeout_s=60)
    began = time.monotonic()
    steps = await collect(run_react(task="t", model=model, tools=[hanging_tool()], limits=limits))
    elapsed = time.monotonic() - began
    end = ending(steps)
    assert (end.reason, end.answer, end.degraded) == (StopReason.TIMEOUT, "best I can do", True)
    assert elapsed < limits.max_time_s + limits.final_answer_timeout_s + SLACK_S
    (observation,) = of_type(steps, Observation)
    assert observation.is_error
    assert "interrupted" in observation.content
    # the final call still saw a well-formed conversation: a result for every tool call
    assert model.calls[-1].messages[-2]["role"] == "tool"


async def test_tool_timeout_is_reported_to_the_model_and_the_run_goes_on() -> None:
    model = ScriptedModel([says(None, call("stuck")), finish("recovered")])
    limits = Limits(tool_timeout_s=0.05)
    steps = await collect(run_react(task="t", model=model, tools=[hanging_tool()], limits=limits))
    assert ending(steps).reason == StopReason.FINISHED
    (observation,) = of_type(steps, Observation)
    assert observation.is_error
    assert observation.timed_out
    assert "timed out after 0.05 s" in observation.content
    assert "timed out" in model.calls[1].messages[-1]["content"]


async def run_until(steps: list[Step], gen, event: asyncio.Event, cancel: asyncio.Event) -> float:
    """Consume the run; set `cancel` once `event` fires; return seconds from cancel to the end."""
    cancelled_at = 0.0

    async def consume() -> None:
        async for step in gen:
            steps.append(step)

    async with anyio.create_task_group() as tg:
        tg.start_soon(consume)
        with anyio.fail_after(5):
            await event.wait()
        cancelled_at = time.monotonic()
        cancel.set()
    return time.monotonic() - cancelled_at


async def test_cancel_interrupts_an_in_flight_llm_call_at_once() -> None:
    called, cancel = asyncio.Event(), asyncio.Event()

    async def hang_after_signal(messages: list, tools: list) -> Reply:
        called.set()
        return await hang()

    steps: list[Step] = []
    gen = run_react(task="t", model=FunctionModel(hang_after_signal), cancel=cancel)
    took = await run_until(steps, gen, called, cancel)
    assert ending(steps).reason == StopReason.CANCELLED
    assert took < SLACK_S


async def test_cancel_interrupts_an_in_flight_tool_call_at_once() -> None:
    started, cancel = asyncio.Event(), asyncio.Event()
    model = ScriptedModel([says(None, call("stuck"))])
    steps: list[Step] = []
    gen = run_react(task="t", model=model, tools=[hanging_tool(started)], cancel=cancel)
    took = await run_until(steps, gen, started, cancel)
    end = ending(steps)
    assert end.reason == StopReason.CANCELLED
    assert took < SLACK_S
    (observation,) = of_type(steps, Observation)
    assert "interrupted" in observation.content


async def test_cancel_during_the_degraded_final_call_still_ends_cancelled() -> None:
    asked_final, cancel = asyncio.Event(), asyncio.Event()

    async def model_fn(messages: list, tools: list) -> Reply:
        if not tools:
            asked_final.set()
            return await hang()
        return says(None, call("echo"))

    tool = FnTool("echo", lambda a, c: "ok", idempotent=False)
    limits = Limits(max_steps=1, repetition_threshold=0)
    steps: list[Step] = []
    gen = run_react(
        task="t", model=FunctionModel(model_fn), tools=[tool], limits=limits, cancel=cancel
    )
    await run_until(steps, gen, asked_final, cancel)
    assert ending(steps).reason == StopReason.CANCELLED


async def test_final_answer_is_bounded_by_final_answer_timeout() -> None:
    model = FunctionModel(lambda m, t: says(None, call("echo")) if t else hang())
    tool = FnTool("echo", lambda a, c: "ok")
    limits = Limits(max_steps=1, final_answer_timeout_s=0.2)
    began = time.monotonic()
    steps = await collect(run_react(task="t", model=model, tools=[tool], limits=limits))
    end = ending(steps)
    assert (end.reason, end.answer, end.degraded) == (StopReason.MAX_STEPS, None, False)
    assert time.monotonic() - began < 0.2 + SLACK_S


async def test_no_final_call_when_final_answer_on_limit_is_off() -> None:
    model = ScriptedModel([says(None, call("echo"))])
    tool = FnTool("echo", lambda a, c: "ok")
    limits = Limits(max_steps=1, final_answer_on_limit=False)
    steps = await collect(run_react(task="t", model=model, tools=[tool], limits=limits))
    end = ending(steps)
    assert (end.reason, end.answer, end.degraded) == (StopReason.MAX_STEPS, None, False)
    assert end.usage.llm_calls == 1


async def test_finish_is_honoured_even_as_the_last_allowed_step() -> None:
    model = ScriptedModel([finish("in time")])
    steps = await collect(run_react(task="t", model=model, limits=Limits(max_steps=1)))
    assert ending(steps).reason == StopReason.FINISHED
