"""The scheduler: one per process, every replica alike. It asks the store for the schedules
due, claims each due time under `(schedule_id, due_at)` (one claimant wins, on every store),
starts its run with an idempotency key derived from the due time, settles the firing with
what came of it, then moves the schedule on to its next due time.

A claimant that dies between its claim and its settling leaves the firing `claimed`: once its
lease runs out (at once, on a one-process store, for a claim of an earlier process) the next
tick takes the firing over and starts the run again with the same key, which finds the run the
dead one made, if it made one. So a due time gives one run, never two, never none.

Misfire: a schedule whose due time passed more than ON_TIME_S ago, or several of whose due
times passed (no scheduler ran: a restart, a down time), fires the latest of them once if its
misfire is `run_once` and it is within FINISHLINE_SCHEDULE_MISFIRE_GRACE_S; otherwise that
due time is recorded `missed`. Either way the earlier ones are counted on it (`missed`)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

import structlog

from app.runs.errors import (
    IdempotencyConflictError,
    InvalidRunError,
    QueueFullError,
    QuotaExceededError,
    RunsError,
    ShuttingDownError,
    StoreUnavailableError,
    ThreadBusyError,
)
from app.runs.records import RunRecord, RunStatus
from app.runs.schedules.cron import Cron, CronError
from app.runs.schedules.metrics import ScheduleMetrics
from app.runs.schedules.records import (
    Firing,
    FiringOutcome,
    Misfire,
    Overlap,
    Schedule,
    idempotency_key,
)
from app.runs.schedules.store import ScheduleStore

log = structlog.get_logger("finishline.schedules")

ON_TIME_S = 30.0
"""A due time reached later than this is a misfire (the scheduler ticks every poll, 1 s)."""
OVERLAP_LOOKBACK = 20
"""Firings read back to find the schedule's previous run (the newest one with a run)."""

StartRun = Callable[[Schedule, str], Awaitable[RunRecord]]
"""Start the schedule's run under the idempotency key: the run made, or the one the key
names already. Raises what POST /runs would answer (InvalidRunError, QuotaExceededError…)."""
StatusOf = Callable[[str], Awaitable[RunStatus | None]]
"""A run's status as stored; None when it is gone."""
Clock = Callable[[], float]

REFUSALS = (QuotaExceededError, QueueFullError, ThreadBusyError, IdempotencyConflictError)
RETRY_LATER = (ShuttingDownError, StoreUnavailableError)


@dataclass(frozen=True, slots=True)
class SchedulerOptions:
    name: str
    """This process among the claimants (its replica name)."""
    enabled: bool = True
    lease_s: float = 15.0
    steal: bool = False
    """A one-process store: a claim by another claimant is a dead process's, taken at once."""
    grace_s: float = 3600.0
    poll_s: float = 1.0


