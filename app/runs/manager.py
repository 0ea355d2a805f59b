"""RunManager: the lifecycle of runs in this process.

Runs execute as tasks in one task group owned by the app's lifespan. At most
`max_concurrent_runs` execute at once; the rest wait in a FIFO queue of bounded length.
A run's record is made terminal before its terminal event is appended, so a client that saw
the event and then reads the run sees it ended.

With a `RunCoordinator` (a store several replicas share: Redis) the queue is the cluster's
instead: see `app/runs/cluster.py`, and `cluster_runs.ClusterRuns` for this side of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from collections import deque
from collections.abc import AsyncIterator, Sequence

import structlog

from app.engine.loop import run_react
from app.engine.policies import StopReason
from app.engine.steps import RunError
from app.runs.cluster import RunCoordinator, wait_for_end
from app.runs.cluster_runs import CANCEL_SETTLE_S, ClusterRuns, _Active
from app.runs.errors import (
    IdempotencyConflictError,
    QueueFullError,
    RunAlreadyEndedError,
    RunNotEndedError,
    RunNotFoundError,
    ShuttingDownError,
)
from app.runs.factory import RunFactory
from app.runs.metrics import RunMetrics
from app.runs.recorder import RunRecorder
from app.runs.records import (
    ACTIVE_STATUSES,
    Event,
    RunRecord,
    RunStatus,
    WebhookState,
    new_run_id,
    utcnow,
)
from app.runs.spec import RunRequest
from app.runs.store import DuplicateRunError, LeaseLostError, RunStore
from app.runs.webhooks import WebhookSender

log = structlog.get_logger("finishline.runs")

EVENT_PAGE = 1000


def request_hash(request: RunRequest) -> str:
    body = json.dumps(request.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(body.encode()).hexdigest()


class RunManager(ClusterRuns):
    def __init__(
        self,
        *,
        store: RunStore,
        factory: RunFactory,
        metrics: RunMetrics,
        webhooks: WebhookSender,
        max_concurrent_runs: int,
        max_queued_runs: int,
        max_event_content_chars: int,
        coordinator: RunCoordinator | None = None,
    ) -> None:
        self.store = store
        self.factory = factory
        self.metrics = metrics
        self.webhooks = webhooks
        self.max_concurrent_runs = max_concurrent_runs
        self.max_queued_runs = max_queued_runs
        self.recorder = RunRecorder(
            store=store,
            metrics=metrics,
            max_event_content_chars=max_event_content_chars,
            on_ended=self._deliver_webhook,
        )
        self._active: dict[str, _Active] = {}
        self._running: set[str] = set()
        self._queue: deque[str] = deque()
        self._tasks: asyncio.TaskGroup | None = None
        self._drain_task: asyncio.Task[None] | None = None
        self._webhook_tasks: set[asyncio.Task[None]] = set()
        self.draining = False
        # with a coordinator (a store replicas share), the queue is the cluster's: this
        # process executes the runs it claims, and asks others for the rest (app/runs/cluster)
        self.coordinator = coordinator
        self._slot_freed = asyncio.Event()
        self._cluster_task: asyncio.Task[None] | None = None

    # -- lifecycle ------------------------------------------------------------------------

    def start(self, tasks: asyncio.TaskGroup) -> None:
        self._tasks = tasks
        if self.coordinator is not None:
            self._cluster_task = tasks.create_task(
                self.coordinator.serve(
                    free_slots=self._free_slots,
                    slot_freed=self._slot_freed,
                    on_claimed=self._claimed,
                    on_cancel=self._cancel_asked,
                    on_lost=self._cancel_asked,
                    on_takeover=self._taken_over,
                    on_webhook=self.webhooks.deliver,
                ),
                name="cluster",
            )

    async def recover(self) -> list[str]:
        """Fail the runs a crash left queued or running (until they can resume elsewhere).
        Not on a store other replicas share (Redis): their runs are not this process's."""
        found: list[str] = []
        if self.coordinator is not None:
            return found
        while True:
            stale = await self.store.list_runs(
                owner=None, statuses=ACTIVE_STATUSES, limit=200, any_owner=True
            )
            if not stale:
                return found
            for record in stale:
                message = f"the server stopped while this run was {record.status.value}"
                await self.recorder.end(
                    record, StopReason.ERROR, error=RunError("interrupted", message)
                )
                found.append(record.id)
                log.warning("run_interrupted", run_id=record.id)

    def begin_drain(self, grace_s: float) -> None:
        """Stop taking runs now; drain in the background (see `drain`)."""
        self.draining = True
        if self._drain_task is None and self._tasks is not None:
            self._drain_task = self._tasks.create_task(self._drain(grace_s))

    async def drain(self, grace_s: float) -> None:
        """Stop taking runs; let running ones end within `grace_s`; cancel the rest, each
        with its terminal event. Pending webhook deliveries are abandoned."""
        self.begin_drain(grace_s)
        if self._drain_task is not None:
            await self._drain_task
        for task in list(self._webhook_tasks):
            task.cancel()

    async def _drain(self, grace_s: float) -> None:
        self._slot_freed.set()  # the coordinator claims no more: other replicas take the queue
        log.info(
            "runs_draining", running=len(self._running), queued=len(self._queue), grace_s=grace_s
        )
        while self._queue:
            await self._cancel_queued(self._active[self._queue[0]])
        await self._wait_for(list(self._running), grace_s)
        for run_id in list(self._running):
            self._active[run_id].cancel.set()
        await self._wait_for(list(self._running), CANCEL_SETTLE_S)
        for run_id in list(self._running):  # a run that ignored its cancel
            active = self._active[run_id]
            if active.task is not None:
                active.task.cancel()
        await self._wait_for(list(self._running), CANCEL_SETTLE_S)
        if self.coordinator is not None and self._cluster_task is not None:
            self.coordinator.stop()  # leases were renewed until the runs ended
            self._cluster_task.cancel()

    async def _wait_for(self, run_ids: Sequence[str], timeout_s: float) -> None:
        events = [self._active[r].done.wait() for r in run_ids if r in self._active]
        if events:
            await asyncio.wait([asyncio.ensure_future(e) for e in events], timeout=timeout_s)

    # -- requests -------------------------------------------------------------------------

    async def create(
        self, request: RunRequest, *, owner: str | None, idempotency_key: str | None = None
    ) -> tuple[RunRecord, bool]:
        """The new run and True, or the run an idempotent replay names and False."""
        if self.draining:
            raise ShuttingDownError("the server is shutting down and takes no new runs")
        digest = request_hash(request)
        if idempotency_key is not None:
            existing = await self.store.find_by_idempotency_key(owner, idempotency_key)
            if existing is not None:
                return self._replay(existing, digest), False
        resolved = self.factory.validate(request)
        busy = len(self._running) >= self.max_concurrent_runs
        if self.coordinator is None:
            queued = len(self._queue)
            full = busy and queued >= self.max_queued_runs
        else:  # the cluster's queue: runs no replica has claimed yet
            queued = await self.coordinator.queued()
            full = queued >= self.max_queued_runs and (queued > 0 or busy)
        if full:
            raise QueueFullError(
                f"{len(self._running)} runs are running here and {queued} are queued; "
                "try again later",
                retry_after_s=5,
            )
        record = RunRecord(
            id=new_run_id(),
            owner=owner,
            request=request.model_dump(mode="json", exclude_none=True),
            model=resolved.model,
            settings=resolved.settings,
            webhook=WebhookState(url=request.webhook) if request.webhook else None,
            idempotency_key=idempotency_key,
            request_hash=digest,
        )
        try:
            await self.store.create(record)
        except DuplicateRunError:
            if idempotency_key is None:
                raise
            existing = await self.store.find_by_idempotency_key(owner, idempotency_key)
            if existing is None:
                raise
            return self._replay(existing, digest), False
        await self.store.append(
            record.id,
            "run.queued",
            0,
            {
                "task": request.task,
                "model": record.model,
                "tools": resolved.tool_names,
                "settings": record.settings,
            },
        )
        self.metrics.run_queued()
        log.info("run_created", run_id=record.id, model=record.model)
        if self.coordinator is not None:
            await self.coordinator.enqueue(record.id)
            return record, True
        active = self._active[record.id] = _Active(record)
        self._queue.append(record.id)
        self._start_next()
        return active.record, True

    def _replay(self, existing: RunRecord, digest: str) -> RunRecord:
        if existing.request_hash != digest:
            raise IdempotencyConflictError(
                "this Idempotency-Key was used with a different request body", run_id=existing.id
            )
        active = self._active.get(existing.id)  # a run in progress: its live record
        return active.record if active is not None else existing

    async def get(self, run_id: str, owner: str | None, *, any_owner: bool = False) -> RunRecord:
        active = self._active.get(run_id)
        record = active.record if active is not None else await self.store.get(run_id)
        if record is None or not (any_owner or record.owner is None or record.owner == owner):
            raise RunNotFoundError(f"no run {run_id!r}", run_id=run_id)
        return record

    async def list_runs(
        self,
        *,
        owner: str | None,
        statuses: Sequence[RunStatus],
        limit: int,
        cursor: str | None,
        any_owner: bool,
    ) -> tuple[list[RunRecord], str | None]:
        records = await self.store.list_runs(
            owner=owner, statuses=statuses, limit=limit + 1, before_id=cursor, any_owner=any_owner
        )
        fresh = [self._active[r.id].record if r.id in self._active else r for r in records]
        if len(fresh) > limit:
            return fresh[:limit], fresh[limit - 1].id
        return fresh, None

    async def cancel(self, run_id: str, owner: str | None, *, any_owner: bool = False) -> RunRecord:
        record = await self.get(run_id, owner, any_owner=any_owner)
        active = self._active.get(run_id)
        if self.coordinator is not None and active is None and not record.status.terminal:
            return await self._cancel_elsewhere(record)
        if record.status.terminal or active is None:
            raise RunAlreadyEndedError(
                f"run {run_id!r} has already ended ({record.status.value})", run_id=run_id
            )
        if run_id in self._queue:
            await self._cancel_queued(active)
        else:
            active.cancel.set()
            await self._wait_for([run_id], CANCEL_SETTLE_S)
        return active.record

    async def wait(
        self, run_id: str, owner: str | None, timeout_s: float, *, any_owner: bool = False
    ) -> RunRecord:
        record = await self.get(run_id, owner, any_owner=any_owner)
        active = self._active.get(run_id)
        if not record.status.terminal and active is not None:
            await self._wait_for([run_id], timeout_s)
            return active.record
        if self.coordinator is not None:  # executing on another replica, or queued
            return await wait_for_end(self.store, record, timeout_s)
        return record

    async def delete(self, run_id: str, owner: str | None, *, any_owner: bool = False) -> None:
        record = await self.get(run_id, owner, any_owner=any_owner)
        if not record.status.terminal or run_id in self._active:
            raise RunNotEndedError(
                f"run {run_id!r} is {record.status.value}: cancel it first", run_id=run_id
            )
        await self.store.delete(run_id)

    async def events(self, run_id: str, after: int = 0) -> AsyncIterator[Event]:
        """The run's events after seq `after`, live until its terminal event. A run not active
        here has every event stored already: replay and stop, wherever `after` points."""
        if run_id in self._active or self.coordinator is not None:
            async for event in self.store.subscribe(run_id, after=after):
                yield event
            return
        while True:
            batch = await self.store.read(run_id, after=after, limit=EVENT_PAGE)
            for event in batch:
                yield event
                after = event.seq
            if len(batch) < EVENT_PAGE:
                return

    async def read_events(self, run_id: str, after: int, limit: int) -> list[Event]:
        return await self.store.read(run_id, after=after, limit=limit)

    # -- execution ------------------------------------------------------------------------

    def _start_next(self) -> None:
        while self._queue and len(self._running) < self.max_concurrent_runs and not self.draining:
            run_id = self._queue.popleft()
            self._running.add(run_id)
            active = self._active[run_id]
            assert self._tasks is not None, "RunManager.start() was not called"
            active.task = self._tasks.create_task(self._execute(active), name=run_id)
        self.metrics.set_load(running=len(self._running), queued=len(self._queue))

    async def _execute(self, active: _Active) -> None:
        record = active.record
        structlog.contextvars.bind_contextvars(run_id=record.id)
        try:
            if active.attempt == 0:
                record.status = RunStatus.RUNNING
                record.started_at = utcnow()
                await self.store.save(record)
                await self.store.append(record.id, "run.started", 0, {})
                log.info("run_started")
            else:
                await self._recovered(active)
            prepared = self.factory.prepare(record)
            try:
                async for step in run_react(
                    task=record.request["task"],
                    system_prompt=record.request.get("system_prompt"),
                    model=prepared.model,
                    tools=prepared.tools,
                    limits=prepared.limits,
                    prompts=prepared.prompts,
                    run_id=record.id,
                    cancel=active.cancel,
                    state=self._resumed_state(active),
                ):
                    await self.recorder.record(record, step)
            finally:
                await prepared.aclose()
        except asyncio.CancelledError:
            if not record.status.terminal:
                with contextlib.suppress(LeaseLostError):
                    await asyncio.shield(self.recorder.end(record, StopReason.CANCELLED))
            raise
        except LeaseLostError:  # another replica took the run over: it is not ours to end
            log.warning("run_given_up", reason="lease lost")
        except Exception as exc:  # our bug: log once with the traceback, fail the run
            log.exception("run_crashed")
            if not record.status.terminal:
                with contextlib.suppress(LeaseLostError):
                    await self.recorder.end(
                        record,
                        StopReason.ERROR,
                        error=RunError("internal", f"internal error: {type(exc).__name__}"),
                    )
        finally:
            if self.coordinator is not None:
                self.coordinator.release(record.id)
            self._running.discard(record.id)
            self._active.pop(record.id, None)
            active.done.set()
            self._slot_freed.set()
            self._start_next()

    def _deliver_webhook(self, record: RunRecord) -> None:
        if self.coordinator is not None:  # the store's outbox has it: one replica delivers
            return
        if record.webhook is not None and self._tasks is not None:
            task = self._tasks.create_task(self.webhooks.deliver(record.id))
            self._webhook_tasks.add(task)
            task.add_done_callback(self._webhook_tasks.discard)

    async def _cancel_queued(self, active: _Active) -> None:
        self._queue.remove(active.record.id)
        self._active.pop(active.record.id, None)
        await self.recorder.end(active.record, StopReason.CANCELLED)
        active.done.set()
        self.metrics.set_load(running=len(self._running), queued=len(self._queue))
