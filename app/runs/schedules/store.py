"""The schedule store: the port every run store implements beside its runs
(`RunStore.schedules`), kept small so a new store (Postgres) implements it and runs its
contract suite (`tests/runs/test_schedule_store_contract.py`) first.

Two writes are compare-and-set, atomic across processes (a transaction, a Lua script):
- `advance` moves a schedule's `next_due_at` on only if it is still the due time the caller
  handled (a PATCH meanwhile, or another replica, wins);
- `claim` takes the firing `(schedule_id, due_at)`: made if there is none; taken over if it
  is still `claimed` and its lease ran out (or, `steal`, by another claimant: a one-process
  store's other claimant is a process that died); otherwise handed back as it is, not won.
`settle` writes what came of a firing only while it is still claimed by the same claimant
(fencing: one that lost its claim to a takeover cannot overwrite the other's outcome).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from app.runs.schedules.records import Firing, Schedule

FIRINGS_KEPT = 1000
"""Firings a store keeps per schedule: the newest (by due time); older ones are dropped."""


@dataclass(frozen=True, slots=True)
class Claim:
    firing: Firing
    """The firing as it now stands: this claimant's, or the one who holds or settled it."""
    won: bool


class ScheduleStore(Protocol):
    async def insert(self, schedule: Schedule) -> None:
        """Store a new schedule (its id is new)."""

    async def replace(self, schedule: Schedule) -> bool:
        """Replace a stored schedule, `next_due_at` included; False if there is none."""

    async def get(self, schedule_id: str) -> Schedule | None: ...

    async def owned(
        self, owner: str | None, *, limit: int, after: str | None = None
    ) -> list[Schedule]:
        """The owner's schedules, oldest first (by id), from past the id `after`."""

    async def remove(self, schedule_id: str) -> bool:
        """Forget the schedule and its firings; False if there was none."""

    async def due(self, now: float, *, limit: int = 100) -> list[Schedule]:
        """Schedules (of every owner) whose `next_due_at` is at or before `now`, soonest first."""

    async def next_due_at(self) -> float | None:
        """The soonest `next_due_at` of every schedule; None when none is due ever."""

    async def advance(self, schedule_id: str, *, expected: float, to: float | None) -> bool:
        """Set `next_due_at` to `to` if it is `expected` now (see the module's text)."""

    async def claim(self, firing: Firing, *, now: float, steal: bool = False) -> Claim:
        """Claim `firing` (new, `claimed`) under its `(schedule_id, due_at)`."""

    async def settle(self, firing: Firing) -> bool:
        """Store the settled `firing` if its claimant still holds it; False otherwise."""

    async def firings(
        self, schedule_id: str, *, limit: int, before: float | None = None
    ) -> list[Firing]:
        """The schedule's firings, newest due time first, from before `before`."""
