"""The `ScheduleStore` of `RedisRunStore` (DESIGN §21 with §8): every replica reads the same
schedules and claims from the same firings; each compare-and-set is one Lua script.

Keys (P is the store's prefix, T an owner tag: `redis_scripts.owner_tag`):
    P sch:{id}     string: the schedule as JSON (without its next due time)
    P sch:due      sorted set: schedule ids by next due time (what `due` reads)
    P sch:own:T    sorted set (all scores 0): the owner's schedule ids, in id order
    P sch:f:{id}   hash: due time (repr) -> the firing as JSON
    P sch:fz:{id}  sorted set: the due times of the firings kept
A claim is made with HSETNX (one claimant makes it); a takeover or a settling replaces the
firing's JSON only if it is still the text the claimant read (compare-and-set on the whole),
so two replicas that read one firing cannot both take it, nor settle it. Schedules do not
expire: they are the user's, like the runs' owners' keys.
"""

from __future__ import annotations

import json
from dataclasses import replace

from redis.asyncio import Redis

from app.runs.schedules.records import Firing, Schedule
from app.runs.schedules.store import FIRINGS_KEPT, Claim
from app.runs.stores.redis_errors import translated
from app.runs.stores.redis_scripts import owner_tag

# ARGV: record key, due set, owner set, id, record JSON, next due ("" for none), replace?
# -> 1, or 0 when replacing a schedule there is none of
PUT = """
if ARGV[7] == '1' and redis.call('EXISTS', ARGV[1]) == 0 then return 0 end
redis.call('SET', ARGV[1], ARGV[5])
if ARGV[6] == '' then redis.call('ZREM', ARGV[2], ARGV[4])
else redis.call('ZADD', ARGV[2], ARGV[6], ARGV[4]) end
redis.call('ZADD', ARGV[3], 0, ARGV[4])
return 1
"""

# ARGV: due set, id, expected due, next due ("" for none) -> 1 if moved on, else 0
ADVANCE = """
local now = redis.call('ZSCORE', ARGV[1], ARGV[2])
if not now or tonumber(now) ~= tonumber(ARGV[3]) then return 0 end
if ARGV[4] == '' then redis.call('ZREM', ARGV[1], ARGV[2])
else redis.call('ZADD', ARGV[1], ARGV[4], ARGV[2]) end
return 1
"""

# ARGV: firings hash, due set, field, due, firing JSON, kept -> {1, JSON} made, {0, held}
CLAIM = """
if redis.call('HSETNX', ARGV[1], ARGV[3], ARGV[5]) == 0 then
  return {0, redis.call('HGET', ARGV[1], ARGV[3])}
end
redis.call('ZADD', ARGV[2], ARGV[4], ARGV[3])
local over = redis.call('ZCARD', ARGV[2]) - tonumber(ARGV[6])
if over > 0 then
  local old = redis.call('ZRANGE', ARGV[2], 0, over - 1)
  redis.call('HDEL', ARGV[1], unpack(old))
  redis.call('ZREMRANGEBYRANK', ARGV[2], 0, over - 1)
end
return {1, ARGV[5]}
"""

# ARGV: firings hash, field, expected JSON, new JSON -> 1 if replaced, else 0
SWAP = """
if redis.call('HGET', ARGV[1], ARGV[2]) ~= ARGV[3] then return 0 end
redis.call('HSET', ARGV[1], ARGV[2], ARGV[4])
return 1
"""

# ARGV: record key, due set, owner set, firings hash, due times, id -> 1 if it was there
REMOVE = """
local gone = redis.call('DEL', ARGV[1])
redis.call('DEL', ARGV[4], ARGV[5])
redis.call('ZREM', ARGV[2], ARGV[6])
redis.call('ZREM', ARGV[3], ARGV[6])
return gone
"""


def _text(firing: Firing) -> str:
    return json.dumps(firing.to_json(), sort_keys=True)


def _read(text: str | bytes) -> Firing:
    return Firing.from_json(json.loads(text))


