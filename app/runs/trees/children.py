"""Trees of runs (DESIGN §15): a sub-agent call starts a child run, a real run (its own id,
record, events; its parent's owner), admitted and placed as any other, so any replica may
execute it. `RunTree` is the engine's `SubAgents` port, made per parent execution (`port`).

- A child is named by its parent, the step and the call (its idempotency key in the store):
  a call redone after a takeover, or resumed after a person decided, finds the child it
  started, never a second one.
- One budget for the tree: a child's settings are its own, bounded by what its parent has
  left (time, tokens, cost: `TreeLink.carved` names the ones the parent's bounded); depth
  and runs per tree are capped (FINISHLINE_MAX_AGENT_DEPTH, FINISHLINE_MAX_AGENT_RUNS, the
  count kept by the store, exact across replicas): past either, the call is refused.
- While a parent waits on children alone, its execution slot is lent (`LiveRuns.lend`).
- A run that ends stops its children still going (`ended`): cancel cascades down a tree.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import replace
from typing import Any

import structlog

from app.engine.delegating import ChildCall, ChildOutcome, ChildRefusedError
from app.engine.pending import ChildApproval
from app.engine.policies import Limits, StopReason
from app.engine.steps import RunUsage
from app.runs.admission import Admission
from app.runs.errors import RunsError
from app.runs.live import LiveRuns
from app.runs.observer import RunTraces
from app.runs.placement import Placement
from app.runs.records import RunRecord, RunStatus, TreeLink
from app.runs.spec import child_request
from app.runs.store import RunStore

log = structlog.get_logger("finishline.runs")

POLL_S = 0.05
"""How often a parent re-reads a child that is neither live here nor settled (between a
decision's write and its requeue; or, with replicas, a wait that timed out)."""
WAIT_S = 60.0
"""How long one wait on a child elsewhere lasts before it is asked again."""
BUDGETS = {
    StopReason.TOKEN_BUDGET: "max_total_tokens",
    StopReason.COST_BUDGET: "max_cost_usd",
}

Canceller = Callable[[str], Awaitable[Any]]
"""Cancels a run by id, whoever owns it (`RunManager.cancel`)."""


def child_key(parent_run_id: str, step: int, call_id: str) -> str:
    """What names a child in the store (its idempotency key, in its owner's namespace)."""
    return f"finishline:agent:{parent_run_id}:{step}:{call_id}"


def bounded(limits: Limits, call: ChildCall) -> tuple[Limits, list[str]]:
    """The child's settings within what its parent has left; the names the parent bounded."""
    carved: list[str] = []
    changes: dict[str, Any] = {}
    time_left = max(call.time_left_s, 0.001)
    if limits.max_time_s > time_left:
        changes["max_time_s"] = time_left
    if call.tokens_left is not None and (
        limits.max_total_tokens is None or limits.max_total_tokens > call.tokens_left
    ):
        changes["max_total_tokens"] = max(call.tokens_left, 1)
    if call.cost_left_usd is not None and (
        limits.max_cost_usd is None or limits.max_cost_usd > call.cost_left_usd
    ):
        changes["max_cost_usd"] = call.cost_left_usd
    carved = sorted(changes)
    return (replace(limits, **changes) if changes else limits), carved


def outcome_of(record: RunRecord) -> ChildOutcome:
    """What the parent learns of its child as it stands (ended, or waiting for a person)."""
    if record.status == RunStatus.REQUIRES_ACTION and record.approval is not None:
        waits_on = tuple(
            ChildApproval(p.call_id, p.tool, p.arguments, p.run_id or record.id)
            for p in record.approval.undecided()
        )
        return ChildOutcome(record.status.value, waits_on=waits_on)
    usage = record.usage
    spent = RunUsage(
        steps=usage.steps,
        llm_calls=usage.llm_calls,
        tool_calls=usage.tool_calls,
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        cost_usd=usage.cost_usd,
    )
    result = record.result
    reason = result.reason if result is not None else None
    carved = record.tree.carved if record.tree is not None else []
    tree_limit = reason.value if reason in BUDGETS and BUDGETS[reason] in carved else None
    return ChildOutcome(
        record.status.value,
        reason.value if reason is not None else None,
        result.answer if result is not None else None,
        result.degraded if result is not None else False,
        record.error.message if record.error is not None else None,
        spent,
        tree_limit=tree_limit,
    )


class RunTree:
    """The children of every run this process executes."""

    def __init__(
        self,
        *,
        store: RunStore,
        admission: Admission,
        live: LiveRuns,
        placement: Placement,
        cancel: Canceller,
        went_on: Callable[[RunRecord], Awaitable[None]] | None = None,
        traces: RunTraces | None = None,
        max_depth: int = 2,
        max_runs: int = 20,
    ) -> None:
        self.store = store
        self.admission = admission
        self.live = live
        self.placement = placement
        self.cancel = cancel
        self.went_on = went_on
        self.traces = traces
        self.max_depth = max_depth
        self.max_runs = max_runs
        self._tasks: asyncio.TaskGroup | None = None
        self._stopping: set[asyncio.Task[None]] = set()

    def open(self, tasks: asyncio.TaskGroup) -> None:
        self._tasks = tasks

    def port(self, parent: RunRecord) -> ChildRuns | None:
        """The `SubAgents` of a run about to execute; None for a run without sub-agents."""
        return ChildRuns(self, parent) if parent.request.agents else None

    # -- a run's end ------------------------------------------------------------------------

    def ended(self, record: RunRecord) -> None:
        """A run ended: its children still going are cancelled (and theirs, as each ends);
        a parent waiting on it (its calls waited for a person) goes on."""
        if record.request.agents and record.status != RunStatus.COMPLETED:
            # (a run that finished waited for every child it started: none is left)
            self._spawn(self._stop_children(record.id), f"stop-children-{record.id}")
        parent = record.parent_run_id
        if parent is not None and self.went_on is not None and parent not in self.live:
            # (a parent live here executes: it waits on the child, not for a person)
            self._spawn(self._parent_goes_on(record), f"went-on-{record.id}")

    async def _parent_goes_on(self, record: RunRecord) -> None:
        assert self.went_on is not None
        try:
            await self.went_on(record)
        except Exception:  # the parent stays waiting; its approval timeout still ends that
            log.exception("agent_parent_resume_failed", child_run_id=record.id)

    def stop(self, run_id: str) -> None:
        """Cancel one child, in the background: its parent stopped waiting on it."""
        self._spawn(self._stop(run_id), f"stop-{run_id}")

    def _spawn(self, work: Coroutine[Any, Any, None], name: str) -> None:
        if self._tasks is None:  # not started (a test's manager): nothing runs in background
            work.close()
            return
        task = self._tasks.create_task(work, name=name)
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)

    async def _stop_children(self, run_id: str) -> None:
        cursor: str | None = None
        while True:
            page = await self.store.list_runs(
                owner=None, any_owner=True, parent_run_id=run_id, limit=200, before_id=cursor
            )
            for child in page:
                if not child.status.terminal:
                    await self._stop(child.id)
            if len(page) < 200:
                return
            cursor = page[-1].id

    async def _stop(self, run_id: str) -> None:
        try:
            await self.cancel(run_id)
            log.info("agent_child_cancelled", child_run_id=run_id)
        except RunsError:  # ended meanwhile, or gone
            return
        except Exception:  # one child must not keep the others running
            log.exception("agent_child_cancel_failed", child_run_id=run_id)

    # -- waiting on a child -----------------------------------------------------------------

    async def settled(self, run_id: str) -> RunRecord | None:
        """The child once it ended or waits for a person; None when it is gone (deleted)."""
        while True:
            active = self.live.get(run_id)
            if active is not None:
                await active.done.wait()
                record: RunRecord | None = active.record
            else:
                record = await self.store.get(run_id)
                if record is not None and not _settled(record):
                    record = await self.placement.wait(record, WAIT_S)
            if record is None:
                return None
            if _settled(record) and (record.status.terminal or run_id not in self.live):
                return record
            if run_id not in self.live:  # (being requeued here; or, elsewhere, still going)
                await asyncio.sleep(POLL_S)


