"""Quotas per API key (DESIGN §13): the `Quotas` seam, and its one-process side.

A key (its owner id: a digest of the key, never the key; None when auth is off, which makes
the whole deployment one tenant) may hold at most `concurrent_runs` runs queued, running or
waiting for a person, be admitted at most `runs_per_minute` runs in any 60 s, and spend at
most `tokens_per_day` tokens and `cost_usd_per_day` USD per UTC day. Admission checks every
quota and takes the key's share in one step (`admit`), so concurrent requests never pass a
quota together; past one, `QuotaExceededError`. Each LLM call adds to the key's day (`spend`),
and a running run reads what its key may still spend today at each budget check (`allowance`,
the engine's `Allowances` port): a spent day ends it like a budget.

Two sides, chosen once where the backend is opened (`app.runs.backends.open_backend`):
- `LocalQuotas` (memory, SQLite: one process): checks under a lock per key against what this
  process holds of the key (its day, its minute's admissions, its unended runs: read from
  the store once, then kept here and written through), with no read of the store per run;
- `RedisQuotas` (`app/runs/replicas/redis_quotas.py`, replicas): one Lua script checks and
  takes in Redis, so racing replicas admit no more than the quota.
Both keep the counts in the run store (`RunStore.counters`), so they survive a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Protocol

import structlog

from app.engine.ports import Allowance, Allowances
from app.runs.errors import QuotaExceededError
from app.runs.records import RunRecord, RunStatus
from app.runs.store import DayUsage, RunStore

log = structlog.get_logger("finishline.runs")

WINDOW_S = 60.0
"""The runs-per-minute window: the admissions of the last 60 s count (a sliding window)."""
CONCURRENT_RETRY_S = 5
"""Retry-After of a refusal at the concurrent-runs quota: when a run ends is not known."""
UNENDED = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.REQUIRES_ACTION)
"""The runs a key holds: the concurrent-runs quota counts them."""


class QuotaName(StrEnum):
    CONCURRENT_RUNS = "concurrent_runs"
    RUNS_PER_MINUTE = "runs_per_minute"
    TOKENS_PER_DAY = "tokens_per_day"
    COST_USD_PER_DAY = "cost_usd_per_day"


@dataclass(frozen=True, slots=True)
class QuotaLimits:
    """The quotas of every API key (`FINISHLINE_QUOTA_*`); None: no such quota."""

    concurrent_runs: int | None = None
    runs_per_minute: int | None = None
    tokens_per_day: int | None = None
    cost_usd_per_day: float | None = None

    @property
    def day_bounded(self) -> bool:
        """A running run ends once its key's day is spent (a day quota is set)."""
        return self.tokens_per_day is not None or self.cost_usd_per_day is not None

    def set(self) -> dict[QuotaName, float]:
        """The quotas set, by name, in the order they are checked."""
        return {QuotaName(f.name): v for f in fields(self) if (v := getattr(self, f.name))}


_DAYS: dict[int, str] = {}


