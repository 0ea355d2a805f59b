"""The `ScheduleStore` of `MemoryRunStore`: dicts, one process, nothing kept past it. Every
method runs to its end without awaiting, so each is atomic on the event loop."""

from __future__ import annotations

from dataclasses import replace

from app.runs.schedules.records import Firing, Schedule
from app.runs.schedules.store import FIRINGS_KEPT, Claim


class MemorySchedules:
    def __init__(self) -> None:
        self._schedules: dict[str, Schedule] = {}
        self._firings: dict[str, dict[float, Firing]] = {}

    async def insert(self, schedule: Schedule) -> None:
        self._schedules[schedule.id] = schedule.model_copy(deep=True)

    async def replace(self, schedule: Schedule) -> bool:
        if schedule.id not in self._schedules:
            return False
        self._schedules[schedule.id] = schedule.model_copy(deep=True)
        return True

    async def get(self, schedule_id: str) -> Schedule | None:
        found = self._schedules.get(schedule_id)
        return found.model_copy(deep=True) if found is not None else None

    async def owned(
        self, owner: str | None, *, limit: int, after: str | None = None
    ) -> list[Schedule]:
        mine = sorted(
            (s for s in self._schedules.values() if s.owner == owner and (after or "") < s.id),
            key=lambda s: s.id,
        )
        return [s.model_copy(deep=True) for s in mine[:limit]]

    async def remove(self, schedule_id: str) -> bool:
        self._firings.pop(schedule_id, None)
        return self._schedules.pop(schedule_id, None) is not None

    async def due(self, now: float, *, limit: int = 100) -> list[Schedule]:
        found = [s for s in self._schedules.values() if (s.next_due_at or now + 1) <= now]
        found.sort(key=lambda s: (s.next_due_at, s.id))
        return [s.model_copy(deep=True) for s in found[:limit]]

    async def next_due_at(self) -> float | None:
        dues = [s.next_due_at for s in self._schedules.values() if s.next_due_at is not None]
        return min(dues, default=None)

    async def advance(self, schedule_id: str, *, expected: float, to: float | None) -> bool:
        found = self._schedules.get(schedule_id)
        if found is None or found.next_due_at != expected:
            return False
        found.next_due_at = to
        return True

    async def claim(self, firing: Firing, *, now: float, steal: bool = False) -> Claim:
        kept = self._firings.setdefault(firing.schedule_id, {})
        held = kept.get(firing.due_at)
        if held is None:
            kept[firing.due_at] = firing
            while len(kept) > FIRINGS_KEPT:
                del kept[min(kept)]
            return Claim(firing, True)
        if held.settled or not (
            held.lease_until <= now or (steal and held.claimed_by != firing.claimed_by)
        ):
            return Claim(held, False)
        taken = replace(
            held,
            claimed_by=firing.claimed_by,
            lease_until=firing.lease_until,
            attempt=held.attempt + 1,
        )
        kept[firing.due_at] = taken
        return Claim(taken, True)

    async def settle(self, firing: Firing) -> bool:
        kept = self._firings.get(firing.schedule_id, {})
        held = kept.get(firing.due_at)
        if held is None or held.settled or held.claimed_by != firing.claimed_by:
            return False
        kept[firing.due_at] = firing
        return True

    async def firings(
        self, schedule_id: str, *, limit: int, before: float | None = None
    ) -> list[Firing]:
        kept = self._firings.get(schedule_id, {})
        dues = sorted((d for d in kept if before is None or d < before), reverse=True)
        return [kept[d] for d in dues[:limit]]
