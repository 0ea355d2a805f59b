"""The `Quotas` seam (see the package's docstring): the protocol, the quotas and what a key
holds of them, the refusals both sides make, and the UTC day."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Awaitable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Protocol

import structlog

from app.engine.ports import Allowance, Allowances
from app.runs.errors import QuotaExceededError
from app.runs.records import RunRecord, RunStatus
from app.runs.store import DayUsage

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