def utc_day(now: float) -> str:
    """The UTC day of `now` (epoch seconds), `YYYY-MM-DD`: what day quotas count by. (Epoch
    time has 86,400 s a day, so the day's number is `now // 86400`; its name is made once.)"""
    number = int(now // 86_400)
    day = _DAYS.get(number)
    if day is None:
        if len(_DAYS) > 64:  # days go by: keep a few
            _DAYS.clear()
        day = _DAYS[number] = datetime.fromtimestamp(number * 86_400, UTC).date().isoformat()
    return day


def until_tomorrow_s(now: float) -> int:
    """Whole seconds until the next UTC midnight (at least 1): a day quota's Retry-After."""
    today = datetime.fromtimestamp(now, UTC).date()
    midnight = datetime(today.year, today.month, today.day, tzinfo=UTC) + timedelta(days=1)
    return max(1, math.ceil(midnight.timestamp() - now))


@dataclass(frozen=True, slots=True)
class KeyUsage:
    """One key's figures now (`GET /usage`): its UTC day's, its unended runs, its runs of the
    last minute, and the quotas that bound them."""

    day: str
    used: DayUsage
    concurrent_runs: int
    runs_last_minute: int
    limits: QuotaLimits

    def quotas(self) -> dict[QuotaName, tuple[float, float]]:
        """Each quota set: its limit, and what the key holds or spent of it."""
        held = {
            QuotaName.CONCURRENT_RUNS: self.concurrent_runs,
            QuotaName.RUNS_PER_MINUTE: self.runs_last_minute,
            QuotaName.TOKENS_PER_DAY: self.used.total_tokens,
            QuotaName.COST_USD_PER_DAY: self.used.cost_usd,
        }
        return {name: (limit, held[name]) for name, limit in self.limits.set().items()}


@dataclass(slots=True)
class QuotaTicket:
    """A share of a key's quotas taken at admission (`Quotas.admit`) for the run `run_id`."""

    run_id: str
    stored: bool = False
    """The run is made: it holds the share from now on (else it is given back)."""

    def made(self) -> None:
        """The run of this admission is stored."""
        self.stored = True


def refusal(
    limits: QuotaLimits, *, held: int, starts: deque[float], used: DayUsage, now: float
) -> QuotaExceededError | None:
    """The first quota a new run of a key would pass, as its refusal; None: it may start.
    `held`: the key's unended runs (and those being admitted); `starts`: when its runs of the
    last minute were admitted, oldest first."""
    if limits.concurrent_runs is not None and held >= limits.concurrent_runs:
        return QuotaExceededError(
            QuotaName.CONCURRENT_RUNS, limits.concurrent_runs, held, CONCURRENT_RETRY_S
        )
    if limits.runs_per_minute is not None and len(starts) >= limits.runs_per_minute:
        retry = max(1, math.ceil(starts[0] + WINDOW_S - now))
        return QuotaExceededError(
            QuotaName.RUNS_PER_MINUTE, limits.runs_per_minute, len(starts), retry
        )
    return day_refusal(limits, used, now)


def day_refusal(limits: QuotaLimits, used: DayUsage, now: float) -> QuotaExceededError | None:
    """The day quota a key has spent, as a refusal of a new run; None: none spent."""
    tokens, cost = limits.tokens_per_day, limits.cost_usd_per_day
    if tokens is not None and used.total_tokens >= tokens:
        return QuotaExceededError(
            QuotaName.TOKENS_PER_DAY, tokens, used.total_tokens, until_tomorrow_s(now)
        )
    if cost is not None and used.cost_usd >= cost:
        return QuotaExceededError(
            QuotaName.COST_USD_PER_DAY, cost, used.cost_usd, until_tomorrow_s(now)
        )
    return None


def allowance_of(limits: QuotaLimits, used: DayUsage) -> Allowance:
    """What a key that used `used` today may still spend."""
    tokens = limits.tokens_per_day
    cost = limits.cost_usd_per_day
    return Allowance(
        tokens=None if tokens is None else tokens - used.total_tokens,
        cost_usd=None if cost is None else cost - used.cost_usd,
    )


class Quotas(Protocol):
    limits: QuotaLimits

    def admit(self, owner: str | None, run_id: str) -> AbstractAsyncContextManager[QuotaTicket]:
        """Check the key's quotas and take its share for the run `run_id` in one step: a
        place among its unended runs, one of its minute's runs, one of its day's runs
        (`QuotaExceededError` past a quota). Held while the run is stored: the run keeps it
        once the ticket says it was `made`; leaving without that (a concurrent replay made
        the run, an error) gives it back."""

    def ended(self, record: RunRecord) -> None:
        """A run is stored ended (`RunRecorder.ended`): its key holds one run fewer."""

    async def spend(self, owner: str | None, call: DayUsage) -> Awaitable[None]:
        """Add an LLM call's tokens and cost to the key's day; what to await for it stored
        (queued, as `RunStore.append_soon`)."""

    async def allowance(self, owner: str | None) -> Allowances | None:
        """What a run of the key may still spend today, read at each of its budget checks:
        as this process knows it (each `spend` here updates it, and this call reads the
        store). None when no day quota is set."""

    async def usage(self, owner: str | None) -> KeyUsage:
        """The key's figures now."""


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
                await self._give_back(owner, key, ticket, day, now, writes)
            failed = await _failures(writes)
            if failed and ticket.stored:
                raise failed[0]  # the run's own write failed with it, and says so first
            if failed:
                log.warning("quota_counts_not_stored", error=str(failed[0]))

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
        active = await self.counters.active_runs(owner)
        return KeyUsage(key.day, key.used, active, recent, self.limits)