def _settled(record: RunRecord) -> bool:
    return record.status.terminal or record.status == RunStatus.REQUIRES_ACTION


class ChildRun:
    """A child run of this service, as its parent's call waits on it (`ChildHandle`)."""

    def __init__(self, tree: RunTree, run_id: str) -> None:
        self.tree = tree
        self.run_id: str | None = run_id
        self._id = run_id

    async def outcome(self) -> ChildOutcome:
        record = await self.tree.settled(self._id)
        if record is None:
            raise ChildRefusedError("unavailable", f"the child run {self._id} was deleted")
        return outcome_of(record)

    def stop(self) -> None:
        self.tree.stop(self._id)


class ChildRuns:
    """One parent run's `SubAgents`: starts its children, lends its slot while it waits."""

    def __init__(self, tree: RunTree, parent: RunRecord) -> None:
        self.tree = tree
        self.parent = parent

    async def start(self, call: ChildCall) -> ChildRun:
        tree, parent = self.tree, self.parent
        key = child_key(parent.id, call.step, call.call_id)
        found = await tree.store.find_by_idempotency_key(parent.owner, key)
        if found is not None:  # started before an interruption (or a person's decision)
            if found.parent_run_id != parent.id:
                raise ChildRefusedError("unavailable", "its name is taken by another run")
            return ChildRun(tree, found.id)
        link = parent.tree
        depth = (link.depth if link is not None else 0) + 1
        if depth > tree.max_depth:
            raise ChildRefusedError("depth", "too deep", limit=tree.max_depth)
        spec = (parent.request.agents or {}).get(call.agent)
        if spec is None or spec.a2a_url is not None:
            raise ChildRefusedError("unavailable", f"{call.agent} is no sub-agent of this run")
        root = link.root_run_id if link is not None else parent.id
        if not await tree.store.add_tree_run(root, key, tree.max_runs):
            raise ChildRefusedError("runs", "too many runs", limit=tree.max_runs)

        def within(limits: Limits) -> tuple[Limits, TreeLink]:
            limits, carved = bounded(limits, call)
            return limits, TreeLink(root_run_id=root, depth=depth, step=call.step, carved=carved)

        try:
            record = await tree.admission.create_child(
                child_request(spec, call.task, parent.model),
                owner=parent.owner,
                key=key,
                parent_run_id=parent.id,
                parent_call_id=call.call_id,
                bounded=within,
                traceparent=(
                    tree.traces.call_traceparent(parent.id, call.call_id) if tree.traces else None
                ),
            )
        except RunsError as exc:  # refused (a cap, the queue, a shutdown): the model is told
            raise ChildRefusedError("unavailable", exc.message) from exc
        log.info("agent_child_created", child_run_id=record.id, agent=call.agent, depth=depth)
        return ChildRun(tree, record.id)

    def lend(self) -> None:
        self.tree.live.lend(self.parent.id)
        self.tree.placement.wake()

    def reclaim(self) -> None:
        self.tree.live.reclaim(self.parent.id)
