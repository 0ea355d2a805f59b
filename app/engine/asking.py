"""Asking the model: one LLM call with its retries, its token accounting and its steps."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from app.engine.context import RunContext
from app.engine.errors import LLMError, LLMTimeoutError
from app.engine.guard import DeadlineError
from app.engine.policies import StopReason, call_over_cost_budget, day_spent, planning_due
from app.engine.ports import ChatModel, Message, Reply, ToolSpec
from app.engine.steps import LLMCalled, LLMRetry, Step, Thought, TokenDelta
from app.engine.tokens import estimate_reply_tokens, estimate_tokens


@dataclass(frozen=True, slots=True)
class Aside:
    """A call in a context of its own (the grader's, DESIGN §22): `messages` instead of the
    run's conversation, to `model`. It counts in the run's usage, cost and budgets like any
    call of the run, at `model`'s price; it is not streamed and its text is no thought."""

    model: ChatModel
    messages: Sequence[Message]


class LLMGaveUpError(LLMError):
    """Retries of a failing LLM call were used up, or would have run past the deadline."""

    def __init__(self, cause: LLMError, why: str) -> None:
        super().__init__(f"{cause.message} ({why})")
        self.kind = cause.kind


async def ask(
    run: RunContext,
    specs: Sequence[ToolSpec],
    deadline: float,
    *,
    final: bool = False,
    force_tool: str | None = None,
    aside: Aside | None = None,
) -> AsyncIterator[Step | Reply]:
    """One model call for `run`: token deltas as they stream, the `llm.call` record, the
    thought, then the `Reply`. Retries transient failures with backoff (Retry-After wins),
    never sleeping past `deadline`; raises LLMError when it gives up, DeadlineError when
    `deadline` interrupts the call, CancelRequestedError on a cancel. `force_tool`: the tool
    the reply must call, where the model can be forced (a planning call). With an output
    schema, a call whose reply may be the answer (the final call; every call with the stop
    tool off) asks for JSON matching it, where the model can be asked. `aside`: the call is
    that one instead of the run's next (see `Aside`)."""
    st, limits = run.state, run.limits
    output = run.output
    schema = output.schema if output is not None and (final or not limits.stop_tool) else None
    model: ChatModel = run.model
    messages: Sequence[Message] = st.messages
    if aside is not None:
        model, messages, schema = aside.model, aside.messages, None
    attempt = 0
    while True:
        call_deadline = min(run.clock() + limits.llm_timeout_s, deadline)
        bounded_by_run = call_deadline >= deadline
        started = time.perf_counter()
        error: LLMError
        try:
            if limits.stream_tokens and aside is None:
                deltas: asyncio.Queue[str] = asyncio.Queue()
                task = asyncio.ensure_future(
                    model.complete(
                        messages,
                        specs,
                        on_delta=deltas.put_nowait,
                        force_tool=force_tool,
                        answer_schema=schema,
                    )
                )
                async for delta in run.guard.stream(task, deltas, call_deadline):
                    yield TokenDelta(st.step, delta)
                reply = task.result()
            else:
                with run.guard.scope(call_deadline):
                    reply = await model.complete(
                        messages, specs, force_tool=force_tool, answer_schema=schema
                    )
        except DeadlineError:
            if bounded_by_run:
                raise
            error = LLMTimeoutError(f"no reply within {limits.llm_timeout_s:g} s")
        except LLMError as exc:
            error = exc
        else:
            yield account(run, reply, started, final, aside)
            if reply.content and aside is None:
                run.log.info("thought_emitted", chars=len(reply.content), final=final)
                yield Thought(st.step, reply.content)
            yield reply
            return

        if not error.retryable:
            raise error
        if attempt >= limits.llm_retries:
            raise LLMGaveUpError(error, f"gave up after {attempt + 1} attempts")
        attempt += 1
        if error.retry_after_s is not None:
            delay = error.retry_after_s
        else:
            base = limits.llm_retry_delay_s * 2 ** (attempt - 1)
            delay = base / 2 + base / 2 * run.jitter()
        if run.clock() + delay >= deadline:
            raise LLMGaveUpError(error, f"a retry in {delay:g} s would pass the deadline")
        run.log.warning("llm_retried", attempt=attempt, error=str(error), delay_s=round(delay, 3))
        yield LLMRetry(st.step, attempt, str(error), round(delay, 3))
        await run.guard.sleep(delay, deadline)


def account(
    run: RunContext, reply: Reply, started: float, final: bool, aside: Aside | None = None
) -> LLMCalled:
    """Count the call, its tokens (estimated when the provider reported none) and its cost
    (from those tokens at the run's price, resolved once; None when it has none; an aside's
    at its model's)."""
    st = run.state
    usage = reply.usage
    if usage is None:
        sent = st.prompt_estimate + run.spec_tokens
        if aside is not None:
            sent = estimate_tokens(aside.messages)
        usage = estimate_reply_tokens(sent, reply)
    st.llm_calls += 1
    st.add_tokens(usage)
    price = run.price if aside is None else aside.model.price
    cost: float | None = None
    if price is not None:
        cost = spent = price.cost(usage)
        st.cost_usd += spent
        st.last_call_cost_usd = spent
    else:
        st.unpriced_calls += 1
    return LLMCalled(  # positional, in field order: keywords cost more to match
        st.step,
        (run.model if aside is None else aside.model).name,
        int((time.perf_counter() - started) * 1000),  # duration_ms
        usage.prompt_tokens,
        usage.completion_tokens,
        usage.estimated,
        len(reply.tool_calls),
        final,
        usage.cached_tokens,
        cost,
    )


def next_call_cost(run: RunContext) -> float | None:
    """What the run's next call is expected to cost (None without a price): its prompt as the
    conversation stands, by the run's token estimator with the tool specs (at most
    max_context_tokens when capped: the trim keeps it under), at the input rate; and no less
    than the run's last call cost (a prompt only grows, and a reply is taken to cost what the
    last one did)."""
    price = run.price
    if price is None:
        return None
    tokens = run.state.prompt_estimate + run.spec_tokens
    if run.limits.max_context_tokens is not None:
        tokens = min(tokens, run.limits.max_context_tokens)
    return max(price.prompt_cost(tokens), run.state.last_call_cost_usd)


def call_over_budget(run: RunContext, calls: int = 1) -> StopReason | None:
    """Before the run's own calls (a step's, a planning call): `cost_budget` when `calls` of
    them are expected (`next_call_cost`) to take the spend past the budget: the run's final
    call comes instead, so that one alone may pass it (DESIGN §13)."""
    if run.limits.max_cost_usd is None:
        return None
    cost = next_call_cost(run)
    if cost is None:
        return None
    return call_over_cost_budget(run.state.tree_cost_usd, calls * cost, run.limits)


def budget_spent(run: RunContext) -> StopReason | None:
    """Top of a step, before its calls: they would take the spend past the run's cost budget
    (`call_over_budget`: two calls on a planning step, its planning call and its own), or the
    run's API key has spent its day (its quotas, across its runs: `token_budget`,
    `cost_budget`, as at the run's own budgets)."""
    calls = 2 if planning_due(run.state.step + 1, run.limits) else 1
    return call_over_budget(run, calls) or key_day_spent(run)


def key_day_spent(run: RunContext) -> StopReason | None:
    """The reason the run's key's day quotas end it, read through its `allowance`."""
    if run.allowance is None:
        return None
    left = run.allowance()
    reason = day_spent(left)
    if reason is not None:
        run.log.info("key_day_spent", tokens_left=left.tokens, cost_left_usd=left.cost_usd)
    return reason
