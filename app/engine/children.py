"""A step's sub-agent calls, from the start of their child runs to their results (DESIGN
§15); the ports and values they use are in `app.engine.delegating`."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterable
from typing import Any

from app.engine.asking import next_call_cost
from app.engine.context import RunContext
from app.engine.delegating import (
    AgentTool,
    ChildCall,
    ChildHandle,
    ChildOutcome,
    ChildRefusedError,
    child_result,
    refusal,
    shares,
)
from app.engine.pending import PendingCall
from app.engine.ports import ToolCall
from app.engine.steps import AgentFinished, AgentStarted, Step
from app.engine.toolcalls import CallResult, parse_arguments


class Delegation:
    """The sub-agent calls of one step (`acting.ToolStep`): each child is started before the
    step's calls run (`agent.started`), then awaited beside them under the run's deadline
    and cancel, never `tool_timeout_s`; while the run waits on children alone, its
    execution slot is lent (`SubAgents.lend`)."""

    def __init__(self, run: RunContext, calls: dict[int, tuple[ToolCall, AgentTool]]) -> None:
        self.run = run
        self.calls = calls
        self.handles: dict[int, ChildHandle] = {}
        self.ended: set[int] = set()
        self.began: dict[int, float] = {}

    async def start(self) -> AsyncIterator[tuple[int, AgentStarted | CallResult]]:
        """Start each call's child (its share of what the run has left: its cost budget less
        room for its own final call); a call whose child cannot be started gets its `is_error`
        result instead."""
        run, st, limits = self.run, self.run.state, self.run.limits
        count = len(self.calls)
        tokens = shares(
            None if limits.max_total_tokens is None else limits.max_total_tokens - st.tree_tokens,
            count,
        )
        cost_left = None
        if limits.max_cost_usd is not None:
            room = (next_call_cost(run) or 0.0) if limits.final_answer_on_limit else 0.0
            cost_left = limits.max_cost_usd - st.tree_cost_usd - room
        cost = shares(cost_left, count)
        for index, (call, tool) in self.calls.items():
            task = str(parse_arguments(call.arguments)[0]["task"])  # type: ignore[index]
            spent = (tokens is not None and tokens < 1) or (cost is not None and cost <= 0)
            if spent:
                error = ChildRefusedError("unavailable", "the run's budget is spent")
                yield index, refusal(tool.name, error, run.prompts)
                continue
            child = ChildCall(
                call.id,
                st.step,
                tool.name,
                task,
                time_left_s=run.deadline - run.clock(),
                tokens_left=None if tokens is None else int(tokens),
                cost_left_usd=cost,
            )
            try:
                handle = await begin(run, tool, child)
            except ChildRefusedError as exc:
                run.log.info("agent_refused", agent=tool.name, call_id=call.id, kind=exc.kind)
                yield index, refusal(tool.name, exc, run.prompts)
                continue
            self.handles[index] = handle
            self.began[index] = time.perf_counter()
            yield index, AgentStarted(st.step, call.id, tool.name, handle.run_id)

    def only_children(self, indexes: Iterable[int]) -> bool:
        return all(index in self.handles for index in indexes)

    async def wait_alone(self, index: int) -> ChildOutcome:
        """The one call of the step: awaited in the run's own task, its slot lent."""
        return await wait_for(self.run, self.handles[index])

    def finish(self, index: int, outcome: ChildOutcome) -> tuple[list[Step], CallResult | None]:
        """An awaited child: its `agent.finished` and result, or (waiting for a person) no
        result: the caller adds the call to the ones the run waits on."""
        self.ended.add(index)
        call, tool = self.calls[index]
        handle = self.handles[index]
        if outcome.waiting:
            return [], None
        waited = time.perf_counter() - self.began.get(index, time.perf_counter())
        return ended(self.run, call.id, tool.name, handle.run_id, outcome, waited)

    def waiting_call(self, index: int, outcome: ChildOutcome, task: Any) -> PendingCall:
        call, tool = self.calls[index]
        run_id = self.handles[index].run_id
        self.run.log.info("agent_waiting", agent=tool.name, call_id=call.id, child_run_id=run_id)
        return PendingCall(call.id, tool.name, task, run_id or "", outcome.waits_on)

    def stop_unfinished(self) -> None:
        """The run stopped waiting (cancel, deadline): the children still going are stopped."""
        for index, handle in self.handles.items():
            if index not in self.ended:
                handle.stop()


async def begin(run: RunContext, tool: AgentTool, call: ChildCall) -> ChildHandle:
    """Start (or re-attach to) `call`'s child, under the run's deadline and cancel."""
    starter = tool.remote or run.subagents
    if starter is None:
        raise ChildRefusedError("unavailable", "this run has no way to start sub-agents")
    with run.guard.scope(run.deadline):
        handle = await starter.start(call)
    run.log.info("agent_started", agent=tool.name, call_id=call.call_id, child_run_id=handle.run_id)
    return handle


async def wait_for(run: RunContext, handle: ChildHandle) -> ChildOutcome:
    """Await a child's outcome under the run's deadline and cancel, the run's slot lent."""
    port = run.subagents
    if port is not None:
        port.lend()
    try:
        with run.guard.scope(run.deadline):
            return await outcome_of(handle)
    finally:
        if port is not None:
            port.reclaim()


async def outcome_of(handle: ChildHandle) -> ChildOutcome:
    """The child's outcome; a failure to learn it is the child's failure, shown to the model."""
    try:
        return await handle.outcome()
    except ChildRefusedError as exc:
        return ChildOutcome("failed", "error", error=exc.message)


def ended(
    run: RunContext,
    call_id: str,
    agent: str,
    run_id: str | None,
    outcome: ChildOutcome,
    waited_s: float = 0.0,
) -> tuple[list[Step], CallResult]:
    """A child that ended: what it spent counts in the run's usage; its `agent.finished`, and
    the call's result."""
    st = run.state
    if outcome.usage is not None:
        st.add_child(outcome.usage)
    if outcome.tree_limit is not None and st.tree_stop is None:
        st.tree_stop = outcome.tree_limit
    run.log.info(
        "agent_finished", agent=agent, call_id=call_id, status=outcome.status, reason=outcome.reason
    )
    finished = AgentFinished(st.step, call_id, agent, run_id, outcome.status, outcome.reason)
    result = child_result(agent, run_id, outcome, run.prompts)
    result.duration_ms = int(waited_s * 1000)
    return [finished], result
