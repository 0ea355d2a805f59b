"""LLM retries: which errors, how long to wait, and never past the deadline."""

from __future__ import annotations

import asyncio
import time

import pytest

from app.engine.errors import LLMConnectionError, LLMError, LLMStatusError, LLMTimeoutError
from app.engine.loop import run_react
from app.engine.policies import Limits, StopReason
from app.engine.ports import Reply
from app.engine.steps import LLMRetry
from app.llm.scripted import FunctionModel
from tests.engine.kit import collect, ending, finish, of_type


def failing(*errors: LLMError) -> FunctionModel:
    """Raises each error in turn, then finishes; records when it was called."""
    queue = list(errors)
    times: list[float] = []

    async def fn(messages: list, tools: list) -> Reply:
        times.append(time.monotonic())
        if queue:
            raise queue.pop(0)
        return finish("ok")

    model = FunctionModel(fn)
    model.times = times  # type: ignore[attr-defined]
    return model


@pytest.mark.parametrize(
    "error",
    [
        LLMConnectionError("connection reset"),
        LLMTimeoutError("read timed out"),
        LLMStatusError(408, "timeout"),
        LLMStatusError(409, "conflict"),
        LLMStatusError(429, "slow down"),
        LLMStatusError(500, "oops"),
        LLMStatusError(503, "unavailable"),
    ],
)
async def test_transient_errors_are_retried(error: LLMError) -> None:
    model = failing(error)
    steps = await collect(run_react(task="t", model=model, limits=Limits(llm_retry_delay_s=0.01)))
    assert ending(steps).reason == StopReason.FINISHED
    (retry,) = of_type(steps, LLMRetry)
    assert retry.attempt == 1
    assert error.message in retry.error


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
async def test_client_errors_are_not_retried(status: int) -> None:
    model = failing(LLMStatusError(status, "bad request"))
    steps = await collect(run_react(task="t", model=model, limits=Limits(llm_retry_delay_s=0.01)))
    end = ending(steps)
    assert end.reason == StopReason.ERROR
    assert of_type(steps, LLMRetry) == []
    assert len(model.times) == 1  # type: ignore[attr-defined]


async def test_backoff_doubles_from_the_first_delay_with_jitter() -> None:
    model = failing(*[LLMStatusError(500, "x")] * 3)
    limits = Limits(llm_retry_delay_s=0.02, llm_retries=3)
    steps = await collect(run_react(task="t", model=model, limits=limits, jitter=lambda: 1.0))
    assert [r.delay_s for r in of_type(steps, LLMRetry)] == [0.02, 0.04, 0.08]
    low = await collect(
        run_react(
            task="t", model=failing(LLMStatusError(500, "x")), limits=limits, jitter=lambda: 0.0
        )
    )
    assert [r.delay_s for r in of_type(low, LLMRetry)] == [0.01]


async def test_retry_after_is_honoured() -> None:
    model = failing(LLMStatusError(429, "rate limited", retry_after_s=0.3))
    steps = await collect(run_react(task="t", model=model, limits=Limits(llm_retry_delay_s=10)))
    assert ending(steps).reason == StopReason.FINISHED
    (retry,) = of_type(steps, LLMRetry)
    assert retry.delay_s == 0.3
    first, second = model.times  # type: ignore[attr-defined]
    assert second - first >= 0.3


async def test_no_retry_sleeps_past_the_deadline() -> None:
    model = failing(LLMStatusError(429, "rate limited", retry_after_s=30))
    limits = Limits(max_time_s=2)
    began = time.monotonic()
    steps = await collect(run_react(task="t", model=model, limits=limits))
    end = ending(steps)
    assert time.monotonic() - began < 1
    assert end.reason == StopReason.ERROR
    assert end.error is not None
    assert "would pass the deadline" in end.error.message
    assert of_type(steps, LLMRetry) == []


async def test_retries_are_bounded_by_llm_retries() -> None:
    model = failing(*[LLMStatusError(503, "down")] * 10)
    limits = Limits(llm_retries=2, llm_retry_delay_s=0.01)
    steps = await collect(run_react(task="t", model=model, limits=limits))
    end = ending(steps)
    assert end.reason == StopReason.ERROR
    assert end.error is not None
    assert "gave up after 3 attempts" in end.error.message
    assert len(model.times) == 3  # type: ignore[attr-defined]


async def test_a_slow_call_is_cut_at_llm_timeout_and_retried() -> None:
    calls = 0

    async def slow_once(messages: list, tools: list) -> Reply:
        nonlocal calls
        calls += 1
        if calls == 1:
            await asyncio.Event().wait()
        return finish("second try")

    limits = Limits(llm_timeout_s=0.1, llm_retry_delay_s=0.01)
    steps = await collect(run_react(task="t", model=FunctionModel(slow_once), limits=limits))
    assert ending(steps).answer == "second try"
    (retry,) = of_type(steps, LLMRetry)
    assert "no reply within 0.1 s" in retry.error
