"""`RunCoordinator` on Redis: the run queue is one Stream read by one consumer group, so each
queued run is delivered to one replica; ownership of a run is one `SET NX` key; cancel is a
stored flag plus one pub/sub channel.

Keys (P is the store's prefix):
    P queue          stream of {run: id}; group `runners`, one consumer per replica
    P owner:{id}     the replica that owns the run (claimed it to execute it, or cancelled it
                     while it was queued); set once, NX
    P cancel:{id}    set when a cancel was asked; the channel `P cancel` carries the run id

A replica reads the queue only while it has a free slot, and at most as many entries as it
has free slots. An entry is acknowledged (and deleted) once the run is taken or found taken;
an entry a replica read and never acknowledged (it died in between) is claimed by another
after `REDELIVER_IDLE_MS` (XAUTOCLAIM), so a queued run is never lost with its replica.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from redis.exceptions import RedisError, ResponseError

from app.runs.redis_store import RedisRunStore

log = structlog.get_logger("finishline.runs")

GROUP = "runners"
BLOCK_MS = 2_000
REDELIVER_IDLE_MS = 10_000
RETRY_S = 0.5
LISTEN_S = 1.0  # a blocking wait for a cancel message, between checks for the drain


class RedisCoordinator:
    def __init__(self, store: RedisRunStore, *, replica: str) -> None:
        self.store = store
        self.redis = store.redis
        self.replica = replica
        self.queue_key = store.prefix + "queue"
        self.channel = store.prefix + "cancel"
        self._ttl_s = max(1, int(store.retention_s))

    async def queued(self) -> int:
        length: int = await self.redis.xlen(self.queue_key)
        return length

    async def enqueue(self, run_id: str) -> None:
        await self.redis.xadd(self.queue_key, {"run": run_id})

    async def claim(self, run_id: str) -> bool:
        key = self.store.prefix + "owner:" + run_id
        return bool(await self.redis.set(key, self.replica, nx=True, ex=self._ttl_s))

    async def request_cancel(self, run_id: str) -> None:
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.set(self.store.prefix + "cancel:" + run_id, self.replica, ex=self._ttl_s)
            pipe.publish(self.channel, run_id)
            await pipe.execute()

    async def cancel_requested(self, run_id: str) -> bool:
        return bool(await self.redis.exists(self.store.prefix + "cancel:" + run_id))

    async def close(self) -> None:
        return None

    async def serve(
        self,
        *,
        free_slots: Callable[[], int],
        slot_freed: asyncio.Event,
        on_claimed: Callable[[str], Awaitable[None]],
        on_cancel: Callable[[str], None],
    ) -> None:
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(self._listen_for_cancels(on_cancel, free_slots))
            tasks.create_task(self._claim_runs(free_slots, slot_freed, on_claimed))

    # -- the queue --------------------------------------------------------------------------

    async def _claim_runs(
        self,
        free_slots: Callable[[], int],
        slot_freed: asyncio.Event,
        on_claimed: Callable[[str], Awaitable[None]],
    ) -> None:
        await self._create_group()
        while True:
            free = free_slots()
            if free < 0:  # draining
                return
            if free == 0:
                slot_freed.clear()
                if free_slots() <= 0:
                    await slot_freed.wait()
                continue
            try:
                entries = await self._redelivered(free)
                if not entries:
                    reply: Any = await self.redis.xreadgroup(
                        GROUP, self.replica, {self.queue_key: ">"}, count=free, block=BLOCK_MS
                    )
                    entries = [e for _stream, page in reply or () for e in page]
                for entry_id, fields in entries:
                    if fields and "run" in fields:
                        await on_claimed(fields["run"])
                    async with self.redis.pipeline(transaction=True) as pipe:
                        pipe.xack(self.queue_key, GROUP, entry_id)
                        pipe.xdel(self.queue_key, entry_id)
                        await pipe.execute()
            except RedisError as exc:
                log.warning("queue_read_failed", error=str(exc))
                await asyncio.sleep(RETRY_S)

    async def _redelivered(self, count: int) -> list[Any]:
        """Entries another replica read and never acknowledged (it died): ours now."""
        reply: Any = await self.redis.xautoclaim(
            self.queue_key, GROUP, self.replica, REDELIVER_IDLE_MS, "0-0", count=count
        )
        return list(reply[1])

    async def _create_group(self) -> None:
        try:
            await self.redis.xgroup_create(self.queue_key, GROUP, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    # -- cancel -----------------------------------------------------------------------------

    async def _listen_for_cancels(
        self, on_cancel: Callable[[str], None], free_slots: Callable[[], int]
    ) -> None:
        while free_slots() >= 0:
            pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(self.channel)
                while free_slots() >= 0:
                    message = await pubsub.get_message(timeout=LISTEN_S)
                    if message is not None and message.get("type") == "message":
                        on_cancel(str(message["data"]))
            except RedisError as exc:
                log.warning("cancel_channel_failed", error=str(exc))
                await asyncio.sleep(RETRY_S)
            finally:
                await pubsub.aclose()