class Scheduler:
    def __init__(
        self,
        *,
        store: ScheduleStore,
        start: StartRun,
        status_of: StatusOf,
        options: SchedulerOptions,
        metrics: ScheduleMetrics | None = None,
        clock: Clock = time.time,
    ) -> None:
        self.store = store
        self.start = start
        self.status_of = status_of
        self.options = options
        self.metrics = metrics
        self.clock = clock
        self._wake = asyncio.Event()

    def wake(self) -> None:
        """Look again now (a schedule was made or changed here)."""
        self._wake.set()

    async def serve(self) -> None:
        """Tick until cancelled: at each schedule's due time, and every `poll_s` besides."""
        while True:
            soonest: float | None = None
            self._wake.clear()  # a wake during the tick is kept for the wait below
            try:
                soonest = await self.tick()
            except (RunsError, OSError) as exc:  # the store away: try again next poll
                log.warning("schedules_tick_failed", error=str(exc))
            except Exception:  # a bug must not stop every schedule (nor the server)
                log.exception("schedules_tick_failed")
            delay = self.options.poll_s
            if soonest is not None:
                delay = min(delay, max(soonest - self.clock(), 0.0))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):  # (wait_for hangs cancelled on 3.11)
                    await self._wake.wait()

    async def tick(self) -> float | None:
        """Handle every schedule due now; the soonest due time then known."""
        now = self.clock()
        for schedule in await self.store.due(now):
            try:
                await self._due(schedule, now)
            except (RunsError, OSError):
                raise  # the store: the next poll tries again
            except Exception:  # this schedule's bug: the others still fire
                log.exception("schedule_firing_failed", schedule_id=schedule.id)
        return await self.store.next_due_at()

    async def trigger(self, schedule: Schedule) -> Firing:
        """Fire the schedule now, outside its cron (POST /schedules/{id}/trigger): a firing of
        its own, due now, kept with the others."""
        now = self.clock()
        firing = self._firing(schedule.id, now, now, manual=True)
        claim = await self.store.claim(firing, now=now)
        if not claim.won:
            return claim.firing
        if not self.options.enabled:
            return await self._settle(claim.firing.settle(FiringOutcome.DISABLED, now))
        return await self._fire(schedule, claim.firing)

    # -- one due schedule ---------------------------------------------------------------

    async def _due(self, schedule: Schedule, now: float) -> None:
        due = schedule.next_due_at
        assert due is not None
        try:
            cron = Cron(schedule.cron, schedule.timezone)
        except CronError as exc:  # stored valid; a zone since gone from tzdata
            log.error("schedule_unreadable", schedule_id=schedule.id, problem=str(exc))
            await self.store.advance(schedule.id, expected=due, to=None)
            return
        end = min(now, schedule.ends_at.timestamp()) if schedule.ends_at else now
        latest, later = cron.between(due, end)
        at = latest if latest is not None else due
        on_time = later == 0 and now - at <= ON_TIME_S
        claim = await self.store.claim(
            self._firing(schedule.id, at, now, missed=later), now=now, steal=self.options.steal
        )
        if claim.won:
            taken_over = claim.firing.attempt > 1  # a dead claimant's: start its run
            if not self.options.enabled:
                await self._settle(claim.firing.settle(FiringOutcome.DISABLED, now))
            elif on_time or taken_over or self._within_grace(schedule, now - at):
                await self._fire(schedule, claim.firing)
            else:
                await self._settle(claim.firing.settle(FiringOutcome.MISSED, now))
        if claim.won or claim.firing.settled:
            following = cron.after(at)
            if following is not None and schedule.ends_at is not None:
                following = following if following <= schedule.ends_at.timestamp() else None
            await self.store.advance(schedule.id, expected=due, to=following)

    def _within_grace(self, schedule: Schedule, late: float) -> bool:
        return schedule.misfire is Misfire.RUN_ONCE and late <= self.options.grace_s

    def _firing(self, schedule_id: str, due: float, now: float, **values: Any) -> Firing:
        return Firing(schedule_id, due, self.options.name, now + self.options.lease_s, **values)

    async def _fire(self, schedule: Schedule, firing: Firing) -> Firing:
        """Start the firing's run (or find why not) and settle it; left claimed when the
        server is shutting down or the store is away (taken over later)."""
        if schedule.overlap is Overlap.SKIP:
            previous = await self._active_run(schedule.id, firing.due_at)
            if previous is not None:
                return await self._settle(
                    firing.settle(
                        FiringOutcome.SKIPPED_OVERLAP,
                        self.clock(),
                        reason=f"run {previous} has not ended",
                        details={"previous_run_id": previous},
                    )
                )
        try:
            run = await self.start(schedule, idempotency_key(schedule.id, firing.due_at))
        except RETRY_LATER as exc:
            log.info("schedule_firing_deferred", schedule_id=schedule.id, reason=str(exc))
            return firing
        except InvalidRunError as exc:
            settled = firing.settle(FiringOutcome.INVALID, self.clock(), reason=exc.message)
        except REFUSALS as exc:
            details = {k: v for k, v in exc.details.items() if k != "retry_after_s"}
            settled = firing.settle(
                FiringOutcome.REFUSED, self.clock(), reason=exc.message, details=details
            )
        else:
            settled = firing.settle(FiringOutcome.FIRED, self.clock(), run_id=run.id)
        return await self._settle(settled)

    async def _active_run(self, schedule_id: str, due: float) -> str | None:
        for earlier in await self.store.firings(schedule_id, limit=OVERLAP_LOOKBACK):
            if earlier.run_id is not None and earlier.due_at != due:
                status = await self.status_of(earlier.run_id)
                return earlier.run_id if status is not None and not status.terminal else None
        return None

    async def _settle(self, firing: Firing) -> Firing:
        if not await self.store.settle(firing):
            log.warning("schedule_firing_lost", schedule_id=firing.schedule_id, due=firing.due_at)
            return replace(firing, outcome=FiringOutcome.CLAIMED)
        if self.metrics is not None:
            self.metrics.settled(firing)
        log.info(
            "schedule_fired" if firing.run_id else "schedule_firing_settled",
            schedule_id=firing.schedule_id,
            due_at=firing.due_at,
            outcome=firing.outcome.value,
            run_id=firing.run_id,
            missed=firing.missed,
        )
        return firing
