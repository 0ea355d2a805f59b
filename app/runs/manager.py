"""RunManager: the runs of this service, as the API sees them. A façade over parts that each
own one concern and receive what they need in their constructor:

- `Admission` (`admission.py`): how a new run gets in;
- `Execution` (`execution.py`): a run's task here, from its slot to its end;
- `ApprovalDesk` (`approvals.py`): runs waiting for a person;
- the backend's sides (`backends.open_backend`, chosen once from the store URL): where runs
  wait and execute (`Placement`), where steering messages are kept (`Inbox`), where waiting
  runs are (`WaitingRuns`), each API key's quotas (`Quotas`); one process or the replicas
  of a shared store, never asked;
- `LiveRuns` (`live.py`): the runs this process holds, which every part reads;
- `RunFollower` (`follow/follower.py`): following a run to its end or its wait;
- `Threads` (`threads/threads.py`): threads as a resource (DESIGN §19); `Reports`
  (`reports/service.py`): termination reports, and the run summaries' backfill (DESIGN §20).

A run's record is made terminal before its terminal event is appended, so a client that saw
the event and then reads the run sees it ended.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Sequence

import structlog

from app.runs.admission import Admission
from app.runs.approvals import ApprovalDesk
from app.runs.backends import Backend
from app.runs.errors import (
    InvalidRunError,
    RunAlreadyEndedError,
    RunClosingError,
    RunNotEndedError,
    RunNotFoundError,
    RunUnreadableError,
)
from app.runs.execution import Execution
from app.runs.follow.follower import RunFollower, Until
from app.runs.live import CANCEL_SETTLE_S
from app.runs.metrics import RunMetrics
from app.runs.observer import RunObserver, RunTraces
from app.runs.ports import RunAssembler
from app.runs.quotas.seam import KeyUsage
from app.runs.recorder import RunRecorder
from app.runs.records import ApprovalDecision, Event, RunRecord, RunStatus
from app.runs.reports.service import Reports
from app.runs.reports.summaries import RunFilter
from app.runs.spec import RunRequest
from app.runs.threads.threads import Multitask, Threads
from app.runs.trees.children import RunTree
from app.runs.webhooks import WebhookSender

log = structlog.get_logger("finishline.runs")

CANCEL_ROUNDS = 4
"""Times a cancel looks again at a run that moved while it was being cancelled."""


class RunManager:
    def __init__(
        self,
        *,
        backend: Backend,
        assembler: RunAssembler,
        metrics: RunMetrics,
        webhooks: WebhookSender,
        max_event_content_chars: int,
        max_message_chars: int = 100_000,
        max_answer_chars: int = 100_000,
        max_argument_chars: int = 100_000,
        observer: RunObserver | None = None,
        max_agent_depth: int = 2,
        max_agent_runs: int = 20,
    ) -> None:
        self.store = backend.store
        self.live = backend.live
        self.placement = backend.placement
        self.inbox = backend.inbox
        self.assembler = assembler
        self.webhooks = webhooks
        self.metrics = metrics
        self.max_message_chars = max_message_chars
        traces = RunTraces(observer)
        self.quotas = backend.quotas
        self.recorder = RunRecorder(
            store=self.store,
            metrics=metrics,
            quotas=self.quotas,
            max_event_content_chars=max_event_content_chars,
            on_ended=self._ended,
            max_answer_chars=max_answer_chars,
            # read only by a takeover
            in_flight_checkpoints=self.placement.resumes_elsewhere,
        )
        self.approvals = ApprovalDesk(
            store=self.store,
            recorder=self.recorder,
            assembler=assembler,
            waiting=backend.waiting,
            max_argument_chars=max_argument_chars,
        )
        self.admission = Admission(
            store=self.store,
            assembler=assembler,
            metrics=metrics,
            placement=self.placement,
            quotas=self.quotas,
            live=self.live,
            traces=traces,
            find=self.get,
        )
        self.reports = Reports(self.store, assembler, self.admission)  # DESIGN §20
        self.tree = RunTree(
            store=self.store,
            admission=self.admission,
            live=self.live,
            placement=self.placement,
            cancel=lambda run_id: self.cancel(run_id, None, any_owner=True),
            went_on=self.approvals.went_on,
            traces=traces,
            max_depth=max_agent_depth,
            max_runs=max_agent_runs,
        )
        self.execution = Execution(
            store=self.store,
            assembler=assembler,
            recorder=self.recorder,
            approvals=self.approvals,
            webhooks=webhooks,
            inbox=self.inbox,
            placement=self.placement,
            quotas=self.quotas,
            live=self.live,
            traces=traces,
            tree=self.tree,
        )
        self.follower = RunFollower(store=self.store, live=self.live, visible=self.get)
        self.threads = Threads(
            index=self.store.threads,
            store=self.store,
            live=self.live,
            admission=self.admission,
            cancel=lambda run_id: self.cancel(run_id, None, any_owner=True),
        )
        self._tasks: asyncio.TaskGroup | None = None
        self._drain_task: asyncio.Task[None] | None = None
        self._timers: list[asyncio.Task[None]] = []

    @property
    def draining(self) -> bool:
        return self.live.draining

    def _ended(self, record: RunRecord) -> None:
        self.quotas.ended(record)
        self.execution.ended(record)

    # -- lifecycle ------------------------------------------------------------------------

    def start(self, tasks: asyncio.TaskGroup) -> None:
        self._tasks = tasks
        self.execution.open(tasks)
        self.placement.serve(self.execution, tasks)
        self._timers = [
            tasks.create_task(self.approvals.watch(), name="approval-timer"),
            tasks.create_task(self.inbox.listen(), name="messages"),
            tasks.create_task(self.reports.backfill(), name="summary-backfill"),
        ]

    async def recover(self) -> list[str]:
        """End the runs a crash of this process interrupted (one process: they fail; with
        replicas the others take them over). Runs waiting for a person stay waiting: their
        approval timeouts are armed again."""
        found = await self.placement.recover()
        waiting = await self.approvals.rearm()
        if waiting:
            log.info("runs_waiting_for_approval", count=waiting)
        return found

    def begin_drain(self, grace_s: float) -> None:
        """Stop taking runs now; drain in the background (see `drain`)."""
        self.live.draining = True
        if self._drain_task is None and self._tasks is not None:
            self._drain_task = self._tasks.create_task(self._drain(grace_s))

    async def drain(self, grace_s: float) -> None:
        """Stop taking runs; let running ones end within `grace_s`; cancel the rest, each
        with its terminal event. Pending webhook deliveries are abandoned."""
        self.begin_drain(grace_s)
        if self._drain_task is not None:
            await self._drain_task
        self.execution.abandon_webhooks()
        for timer in self._timers:
            timer.cancel()

    async def _drain(self, grace_s: float) -> None:
        running = self.live.running
        queued = len(self.live.all()) - running
        log.info("runs_draining", running=running, queued=queued, grace_s=grace_s)
        await self.placement.drain()
        await self.execution.drain(grace_s)
        self.placement.stop()

    # -- requests -------------------------------------------------------------------------

    async def create(
        self,
        request: RunRequest,
        *,
        owner: str | None,
        idempotency_key: str | None = None,
        traceparent: str | None = None,
        thread_id: str | None = None,
        multitask: Multitask = Multitask.REJECT,
        schedule_id: str | None = None,
    ) -> tuple[RunRecord, bool]:
        """The new run and True, or the run an idempotent replay names and False
        (`Admission.create`); with `thread_id`, that thread's next run (`Threads.start`)."""
        if thread_id is not None:
            return await self.threads.start(
                request,
                owner=owner,
                thread_id=thread_id,
                multitask=multitask,
                idempotency_key=idempotency_key,
                traceparent=traceparent,
                schedule_id=schedule_id,
            )
        key, parent = idempotency_key, traceparent
        return await self.admission.create(
            request, owner=owner, idempotency_key=key, traceparent=parent, schedule_id=schedule_id
        )

    async def get(self, run_id: str, owner: str | None, *, any_owner: bool = False) -> RunRecord:
        active = self.live.get(run_id)
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
        parent_run_id: str | None = None,
        matching: RunFilter | None = None,
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
            parent_run_id=parent_run_id,
            matching=matching,
        )
        fresh = [getattr(self.live.get(r.id), "record", r) for r in records]
        after = fresh[limit - 1].id if len(fresh) > limit else None
        if unreadable is not None:  # past the cursor: the next page's
            unreadable += [e.run_id for e in bad if after is None or e.run_id > after]
        return fresh[:limit], after

    async def cancel(self, run_id: str, owner: str | None, *, any_owner: bool = False) -> RunRecord:
        """End the run `cancelled`, wherever it is (queued, running here or on another
        replica, waiting for a person), and answer it; 409 once it ended otherwise. A run that
        moves meanwhile (a decision resumed it, it began to wait) is cancelled where it went.
        Its answer is never a run that ended any other way: a cancel too late is refused."""
        for _ in range(CANCEL_ROUNDS):
            record = await self.get(run_id, owner, any_owner=any_owner)
            if record.status.terminal:
                raise self._ended_already(record)
            active = self.live.get(run_id)
            if active is not None:
                if await self.placement.cancel_waiting(active):  # queued here
                    return active.record
                active.cancel.set()
                await self.live.wait_for([run_id], CANCEL_SETTLE_S)
                if active.record.status != RunStatus.REQUIRES_ACTION:
                    return self._cancelled(active.record)
            elif record.status == RunStatus.REQUIRES_ACTION:
                ended = await self.approvals.cancel(run_id)
                if ended is not None:
                    return ended
            else:  # queued in the cluster, or another replica's
                elsewhere = await self.placement.cancel_elsewhere(record)
                if elsewhere is not None and elsewhere.status != RunStatus.REQUIRES_ACTION:
                    return self._cancelled(elsewhere)
            # it began to wait, was decided and resumed, or ended: look again
        record = await self.get(run_id, owner, any_owner=any_owner)
        return self._cancelled(record)

    @staticmethod
    def _ended_already(record: RunRecord) -> RunAlreadyEndedError:
        return RunAlreadyEndedError(
            f"run {record.id!r} has already ended ({record.status.value})", run_id=record.id
        )

    def _cancelled(self, record: RunRecord) -> RunRecord:
        """`record` as a cancel's answer: cancelled, or still settling (another replica's
        run: its terminal event follows); a run that ended otherwise first is a 409."""
        if record.status.terminal and record.status != RunStatus.CANCELLED:
            raise self._ended_already(record)
        return record

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
        active = self.live.get(run_id)  # resumed already: its live record
        return active.record if active is not None else record

    async def post_message(
        self, run_id: str, owner: str | None, content: str, *, any_owner: bool = False
    ) -> RunRecord:
        """Keep a steering message for the run's next LLM call (DESIGN §10)."""
        if len(content) > self.max_message_chars:
            raise InvalidRunError(
                "content",
                f"{len(content)} chars exceeds the server cap of {self.max_message_chars}",
                cap=self.max_message_chars,
            )
        record = await self.get(run_id, owner, any_owner=any_owner)
        return await self.inbox.post(record, content)

    async def wait(
        self, run_id: str, owner: str | None, timeout_s: float, *, any_owner: bool = False
    ) -> RunRecord:
        record = await self.get(run_id, owner, any_owner=any_owner)
        active = self.live.get(run_id)
        if record.status.terminal and active is None:
            return record
        log.info("run_wait_started", run_id=run_id, timeout_s=timeout_s)
        if active is not None:  # its record turns terminal before its end is stored (DESIGN §5)
            await self.live.wait_for([run_id], timeout_s)
            return active.record
        return await self.placement.wait(record, timeout_s)  # another replica's, or queued

    async def delete(self, run_id: str, owner: str | None, *, any_owner: bool = False) -> None:
        """Delete an ended run. One whose task here is still storing its end (its record is
        terminal first, DESIGN §5) or closing is waited for, at most `CANCEL_SETTLE_S`: a
        follower may send the DELETE as soon as it has the terminal event."""
        record = await self.get(run_id, owner, any_owner=any_owner)
        if not record.status.terminal:
            raise RunNotEndedError(
                f"run {run_id!r} is {record.status.value}: cancel it first", run_id=run_id
            )
        if run_id in self.live:
            await self.live.wait_for([run_id], CANCEL_SETTLE_S)
            if run_id in self.live:
                raise RunClosingError(
                    f"run {run_id!r} is {record.status.value}, and its task is still closing: "
                    "delete it again in a moment",
                    retry_after_s=1,
                    run_id=run_id,
                )
        await self.store.delete(run_id)

    def follow(
        self,
        run_id: str,
        owner: str | None,
        after: int = 0,
        *,
        any_owner: bool = False,
        until: Until = Until.END,
        seen: RunRecord | None = None,
    ) -> AsyncGenerator[list[Event], None]:
        """`RunFollower.follow` (`seen`: the run as `get` just gave it to the caller)."""
        follow = self.follower.follow
        return follow(run_id, owner, after, any_owner=any_owner, until=until, seen=seen)

    async def read_events(self, run_id: str, after: int, limit: int) -> list[Event]:
        return await self.store.read(run_id, after=after, limit=limit)

    async def usage(self, owner: str | None) -> KeyUsage:
        """The figures of `owner`'s API key now: its day, its runs, its quotas (DESIGN §13)."""
        return await self.quotas.usage(owner)
