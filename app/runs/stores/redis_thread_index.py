"""The `ThreadIndex` of `RedisRunStore` (DESIGN §19 with §8): every replica reads and changes
the same threads, each change one Lua script (a compare-and-set on the head, atomic in Redis).

Keys (P is the store's prefix, T an owner tag: `redis_scripts.owner_tag`):
    P th:T:{id}    hash: head, created, updated (epoch seconds), metadata (JSON), runs
    P thr:T:{id}   list: the thread's run ids, oldest first
    P ths:T        sorted set: the owner's thread ids by `updated` (what GET /threads lists)
A thread is kept twice a run's retention after it last changed (as the heads before it
were), its runs expiring before it; an id of the sorted set whose hash has expired is dropped
as it is met. The heads kept before threads were a resource (`P thread:T:{id}`, a run id) are
adopted as threads of one run when the store opens, or when one is read first.
"""

from __future__ import annotations

import contextlib
import json
import time
from typing import Any

from redis.asyncio import Redis

from app.runs.errors import RunUnreadableError
from app.runs.store import read_record
from app.runs.stores.redis_errors import translated
from app.runs.stores.redis_scripts import owner_tag, tag_owner
from app.runs.threads.index import ThreadCursor, ThreadEntry

# ARGV: hash, list, sorted set, expected head ("" for none: make it), run id, at, ttl_ms, id
# -> 1 if the thread advanced, 0 if its head was not `expected`
ADVANCE = """
local th, list, index = ARGV[1], ARGV[2], ARGV[3]
local expected, run, at, ttl = ARGV[4], ARGV[5], ARGV[6], tonumber(ARGV[7])
if redis.call('EXISTS', th) == 1 then
  if expected == '' or redis.call('HGET', th, 'head') ~= expected then return 0 end
  redis.call('HSET', th, 'head', run, 'updated', at)
  redis.call('HINCRBY', th, 'runs', 1)
else
  if expected ~= '' then return 0 end
  redis.call('HSET', th, 'head', run, 'created', at, 'updated', at, 'metadata', '{}', 'runs', 1)
end
redis.call('RPUSH', list, run)
redis.call('ZADD', index, at, ARGV[8])
for _, key in ipairs({th, list, index}) do redis.call('PEXPIRE', key, ttl) end
return 1
"""

# ARGV: hash, sorted set, metadata JSON, at, ttl_ms, id -> 1, or 0 for no such thread
SET_METADATA = """
local th, index = ARGV[1], ARGV[2]
if redis.call('EXISTS', th) == 0 then return 0 end
redis.call('HSET', th, 'metadata', ARGV[3], 'updated', ARGV[4])
redis.call('ZADD', index, ARGV[4], ARGV[6])
redis.call('PEXPIRE', th, tonumber(ARGV[5]))
redis.call('PEXPIRE', ARGV[7], tonumber(ARGV[5]))
return 1
"""

# ARGV: hash, list, sorted set, expected head ("" for none), id -> 1 if removed, else 0
REMOVE = """
local th = ARGV[1]
if redis.call('EXISTS', th) == 0 then return 0 end
if (redis.call('HGET', th, 'head') or '') ~= ARGV[4] then return 0 end
redis.call('DEL', th, ARGV[2])
redis.call('ZREM', ARGV[3], ARGV[5])
return 1
"""

# ARGV: the old head key, hash, list, sorted set, created (epoch s), ttl_ms, id
# -> 1 if a thread was made of the old head, else 0; the old key is gone either way
ADOPT = """
local old, th, list, index = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local run = redis.call('GET', old)
redis.call('DEL', old)
if not run or redis.call('EXISTS', th) == 1 then return 0 end
local at, ttl = ARGV[5], tonumber(ARGV[6])
redis.call('HSET', th, 'head', run, 'created', at, 'updated', at, 'metadata', '{}', 'runs', 1)
redis.call('RPUSH', list, run)
redis.call('ZADD', index, at, ARGV[7])
for _, key in ipairs({th, list, index}) do redis.call('PEXPIRE', key, ttl) end
return 1
"""

LIST_PAGE = 100


