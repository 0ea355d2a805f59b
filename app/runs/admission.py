"""Admission: how a new run gets in (`RunManager.create`).

The request is checked (`RunAssembler`), an idempotent replay names the run its key made, a
follow-up's previous run must be visible and ended, then the caller's API key's quotas are
checked and its share taken in one step (`Quotas.admit`, DESIGN §13), and room is taken in
one step with the check for it (`Placement.reserve`: in this process, the queue's length and
the runs being stored, with no await between check and take; with replicas, the cluster's
atomic reservation). The run is then stored with its `run.queued` event in one write and
queued.

A thread's next run (DESIGN §19, `Joining`: the `Threads` part says what it continues and
what it waits for) is bound to its thread once stored and before it is queued: the thread's
index moves to it by compare-and-set, and a run that lost that race (the thread moved since
it was read) is deleted before anyone was given its id (`ThreadMovedError`: the part looks
again). Then it is queued, or held until the run it waits for has ended.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import structlog

from app.engine.errors import FinishlineError
from app.engine.events import EventType
from app.engine.policies import Limits
from app.runs.errors import (
    IdempotencyConflictError,
    RunNotEndedError,
    RunNotFoundError,
    ShuttingDownError,
)
from app.runs.live import LiveRuns
from app.runs.metrics import RunMetrics
from app.runs.observer import RunTraces
from app.runs.placement import Placement
from app.runs.ports import CheckedRequest, RunAssembler
from app.runs.quotas.seam import Quotas
from app.runs.records import (
    ForkedFrom,
    RunRecord,
    TreeLink,
    WebhookState,
    new_run_id,
    request_hash,
)
from app.runs.spec import RunRequest
from app.runs.store import DuplicateRunError, RunStore
from app.runs.view import settings_dict

log = structlog.get_logger("finishline.runs")

Finder = Callable[[str, str | None], Awaitable[RunRecord]]
"""A run visible to an owner (`RunManager.get`): `RunNotFoundError` otherwise."""


class ThreadMovedError(FinishlineError):
    """The thread moved on between the read that planned its next run and the run's
    binding to it: the run is not made (`Joining.bind` said so)."""


Fork = tuple[ForkedFrom, dict[str, Any] | None]
"""A fork's origin, and the engine state it starts from (None: from the start)."""


@dataclass(frozen=True, slots=True)
class Joining:
    """A run that joins a thread (DESIGN §19), as `Threads` plans it."""

    thread_id: str
    previous: RunRecord | None
    """The run it continues (its `previous_run_id`): the thread's latest, ended or not."""
    behind: str | None
    """Hold it until this run has ended (`multitask` enqueue or interrupt); None: queue it."""
    bind: Callable[[RunRecord], Awaitable[bool]]
    """Move the thread to the stored run (compare-and-set): False when the thread moved."""


