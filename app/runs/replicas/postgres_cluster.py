"""`RunCoordinator` on Postgres (DESIGN §18 with §8): the queue, the leases, cancel and the
webhook outbox are columns of the run's row, so Postgres alone is the whole backend.

- The queue: a run is queued while `status = 'queued'` and `queued_at` is set. A replica
  takes up to its free slots at once, oldest first, `FOR UPDATE SKIP LOCKED` (never waiting
  on another's rows, never taking a run twice), its lease set by the same statement. One
  that dies between taking a run and starting it leaves a lease that lapses: taken again.
  A run a POST made but could not queue (its replica died, or Postgres went away, between
  the two writes) is queued by a replica's sweep once it is older than a POST takes.
- The lease: `lease_token` (a fencing token) and `lease_until` (the database's clock). The
  store's writes of a run name the token (`PostgresRunStore.hold`), refused once another
  holds the run or it lapsed; renewed every `lease_s / 3`, one lost stops the run here.
- Takeover: every `sweep_s` a replica with a free slot takes running runs whose lease lapsed,
  one at a time (`SKIP LOCKED`), counting the attempt; never one it holds (`_take_over`).
- Cancel: `cancel_requested` set, and a notification `c:<id>` on the store's channel, which
  every replica's listener hands to `member.cancel_asked`; each time the listener listens
  again (notifications may have been missed), the flags of the runs held here are read.
- Held runs (DESIGN §19): `held_behind` names the run a run waits for; whoever ends that run
  queues it, or any replica's sweep once it sees that run ended.
- Retention: runs ended past `FINISHLINE_RETENTION_S`, by one replica at a time (`expire`).
- The webhook outbox: `webhook_due` (`postgres_outbox`), one replica delivering each entry.

Postgres going away stops none of these loops: each waits it out and carries on.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from app.runs.replicas.cluster import ClusterMember
from app.runs.replicas.postgres_outbox import PostgresOutbox, handled
from app.runs.replicas.postgres_queue import (
    ADMIT_HOLD_S,
    CLAIM,
    HELD,
    PLACES,
    QUEUED,
    RENEW,
    RESERVE,
    STALE_HOLDS,
    STRANDED,
    TAKE,
    TAKE_OVER,
    Enqueue,
    Reserve,
    enqueue_many,
    release_many,
    reserve_many,
    unreserve_many,
)
from app.runs.stores.postgres import PostgresRunStore
from app.runs.stores.postgres_errors import RETRY_S, is_outage
from app.runs.stores.postgres_rows import NOW_S, Conn, record_of

log = structlog.get_logger("finishline.runs")

MAX_CANCELS_HEARD = 1024  # cancels remembered (for runs being started) before older go
POLL_S = 1.0  # the longest a loop waits for its doorbell before it looks anyway
RETENTION_EVERY_S = 60.0  # how often a replica looks for runs past the retention
STRANDED_S = ADMIT_HOLD_S / 3  # how often it looks for runs made but never queued


def _failed(event: str) -> Callable[[asyncio.Future[Any]], None]:
    """A write not awaited: its failure logged as `event`."""

    def done(future: asyncio.Future[Any]) -> None:
        if not future.cancelled() and future.exception() is not None:
            log.warning(event, error=str(future.exception()))

    return done


class PostgresCoordinator:
    def __init__(
        self,
        store: PostgresRunStore,
        *,
        replica: str,
        lease_s: float = 15.0,
        max_attempts: int = 3,
    ) -> None:
        self.store = store
        self.replica = replica
        self.lease_s = lease_s
        self.max_attempts = max_attempts
        self.sweep_s = min(1.0, lease_s / 3)
        self._held: dict[str, str] = {}  # run id -> this replica's fencing token
        self._offered: dict[str, str] = {}  # taken from the queue, not yet claimed
        self._asked: dict[str, tuple[bool, float, int]] = {}
        """Runs taken, not yet started: whether a cancel was asked by the take, when the take
        was sent, and which listener listened then (`cancel_requested`)."""
        self._cancels: dict[str, float] = {}  # cancels heard lately: run id -> when
        self._queue_bell = asyncio.Event()
        self._stranded_at = -math.inf
        self._relistened = asyncio.Event()  # the listener listens again: cancels may be unheard
        self._outbox = PostgresOutbox(store, replica=replica, lease_s=lease_s)
        self._member: ClusterMember | None = None
        self._stopping = False
        store.follower.listeners.append(self._told)
        store.follower.reconnected.append(self._relistened.set)

    def _told(self, payload: str) -> None:
        kind, _, run_id = payload.partition(":")
        if kind == "q" and not run_id:
            self._queue_bell.set()
        elif kind == "c":
            self._cancels[run_id] = time.monotonic()
            if self._member is not None:
                self._member.cancel_asked(run_id)
        elif kind == "w" and not run_id:
            self._outbox.bell.set()

    # -- the queue --------------------------------------------------------------------------

    async def queued(self) -> int:
        rows = await self.store.query(f"SELECT COUNT(*) FROM runs WHERE {QUEUED}", ())
        return int(rows[0][0])

    async def enqueue(self, run_id: str, place: str | None = None) -> None:
        # not awaited: the POST answers once its run is stored (a write lost: `STRANDED`)
        item = Enqueue(run_id, place or "", self.store.channel)

        async def enqueue(conn: Conn) -> None:
            await enqueue_many(conn, [item])

        done = self.store.queue(enqueue, None, run_id, (enqueue_many, item), one_statement=True)
        done.add_done_callback(_failed("run_not_queued"))

    async def hold(self, run_id: str, behind: str) -> None:
        async def hold(conn: Conn) -> None:
            sql = f"UPDATE runs SET held_behind = %s, queued_at = {NOW_S} WHERE id = %s"
            await conn.execute(sql, (behind, run_id))

        await self.store.submit(hold, touches=HELD, one_statement=True)

    async def release_held(self, behind: str) -> None:
        """Made with the other releases of its batch, in one statement (`release_many`),
        after every hold asked before (both touch `HELD`)."""
        item = (behind, self.store.channel)

        async def release(conn: Conn) -> list[str]:
            return (await release_many(conn, [item]))[0]

        released = self.store.queue(release, None, HELD, (release_many, item), one_statement=True)
        for run_id in await released:
            log.info("run_released", run_id=run_id, behind=behind)

    async def _release_stale_holds(self) -> None:
        for (behind,) in await self.store.query(STALE_HOLDS, ()):
            await self.release_held(str(behind))

    async def _queue_stranded(self) -> None:
        """Queue the runs a POST made but did not queue (`STRANDED`), every `STRANDED_S`."""
        if time.monotonic() - self._stranded_at < STRANDED_S:
            return
        self._stranded_at = time.monotonic()
        for run_id, _ in await self.store.query(STRANDED, (ADMIT_HOLD_S, self.store.channel)):
            log.warning("run_queued_after_its_post", run_id=run_id)

    async def reserve(self, *, cap: int, busy: bool) -> tuple[str | None, int]:
        ticket = self._token()

        async def reserve(conn: Conn) -> tuple[str | None, int]:
            # the lock first: the count's snapshot is taken after the admissions before it
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (self.store.channel,))
            cur = await conn.execute(RESERVE, (ADMIT_HOLD_S, ADMIT_HOLD_S, ticket, cap, busy))
            row = await cur.fetchone()
            assert row is not None
            queued, taken = int(row[0]), bool(row[1])
            return (ticket if taken else None), queued

        ask = Reserve(ticket, cap, busy, self.store.channel)  # made with the batch's others
        result: tuple[str | None, int] = await self.store.queue(
            reserve, None, PLACES, (reserve_many, ask)
        )
        return result

    async def unreserve(self, ticket: str) -> None:
        """Queued, not awaited: a POST answers without waiting for a commit more. Every
        later admission's count is made after it (admission writes, `PLACES`, are made in
        the order asked); if it fails, the place is dropped once `ADMIT_HOLD_S` old."""

        async def unreserve(conn: Conn) -> None:
            await conn.execute("DELETE FROM queue_places WHERE ticket = %s", (ticket,))

        many = (unreserve_many, ticket)
        done = self.store.queue(unreserve, None, PLACES, many, one_statement=True)
        done.add_done_callback(_failed("queue_place_not_given_back"))

    async def claim(self, run_id: str) -> bool:
        token = self._offered.pop(run_id, None)
        if token is None:
            token = self._token()
            rows = await self.store.query(CLAIM, (self.replica, token, self.lease_s, run_id))
            if not rows:
                return False
        self._hold(run_id, token)
        return True

    def release(self, run_id: str) -> None:
        self._held.pop(run_id, None)
        self.store.release(run_id)

    def stop(self) -> None:
        self._stopping = True
        self._queue_bell.set()
        self._relistened.set()

    def _token(self) -> str:
        return f"{self.replica}:{os.urandom(6).hex()}"

    def _hold(self, run_id: str, token: str) -> None:
        self._held[run_id] = token
        self.store.hold(run_id, token)

    async def request_cancel(self, run_id: str) -> None:
        async def ask(conn: Conn) -> None:
            sql = "UPDATE runs SET cancel_requested = TRUE WHERE id = %s"
            sql += " RETURNING pg_notify(%s, %s)"
            await conn.execute(sql, (run_id, self.store.channel, "c:" + run_id))

        await self.store.submit(ask, touches=run_id, one_statement=True)

    async def cancel_requested(self, run_id: str) -> bool:
        """Asked of a run as it starts here. One this replica took: a cancel asked before the
        take was read by it, and one asked since was heard by the listener if it listened
        throughout (one heard after this answer finds the run live here); else read."""
        asked = self._asked.pop(run_id, None)
        follower = self.store.follower
        if asked is not None and follower.listening.is_set() and follower.listened == asked[2]:
            return asked[0] or self._cancels.get(run_id, -math.inf) >= asked[1]
        sql = "SELECT cancel_requested FROM runs WHERE id = %s"
        rows = await self.store.query(sql, (run_id,))
        return bool(rows and rows[0][0])

    async def close(self) -> None:
        with contextlib.suppress(ValueError):
            self.store.follower.listeners.remove(self._told)
        with contextlib.suppress(ValueError):
            self.store.follower.reconnected.remove(self._relistened.set)

    async def serve(self, member: ClusterMember) -> None:
        self._member = member
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(self._loop("queue_read_failed", self._claim_runs, member))
            tasks.create_task(self._loop("lease_renewal_failed", self._renew_leases, member))
            tasks.create_task(self._loop("cancel_read_failed", self._cancels_unheard, member))
            tasks.create_task(self._loop("takeover_sweep_failed", self._sweep, member))
            tasks.create_task(self._loop("webhook_outbox_read_failed", self._webhooks, member))
            if self.store.retention_s:
                tasks.create_task(self._loop("retention_failed", self._expire, member))

    async def _loop(
        self, event: str, step: Callable[[ClusterMember], Awaitable[None]], member: ClusterMember
    ) -> None:
        """`step` again and again until the drain; an outage is waited out."""
        while not self._stopping and member.free_slots() >= 0:
            try:
                await step(member)
            except Exception as exc:
                if not is_outage(exc):
                    log.exception(event)
                else:
                    log.warning(event, error=str(exc))
                await asyncio.sleep(RETRY_S)

    async def _claim_runs(self, member: ClusterMember) -> None:
        free = member.free_slots()
        if free == 0:
            member.slot_freed.clear()
            if member.free_slots() == 0:
                await member.slot_freed.wait()
            return
        if free < 0:
            return
        self._queue_bell.clear()
        follower, sent = self.store.follower, time.monotonic()
        heard = follower.listened if follower.listening.is_set() else -1
        rows = await self.store.query(TAKE, (self.replica, self._token() + ":", self.lease_s, free))
        for run_id, token, _owner, _record, asked in rows:
            self._offered[run_id] = token
            self._asked[run_id] = (bool(asked), sent, heard)
        for run_id, _token, owner, record, _asked in rows:
            try:
                taken = record_of((run_id, owner, record))  # (read in the take)
                await handled("run_claim_failed", member.claimed(run_id, taken))
            finally:
                self._offered.pop(run_id, None)  # not queued any more: its lease lapses
                self._asked.pop(run_id, None)
        if len(self._cancels) > MAX_CANCELS_HEARD:  # (only those since a take still in hand count)
            self._cancels = {r: at for r, at in self._cancels.items() if at >= sent}
        if len(rows) < free:  # the queue is empty (but for rows another replica locks): a
            # run queued since rang the bell (cleared before the take); else POLL_S at most
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._queue_bell.wait(), POLL_S)

    async def _renew_leases(self, member: ClusterMember) -> None:
        await asyncio.sleep(self.lease_s / 3)
        held = dict(self._held)
        if not held:
            return
        params = (self.lease_s, list(held), list(held.values()))

        async def renew(conn: Conn) -> set[str]:
            # through the writer: behind this replica's writes of these runs, never
            # interleaved with them (two statements locking rows in different orders deadlock)
            return {run_id for (run_id,) in await (await conn.execute(RENEW, params)).fetchall()}

        renewed: set[str] = await self.store.submit(renew)
        for run_id, token in held.items():
            if run_id not in renewed and self._held.get(run_id) == token:
                log.warning("lease_lost", run_id=run_id)
                member.cancel_asked(run_id)

    async def _cancels_unheard(self, member: ClusterMember) -> None:
        """Each time the listener listens again, the cancels of runs held here asked while
        it was away (their notifications unheard), read."""
        await self._relistened.wait()
        self._relistened.clear()
        if held := list(self._held):
            sql = "SELECT id FROM runs WHERE id = ANY(%s) AND cancel_requested"
            for (run_id,) in await self.store.query(sql, (held,)):
                member.cancel_asked(run_id)

    async def _sweep(self, member: ClusterMember) -> None:
        await asyncio.sleep(self.sweep_s)
        await self._release_stale_holds()
        await self._queue_stranded()
        while member.free_slots() > 0 and not self._stopping:
            if not await self._take_over(member):
                return

    async def _take_over(self, member: ClusterMember) -> bool:
        """Take one running run whose lease lapsed, if any. Never one this replica holds:
        its lease lapsing (Postgres was away past it) is this replica's renewal to find,
        which stops the run here; taking it again here would run it twice in one process."""
        token = self._token()
        held = list(self._held)
        rows = await self.store.query(TAKE_OVER, (self.replica, token, self.lease_s, held))
        if not rows:
            return False
        run_id, attempt = rows[0]
        self._hold(run_id, token)
        log.warning("run_taken_over", run_id=run_id, attempt=attempt)
        await handled("takeover_failed", member.taken_over(run_id, int(attempt)))
        return True

    async def _webhooks(self, member: ClusterMember) -> None:
        await self._outbox.take(member, POLL_S)

    async def _expire(self, member: ClusterMember) -> None:
        """Retention (`FINISHLINE_RETENTION_S`): a batch at a time, by one replica at a
        time, until nothing is left to delete; then again after `RETENTION_EVERY_S`."""
        if await self.store.expire() == 0:
            await asyncio.sleep(RETENTION_EVERY_S)