@translated
class RedisThreadIndex:
    def __init__(self, redis: Redis, prefix: str, retention_s: float) -> None:
        self.redis = redis
        self.prefix = prefix
        self.ttl_ms = int(retention_s * 2000)  # twice a run's retention: it outlives its runs
        self._advance = redis.register_script(ADVANCE)
        self._set_metadata = redis.register_script(SET_METADATA)
        self._remove = redis.register_script(REMOVE)
        self._adopt = redis.register_script(ADOPT)

    def _keys(self, owner: str | None, thread_id: str) -> tuple[str, str, str]:
        tag = owner_tag(owner)
        return (
            f"{self.prefix}th:{tag}:{thread_id}",
            f"{self.prefix}thr:{tag}:{thread_id}",
            f"{self.prefix}ths:{tag}",
        )

    async def thread(self, owner: str | None, thread_id: str) -> ThreadEntry | None:
        found = await self._read(owner, thread_id)
        if found is None and await self._adopted(owner, thread_id):
            found = await self._read(owner, thread_id)
        return found

    async def _read(self, owner: str | None, thread_id: str) -> ThreadEntry | None:
        fields: Any = await self.redis.hgetall(self._keys(owner, thread_id)[0])
        return _entry(owner, thread_id, fields) if fields else None

    async def advance(
        self, owner: str | None, thread_id: str, *, expected: str | None, run_id: str, at: float
    ) -> bool:
        if expected is None:  # a thread of the heads kept before (AG-UI's, A2A's): its own
            await self._adopted(owner, thread_id)
        th, runs, index = self._keys(owner, thread_id)
        args: list[str | int] = [th, runs, index, expected or "", run_id, repr(at), self.ttl_ms]
        args.append(thread_id)
        return bool(await self._advance(args=args))

    async def threads(
        self, owner: str | None, *, limit: int, before: ThreadCursor | None = None
    ) -> list[ThreadEntry]:
        index = self._keys(owner, "")[2]
        found: list[ThreadEntry] = []
        top: str = "+inf" if before is None else repr(before[0])
        offset = 0
        while len(found) < limit:
            page: Any = await self.redis.zrevrangebyscore(
                index, top, "-inf", start=offset, num=LIST_PAGE, withscores=True
            )
            if not page:
                break
            ids = [
                str(member)
                for member, score in page
                if before is None or (score, str(member)) < before
            ]
            async with self.redis.pipeline(transaction=False) as pipe:
                for thread_id in ids:
                    pipe.hgetall(self._keys(owner, thread_id)[0])
                rows: list[dict[str, Any]] = await pipe.execute()
            gone = [thread_id for thread_id, row in zip(ids, rows, strict=True) if not row]
            if gone:  # expired: out of the listing (the next page moves up by as many)
                await self.redis.zrem(index, *gone)
            offset += len(page) - len(gone)
            entries = [
                _entry(owner, thread_id, row)
                for thread_id, row in zip(ids, rows, strict=True)
                if row
            ]
            entries.sort(key=lambda t: (t.updated_at, t.thread_id), reverse=True)
            found += entries
            if len(page) < LIST_PAGE:
                break
        return found[:limit]

    async def thread_runs(
        self, owner: str | None, thread_id: str, *, start: int = 0, limit: int = 100
    ) -> list[str]:
        runs = self._keys(owner, thread_id)[1]
        found: list[Any] = await self.redis.lrange(runs, start, start + limit - 1)
        return [str(run_id) for run_id in found]

    async def set_metadata(
        self, owner: str | None, thread_id: str, metadata: dict[str, Any], *, at: float
    ) -> ThreadEntry | None:
        th, runs, index = self._keys(owner, thread_id)
        text = json.dumps(metadata, ensure_ascii=False)
        args: list[str | int] = [th, index, text, repr(at), self.ttl_ms, thread_id, runs]
        if not await self._set_metadata(args=args):
            return None
        return await self._read(owner, thread_id)

    async def remove(self, owner: str | None, thread_id: str, *, expected: str | None) -> bool:
        th, runs, index = self._keys(owner, thread_id)
        return bool(await self._remove(args=[th, runs, index, expected or "", thread_id]))

    # -- the heads kept before threads were a resource ----------------------------------------

    def _old_key(self, owner: str | None, thread_id: str) -> str:
        return f"{self.prefix}thread:{owner_tag(owner)}:{thread_id}"

    async def _adopted(self, owner: str | None, thread_id: str) -> bool:
        """Make a thread of the head kept before (`P thread:T:{id}`), if there is one."""
        old = self._old_key(owner, thread_id)
        run_id: Any = await self.redis.get(old)
        if run_id is None:
            return False
        raw: Any = await self.redis.hget(f"{self.prefix}run:{run_id}", "record")
        created = time.time()
        if raw is not None:
            with contextlib.suppress(RunUnreadableError):  # (it is made now, then)
                created = read_record(str(run_id), raw).created_at.timestamp()
        th, runs, index = self._keys(owner, thread_id)
        args: list[str | int] = [old, th, runs, index, repr(created), self.ttl_ms, thread_id]
        return bool(await self._adopt(args=args))

    async def adopt_old_heads(self) -> int:
        """At open: every head kept before becomes a thread (listed by GET /threads)."""
        count = 0
        async for key in self.redis.scan_iter(match=f"{self.prefix}thread:*", count=500):
            owned = _owner_and_id(str(key).removeprefix(f"{self.prefix}thread:"))
            if owned is not None and await self._adopted(*owned):
                count += 1
        return count


def _owner_and_id(rest: str) -> tuple[str | None, str] | None:
    """`T:{id}` (T an owner tag) as the owner and the thread id; None if it is not one."""
    if rest.startswith("n:"):
        return None, rest[2:]
    length, colon, tail = rest[1:].partition(":")
    if not rest.startswith("o") or not colon or not length.isdigit():
        return None
    owner = tail[: int(length)]
    if len(owner) != int(length) or tail[int(length) : int(length) + 1] != ":":
        return None
    return tag_owner(f"o{length}:{owner}"), tail[int(length) + 1 :]


def _entry(owner: str | None, thread_id: str, fields: dict[str, Any]) -> ThreadEntry:
    return ThreadEntry(
        thread_id=thread_id,
        owner=owner,
        head=str(fields["head"]) if fields.get("head") else None,
        created_at=float(fields["created"]),
        updated_at=float(fields["updated"]),
        metadata=json.loads(fields.get("metadata") or "{}"),
        runs=int(fields.get("runs", 0)),
    )
