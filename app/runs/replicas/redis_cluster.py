"""`RunCoordinator` on Redis: the run queue is one Stream read by one consumer group, so each
queued run is delivered to one replica; ownership of a run is a lease, one `SET NX PX` key
holding the owner's fencing token; cancel is a stored flag plus one pub/sub channel.

Keys (P is the store's prefix):
    P queue          stream of {run: id}; group `runners`, one consumer per replica
    P owner:{id}     the lease: the fencing token of the replica that owns the run (claimed it
                     to execute it, took it over, or cancelled it while it was queued); set NX
                     with a `lease_s` expiry the owner renews every third of it. The store's
                     writes of a run name the token (`RedisRunStore.hold`) and are refused
                     once it is not the lease's any more
    P cancel:{id}    set when a cancel was asked; the channel `P cancel` carries the run id
    P held           hash: a run -> the run held to start once it has ended (DESIGN §19);
                     released into the queue by the replica that ends the run, or by any
                     replica's sweep once it sees the run ended (its replica died first)

A replica reads the queue only while it has a free slot, and at most as many entries as it
has free slots. An entry is acknowledged (and deleted) once the run is taken or found taken;
an entry a replica read and never acknowledged (it died in between) is claimed by another
after `REDELIVER_IDLE_MS` (XAUTOCLAIM), so a queued run is never lost with its replica; a
run in no queue at all is queued by a sweep once older than a POST (`redis_stranded`).

Takeover: every replica with a free slot scans the running runs every `sweep_s` (at most a
third of the lease); a running run whose lease key is gone (its replica died or hung past
the lease) is taken by the first replica whose `TAKE_OVER` script sets the key, which counts
the attempt; this replica then resumes the run from its checkpoint (`member.taken_over`).

Redis going away stops none of this replica's loops: each waits it out (`waited_out`) and
carries on when Redis is back, making its consumer group again if Redis lost it. A queued run
or an outbox entry whose handling failed on an outage is left unacknowledged, so it is handed
out again; one that failed on anything else (a record that does not read back) is logged with
its traceback and acknowledged, so it is not handed out forever.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable
from typing import Any

import structlog
from redis.exceptions import RedisError, ResponseError

from app.runs.replicas.cluster import ClusterMember
from app.runs.replicas.redis_stranded import stranded
from app.runs.stores.redis_errors import cancelling, translated, unavailable, waited_out
from app.runs.stores.redis_scripts import HOLD_ENTRY, RELEASE_HELD, RENEW, RESERVE, TAKE_OVER
from app.runs.stores.redis_store import RedisRunStore

log = structlog.get_logger("finishline.runs")

GROUP = "runners"
WEBHOOK_GROUP = "senders"
BLOCK_MS = 2_000  # half the store's socket timeout (`redis_errors.SOCKET_TIMEOUT_S`)
REDELIVER_IDLE_MS = 10_000
ADMIT_HOLD_MS = 30_000  # a place taken in the queue by a POST whose replica died meanwhile
LISTEN_S = 1.0  # a blocking wait for a cancel message, between checks for the drain
UNENDED = frozenset({"queued", "running", "requires_action"})


@translated
class RedisCoordinator:
    def __init__(
        self, store: RedisRunStore, *, replica: str, lease_s: float = 15.0, max_attempts: int = 3
    ) -> None:
        self.store = store
        self.redis = store.redis
        self.replica = replica
        self.lease_s = lease_s
        self.max_attempts = max_attempts
        self.queue_key = store.prefix + "queue"
        self.channel = store.prefix + "cancel"
        self.webhooks_key = store.prefix + "webhooks"
        self.sweep_s = min(1.0, lease_s / 3)
        self._ttl_s = max(1, int(store.retention_s))
        self._lease_ms = max(1, int(lease_s * 1000))
        self._held: dict[str, str] = {}  # run id -> this replica's fencing token
        self._take_over = self.redis.register_script(TAKE_OVER)
        self._renew = self.redis.register_script(RENEW)
        self._reserve = self.redis.register_script(RESERVE)
        self._hold_entry_script = self.redis.register_script(HOLD_ENTRY)
        self._release_held = self.redis.register_script(RELEASE_HELD)
        self.held_key = store.prefix + "held"
        self._stopping = False
        self._stranded_at = 0.0  # (monotonic: the first sweep looks)

    async def queued(self) -> int:
        length: int = await self.redis.xlen(self.queue_key)
        return length

    async def enqueue(self, run_id: str, place: str | None = None) -> None:
        async with self.redis.pipeline(transaction=True) as pipe:  # (one step: the count)
            pipe.xadd(self.queue_key, {"run": run_id})
            pipe.zrem(self.store.prefix + "admitting", place or "")
            await pipe.execute()

    async def hold(self, run_id: str, behind: str) -> None:
        await self.redis.hset(self.held_key, behind, run_id)

    async def release_held(self, behind: str) -> None:
        released = await self._release_held(args=[self.store.prefix, behind])
        if released is not None:
            log.info("run_released", run_id=str(released), behind=behind)

    async def _release_stale_holds(self) -> None:
        """Release the runs held behind runs that ended (or are gone) whose replica did not
        release them (it died between): what `release_held` does, once, whoever finds it."""
        held: Any = await self.redis.hgetall(self.held_key)
        if not held:
            return
        behind = list(held)
        async with self.redis.pipeline(transaction=False) as pipe:
            for run_id in behind:
                pipe.hget(self.store.prefix + "run:" + run_id, "status")
            statuses: list[Any] = await pipe.execute()
        for run_id, status in zip(behind, statuses, strict=True):
            if status is None or status not in UNENDED:
                await self.release_held(run_id)

    async def _queue_stranded(self) -> None:
        """Queue the runs made but in no queue (`redis_stranded`), every `ADMIT_HOLD_MS / 3`."""
        if time.monotonic() - self._stranded_at < ADMIT_HOLD_MS / 3000:
            return
        self._stranded_at = time.monotonic()
        for run_id in await stranded(self.redis, self.store.prefix, ADMIT_HOLD_MS / 1000):
            log.warning("run_queued_after_its_post", run_id=run_id)
            await self.enqueue(run_id)

    async def reserve(self, *, cap: int, busy: bool) -> tuple[str | None, int]:
        ticket = self._token()
        taken, queued = await self._reserve(
            args=[self.store.prefix, ticket, cap, "1" if busy else "0", ADMIT_HOLD_MS]
        )
        return (ticket if taken else None), int(queued)

    async def unreserve(self, ticket: str) -> None:
        await self.redis.zrem(self.store.prefix + "admitting", ticket)

    async def claim(self, run_id: str) -> bool:
        token = self._token()
        key = self.store.prefix + "owner:" + run_id
        if not await self.redis.set(key, token, nx=True, px=self._lease_ms):
            return False
        self._hold(run_id, token)
        return True

    def release(self, run_id: str) -> None:
        self._held.pop(run_id, None)
        self.store.release(run_id)

    def stop(self) -> None:
        self._stopping = True

    def _token(self) -> str:
        return f"{self.replica}:{os.urandom(6).hex()}"

    def _hold(self, run_id: str, token: str) -> None:
        self._held[run_id] = token
        self.store.hold(run_id, token)

    async def request_cancel(self, run_id: str) -> None:
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.set(self.store.prefix + "cancel:" + run_id, self.replica, ex=self._ttl_s)
            pipe.publish(self.channel, run_id)
            await pipe.execute()

    async def cancel_requested(self, run_id: str) -> bool:
        return bool(await self.redis.exists(self.store.prefix + "cancel:" + run_id))

    async def close(self) -> None:
        return None

    async def serve(self, member: ClusterMember) -> None:
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(self._send_webhooks(member, tasks))
            tasks.create_task(self._listen_for_cancels(member))
            tasks.create_task(self._claim_runs(member))
            tasks.create_task(self._renew_leases(member))
            tasks.create_task(self._sweep(member))

    # -- the queue --------------------------------------------------------------------------

    async def _claim_runs(self, member: ClusterMember) -> None:
        await self._create_group(self.queue_key, GROUP)
        while not self._stopping:
            free = member.free_slots()
            if free < 0:  # draining
                return
            if free == 0:
                member.slot_freed.clear()
                if member.free_slots() <= 0:
                    await member.slot_freed.wait()
                continue
            try:
                entries = await self._redelivered(self.queue_key, GROUP, REDELIVER_IDLE_MS, free)
                if not entries:
                    reply: Any = await self.redis.xreadgroup(
                        GROUP, self.replica, {self.queue_key: ">"}, count=free, block=BLOCK_MS
                    )
                    entries = [e for _stream, page in reply or () for e in page]
                for entry_id, fields in entries:
                    if fields and "run" in fields:
                        await _handled("run_claim_failed", member.claimed(fields["run"]))
                    async with self.redis.pipeline(transaction=True) as pipe:
                        pipe.xack(self.queue_key, GROUP, entry_id)
                        pipe.xdel(self.queue_key, entry_id)
                        await pipe.execute()
            except Exception as exc:
                await self._read_failed(self.queue_key, GROUP, "queue_read_failed", exc)

    async def _redelivered(self, key: str, group: str, idle_ms: int, count: int) -> list[Any]:
        """Entries another replica read and never acknowledged (it died): ours now."""
        reply: Any = await self.redis.xautoclaim(
            key, group, self.replica, idle_ms, "0-0", count=count
        )
        return list(reply[1])

    async def _create_group(self, key: str, group: str) -> None:
        """Make the consumer group (and its stream) exist, waiting out a Redis that is down:
        a replica outlives Redis outages, it does not crash on one."""
        while not self._stopping:
            try:
                await self.redis.xgroup_create(key, group, id="0", mkstream=True)
                return
            except ResponseError as exc:
                if "BUSYGROUP" in str(exc):
                    return
                await waited_out(exc, "group_create_failed", self.redis, stream=key)
            except RedisError as exc:
                await waited_out(exc, "group_create_failed", self.redis, stream=key)

    async def _read_failed(self, key: str, group: str, event: str, exc: Exception) -> None:
        """After a failed read: wait (`waited_out`), and make the group again if Redis lost it
        (it restarted without its data)."""
        if "NOGROUP" in str(exc):  # Redis came back without its data
            log.warning(event, error=str(exc), stream=key)
            await self._create_group(key, group)
            return
        await waited_out(exc, event, self.redis)

    # -- cancel -----------------------------------------------------------------------------

    async def _listen_for_cancels(self, member: ClusterMember) -> None:
        while not self._stopping:
            pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(self.channel)
                while not self._stopping:
                    message = await pubsub.get_message(timeout=LISTEN_S)
                    if message is not None and message.get("type") == "message":
                        member.cancel_asked(str(message["data"]))
            except RedisError as exc:
                await waited_out(exc, "cancel_channel_failed", self.redis)
            finally:
                await pubsub.aclose()  # type: ignore[no-untyped-call]

    # -- leases and takeover ----------------------------------------------------------------

    async def _renew_leases(self, member: ClusterMember) -> None:
        """Renew every held lease each third of it; a lease found lost (this process was
        paused past it and another took the run) stops the run here (`cancel_asked`)."""
        while not self._stopping:
            await asyncio.sleep(self.lease_s / 3)
            for run_id, token in list(self._held.items()):
                try:
                    renewed = await self._renew(
                        args=[self.store.prefix, run_id, token, self._lease_ms]
                    )
                except RedisError as exc:
                    if cancelling():
                        raise asyncio.CancelledError from exc
                    log.warning("lease_renewal_failed", run_id=run_id, error=str(exc))
                    continue
                if not renewed and self._held.get(run_id) == token:
                    log.warning("lease_lost", run_id=run_id)
                    member.cancel_asked(run_id)

    async def _sweep(self, member: ClusterMember) -> None:
        """Take over running runs whose lease expired, while this replica has free slots;
        release held runs whose run ended (`_release_stale_holds`)."""
        while not self._stopping and member.free_slots() >= 0:
            await asyncio.sleep(self.sweep_s)
            try:
                await self._release_stale_holds()
                await self._queue_stranded()
            except Exception as exc:
                await waited_out(exc, "held_sweep_failed", self.redis)
            if member.free_slots() <= 0:
                continue
            try:
                await self._take_over_lapsed(member)
            except Exception as exc:
                await waited_out(exc, "takeover_sweep_failed", self.redis)

    async def _take_over_lapsed(self, member: ClusterMember) -> None:
        """Take over the running runs whose lease lapsed, while this replica has free slots.
        Never one this replica holds: its lease lapsing (Redis was away, or this process
        paused, past it) is this replica's renewal to find, which stops the run here; taking
        it over here too would run it twice in one process, under a new token that the first
        execution's writes would pass as well."""
        running = self.store.prefix + "idx:all|running"
        run_ids = [str(i) for i in await self.redis.zrange(running, 0, 199)]
        run_ids = [run_id for run_id in run_ids if run_id not in self._held]
        async with self.redis.pipeline(transaction=False) as pipe:
            for run_id in run_ids:
                pipe.exists(self.store.prefix + "owner:" + run_id)
            held = await pipe.execute()
        for run_id, exists in zip(run_ids, held, strict=True):
            if exists or member.free_slots() <= 0:
                continue
            token = self._token()
            attempt = await self._take_over(args=[self.store.prefix, run_id, token, self._lease_ms])
            if attempt:
                self._hold(run_id, token)
                log.warning("run_taken_over", run_id=run_id, attempt=attempt)
                await _handled("takeover_failed", member.taken_over(run_id, int(attempt)))

    # -- the webhook outbox -----------------------------------------------------------------

    async def _hold_entry(self, entry_id: str) -> None:
        """Keep an outbox entry this replica delivers from looking abandoned: claim it again
        (JUSTID: no delivery counted) every third of the lease, which resets its idle time,
        for as long as it is this replica's (`HOLD_ENTRY`)."""
        args = [self.webhooks_key, WEBHOOK_GROUP, self.replica, entry_id]
        while True:
            await asyncio.sleep(self.lease_s / 3)
            try:
                if not await self._hold_entry_script(args=args):
                    log.warning("webhook_entry_lost", entry=entry_id)
                    return
            except RedisError as exc:
                if cancelling():
                    raise asyncio.CancelledError from exc
                log.warning("webhook_hold_failed", entry=entry_id, error=str(exc))

    async def _send_webhooks(self, member: ClusterMember, tasks: asyncio.TaskGroup) -> None:
        """Deliver the webhooks of ended runs: the store's SAVE script put each run's id in
        the outbox stream as it ended the run; one replica of the group reads each entry and
        acknowledges it once the delivery is done (all its attempts). While it delivers, it
        holds the entry as a lease: it claims it again every third of `lease_s`, which keeps
        the entry's idle time under the lease; an entry idle past the lease (its reader died
        or hung) is taken by another replica (XAUTOCLAIM), which delivers it again."""
        await self._create_group(self.webhooks_key, WEBHOOK_GROUP)
        while not self._stopping and member.free_slots() >= 0:
            try:
                entries = await self._redelivered(
                    self.webhooks_key, WEBHOOK_GROUP, self._lease_ms, 10
                )
                if not entries:
                    reply: Any = await self.redis.xreadgroup(
                        WEBHOOK_GROUP,
                        self.replica,
                        {self.webhooks_key: ">"},
                        count=10,
                        block=BLOCK_MS,
                    )
                    entries = [e for _stream, page in reply or () for e in page]
                for entry_id, fields in entries:
                    tasks.create_task(self._deliver(entry_id, fields.get("run"), member))
            except Exception as exc:
                await self._read_failed(
                    self.webhooks_key, WEBHOOK_GROUP, "webhook_outbox_read_failed", exc
                )

    async def _deliver(self, entry_id: str, run_id: str | None, member: ClusterMember) -> None:
        if run_id:
            log.info("webhook_delivering", run_id=run_id, entry=entry_id)
            holding = asyncio.create_task(self._hold_entry(entry_id))
            try:
                await _handled("webhook_failed", member.deliver_webhook(run_id))
            except Exception:  # Redis is away: unacknowledged, the entry is taken again
                return
            finally:
                holding.cancel()
        try:
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.xack(self.webhooks_key, WEBHOOK_GROUP, entry_id)
                pipe.xdel(self.webhooks_key, entry_id)
                await pipe.execute()
        except RedisError as exc:  # unacknowledged: taken again after the lease (Webhook-Id)
            if cancelling():
                raise asyncio.CancelledError from exc
            log.warning("webhook_ack_failed", entry=entry_id, error=str(exc))


async def _handled(event: str, work: Awaitable[None]) -> None:
    """Await `work` (this replica's part of a queue or outbox entry). An outage, or the
    cancellation it may stand for, is raised: the entry stays unacknowledged and is handed out
    again once Redis is back. Anything else is logged with its traceback and swallowed: the
    entry is acknowledged, not handed out forever."""
    try:
        await work
    except Exception as exc:
        if cancelling():
            raise asyncio.CancelledError from exc
        if unavailable(exc) is not None:
            raise
        log.exception(event)
