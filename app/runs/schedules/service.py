"""Schedules as the API sees them (DESIGN §21): made, read, listed, changed, deleted and
triggered per owner (another owner's schedule is a 404), each checked whole before anything is
stored: its cron and time zone, its window, and its run body as POST /runs would read it
(`ReadRun`, implemented beside POST /runs, so both read a body through one function)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from app.runs.errors import (
    IdempotencyConflictError,
    InvalidRunError,
    RunNotFoundError,
    ScheduleNotFoundError,
)
from app.runs.manager import RunManager
from app.runs.records import RunRecord, RunStatus
from app.runs.schedules.cron import Cron, CronError, zone
from app.runs.schedules.metrics import ScheduleMetrics
from app.runs.schedules.records import Firing, Schedule, new_schedule_id
from app.runs.schedules.scheduler import Clock, Scheduler, SchedulerOptions
from app.runs.spec import RunRequest
from app.runs.threads.threads import Multitask


@dataclass(frozen=True, slots=True)
class ScheduledRun:
    """A schedule's run body, read as POST /runs reads one."""

    request: RunRequest
    thread_id: str | None = None
    multitask: Multitask = Multitask.REJECT


ReadRun = Callable[[dict[str, Any]], Awaitable[ScheduledRun]]
"""Read a run body as POST /runs would (InvalidRunError naming the field as `run.FIELD`, or the
API's validation error, for one it would refuse)."""

EDITABLE = ("cron", "timezone", "run", "enabled", "starts_at", "ends_at", "overlap", "misfire")


class Schedules:
    def __init__(
        self,
        *,
        manager: RunManager,
        read: ReadRun,
        options: SchedulerOptions,
        metrics: ScheduleMetrics | None = None,
        clock: Clock = time.time,
    ) -> None:
        self.store = manager.store.schedules
        self.manager = manager
        self.read = read
        self.clock = clock
        self.scheduler = Scheduler(
            store=self.store,
            start=self._start,
            status_of=self._status,
            options=options,
            metrics=metrics,
            clock=clock,
        )

    async def _start(self, schedule: Schedule, key: str) -> RunRecord:
        """The due time's run: made now, or the one a claimant that died made (its key names
        it, even if the schedule's body was changed since)."""
        run = await self.read(schedule.run)
        try:
            record, _ = await self.manager.create(
                run.request,
                owner=schedule.owner,
                idempotency_key=key,
                thread_id=run.thread_id,
                multitask=run.multitask,
                schedule_id=schedule.id,
            )
        except IdempotencyConflictError:
            made = await self.manager.store.find_by_idempotency_key(schedule.owner, key)
            if made is None:
                raise
            return made
        return record

    async def _status(self, run_id: str) -> RunStatus | None:
        try:
            return (await self.manager.get(run_id, None, any_owner=True)).status
        except RunNotFoundError:
            return None

    # -- the resource -------------------------------------------------------------------

    async def create(self, owner: str | None, fields: dict[str, Any]) -> Schedule:
        schedule = Schedule(id=new_schedule_id(), owner=owner, **fields)
        await self._check(schedule)
        await self.store.insert(schedule)
        self.scheduler.wake()
        return schedule

    async def get(self, owner: str | None, schedule_id: str) -> Schedule:
        found = await self.store.get(schedule_id)
        if found is None or found.owner != owner:
            raise ScheduleNotFoundError(f"no schedule {schedule_id!r}", schedule_id=schedule_id)
        return found

    async def listed(
        self, owner: str | None, *, limit: int, cursor: str | None = None
    ) -> tuple[list[Schedule], str | None]:
        page = await self.store.owned(owner, limit=limit + 1, after=cursor)
        more = len(page) > limit
        return page[:limit], (page[limit - 1].id if more else None)

    async def update(self, owner: str | None, schedule_id: str, fields: dict[str, Any]) -> Schedule:
        current = await self.get(owner, schedule_id)
        changed = current.model_copy(update={**fields, "updated_at": datetime.now(UTC)})
        changed = Schedule.model_validate(changed.model_dump())
        await self._check(changed)
        if not await self.store.replace(changed):
            raise ScheduleNotFoundError(f"no schedule {schedule_id!r}", schedule_id=schedule_id)
        self.scheduler.wake()
        return changed

    async def delete(self, owner: str | None, schedule_id: str) -> None:
        await self.get(owner, schedule_id)
        await self.store.remove(schedule_id)

    async def trigger(self, owner: str | None, schedule_id: str) -> Firing:
        return await self.scheduler.trigger(await self.get(owner, schedule_id))

    async def firings(
        self, owner: str | None, schedule_id: str, *, limit: int, before: float | None = None
    ) -> tuple[list[Firing], float | None]:
        await self.get(owner, schedule_id)
        page = await self.store.firings(schedule_id, limit=limit + 1, before=before)
        more = len(page) > limit
        return page[:limit], (page[limit - 1].due_at if more else None)

    async def _check(self, schedule: Schedule) -> None:
        """Every field, before anything is stored (InvalidRunError naming it); sets
        `next_due_at`."""
        try:
            zone(schedule.timezone)
        except CronError as exc:
            raise InvalidRunError("timezone", str(exc)) from None
        try:
            cron = Cron(schedule.cron, schedule.timezone)
        except CronError as exc:
            raise InvalidRunError("cron", str(exc)) from None
        starts, ends = schedule.starts_at, schedule.ends_at
        if starts is not None and ends is not None and ends <= starts:
            raise InvalidRunError("ends_at", "must be after starts_at")
        await self.read(schedule.run)
        schedule.next_due_at = None
        if schedule.enabled:
            since = self.clock()
            if starts is not None:
                since = max(since, starts.timestamp() - 0.001)  # starts_at itself may be due
            due = cron.after(since)
            if due is not None and (ends is None or due <= ends.timestamp()):
                schedule.next_due_at = due
