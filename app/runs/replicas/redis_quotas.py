"""The replica side of the `Quotas` seam (DESIGN §13): every replica of one Redis store checks
and takes a key's quotas in Redis, in one Lua script (`ADMIT`), so POSTs racing on any
replicas never pass a quota together; the counts are the store's (`RedisCounters`, whose keys
the script reads and writes).

A key's unended runs are those in its status indexes (queued, running, requires_action) plus
the tickets of runs past the check and not yet stored (`P quota:T:admitting`, dropped once
the run is stored, or after `HOLD_S` when the replica admitting it died meanwhile). A ticket
is its run's id, so a run stored and not yet let go is counted once, by its index: the count
is exact at every moment.
Times are the replicas' clocks (UTC days, the minute's window), which NTP keeps together.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import structlog
from redis.exceptions import RedisError

from app.engine.ports import Allowance, Allowances
from app.runs.errors import QuotaExceededError
from app.runs.quotas.seam import (
    CONCURRENT_RETRY_S,
    WINDOW_S,
    KeyUsage,
    QuotaLimits,
    QuotaName,
    QuotaTicket,
    allowance_of,
    until_tomorrow_s,
    utc_day,
)
from app.runs.records import RunRecord
from app.runs.store import DayUsage, settled
from app.runs.stores.redis_counters import DAY_TTL_S, RedisCounters
from app.runs.stores.redis_errors import cancelling, translated, translated_error
from app.runs.stores.redis_store import RedisRunStore

log = structlog.get_logger("finishline.runs")

HOLD_S = 30.0
"""How long a ticket of a run being admitted counts at most (its replica may have died)."""

# ARGV: quota key prefix (P quota:T), the key's run index (P idx:T; by status: P idx:T|S), the
# run's id (its ticket), now (epoch seconds),
# day, concurrent, per minute, tokens per day, USD per day ("" for a quota not set), hold_s,
# window_s, day ttl (s)
# -> {"ok"}, or {quota name, what the key holds of it, the oldest admission of the window}
ADMIT = """
local Q, I, ticket, now, day = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5]
local concurrent, per_minute = tonumber(ARGV[6]), tonumber(ARGV[7])
local tokens, cost = tonumber(ARGV[8]), tonumber(ARGV[9])
local hold, window, day_ttl = tonumber(ARGV[10]), tonumber(ARGV[11]), tonumber(ARGV[12])
local admitting, starts, days = Q .. ':admitting', Q .. ':starts', Q .. ':day:' .. day
if concurrent then
  redis.call('ZREMRANGEBYSCORE', admitting, '-inf', now - hold)
  local held = 0
  for _, status in ipairs({'queued', 'running', 'requires_action'}) do
    held = held + redis.call('ZCARD', I .. '|' .. status)
  end
  -- a ticket is its run's id: a run stored already is counted by its index, once
  for _, run in ipairs(redis.call('ZRANGE', admitting, 0, -1)) do
    if not redis.call('ZSCORE', I, run) then held = held + 1 end
  end
  if held >= concurrent then return {'concurrent_runs', tostring(held), ''} end
end
if per_minute then
  redis.call('ZREMRANGEBYSCORE', starts, '-inf', now - window)
  local recent = redis.call('ZCARD', starts)
  if recent >= per_minute then
    local oldest = redis.call('ZRANGE', starts, 0, 0, 'WITHSCORES')
    return {'runs_per_minute', tostring(recent), oldest[2]}
  end
end
local used = redis.call('HMGET', days, 'prompt_tokens', 'completion_tokens', 'cost_usd')
local spent = (tonumber(used[1]) or 0) + (tonumber(used[2]) or 0)
if tokens and spent >= tokens then return {'tokens_per_day', tostring(spent), ''} end
if cost and (tonumber(used[3]) or 0) >= cost then
  return {'cost_usd_per_day', used[3], ''}
end
if concurrent then
  redis.call('ZADD', admitting, now, ticket)
  redis.call('EXPIRE', admitting, math.ceil(hold))
end
if per_minute then
  redis.call('ZADD', starts, now, ticket)
  redis.call('EXPIRE', starts, math.ceil(2 * window))
