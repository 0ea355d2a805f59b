"""The one-process side of the `Quotas` seam (memory, SQLite): `LocalQuotas`."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass

import structlog

from app.engine.ports import Allowance, Allowances
from app.runs.quotas.seam import (
    UNENDED,
    WINDOW_S,
    KeyUsage,
    QuotaLimits,
    QuotaTicket,
    allowance_of,
    refusal,
    utc_day,
)
from app.runs.records import RunRecord
from app.runs.store import DayUsage, RunStore, StoreError

log = structlog.get_logger("finishline.runs")


async def _failures(writes: list[Awaitable[object]]) -> list[Exception]:
    """What the queued writes failed with. Writes stored already are read without an await:
    an admission that hands back the live record of a run it just queued must not let the
    run go on before the caller has it."""
    failed: list[Exception] = []
    for write in writes:
        try:
            if isinstance(write, asyncio.Future) and write.done():
                write.result()
            else:
                await write
        except Exception as exc:
            failed.append(exc)
    return failed


@dataclass(slots=True)
class _Key:
    """What this process holds of one key: its day, its minute's admissions, its unended
    runs (with the concurrent-runs quota), and how many are past the check, being stored."""

    day: str
    used: DayUsage
    starts: deque[float]
    held: set[str]
    admitting: int = 0


class LocalQuotas:
    """One process: every check and take of a key under its own lock, against what this
    process holds of the key: read from the store the first time (and its day each new
    day), then kept here, and written through to the store's counters. Its unended runs are
    those it admitted less those `ended`, and, read once, those a previous process left
    waiting for a person: nothing else makes or ends a run of this store."""

    def __init__(
        self,
        store: RunStore,
        limits: QuotaLimits,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.counters = store.counters
        self.limits = limits
        self.clock = clock
        self._keys: dict[str | None, _Key] = {}
        self._locks: defaultdict[str | None, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._reading: dict[str | None, set[str]] = {}
        """Per key whose unended runs are being read: the runs that ended meanwhile."""

    async def _key(self, owner: str | None, now: float) -> _Key:
        """The key as of `now`: read from the store the first time, and each new day."""
        key = self._keys.get(owner)
        if key is not None and key.day == utc_day(now):
            return key
        async with self._locks[owner]:
            return await self._loaded(owner, now)

    async def _loaded(self, owner: str | None, now: float) -> _Key:
        """As `_key`, under the key's lock."""
        day = utc_day(now)
        key = self._keys.get(owner)
        if key is None:
            starts = deque(await self.counters.admissions_since(owner, now - WINDOW_S))
            used = await self.counters.day_usage(owner, day)
            held = await self._unended(owner)
            key = self._keys[owner] = _Key(day, used, starts, held)
        elif key.day != day:
            key.day, key.used = day, await self.counters.day_usage(owner, day)
        return key

    async def _unended(self, owner: str | None) -> set[str]:
        """The key's unended runs as stored, less those that end while they are read (a run
        `ended` before the read began is stored ended: the read does not see it)."""
        if self.limits.concurrent_runs is None:
            return set()
        found: set[str] = set()
        cursor: str | None = None
        gone = self._reading.setdefault(owner, set())
        try:
            while True:
                page = await self.store.list_runs(
                    owner=owner, statuses=UNENDED, limit=200, before_id=cursor
                )
                found |= {record.id for record in page}
                if len(page) < 200:
                    return found - gone
                cursor = page[-1].id
        finally:
            del self._reading[owner]

    def ended(self, record: RunRecord) -> None:
        key = self._keys.get(record.owner)
        if key is not None:
            key.held.discard(record.id)
        elif record.owner in self._reading:
            self._reading[record.owner].add(record.id)

    def admit(self, owner: str | None, run_id: str) -> AbstractAsyncContextManager[QuotaTicket]:
        return self._admit(owner, run_id)

    @asynccontextmanager
    async def _admit(self, owner: str | None, run_id: str) -> AsyncIterator[QuotaTicket]:
        limits, now = self.limits, self.clock()
        ticket = QuotaTicket(run_id)
        writes: list[Awaitable[object]] = []
        async with self._locks[owner]:
            key = await self._loaded(owner, now)
            held = len(key.held) + key.admitting
            while key.starts and key.starts[0] <= now - WINDOW_S:
                key.starts.popleft()
            refused = refusal(limits, held=held, starts=key.starts, used=key.used, now=now)
            if refused is not None:
                raise refused
            day = key.day  # the writes are queued before the run's own: stored with it
            writes.append(await self.counters.add_usage(owner, day, DayUsage(runs=1)))
            if limits.runs_per_minute is not None:
                writes.append(await self.counters.admitted(owner, run_id, now))
                key.starts.append(now)
            key.used += DayUsage(runs=1)
            key.admitting += 1
        try:
            yield ticket
        finally:
            key.admitting -= 1
            if ticket.stored:  # before any await: the run may end at the next
                key.held.add(run_id)
            else:
                with contextlib.suppress(StoreError):  # (a closed store: nothing to give)
                    await self._give_back(owner, key, ticket, day, now, writes)
            # the counts are the key's books, not the run: a failure to store them fails no
            # request (the run's own write, in the same commit, said so first if it failed)
            failed = await _failures(writes)
            if failed:
                log.warning("quota_counts_not_stored", run_id=run_id, error=str(failed[0]))

    async def _give_back(
        self,
        owner: str | None,
        key: _Key,
        ticket: QuotaTicket,
        day: str,
        now: float,
        writes: list[Awaitable[object]],
    ) -> None:
        if key.day == day:
            key.used += DayUsage(runs=-1)
        if self.limits.runs_per_minute is not None:
            with contextlib.suppress(ValueError):  # (gone with the window)
                key.starts.remove(now)
            writes.append(await self.counters.unadmitted(owner, ticket.run_id))
        writes.append(await self.counters.add_usage(owner, day, DayUsage(runs=-1)))

    async def spend(self, owner: str | None, call: DayUsage) -> Awaitable[None]:
        key = await self._key(owner, self.clock())
        key.used += call
        return await self.counters.add_usage(owner, key.day, call)

    async def allowance(self, owner: str | None) -> Allowances | None:
        if not self.limits.day_bounded:
            return None
        key = await self._key(owner, self.clock())

        def left() -> Allowance:
            # a day no call of this process has counted yet: nothing spent (one process)
            used = key.used if key.day == utc_day(self.clock()) else DayUsage()
            return allowance_of(self.limits, used)

        return left

    async def usage(self, owner: str | None) -> KeyUsage:
        now = self.clock()
        key = await self._key(owner, now)
        recent = sum(1 for at in key.starts if at > now - WINDOW_S)
        if self.limits.concurrent_runs is not None:  # what admission counts
            active = len(key.held) + key.admitting
        else:
            active = await self.counters.active_runs(owner)
        return KeyUsage(key.day, key.used, active, recent, self.limits)