class Admission:
    def __init__(
        self,
        *,
        store: RunStore,
        assembler: RunAssembler,
        metrics: RunMetrics,
        placement: Placement,
        quotas: Quotas,
        live: LiveRuns,
        traces: RunTraces,
        find: Finder,
    ) -> None:
        self.store = store
        self.quotas = quotas
        self.assembler = assembler
        self.metrics = metrics
        self.placement = placement
        self.live = live
        self.traces = traces
        self.find = find

    async def create(
        self,
        request: RunRequest,
        *,
        owner: str | None,
        idempotency_key: str | None = None,
        traceparent: str | None = None,
        joining: Joining | None = None,
        schedule_id: str | None = None,
        fork: Fork | None = None,
    ) -> tuple[RunRecord, bool]:
        """The new run and True, or the run an idempotent replay names and False.
        `fork`: the run is a fork (DESIGN §20): its origin, and the state it starts from
        (None: from the start), stored as its checkpoint before it is queued.
        `traceparent`: the caller's W3C trace context, the parent of the run's trace. A run
        with an idempotency key keeps its `request_hash` (the request's `digest`, computed
        where it was read, else here in a worker thread); one without keeps none: only a
        replay of its key compares it (and A2A's and AG-UI's, whose runs have keys).
        `joining`: the run is a thread's next (`ThreadMovedError` when the thread moved).
        `schedule_id`: the schedule whose firing starts it (DESIGN §21)."""
        if self.live.draining:
            raise ShuttingDownError("the server is shutting down and takes no new runs")
        digest: str | None = None
        if idempotency_key is not None:
            # in proportion to the request's size (64 KB of tool schemas: milliseconds)
            known = request.digest
            if known is None:
                known = await anyio.to_thread.run_sync(request_hash, request)
            existing = await self.store.find_by_idempotency_key(owner, idempotency_key)
            if existing is not None:
                return self._replay(existing, known), False
            digest = known
        checked = await self.assembler.check(request)
        request = checked.request  # with its agent profile applied, if it names one
        previous = None
        if joining is not None:  # the thread's latest, ended or not
            previous = joining.previous
            continued = previous.id if previous is not None else None
            request = request.model_copy(update={"previous_run_id": continued})
        elif request.previous_run_id is not None:
            previous = await self._previous(request.previous_run_id, owner)
        run_id = new_run_id()
        async with self.quotas.admit(owner, run_id) as share, self.placement.reserve() as place:
            record = self._new_record(
                run_id, request, checked, previous, owner, idempotency_key, digest
            )
            record.thread_id = joining.thread_id if joining is not None else None
            record.schedule_id = schedule_id
            record.forked_from = fork[0] if fork is not None else None
            replayed = await self._store(record, checked, traceparent, joining=joining)
            if replayed is not None:  # no run made: the key's share is given back
                return replayed, False
            share.made()
            if fork is not None and fork[1] is not None:  # where it starts, before it can
                await self.store.save_checkpoint(record.id, fork[1]["step"], fork[1])
            if joining is not None and joining.behind is not None:
                return await self.placement.hold(record, joining.behind), True
            return await self.placement.enqueue(record, place), True

    async def create_child(
        self,
        request: RunRequest,
        *,
        owner: str | None,
        key: str,
        parent_run_id: str,
        parent_call_id: str,
        bounded: Callable[[Limits], tuple[Limits, TreeLink]],
        traceparent: str | None = None,
    ) -> RunRecord:
        """A sub-agent's child run (DESIGN §15), admitted as any run is (checked, a place in
        the queue, stored with its `run.queued`), owned by its parent's owner; `bounded`
        gives its settings within what the parent has left, and its place in the tree. The
        caller looked for the child `key` names (its parent, step and call) first; one made
        meanwhile is found as the store refuses a second (a call redone after a takeover
        finds its child, never a second one)."""
        if self.live.draining:
            raise ShuttingDownError("the server is shutting down and takes no new runs")
        checked = await self.assembler.check(request)
        limits, tree = bounded(checked.limits)
        run_id = new_run_id()
        async with self.quotas.admit(owner, run_id) as share, self.placement.reserve() as place:
            record = RunRecord(
                id=run_id,
                owner=owner,
                request=checked.request,
                model=checked.model,
                settings=limits,
                idempotency_key=key,
                request_hash=request_hash(checked.request),
                parent_run_id=parent_run_id,
                parent_call_id=parent_call_id,
                tree=tree,
            )
            found = await self._store(record, checked, traceparent, replay=False)
            if found is not None:  # made before: the key's share is given back
                return found
            share.made()
            return await self.placement.enqueue(record, place)

    def _new_record(
        self,
        run_id: str,
        request: RunRequest,
        checked: CheckedRequest,
        previous: RunRecord | None,
        owner: str | None,
        idempotency_key: str | None,
        digest: str | None,
    ) -> RunRecord:
        return RunRecord(
            id=run_id,
            owner=owner,
            request=request,
            model=checked.model,
            settings=checked.limits,
            webhook=WebhookState(url=request.webhook) if request.webhook else None,
            idempotency_key=idempotency_key,
            request_hash=digest,
            previous_run_id=request.previous_run_id,
            inherited_system_prompt=(
                previous.system_prompt
                if previous is not None and request.system_prompt is None
                else None
            ),
        )

    async def _store(
        self,
        record: RunRecord,
        checked: CheckedRequest,
        traceparent: str | None,
        *,
        replay: bool = True,
        joining: Joining | None = None,
    ) -> RunRecord | None:
        """Store the run with its `run.queued` event; None, or the run a concurrent request
        with the same Idempotency-Key stored first (`replay`: checked to be the same
        request; a child's key names its call, whatever its request). A thread's run is
        bound to its thread then (`joining`), or deleted (`ThreadMovedError`)."""
        trace = self.traces.open(record, traceparent)
        if trace is not None:
            record.trace_id = trace.trace_id
        queued: dict[str, Any] = {
            "task": record.request.task,
            "model": record.model,
            "tools": checked.tool_names,
            "settings": settings_dict(record.settings),
            **({"previous_run_id": record.previous_run_id} if record.previous_run_id else {}),
            **({"thread_id": record.thread_id} if record.thread_id else {}),
            **({"schedule_id": record.schedule_id} if record.schedule_id else {}),
            **({"agent": record.request.agent} if record.request.agent else {}),
            **(
                {"forked_from": record.forked_from.model_dump()}
                if record.forked_from is not None
                else {}
            ),
            **(
                {"parent_run_id": record.parent_run_id, "parent_call_id": record.parent_call_id}
                if record.parent_run_id
                else {}
            ),
        }
        try:  # the run and its run.queued event in one write
            await self.store.create(record, first_event=(EventType.RUN_QUEUED, 0, queued))
        except DuplicateRunError:
            key = record.idempotency_key
            if key is None:
                raise
            existing = await self.store.find_by_idempotency_key(record.owner, key)
            if existing is None:
                raise
            if not replay:
                return self._live(existing)
            return self._replay(existing, record.request_hash or "")
        if joining is not None and not await joining.bind(record):
            await self.store.delete(record.id)  # nobody was given its id
            raise ThreadMovedError(f"thread {joining.thread_id!r} moved on")
        if trace is not None:
            self.traces.keep(record.id, trace)
        self.metrics.run_queued(record.owner)
        log.info("run_created", run_id=record.id, model=record.model)
        return None

    async def _previous(self, run_id: str, owner: str | None) -> RunRecord:
        """The run a follow-up continues: visible to the caller (404) and ended (409)."""
        try:
            previous = await self.find(run_id, owner)
        except RunNotFoundError:
            raise RunNotFoundError(
                f"previous_run_id: no run {run_id!r}", run_id=run_id, field="previous_run_id"
            ) from None
        if not previous.status.terminal:
            raise RunNotEndedError(
                f"previous_run_id: run {run_id!r} is {previous.status.value}; a follow-up "
                "starts from an ended run",
                run_id=run_id,
                field="previous_run_id",
            )
        return previous

    def _replay(self, existing: RunRecord, digest: str) -> RunRecord:
        if existing.request_hash != digest:
            raise IdempotencyConflictError(
                "this Idempotency-Key was used with a different request body", run_id=existing.id
            )
        return self._live(existing)

    def _live(self, record: RunRecord) -> RunRecord:
        active = self.live.get(record.id)  # a run in progress: its live record
        return active.record if active is not None else record
