"""`redis://HOST:PORT/DB` (or `rediss://`): the store several replicas share (DESIGN §8).

A run is a hash (its record as the model's own JSON, plus the fields the scripts index on),
its event log one Stream whose entry ids are `0-{seq}`, its checkpoint one string; listing
goes through sorted-set indexes per owner and status. Every multi-key write is a Lua script
(`redis_scripts`), atomic in Redis: `append` counts the seq and adds the entry in one step,
so the log has no gap and no duplicate whatever crashes. Durability is Redis's: with
`appendonly yes` and `appendfsync everysec`, a Redis crash loses at most the last second.
A terminal record (and its events, checkpoint, idempotency key) expires `retention_s` after
it was saved terminal. Followers on every replica read the run's stream (`redis_follow`)."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Awaitable, Sequence
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.exceptions import RedisError

from app.engine.events import EventType
from app.runs.errors import RunUnreadableError
from app.runs.records import Event, RunRecord, RunStatus
from app.runs.reports.summaries import RunFilter
from app.runs.store import (
    CHECKPOINT_FORMAT,
    Checkpoint,
    DuplicateRunError,
    FirstEvent,
    LeaseLostError,
    RunGoneError,
    StoreError,
    WritesAtOnce,
    read_record,
    settled,
)
from app.runs.stores.checkpoints import CheckpointDeltas, loaded
from app.runs.stores.events import encode, stored
from app.runs.stores.fanout import Fanout
from app.runs.stores.redis_counters import RedisCounters
from app.runs.stores.redis_errors import redis_client, translated, unavailable
from app.runs.stores.redis_follow import StreamFollower, event_from_entry
from app.runs.stores.redis_reports import RedisSummaries
from app.runs.stores.redis_schedules import RedisSchedules
from app.runs.stores.redis_scripts import (
    APPEND,
    CHECKPOINT,
    CREATE,
    CREATE_APPEND,
    DELETE,
    SAVE,
    SAVE_APPEND,
    TREE_RUN,
    owner_tag,
    tag_owner,
)
from app.runs.stores.redis_thread_index import RedisThreadIndex

DEFAULT_RETENTION_S = 7 * 24 * 3600.0


@translated
class RedisRunStore(WritesAtOnce, RedisSummaries):
    """A `RunStore` in Redis 7 (run summaries: `RedisSummaries`). `prefix` starts every key
    (several deployments can share a database); `retention_s`: how long a terminal run is kept."""

    shared = True  # several processes may serve this store at once

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "finishline:",
        retention_s: float = DEFAULT_RETENTION_S,
    ) -> None:
        self.url = url
        self.prefix = prefix
        self.retention_s = retention_s
        self.fanout = Fanout()
        self.redis: Redis = redis_client(url)
        self.counters = RedisCounters(self.redis, prefix)  # quotas' counts (DESIGN §13)
        self.threads = RedisThreadIndex(self.redis, prefix, retention_s)  # DESIGN §19
        self.schedules = RedisSchedules(self.redis, prefix)  # DESIGN §21
        self._create = self.redis.register_script(CREATE)
        self._create_append = self.redis.register_script(CREATE_APPEND)
        self._save = self.redis.register_script(SAVE)
        self._append = self.redis.register_script(APPEND)
        self._save_append = self.redis.register_script(SAVE_APPEND)
        self._checkpoint = self.redis.register_script(CHECKPOINT)
        self._delete = self.redis.register_script(DELETE)
        self._tree_run = self.redis.register_script(TREE_RUN)
        self._follower = StreamFollower(
            self.redis, self._events_key, self.read, lambda: self.fanout, self._run_key
        )
        self._closed = False
        self._fences: dict[str, str] = {}
        self._deltas = CheckpointDeltas()

    # -- fencing ----------------------------------------------------------------------------

    def hold(self, run_id: str, token: str) -> None:
        """From now on, every write of this run from this process names `token`, and is
        refused (`LeaseLostError`) once the run's lease holds another."""
        self._fences[run_id] = token

    def release(self, run_id: str) -> None:
        self._fences.pop(run_id, None)
        self._deltas.forget(run_id)

    def fence_of(self, run_id: str) -> str:
        """The fencing token this process's writes of the run name ("" for none)."""
        return self._fences.get(run_id, "")

    def _fence(self, run_id: str, outcome: object) -> None:
        if outcome == "fenced":
            raise LeaseLostError(f"run {run_id!r} was taken over by another replica")

    # -- lifecycle --------------------------------------------------------------------------

    async def open(self) -> None:
        await self.ping()
        await self.threads.adopt_old_heads()

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self._follower.close()
            await self.redis.aclose()

    async def ping(self) -> None:
        """Redis answers and takes writes (at its `maxmemory`, or read-only, it is not ready)."""
        if self._closed:
            raise StoreError("the Redis store is closed")
        try:
            await self.redis.set(self.prefix + "ready", "1", px=10_000)
        except (RedisError, OSError) as exc:
            outage = unavailable(exc)
            raise StoreError(
                outage.message if outage is not None else f"Redis does not answer: {exc}"
            ) from exc

    # -- runs -------------------------------------------------------------------------------

    async def create(
        self, record: RunRecord, *, first_event: FirstEvent | None = None
    ) -> Event | None:
        args: list[str | int] = [*self._record_args(record)]
        event: Event | None = None
        if first_event is None:
            outcome = await self._create(args=args)
        else:  # one script: the run and its event 1, or nothing
            type, step, data = first_event
            payload = encode(data)
            ts = time.time()
            outcome = await self._create_append(args=[*args, type, repr(ts), step, payload])
            if outcome not in ("id", "key"):
                event = stored(record.id, int(outcome), type, ts, step, payload)
        if outcome == "id":
            raise DuplicateRunError(record.id)
        if outcome == "key":
            raise DuplicateRunError(record.idempotency_key)
        if record.previous_run_id is not None:  # GET /runs?previous_run_id= reads this index
            await self.redis.zadd(self._follow_ups_key(record.previous_run_id), {record.id: 0})
        if record.parent_run_id is not None:  # GET /runs?parent_run_id= reads this one
            await self.redis.zadd(self._children_key(record.parent_run_id), {record.id: 0})
        return event

    async def save(self, record: RunRecord) -> None:
        outcome = await self._save(args=self.save_args(record, self._fences.get(record.id, "")))
        self._fence(record.id, outcome)
        if outcome == "key":
            raise DuplicateRunError(record.idempotency_key)

    async def get(self, run_id: str) -> RunRecord | None:
        found: list[Any] = await self.redis.hmget(self._run_key(run_id), ["record", "tag"])
        raw, tag = found
        return read_record(run_id, raw, owner=tag_owner(tag)) if raw is not None else None

    async def find_by_idempotency_key(self, owner: str | None, key: str) -> RunRecord | None:
        run_id: Any = await self.redis.get(self._idem_key(owner, key))
        return await self.get(str(run_id)) if run_id is not None else None

    async def list_runs(
        self,
        *,
        owner: str | None,
        statuses: Sequence[RunStatus] = (),
        limit: int = 50,
        before_id: str | None = None,
        any_owner: bool = False,
        previous_run_id: str | None = None,
        unreadable: list[RunUnreadableError] | None = None,
        parent_run_id: str | None = None,
        matching: RunFilter | None = None,
    ) -> list[RunRecord]:
        scope = self.prefix + "idx:" + ("all" if any_owner else owner_tag(owner))
        wanted = {RunStatus(s) for s in statuses}
        indexes = [f"{scope}|{s.value}" for s in sorted(wanted)] if wanted else [scope]
        if parent_run_id is not None:  # its children's own index; the rest checked below
            indexes = [self._children_key(parent_run_id)]
        elif previous_run_id is not None:  # its follow-ups' own index, likewise
            indexes = [self._follow_ups_key(previous_run_id)]
        found: list[RunRecord] = []
        cursor = before_id
        while len(found) < limit:
            want = limit - len(found)
            ids = await self._newest_ids(indexes, cursor, want)
            if not ids:
                break
            rows = await self._records([self._run_key(i) for i in ids])
            gone = [run_id for run_id, (raw, _) in zip(ids, rows, strict=True) if raw is None]
            for run_id, (raw, tag) in zip(ids, rows, strict=True):
                if raw is None:
                    continue
                try:
                    record = read_record(run_id, raw, owner=tag_owner(tag))
                except RunUnreadableError as exc:
                    if unreadable is not None and (any_owner or exc.owner == owner):
                        unreadable.append(exc)
                    continue
                visible = any_owner or record.owner == owner
                if (
                    visible
                    and (not wanted or record.status in wanted)  # (it may have moved)
                    and previous_run_id in (None, record.previous_run_id)
                    and parent_run_id in (None, record.parent_run_id)
                    and (matching is None or matching.admits_record(record))
                ):
                    found.append(record)
            if gone:  # expired (retention): drop them from the indexes read here
                async with self.redis.pipeline(transaction=False) as pipe:
                    for index in indexes:
                        pipe.zrem(index, *gone)
                    await pipe.execute()
            if len(ids) < want:
                break
            cursor = ids[-1]
        return found

    async def delete(self, run_id: str) -> None:
        self._deltas.forget(run_id)
        await self._delete(args=[self.prefix, run_id])

    async def add_tree_run(self, root_run_id: str, member: str, cap: int) -> bool:
        ttl_ms = int(self.retention_s * 2000)  # twice the retention: it outlives its runs
        args: list[str | int] = [self.prefix + "tree:" + root_run_id, member, cap, ttl_ms]
        return bool(await self._tree_run(args=args))

    # -- events -----------------------------------------------------------------------------

    async def append(
        self,
        run_id: str,
        type: str,
        step: int,
        data: dict[str, Any],
        *,
        record: RunRecord | None = None,
    ) -> Event:
        payload = encode(data)
        ts = time.time()
        fence = self._fences.get(run_id, "")
        self._deltas.appended(run_id, type)
        args: list[str | int]
        if record is None:
            args = [self.prefix, run_id, type, repr(ts), step, payload, fence]
            seq = await self._append(args=args)
        else:  # one script: the save, then the append, or nothing
            args = [*self.save_args(record, fence), type, repr(ts), step, payload]
            seq = await self._save_append(args=args)
            if seq == "key":
                raise DuplicateRunError(record.idempotency_key)
        self._fence(run_id, seq)
        if seq is None:
            raise RunGoneError(run_id)
        return stored(run_id, int(seq), type, ts, step, payload)

    async def append_soon(
        self,
        run_id: str,
        type: EventType,
        step: int,
        data: dict[str, Any],
        *,
        record: RunRecord | None = None,
    ) -> Awaitable[Event]:
        return settled(await self.append(run_id, type, step, data, record=record))  # at once

    async def read(self, run_id: str, *, after: int = 0, limit: int = 1000) -> list[Event]:
        entries: Any = await self.redis.xrange(
            self._events_key(run_id), min=f"0-{after + 1}", max="+", count=limit
        )
        return [event_from_entry(run_id, entry_id, fields) for entry_id, fields in entries]

    def subscribe(self, run_id: str, *, after: int = 0) -> AsyncIterator[Event]:
        return self._follower.follow(run_id, after)

    def subscribe_batches(self, run_id: str, *, after: int = 0) -> AsyncIterator[list[Event]]:
        return self._follower.follow_batches(run_id, after)

    # -- checkpoints ------------------------------------------------------------------------

    async def save_checkpoint(self, run_id: str, step: int, state: dict[str, Any]) -> None:
        with self._deltas.writing(run_id, state) as write:  # incremental: stores.checkpoints
            head = f'{{"version":{CHECKPOINT_FORMAT},"step":{int(step)},"state":{write.state}}}'
            fence = self._fences.get(run_id, "")
            chunk = write.chunk if write.chunk is not None else ""
            args: list[str | int] = [self.prefix, run_id, head, fence, write.start, chunk]
            outcome = await self._checkpoint(args=args)
            self._fence(run_id, outcome)
            if outcome is None:
                raise RunGoneError(run_id)

    async def save_checkpoint_soon(
        self, run_id: str, step: int, state: dict[str, Any]
    ) -> Awaitable[None]:
        await self.save_checkpoint(run_id, step, state)  # one fenced script, made at once
        return settled(None)

    async def load_checkpoint(self, run_id: str) -> Checkpoint | None:
        async with self.redis.pipeline(transaction=True) as pipe:  # one moment: MULTI
            pipe.get(self.prefix + "cp:" + run_id)
            pipe.lrange(self.prefix + "cpm:" + run_id, 0, -1)
            raw, chunks = await pipe.execute()
        if raw is None:
            return None
        head: dict[str, Any] = json.loads(raw)  # no "version": stored before it was named
        return loaded(head["step"], head["state"], chunks, head.get("version"))

    # -- writes inside a caller's transaction (a MULTI on `pipe`) ----------------------------

    async def save_in(self, pipe: Pipeline, record: RunRecord) -> None:
        """Queue `save(record)` on `pipe`; it replies as SAVE does ("fenced": the lease is lost)."""
        await self._save(args=self.save_args(record, self.fence_of(record.id)), client=pipe)

    async def append_in(
        self, pipe: Pipeline, run_id: str, type: str, step: int, data: dict[str, Any]
    ) -> None:
        """Queue `append(...)` on `pipe`; its reply is the new event's seq."""
        payload = encode(data)
        fence = self.fence_of(run_id)
        args: list[str | int] = [self.prefix, run_id, type, repr(time.time()), step, payload]
        args.append(fence)
        await self._append(args=args, client=pipe)

    # -- plumbing ---------------------------------------------------------------------------

    def _follow_ups_key(self, run_id: str) -> str:
        return self.prefix + "fu:" + run_id

    def _children_key(self, run_id: str) -> str:
        return self.prefix + "ch:" + run_id

    def _run_key(self, run_id: str) -> str:
        return self.prefix + "run:" + run_id

    def _events_key(self, run_id: str) -> str:
        return self.prefix + "ev:" + run_id

    def _idem_key(self, owner: str | None, key: str) -> str:
        return f"{self.prefix}idem:{owner_tag(owner)}:{key}"

    def _record_args(self, record: RunRecord) -> list[str]:
        idem = (
            self._idem_key(record.owner, record.idempotency_key)
            if record.idempotency_key is not None
            else ""
        )
        return [
            self.prefix,
            record.id,
            record.model_dump_json(),
            record.status.value,
            owner_tag(record.owner),
            idem,
        ]

    async def _newest_ids(self, indexes: list[str], before: str | None, count: int) -> list[str]:
        """The `count` greatest ids below `before` across `indexes`, greatest first."""
        top = f"({before}" if before is not None else "+"
        async with self.redis.pipeline(transaction=False) as pipe:
            for index in indexes:
                pipe.execute_command("ZRANGE", index, top, "-", "BYLEX", "REV", "LIMIT", 0, count)
            pages: list[list[str]] = await pipe.execute()
        return sorted({i for page in pages for i in page}, reverse=True)[:count]

    async def _records(self, keys: list[str]) -> list[tuple[str | None, str | None]]:
        """Each run's record and owner tag (None, None: gone)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.hmget(key, ["record", "tag"])
            rows: list[list[str | None]] = await pipe.execute()
        return [(raw, tag) for raw, tag in rows]
