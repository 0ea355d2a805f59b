"""`WaitingRuns` on Redis (DESIGN §9 with §8): runs waiting for a person, shared by replicas.

A waiting run holds no lease and no slot: the replica that executed it stores it waiting and
gives its lease up in one transaction. Every later change (a decision, the approval timeout,
a cancel) is a compare-and-set on the stored record: `WATCH` the run's hash and its inbox,
read, work the change out, then `MULTI … EXEC` its events, the record, and (once every call
is decided) an entry of the cluster's queue stream. A concurrent change of the run (any write
to its hash: a save, an event) fails the `EXEC`; the change is then worked out again on the
new record, where a call decided meanwhile is refused (409). So exactly one of two replicas
deciding one call wins, and a decided run is queued exactly once, through the cluster's queue
(consumer group, then a lease): no replica can run it twice.

Keys (P is the store's prefix), beside the store's and the coordinator's:
    P approvals      sorted set: run id -> its approval deadline (epoch seconds). Every
                     replica polls it (`due`); whoever's compare-and-set turns a run's undecided
                     calls into rejections takes the entry out in the same transaction
    P inbox:{id}     the run's undelivered steering messages (`redis_messages`): a waiting run
                     keeps there the ones it was sent and had not seen
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

import structlog
from redis.exceptions import RedisError, WatchError

from app.runs.follow.log import wait_logged
from app.runs.records import RunRecord, RunStatus
from app.runs.store import LeaseLostError, StoreError, read_record
from app.runs.stores.redis_errors import cancelling, translated
from app.runs.stores.redis_store import RedisRunStore
from app.runs.waiting import (
    Changer,
    NewEvent,
    WaitChange,
    deadline_of,
    unlogged_wait,
    waiting_event,
)

log = structlog.get_logger("finishline.runs")

POLL_S = 1.0  # how often each replica looks for approval deadlines that passed
DUE_PAGE = 100
ATTEMPTS = 100  # compare-and-set rounds before a change gives up (never seen in practice)

# ARGV: prefix, id, token: drop the run's lease if `token` still holds it
RELEASE = """
local key = ARGV[1] .. 'owner:' .. ARGV[2]
if redis.call('GET', key) == ARGV[3] then return redis.call('DEL', key) end
return 0
"""


@translated
class RedisWaitingRuns:
    def __init__(
        self,
        store: RedisRunStore,
        *,
        queue_key: str,
        poll_s: float = POLL_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.redis = store.redis
        self.queue_key = queue_key
        self.poll_s = poll_s
        self.clock = clock
        self.deadlines_key = store.prefix + "approvals"
        self._release = self.redis.register_script(RELEASE)

    def inbox_key(self, run_id: str) -> str:
        return self.store.prefix + "inbox:" + run_id

    async def suspend(self, record: RunRecord, held: list[str], waited: NewEvent) -> None:
        """Fenced by the executing replica's lease, which the same transaction drops; the
        messages the run held go back to the front of its inbox, in order."""
        token = self.store.fence_of(record.id)
        inbox = self.inbox_key(record.id)
        async with self.redis.pipeline(transaction=True) as pipe:
            await self.store.save_in(pipe, record)
            await self.store.append_in(pipe, record.id, waited.type, waited.step, waited.data)
            if held:
                pipe.lpush(inbox, *reversed(held))
                pipe.pexpire(inbox, int(self.store.retention_s * 1000))
            pipe.zadd(self.deadlines_key, {record.id: deadline_of(record)})
            await self._release(args=[self.store.prefix, record.id, token], client=pipe)
            replies: list[Any] = await pipe.execute()
        if replies[0] == "fenced":
            raise LeaseLostError(f"run {record.id!r} was taken over by another replica")
        self.store.release(record.id)  # not this replica's any more: its writes are unfenced

    async def change(self, run_id: str, changer: Changer) -> WaitChange | None:
        run_key, inbox = self.store.prefix + "run:" + run_id, self.inbox_key(run_id)
        for _ in range(ATTEMPTS):
            async with self.redis.pipeline(transaction=True) as pipe:
                await pipe.watch(run_key, inbox)
                raw: Any = await pipe.hget(run_key, "record")
                record = read_record(run_id, raw) if raw is not None else None
                waiting = record is not None and record.status == RunStatus.REQUIRES_ACTION
                held = [str(m) for m in await pipe.lrange(inbox, 0, -1)] if waiting else []
                if not waiting:
                    await self._forget(pipe, run_id)
                change = changer(record, held)
                if change is None:
                    return None
                assert waiting, "a change is made to a waiting run only"
                pipe.multi()  # type: ignore[no-untyped-call]
                await self._write(pipe, change, inbox)
                try:
                    await pipe.execute()
                except WatchError:
                    continue  # changed meanwhile: work it out again on the new record
                return change
        raise StoreError(f"run {run_id!r} changed {ATTEMPTS} times while a change was written")

    async def _forget(self, pipe: Any, run_id: str) -> None:
        """The run does not wait (any more): drop its deadline, unless it waits again
        meanwhile (the watch then fails this)."""
        pipe.multi()
        pipe.zrem(self.deadlines_key, run_id)
        with contextlib.suppress(WatchError):
            await pipe.execute()

    async def _write(self, pipe: Any, change: WaitChange, inbox: str) -> None:
        record = change.record
        for event in change.events:
            await self.store.append_in(pipe, record.id, event.type, event.step, event.data)
        await self.store.save_in(pipe, record)
        if change.final is not None:
            final = change.final
            await self.store.append_in(pipe, record.id, final.type, final.step, final.data)
            pipe.delete(inbox)  # its messages were logged undelivered with the change
        if record.status != RunStatus.REQUIRES_ACTION:
            pipe.zrem(self.deadlines_key, record.id)
        if change.requeue:
            pipe.xadd(self.queue_key, {"run": record.id})

    async def due(self) -> list[str]:
        await asyncio.sleep(self.poll_s)
        try:
            found: list[Any] = await self.redis.zrangebyscore(
                self.deadlines_key, "-inf", self.clock(), start=0, num=DUE_PAGE
            )
        except RedisError as exc:
            if cancelling():
                raise asyncio.CancelledError from exc
            log.warning("approval_deadlines_read_failed", error=str(exc))
            return []
        return [str(run_id) for run_id in found]

    async def rearm(self) -> int:
        """The deadlines are the cluster's, in Redis: nothing to arm. The runs stored waiting
        without their wait in their log (before waits were events) have it logged, once
        whichever replicas start together."""
        cursor = None
        while True:
            page = await self.store.list_runs(
                owner=None,
                statuses=(RunStatus.REQUIRES_ACTION,),
                limit=DUE_PAGE,
                before_id=cursor,
                any_owner=True,
            )
            for record in page:
                await self.log_wait(record.id)
            if len(page) < DUE_PAGE:
                break
            cursor = page[-1].id
        count: int = await self.redis.zcard(self.deadlines_key)
        return count

    async def log_wait(self, run_id: str) -> bool:
        """Append the `run.waiting` of a run stored waiting without it in its log (a
        compare-and-set on the run's hash, which every append changes); whether it was."""
        run_key = self.store.prefix + "run:" + run_id
        for _ in range(ATTEMPTS):
            async with self.redis.pipeline(transaction=True) as pipe:
                await pipe.watch(run_key)
                raw: Any = await pipe.hget(run_key, "record")
                record = read_record(run_id, raw) if raw is not None else None
                if not unlogged_wait(record) or await wait_logged(self.store, run_id):
                    return False
                assert record is not None
                waited = waiting_event(record, record.usage.steps)
                pipe.multi()  # type: ignore[no-untyped-call]
                await self.store.append_in(pipe, run_id, waited.type, waited.step, waited.data)
                try:
                    await pipe.execute()
                except WatchError:
                    continue  # changed meanwhile (another replica logged it, say): again
                log.info("run_wait_logged", run_id=run_id)
                return True
        raise StoreError(f"run {run_id!r} changed {ATTEMPTS} times while its wait was logged")