@translated
class RedisSchedules:
    def __init__(self, redis: Redis, prefix: str) -> None:
        self.redis = redis
        self.p = prefix + "sch:"
        self._put = redis.register_script(PUT)
        self._advance = redis.register_script(ADVANCE)
        self._claim = redis.register_script(CLAIM)
        self._swap = redis.register_script(SWAP)
        self._remove = redis.register_script(REMOVE)

    def _own(self, owner: str | None) -> str:
        return f"{self.p}own:{owner_tag(owner)}"

    async def _store(self, schedule: Schedule, replacing: bool) -> bool:
        due = "" if schedule.next_due_at is None else repr(schedule.next_due_at)
        record = schedule.model_dump_json(exclude={"next_due_at"})
        args = [self.p + schedule.id, self.p + "due", self._own(schedule.owner), schedule.id]
        done = await self._put(args=[*args, record, due, "1" if replacing else "0"])
        return bool(done)

    async def insert(self, schedule: Schedule) -> None:
        await self._store(schedule, False)

    async def replace(self, schedule: Schedule) -> bool:
        return await self._store(schedule, True)

    async def get(self, schedule_id: str) -> Schedule | None:
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.get(self.p + schedule_id)
            pipe.zscore(self.p + "due", schedule_id)
            record, due = await pipe.execute()
        if record is None:
            return None
        schedule = Schedule.model_validate_json(record)
        schedule.next_due_at = float(due) if due is not None else None
        return schedule

    async def _many(self, ids: list[str]) -> list[Schedule]:
        found = [await self.get(i) for i in ids]
        return [s for s in found if s is not None]

    async def owned(
        self, owner: str | None, *, limit: int, after: str | None = None
    ) -> list[Schedule]:
        start = f"({after}" if after else "-"
        ids = await self.redis.zrangebylex(self._own(owner), start, "+", start=0, num=limit)
        return await self._many([str(i) for i in ids])

    async def remove(self, schedule_id: str) -> bool:
        found = await self.get(schedule_id)
        owner = found.owner if found is not None else None
        keys = [self.p + schedule_id, self.p + "due", self._own(owner)]
        firings = [f"{self.p}f:{schedule_id}", f"{self.p}fz:{schedule_id}"]
        return bool(await self._remove(args=[*keys, *firings, schedule_id]))

    async def due(self, now: float, *, limit: int = 100) -> list[Schedule]:
        ids = await self.redis.zrangebyscore(self.p + "due", "-inf", now, start=0, num=limit)
        return await self._many([str(i) for i in ids])

    async def next_due_at(self) -> float | None:
        first = await self.redis.zrange(self.p + "due", 0, 0, withscores=True)
        return float(first[0][1]) if first else None

    async def advance(self, schedule_id: str, *, expected: float, to: float | None) -> bool:
        args = [self.p + "due", schedule_id, repr(expected), "" if to is None else repr(to)]
        return bool(await self._advance(args=args))

    async def claim(self, firing: Firing, *, now: float, steal: bool = False) -> Claim:
        hash_key = f"{self.p}f:{firing.schedule_id}"
        field, text = repr(firing.due_at), _text(firing)
        zset = f"{self.p}fz:{firing.schedule_id}"
        made, held_text = await self._claim(
            args=[hash_key, zset, field, repr(firing.due_at), text, FIRINGS_KEPT]
        )
        if made:
            return Claim(firing, True)
        held = _read(held_text)
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
        if await self._swap(args=[hash_key, field, held_text, _text(taken)]):
            return Claim(taken, True)
        again = await self.redis.hget(hash_key, field)
        return Claim(_read(again) if again is not None else held, False)

    async def settle(self, firing: Firing) -> bool:
        hash_key, field = f"{self.p}f:{firing.schedule_id}", repr(firing.due_at)
        held_text = await self.redis.hget(hash_key, field)
        if held_text is None:
            return False
        held = _read(held_text)
        if held.settled or held.claimed_by != firing.claimed_by:
            return False
        return bool(await self._swap(args=[hash_key, field, held_text, _text(firing)]))

    async def firings(
        self, schedule_id: str, *, limit: int, before: float | None = None
    ) -> list[Firing]:
        top = f"({before!r}" if before is not None else "+inf"
        fields = await self.redis.zrevrangebyscore(
            f"{self.p}fz:{schedule_id}", top, "-inf", start=0, num=limit
        )
        if not fields:
            return []
        texts = await self.redis.hmget(f"{self.p}f:{schedule_id}", [str(f) for f in fields])
        return [_read(t) for t in texts if t is not None]