end
redis.call('HINCRBY', days, 'runs', 1)
redis.call('EXPIRE', days, day_ttl)
return {'ok'}
"""


@translated
class RedisQuotas:
    def __init__(
        self,
        store: RedisRunStore,
        limits: QuotaLimits,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.counters: RedisCounters = store.counters
        self.limits = limits
        self.clock = clock
        self._admit_script = store.redis.register_script(ADMIT)
        self._days: dict[str | None, tuple[str, DayUsage]] = {}
        """Per key, its day's figures as last read or added here (`allowance`)."""

    def admit(self, owner: str | None, run_id: str) -> AbstractAsyncContextManager[QuotaTicket]:
        return self._admit(owner, run_id)

    @asynccontextmanager
    async def _admit(self, owner: str | None, run_id: str) -> AsyncIterator[QuotaTicket]:
        limits, now = self.limits, self.clock()
        day, ticket = utc_day(now), QuotaTicket(run_id)
        quota = self.counters.key(owner)
        args: list[str | float] = [quota, self.counters.index(owner), run_id, repr(now), day]
        for name in QuotaName:
            value = getattr(limits, name.value)
            args.append("" if value is None else repr(value))
        args += [repr(HOLD_S), repr(WINDOW_S), DAY_TTL_S]
        try:
            outcome: list[Any] = await self._admit_script(args=args)
        except RedisError as exc:  # (its public methods are translated by the decorator)
            raise translated_error(exc) from exc
        if outcome[0] != "ok":
            raise self._refusal(QuotaName(outcome[0]), outcome[1], outcome[2], now)
        try:
            yield ticket
        finally:
            await self._release(quota, day, ticket)

    async def _release(self, quota: str, day: str, ticket: QuotaTicket) -> None:
        """The run is stored (its place is its status index now) or was not made (its share
        is given back). A failure here fails no request: the run is made either way, and a
        ticket left behind stops counting after `HOLD_S`."""
        if ticket.stored and self.limits.concurrent_runs is None:
            return  # no ticket was taken: nothing to let go
        try:
            async with self.counters.redis.pipeline(transaction=True) as pipe:
                pipe.zrem(f"{quota}:admitting", ticket.run_id)
                if not ticket.stored:  # no run made: the share is given back
                    pipe.zrem(f"{quota}:starts", ticket.run_id)
                    pipe.hincrby(f"{quota}:day:{day}", "runs", -1)
                await pipe.execute()
        except RedisError as exc:
            if cancelling():  # a cancellation redis-py's timeout turned into its error
                raise asyncio.CancelledError from exc
            log.warning("quota_ticket_not_released", made=ticket.stored, error=str(exc))

    def ended(self, record: RunRecord) -> None:
        return None  # its status index says so: the script counts the indexes

    def _refusal(self, name: QuotaName, held: str, oldest: str, now: float) -> Exception:
        """The refusal the script named, as the one-process side words it."""
        limit = getattr(self.limits, name.value)
        if name == QuotaName.CONCURRENT_RUNS:
            return QuotaExceededError(name, limit, int(held), CONCURRENT_RETRY_S)
        if name == QuotaName.RUNS_PER_MINUTE:
            retry = max(1, math.ceil(float(oldest) + WINDOW_S - now))
            return QuotaExceededError(name, limit, int(held), retry)
        used = int(held) if name == QuotaName.TOKENS_PER_DAY else float(held)
        return QuotaExceededError(name, limit, used, until_tomorrow_s(now))

    async def spend(self, owner: str | None, call: DayUsage) -> Awaitable[None]:
        day = utc_day(self.clock())
        self._days[owner] = (day, await self.counters.added(owner, day, call))
        return settled(None)

    async def allowance(self, owner: str | None) -> Allowances | None:
        if not self.limits.day_bounded:
            return None
        day = utc_day(self.clock())
        self._days[owner] = (day, await self.counters.day_usage(owner, day))

        def left() -> Allowance:
            known_day, used = self._days[owner]
            if known_day != utc_day(self.clock()):
                used = DayUsage()  # a new day: until a call here reads it
            return allowance_of(self.limits, used)

        return left

    async def usage(self, owner: str | None) -> KeyUsage:
        now = self.clock()
        day = utc_day(now)
        used = await self.counters.day_usage(owner, day)
        recent = await self.counters.admissions_since(owner, now - WINDOW_S)
        active = await self.counters.active_runs(owner)
        return KeyUsage(day, used, active, len(recent), self.limits)
