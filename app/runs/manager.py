"""RunManager: the lifecycle of runs in this process.

Runs execute as tasks in one task group owned by the app's lifespan. At most
`max_concurrent_runs` execute at once; the rest wait in a FIFO queue of bounded length.
A run's record is made terminal before its terminal event is appended, so a client that saw
the event and then reads the run sees it ended.

With a `RunCoordinator` (a store several replicas share: Redis) the queue is the cluster's
instead: see `app/runs/cluster.py`, and `cluster_runs.ClusterRuns` for this side of it.
How a new run gets in (the queue check, idempotent replays, follow-ups) is
`admission.AdmissionRuns`; how it executes (its task, its end, its webhook, its return to the
queue once a person decided) is `execution.ExecutingRuns`.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Sequence

import structlog

from app.engine.policies import StopReason
from app.engine.steps import RunError
from app.runs.admission import AdmissionRuns
from app.runs.approvals import ApprovalDesk
from app.runs.cluster import RunCoordinator
from app.runs.cluster_runs import CANCEL_SETTLE_S, ClusterRuns, _Active
from app.runs.errors import (
    InvalidRunError,
    RunAlreadyEndedError,
    RunNotEndedError,
    RunNotFoundError,
    RunUnreadableError,
    TooManyMessagesError,
)
from app.runs.execution import ExecutingRuns
from app.runs.inbox import SharedInbox, SharedInboxRuns
from app.runs.metrics import RunMetrics
from app.runs.observer import RunObserver, RunTrace
from app.runs.ports import RunAssembler
from app.runs.recorder import RunRecorder
from app.runs.records import (
    ACTIVE_STATUSES,
    ApprovalDecision,
    Event,
    RunRecord,
    RunStatus,
)
from app.runs.store import RunStore
from app.runs.waiting import LocalWaitingRuns, WaitingRuns, wait_until_settled
from app.runs.webhooks import WebhookSender

log = structlog.get_logger("finishline.runs")

EVENT_PAGE = 1000


class RunManager(ExecutingRuns, AdmissionRuns, ClusterRuns, SharedInboxRuns):
    def __init__(
        self,
        *,
        store: RunStore,
        assembler: RunAssembler,
        metrics: RunMetrics,
        webhooks: WebhookSender,
        max_concurrent_runs: int,
        max_queued_runs: int,
        max_event_content_chars: int,
        max_message_chars: int = 100_000,
        max_pending_messages: int = 100,
        max_answer_chars: int = 100_000,
        max_argument_chars: int = 100_000,
        observer: RunObserver | None = None,
        coordinator: RunCoordinator | None = None,
        waiting: WaitingRuns | None = None,
        messages: SharedInbox | None = None,
    ) -> None:
        self.store = store
        self.assembler = assembler
        self.metrics = metrics
        self.webhooks = webhooks
        self.max_concurrent_runs = max_concurrent_runs
        self.max_queued_runs = max_queued_runs
        self.max_message_chars = max_message_chars
        self.max_pending_messages = max_pending_messages
        self.messages = messages
        """With replicas: runs' steering messages go through the store (else `_Active`)."""
        self.observer = observer
        self._traces: dict[str, RunTrace] = {}
        self.recorder = RunRecorder(
            store=store,
            metrics=metrics,
            max_event_content_chars=max_event_content_chars,
            on_ended=self._on_ended,
            max_answer_chars=max_answer_chars,
            in_flight_checkpoints=coordinator is not None,  # read only by a takeover
        )
        self._active: dict[str, _Active] = {}
        self._running: set[str] = set()
        self._queue: deque[str] = deque()
        self._admitting = 0  # runs past the queue check, being stored
        self._tasks: asyncio.TaskGroup | None = None
        self._drain_task: asyncio.Task[None] | None = None
        self._webhook_tasks: set[asyncio.Task[None]] = set()
        self.draining = False
        self.approvals = ApprovalDesk(
            store=store,
            recorder=self.recorder,
            assembler=assembler,
            waiting=waiting or LocalWaitingRuns(store, self._requeue),
            max_pending_messages=max_pending_messages,
            max_argument_chars=max_argument_chars,
        )
        self._approval_timer: asyncio.Task[None] | None = None
        self._messages_task: asyncio.Task[None] | None = None
        # with a coordinator (a store replicas share), the queue is the cluster's: this
        # process executes the runs it claims, and asks others for the rest (app/runs/cluster)
        self.coordinator = coordinator
        self._slot_freed = asyncio.Event()
        self._cluster_task: asyncio.Task[None] | None = None

    # -- lifecycle ------------------------------------------------------------------------

    def start(self, tasks: asyncio.TaskGroup) -> None:
        self._tasks = tasks
        self._approval_timer = tasks.create_task(self.approvals.watch(), name="approval-timer")
        if self.messages is not None:
            listen = self.messages.listen(self._messages_posted)
            self._messages_task = tasks.create_task(listen, name="messages")
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
        Runs waiting for a person stay waiting: their approval timeouts are armed again.
        Not on a store other replicas share (Redis): their runs are not this process's."""
        found: list[str] = []
        if self.coordinator is not None:
            return found
        while True:
            stale = await self.store.list_runs(
                owner=None, statuses=ACTIVE_STATUSES, limit=200, any_owner=True
            )
            if not stale:
                break
            for record in stale:
                if record.status == RunStatus.QUEUED and record.approval is not None:
                    # decided, but the server stopped before it resumed: it waits again and
                    # resumes once the timer is running
                    record.status = RunStatus.REQUIRES_ACTION
                    await self.store.save(record)
                    continue
                message = f"the server stopped while this run was {record.status.value}"
                await self.recorder.end(
                    record, StopReason.ERROR, error=RunError("interrupted", message)
                )
                found.append(record.id)
                log.warning("run_interrupted", run_id=record.id)
        waiting = await self.approvals.rearm()
        if waiting:
            log.info("runs_waiting_for_approval", count=waiting)
        return found

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
        for timer in (self._approval_timer, self._messages_task):
            if timer is not None:
                timer.cancel()

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

    async def get(self, run_id: str, owner: str | None, *, any_owner: bool = False) -> RunRecord:
        active = self._active.get(run_id)
        try:
            record = active.record if active is not None else await self.store.get(run_id)
        except RunUnreadableError as exc:  # said to its owner only: to others there is none
            if any_owner or exc.owner is None or exc.owner == owner:
                raise
            record = None
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
        previous_run_id: str | None = None,
        unreadable: list[str] | None = None,
    ) -> tuple[list[RunRecord], str | None]:
        """A page of runs and the cursor of the next; the ids of the runs within this page
        that do not read back (left out) are added to `unreadable`."""
        bad: list[RunUnreadableError] = []
        records = await self.store.list_runs(
            owner=owner,
            statuses=statuses,
            limit=limit + 1,
            before_id=cursor,
            any_owner=any_owner,
            previous_run_id=previous_run_id,
            unreadable=bad,
        )
        fresh = [self._active[r.id].record if r.id in self._active else r for r in records]
        after = fresh[limit - 1].id if len(fresh) > limit else None
        if unreadable is not None:  # past the cursor: the next page's
            unreadable += [e.run_id for e in bad if after is None or e.run_id > after]
        return fresh[:limit], after

    async def cancel(self, run_id: str, owner: str | None, *, any_owner: bool = False) -> RunRecord:
        record = await self.get(run_id, owner, any_owner=any_owner)
        active = self._active.get(run_id)
        waiting = record.status == RunStatus.REQUIRES_ACTION
        remote = self.coordinator is not None and active is None and not waiting
        if remote and not record.status.terminal:
            record = await self._cancel_elsewhere(record)
            if record.status != RunStatus.REQUIRES_ACTION:
                return record
            return await self.approvals.cancel(run_id) or record  # it began to wait meanwhile
        if record.status.terminal or (active is None and not waiting):
            raise RunAlreadyEndedError(
                f"run {run_id!r} has already ended ({record.status.value})", run_id=run_id
            )
        if active is not None and run_id in self._queue:
            await self._cancel_queued(active)
            return active.record
        if active is not None and not waiting:
            active.cancel.set()
            await self._wait_for([run_id], CANCEL_SETTLE_S)
            if active.record.status != RunStatus.REQUIRES_ACTION:
                return active.record
        ended = await self.approvals.cancel(run_id)  # a run waiting for a person
        if ended is not None:
            return ended
        fresh = await self.get(run_id, owner, any_owner=True)  # decided meanwhile
        if self.coordinator is not None and not fresh.status.terminal:
            return await self._cancel_elsewhere(fresh)
        return fresh

    async def decide(
        self,
        run_id: str,
        owner: str | None,
        decisions: Sequence[ApprovalDecision],
        *,
        any_owner: bool = False,
    ) -> RunRecord:
        """A person's decisions on the calls a run waits on (DESIGN §9)."""
        await self.get(run_id, owner, any_owner=any_owner)
        record = await self.approvals.decide(run_id, decisions)
        active = self._active.get(run_id)  # resumed already: its live record
        return active.record if active is not None else record

    async def post_message(
        self, run_id: str, owner: str | None, content: str, *, any_owner: bool = False
    ) -> RunRecord:
        """Queue a steering message for the run's next LLM call (DESIGN §10)."""
        if len(content) > self.max_message_chars:
            raise InvalidRunError(
                "content",
                f"{len(content)} chars exceeds the server cap of {self.max_message_chars}",
                cap=self.max_message_chars,
            )
        record = await self.get(run_id, owner, any_owner=any_owner)
        if self.messages is not None and not record.status.terminal:  # through the store
            return await self._post_through_store(record, content)
        active = self._active.get(run_id)
        if record.status == RunStatus.REQUIRES_ACTION:
            held = await self.approvals.hold_message(run_id, content)
            if held is not None:
                return held
            record = await self.get(run_id, owner, any_owner=any_owner)  # it just resumed
            active = self._active.get(run_id)
        if record.status.terminal or active is None or active.inbox_closed:
            raise RunAlreadyEndedError(
                f"run {run_id!r} has ended ({record.status.value}): start a follow-up with "
                "previous_run_id instead",
                run_id=run_id,
            )
        if len(active.inbox) >= self.max_pending_messages:
            raise TooManyMessagesError(
                f"run {run_id!r} already holds {len(active.inbox)} undelivered messages",
                run_id=run_id,
                cap=self.max_pending_messages,
            )
        active.inbox.append(content)
        log.info("user_message_queued", run_id=run_id, chars=len(content))
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
            return await wait_until_settled(self.store, record, timeout_s)
        return record

    async def delete(self, run_id: str, owner: str | None, *, any_owner: bool = False) -> None:
        record = await self.get(run_id, owner, any_owner=any_owner)
        if not record.status.terminal or run_id in self._active:
            raise RunNotEndedError(
                f"run {run_id!r} is {record.status.value}: cancel it first", run_id=run_id
            )
        await self.store.delete(run_id)

    async def event_batches(self, run_id: str, after: int = 0) -> AsyncIterator[list[Event]]:
        """The run's events after seq `after`, live until its terminal event (a run waiting
        for a person too: its follower stays; with replicas, any run: it may run elsewhere).
        Otherwise the run has every event stored already: replay and stop. In batches of
        what is ready at once (`RunStore.subscribe_batches`)."""
        live = run_id in self._active or self.coordinator is not None
        live = live or await self._unended(run_id)
        if live or run_id in self._active:  # (it may have resumed during that read)
            async for batch in self.store.subscribe_batches(run_id, after=after):
                yield batch
            return
        while True:
            batch = await self.store.read(run_id, after=after, limit=EVENT_PAGE)
            if batch:
                yield batch
                after = batch[-1].seq
            if len(batch) < EVENT_PAGE:
                return

    async def _unended(self, run_id: str) -> bool:
        """Whether the run has not ended though no task here runs it: it waits for a person,
        or was just decided and is being queued again. Its followers stay connected."""
        record = await self.store.get(run_id)
        return record is not None and not record.status.terminal

    async def read_events(self, run_id: str, after: int, limit: int) -> list[Event]:
        return await self.store.read(run_id, after=after, limit=limit)

    # -- the queue (a run's task is execution.ExecutingRuns) -------------------------------

    async def _cancel_queued(self, active: _Active) -> None:
        self._queue.remove(active.record.id)
        self._active.pop(active.record.id, None)
        await self._end_cancelled(active)
        active.done.set()
        self.metrics.set_load(running=len(self._running), queued=len(self._queue))
