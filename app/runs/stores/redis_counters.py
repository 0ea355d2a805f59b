"""The `UsageCounters` of `RedisRunStore`, which every replica shares (DESIGN §13).

Keys (P the store's prefix, T the key's owner tag, as the run indexes have it):
    P quota:T:day:D     hash: runs, llm_calls, unpriced_calls, prompt_tokens,
                        completion_tokens, cost_usd of UTC day D; kept `DAY_TTL_S` after its
                        last change
    P quota:T:starts    sorted set: admission tickets, scored by when (epoch seconds), the
                        last minute's (runs per minute); kept two minutes after the last
    P quota:T:admitting sorted set: tickets of runs past the concurrent-runs check and not yet
                        stored (`app.runs.replicas.redis_quotas`)
    P idx:T|S           the store's index of the key's runs of status S: the unended ones
                        are counted from there
Increments are Redis's own (HINCRBY, HINCRBYFLOAT), each add one MULTI with the read of the
day after it, so adds from every replica all count and each sees a total that includes it.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from redis.asyncio import Redis

from app.runs.records import RunStatus
from app.runs.store import DayUsage, settled
from app.runs.stores.redis_errors import translated
from app.runs.stores.redis_scripts import owner_tag

DAY_TTL_S = 2 * 86_400
"""How long a day's figures stay after their last change: past the day, nothing reads them."""
WINDOW_S = 60
UNENDED = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.REQUIRES_ACTION)
FIELDS = ("runs", "llm_calls", "unpriced_calls", "prompt_tokens", "completion_tokens")


def day_of(raw: dict[str, Any]) -> DayUsage:
    """A day's hash read back (zeros for fields never added)."""
    counts = {name: int(raw.get(name, 0)) for name in FIELDS}
    return DayUsage(**counts, cost_usd=float(raw.get("cost_usd", 0.0)))


@translated
class RedisCounters:
    def __init__(self, redis: Redis, prefix: str) -> None:
        self.redis = redis
        self.prefix = prefix

    def key(self, owner: str | None) -> str:
        """The prefix of the key's quota keys: `P quota:T`."""
        return f"{self.prefix}quota:{owner_tag(owner)}"

    def index(self, owner: str | None) -> str:
        """The key's index of its runs, `P idx:T`; by status: `P idx:T|S`."""
        return f"{self.prefix}idx:{owner_tag(owner)}"

    async def day_usage(self, owner: str | None, day: str) -> DayUsage:
        raw: Any = await self.redis.hgetall(f"{self.key(owner)}:day:{day}")
        return day_of(raw)

    async def add_usage(self, owner: str | None, day: str, usage: DayUsage) -> Awaitable[None]:
        await self.added(owner, day, usage)
        return settled(None)

    async def added(self, owner: str | None, day: str, usage: DayUsage) -> DayUsage:
        """`add_usage`, made at once; the day's figures with it added (every replica's adds
        before it in them)."""
        key = f"{self.key(owner)}:day:{day}"
        async with self.redis.pipeline(transaction=True) as pipe:  # MULTI: the add, then the day
            for name in FIELDS:
                pipe.hincrby(key, name, getattr(usage, name))
            if usage.cost_usd:
                pipe.hincrbyfloat(key, "cost_usd", usage.cost_usd)
            pipe.expire(key, DAY_TTL_S)
            pipe.hgetall(key)
            replies = await pipe.execute()
        return day_of(replies[-1])

    async def admitted(self, owner: str | None, ticket: str, at: float) -> Awaitable[None]:
        key = f"{self.key(owner)}:starts"
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.zremrangebyscore(key, "-inf", at - WINDOW_S)
            pipe.zadd(key, {ticket: at})
            pipe.expire(key, 2 * WINDOW_S)
            await pipe.execute()
        return settled(None)

    async def unadmitted(self, owner: str | None, ticket: str) -> Awaitable[None]:
        await self.redis.zrem(f"{self.key(owner)}:starts", ticket)
        return settled(None)

    async def admissions_since(self, owner: str | None, since: float) -> list[float]:
        found: Any = await self.redis.zrangebyscore(
            f"{self.key(owner)}:starts", f"({since!r}", "+inf", withscores=True
        )
        return [at for _, at in found]

    async def active_runs(self, owner: str | None) -> int:
        async with self.redis.pipeline(transaction=True) as pipe:
            for status in UNENDED:
                pipe.zcard(f"{self.index(owner)}|{status.value}")
            counts: list[int] = await pipe.execute()
        return sum(counts)
