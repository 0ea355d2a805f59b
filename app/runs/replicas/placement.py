"""The replica side of the `Placement` seam (DESIGN §8): runs wait in the cluster's queue,
shared by every replica on one store, and execute on whichever replica claims them.

`ReplicaPlacement` is this replica's `ClusterMember`: its coordinator hands it queued runs to
claim, runs to take over from a replica that stopped, cancel requests and lost leases, and
webhooks to deliver from the outbox. It runs them through this process's `Runner`, and
cancels or waits for a run another replica executes through the shared store.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import structlog

from app.engine.steps import RunError
from app.runs.errors import QueueFullError
from app.runs.live import CANCEL_SETTLE_S, ActiveRun, LiveRuns, Takeover
from app.runs.metrics import RunMetrics
from app.runs.placement import Runner
from app.runs.records import RunRecord, RunStatus
from app.runs.replicas.cluster import RunCoordinator
from app.runs.replicas.follow import wait_for_end, wait_until_settled
from app.runs.store import RunStore

log = structlog.get_logger("finishline.runs")


class ReplicaPlacement:
    resumes_elsewhere = True

    def __init__(
        self,
        *,
        store: RunStore,
        coordinator: RunCoordinator,
        live: LiveRuns,
        metrics: RunMetrics,
        max_queued: int,
    ) -> None:
        self.store = store
        self.coordinator = coordinator
        self.live = live
        self.metrics = metrics
        self.max_queued = max_queued
        self.slot_freed = asyncio.Event()
        self._runner: Runner | None = None
        self._serving: asyncio.Task[None] | None = None
        self._tasks: asyncio.TaskGroup | None = None
        self._placed: set[str] = set()  # places of POSTs an enqueue took (no unreserve)

    @property
    def runner(self) -> Runner:
        assert self._runner is not None, "RunManager.start() was not called"
        return self._runner

    def serve(self, runner: Runner, tasks: asyncio.TaskGroup) -> None:
        self._runner = runner
        self._tasks = tasks
        self._serving = tasks.create_task(self.coordinator.serve(self), name="cluster")

    # -- admission --------------------------------------------------------------------------

    def reserve(self) -> AbstractAsyncContextManager[str | None]:
        return self._reserve()

    @asynccontextmanager
    async def _reserve(self) -> AsyncIterator[str | None]:
        # the cluster's queue: one atomic check-and-take across replicas
        busy = self.live.running >= self.live.slots
        ticket, queued = await self.coordinator.reserve(cap=self.max_queued, busy=busy)
        if ticket is None:
            raise QueueFullError(
                f"{self.live.running} runs are running here and {queued} are queued; "
                "try again later",
                retry_after_s=5,
            )
        try:
            yield ticket
        finally:  # given back, unless an enqueue took it
            if ticket not in self._placed:
                await self.coordinator.unreserve(ticket)
            self._placed.discard(ticket)

    async def enqueue(self, record: RunRecord, place: str | None = None) -> RunRecord:
        await self.coordinator.enqueue(record.id, place)
        if place is not None:  # given back with it
            self._placed.add(place)
        return record

    async def hold(self, record: RunRecord, behind: str) -> RunRecord:
        """Held in the cluster (`RunCoordinator.hold`) until the replica that ends `behind`
        releases it into the queue (`ended`), or, if that replica died first, the sweep of
        any replica does."""
        await self.coordinator.hold(record.id, behind)
        before = await self.store.get(behind)
        if before is None or before.status.terminal:  # it ended before the hold: no wait
            await self.coordinator.release_held(behind)
        return record

    # -- what the coordinator hands this replica (`ClusterMember`) ---------------------------

    def free_slots(self) -> int:
        return self.live.free_slots()

    async def claimed(self, run_id: str, record: RunRecord | None = None) -> None:
        """Execute the run here, unless it ended (a cancel took it first) or another replica
        owns it."""
        record = record or await self.store.get(run_id)
        if record is None or record.status != RunStatus.QUEUED:
            return
        if not await self.coordinator.claim(run_id):
            return
        await self._run_here(ActiveRun(record))

    async def taken_over(self, run_id: str, attempt: int) -> None:
        """Resume the run here from its checkpoint, or fail it once it was taken over
        `max_attempts` times. Until it runs, a failure (Redis away) gives the lease up: it
        lapses, and the run is taken over again."""
        try:
            record = await self.store.get(run_id)
            if record is None or record.status != RunStatus.RUNNING:
                self.coordinator.release(run_id)
                return
            if attempt > self.coordinator.max_attempts:
                message = f"the run was interrupted {attempt} times (its replica stopped)"
                try:
                    await self.runner.fail(record, RunError("interrupted", message))
                finally:
                    self.coordinator.release(run_id)
                return
            checkpoint = await self.store.load_checkpoint(run_id)
        except BaseException:
            self.coordinator.release(run_id)
            raise
        takeover = Takeover(attempt, checkpoint, self.coordinator.replica)
        await self._run_here(ActiveRun(record, takeover=takeover))

    async def _run_here(self, active: ActiveRun) -> None:
        self.runner.start(active)
        self.metrics.set_load(running=self.live.running, queued=0)
        if await self.coordinator.cancel_requested(active.record.id):  # asked as it was claimed
            active.cancel.set()

    def cancel_asked(self, run_id: str) -> None:
        active = self.live.get(run_id)
        if active is not None:
            active.cancel.set()

    async def deliver_webhook(self, run_id: str) -> None:
        await self.runner.deliver_webhook(run_id)

    # -- runs another replica holds ---------------------------------------------------------

    async def cancel_waiting(self, active: ActiveRun) -> bool:
        return False  # a run live here executes here: it is queued in the cluster otherwise

    async def cancel_elsewhere(self, record: RunRecord) -> RunRecord | None:
        """End the run here if it is still queued (taking it before any replica does), else
        ask its owner; then wait for its end."""
        if record.status == RunStatus.QUEUED and await self.coordinator.claim(record.id):
            try:
                await self.runner.end_cancelled(ActiveRun(record))  # with its messages
            finally:
                self.coordinator.release(record.id)
            return record
        await self.coordinator.request_cancel(record.id)
        return await wait_for_end(self.store, record, CANCEL_SETTLE_S)

    async def wait(self, record: RunRecord, timeout_s: float) -> RunRecord:
        return await wait_until_settled(self.store, record, timeout_s)

    # -- this replica's runs ----------------------------------------------------------------

    def release(self, run_id: str) -> None:
        self.coordinator.release(run_id)
        self.slot_freed.set()

    def wake(self) -> None:
        self.slot_freed.set()

    def ended(self, record: RunRecord) -> None:
        # the store's outbox has its webhook: one replica delivers it; a run held behind it
        # goes to the queue (the coordinator's sweep does it if this replica dies first)
        if self._tasks is not None:
            release = self._released(record.id)
            try:
                self._tasks.create_task(release)
            except RuntimeError:  # the task group is closing (shutdown): the sweep will
                release.close()

    async def _released(self, behind: str) -> None:
        try:
            await self.coordinator.release_held(behind)
        except Exception:  # the sweep releases it once Redis answers
            log.warning("run_release_failed", behind=behind, exc_info=True)

    async def recover(self) -> list[str]:
        return []  # a stopped replica's runs are taken over by the others (`taken_over`)

    async def drain(self) -> None:
        self.slot_freed.set()  # the coordinator claims no more: other replicas take the queue

    def stop(self) -> None:
        self.coordinator.stop()  # leases were renewed until the runs here ended
        if self._serving is not None:
            self._serving.cancel()
