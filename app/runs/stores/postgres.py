"""`postgresql://USER:PASSWORD@HOST:PORT/DB`: the system of record several replicas share
(DESIGN §18). Postgres alone is the whole backend: no Redis beside it.

A run is a row of `runs` (its record as the model's own JSON text, plus the columns indexes,
leases and the queue need), its event log rows of `events` keyed (run_id, seq), its
checkpoint a row of `checkpoints` and its chunks (`app.runs.stores.checkpoints`). `append`
takes the next seq from the run's row (`last_seq + 1`, the row locked by that update) and
inserts the event in one statement, so the log has no gap and no duplicate whatever crashes,
and a write of a run this replica no longer leases is refused in the same statement.

Writes go through one writer task per process (`postgres_writer`): queued in the order asked,
many per transaction, acknowledged only once committed (durable as Postgres's
`synchronous_commit` makes it: on by default, an acknowledged write survives a crash).
Reads borrow a pooled connection for one statement. No connection is held between
statements of different requests, across an LLM or tool call, or idle in a transaction; the
pool (`FINISHLINE_PG_POOL_SIZE`) checks a connection idle for a while before handing it out
and replaces one that died (`pg_terminate_backend`, an idle timeout, a failover). Followers
on every replica are woken by `LISTEN/NOTIFY` and read the rows (`postgres_follow`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar

import psycopg
import structlog

from app.engine.events import TERMINAL_EVENT_TYPES
from app.runs.errors import RunUnreadableError
from app.runs.records import Event, RunRecord, RunStatus
from app.runs.reports.summaries import RunFilter
from app.runs.store import Checkpoint, FirstEvent, StoreError
from app.runs.stores.checkpoints import CheckpointDeltas, CheckpointWrite
from app.runs.stores.events import encode
from app.runs.stores.fanout import Fanout
from app.runs.stores.postgres_appends import Created, Row, append_many, create_many
from app.runs.stores.postgres_checkpoints import Saved, save_many
from app.runs.stores.postgres_counters import PostgresCounters
from app.runs.stores.postgres_errors import cause, is_outage, outage
from app.runs.stores.postgres_follow import PostgresFollower
from app.runs.stores.postgres_pool import POOL_TIMEOUT_S, make_pool
from app.runs.stores.postgres_queued import QueuedAppends
from app.runs.stores.postgres_reports import PostgresSummaries, where_matching
from app.runs.stores.postgres_rows import (
    Write,
    checkpoint_of,
    checkpoint_upsert,
    delete_runs,
    insert_run,
    insert_run_with_event,
    paged,
    read_events,
    record_of,
    run_row,
    tree_member,
    upsert_run,
)
from app.runs.stores.postgres_schedules import PostgresSchedules
from app.runs.stores.postgres_schema import check_schema_name, migrate
from app.runs.stores.postgres_thread_index import PostgresThreadIndex
from app.runs.stores.postgres_upkeep import RETENTION_BATCH, expire, import_run
from app.runs.stores.postgres_writer import Many, PostgresWriter

log = structlog.get_logger("finishline.runs")
T = TypeVar("T")

DEFAULT_POOL_SIZE = 10


class PostgresRunStore(QueuedAppends, PostgresSummaries):
    """A `RunStore` in Postgres 13+ (appends: `QueuedAppends`; summaries: `PostgresSummaries`).
    `schema`: where its tables are (`FINISHLINE_PG_SCHEMA`); `pool_size`: the most
    connections it opens, besides the one that listens; `retention_s`: how long a terminal
    run is kept (0: for good)."""

    shared = True  # several processes may serve this store at once

    def __init__(
        self,
        url: str,
        *,
        schema: str = "finishline",
        pool_size: int = DEFAULT_POOL_SIZE,
        retention_s: float = 0.0,
    ) -> None:
        if pool_size < 1:
            raise ValueError(f"FINISHLINE_PG_POOL_SIZE must be at least 1, not {pool_size}")
        self.url = url
        self.schema = check_schema_name(schema)
        self.retention_s = retention_s
        self.channel = f"{schema}_events"
        self.fanout = Fanout()
        self.follower = PostgresFollower(
            url, self.channel, self.read, self._last_seq, lambda: self.fanout
        )
        self.pool = make_pool(url, self.schema, pool_size, self.follower.own)
        self._chunked: dict[str, int] = {}  # the writer's: messages in chunks, per run
        self._writer = PostgresWriter(self.pool.connection, on_abort=self._chunked.clear)
        self._append_many = lambda conn, rows: append_many(conn, rows, self.channel)
        self._create_many = lambda conn, items: create_many(conn, items, self.channel)
        self._save_many = lambda conn, saved: save_many(conn, saved, self._chunked)
        self.counters = PostgresCounters(self.query, self.queue)
        self.threads = PostgresThreadIndex(self.query, self.submit)
        self.schedules = PostgresSchedules(self.query, self.submit)
        self._state = "new"
        self._fences: dict[str, str] = {}
        self.deltas = CheckpointDeltas()  # (`postgres_upkeep` plans with it too)

    # -- fencing ----------------------------------------------------------------------------

    def hold(self, run_id: str, token: str) -> None:
        """From now on, every write of this run from this process names `token`, and is
        refused (`LeaseLostError`) once the run's lease holds another."""
        self._fences[run_id] = token

    def release(self, run_id: str) -> None:
        self._fences.pop(run_id, None)
        self.follower.forget(run_id)
        self.deltas.forget(run_id)
        self._chunked.pop(run_id, None)

    def fence_of(self, run_id: str) -> str:
        return self._fences.get(run_id, "")

    # -- lifecycle --------------------------------------------------------------------------

    async def open(self) -> None:
        if self._state != "new":
            raise StoreError("a PostgresRunStore opens once; make a new one")
        self._state = "open"
        try:
            await self.pool.open(wait=True, timeout=POOL_TIMEOUT_S * 2)
            async with self.pool.connection() as conn:
                await migrate(conn, self.schema)
        except Exception as exc:
            self._state = "closed"
            await self.pool.close()
            if is_outage(exc):
                raise StoreError(cause(exc)) from exc
            raise
        self._writer.start()
        self.follower.start()

    async def close(self) -> None:
        was_open, self._state = self._state == "open", "closed"
        if was_open:
            await self._writer.stop()
            await self.follower.close()
            await self.pool.close()

    async def ping(self) -> None:
        """Postgres answers and takes writes (a read-only standby is not ready)."""
        if self._state != "open":
            raise StoreError("the Postgres store is not open")
        try:
            async with self.pool.connection(timeout=POOL_TIMEOUT_S) as conn:
                cur = await conn.execute(
                    "SELECT pg_is_in_recovery(), current_setting(%s)",
                    ("default_transaction_read_only",),
                )
                row = await cur.fetchone()
        except Exception as exc:
            if is_outage(exc):
                raise StoreError(cause(exc)) from exc
            raise
        if row is not None and (row[0] or row[1] == "on"):
            raise StoreError("Postgres is read-only (a standby, or default_transaction_read_only)")

    # -- runs -------------------------------------------------------------------------------

    async def create(
        self, record: RunRecord, *, first_event: FirstEvent | None = None
    ) -> Event | None:
        if first_event is None:
            await self.submit(insert_run(record), touches=record.id, one_statement=True)
            return None
        type, step, data = first_event
        saved, row = run_row(record), Row(record.id, "", type, time.time(), step, encode(data))
        both = insert_run_with_event(record, saved, type, row.ts, step, row.payload, self.channel)
        # made with the other runs made in the batch (`postgres_appends.create_many`)
        many = (self._create_many, Created(saved, row))
        event: Event = await self.queue(both, self.published, record.id, many, one_statement=True)
        return event

    async def save(self, record: RunRecord) -> None:
        await self.submit(
            upsert_run(record, self.fence_of(record.id), self.channel),
            touches=record.id,
            one_statement=not record.status.terminal,  # a terminal one's summary with it
        )

    async def get(self, run_id: str) -> RunRecord | None:
        rows = await self.query("SELECT id, owner, record FROM runs WHERE id = %s", (run_id,))
        return record_of(rows[0]) if rows else None

    async def find_by_idempotency_key(self, owner: str | None, key: str) -> RunRecord | None:
        sql = "SELECT id, owner, record FROM runs WHERE idempotency_key = %s AND owner "
        sql += "IS NULL" if owner is None else "= %s"
        rows = await self.query(sql, (key,) if owner is None else (key, owner))
        return record_of(rows[0]) if rows else None

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
        where, params = where_matching(owner, any_owner, matching, summaries=False)
        if statuses:
            where.append("status = ANY(%s)")
            params.append([RunStatus(s).value for s in statuses])
        for column, value in (
            ("previous_run_id", previous_run_id),
            ("parent_run_id", parent_run_id),
        ):
            if value is not None:  # (a column name of ours: no injection)
                where.append(f"{column} = %s")
                params.append(value)
        return await paged(self.query, where, params, limit, before_id, unreadable)

    async def delete(self, run_id: str) -> None:
        self.deltas.forget(run_id)
        self.fanout.forget(run_id)
        self.follower.forget(run_id)

        async def delete(conn: psycopg.AsyncConnection[Any]) -> None:
            await delete_runs(conn, "id = %s", (run_id,))
            self._chunked.pop(run_id, None)

        await self.submit(delete)

    async def add_tree_run(self, root_run_id: str, member: str, cap: int) -> bool:
        counted: bool = await self.submit(tree_member(root_run_id, member, cap))
        return counted

    # -- events -----------------------------------------------------------------------------

    async def read(self, run_id: str, *, after: int = 0, limit: int = 1000) -> list[Event]:
        return await self.with_connection(lambda conn: read_events(conn, run_id, after, limit))

    def subscribe(self, run_id: str, *, after: int = 0) -> AsyncIterator[Event]:
        return self.follower.follow(run_id, after)

    def subscribe_batches(self, run_id: str, *, after: int = 0) -> AsyncIterator[list[Event]]:
        return self.follower.follow_batches(run_id, after)

    # -- checkpoints ------------------------------------------------------------------------

    async def save_checkpoint(self, run_id: str, step: int, state: dict[str, Any]) -> None:
        with self.deltas.writing(run_id, state) as write:  # incremental: stores.checkpoints
            await self._queue_checkpoint(run_id, step, write)

    async def save_checkpoint_soon(
        self, run_id: str, step: int, state: dict[str, Any]
    ) -> Awaitable[None]:
        """Queued as `append_soon`: it commits with the run's next events (`checkpoint_upsert`)."""
        self._check_open()
        future = self._queue_checkpoint(run_id, step, self.deltas.plan(run_id, state))
        future.add_done_callback(lambda done: self._forget_if_failed(run_id, done))
        return future

    def _queue_checkpoint(
        self, run_id: str, step: int, write: CheckpointWrite
    ) -> asyncio.Future[None]:
        """Made with the other checkpoints of its batch (`postgres_checkpoints`)."""
        self._check_open()
        saved = Saved(run_id, self.fence_of(run_id), step, write)
        upsert = checkpoint_upsert(run_id, step, write, saved.fence, self._chunked)
        many = (self._save_many, saved)
        return self._writer.submit(upsert, None, many, run_id, one_statement=True)

    def _forget_if_failed(self, run_id: str, done: asyncio.Future[None]) -> None:
        if done.cancelled() or done.exception() is not None:
            self.deltas.forget(run_id)  # the next checkpoint whole

    async def load_checkpoint(self, run_id: str) -> Checkpoint | None:
        return await self.with_connection(lambda conn: checkpoint_of(conn, run_id))

    # -- store copy and retention (`postgres_upkeep`) --------------------------------------

    async def import_run(
        self, record: RunRecord, events: list[Event], checkpoint: Checkpoint | None
    ) -> None:
        """A run copied from another store (`stores.copying`): see `postgres_upkeep`."""
        await import_run(self, record, events, checkpoint)

    async def expire(self, *, batch: int = RETENTION_BATCH) -> int:
        """Delete up to `batch` runs past the retention: see `postgres_upkeep.expire`."""
        return await expire(self, batch)

    # -- plumbing ---------------------------------------------------------------------------

    def published(self, event: Event) -> None:
        self.fanout.publish(event)  # committed: this process's followers have it at once
        self.follower.published(event)
        if event.type in TERMINAL_EVENT_TYPES:  # no checkpoint follows: free its entry
            self._chunked.pop(event.run_id, None)

    def _check_open(self) -> None:
        if self._state != "open":
            what = "closed" if self._state == "closed" else "not open yet: call open() first"
            raise StoreError(f"the Postgres store is {what}")

    async def submit(
        self,
        apply: Write,
        after_commit: Callable[[Any], None] | None = None,
        touches: str = "",
        *,
        one_statement: bool = False,
    ) -> Any:
        """Make the write (behind every write asked before) and return its outcome; `touches`
        and `one_statement`: as `PostgresWriter.submit`'s."""
        return await self.queue(apply, after_commit, touches, one_statement=one_statement)

    def queue(
        self,
        apply: Write,
        after_commit: Callable[[Any], None] | None = None,
        touches: str = "",
        many: tuple[Many, Any] | None = None,
        *,
        one_statement: bool = False,
    ) -> asyncio.Future[Any]:
        """Queue the write (behind every write asked before); what to await for it."""
        self._check_open()
        return self._writer.submit(
            apply, after_commit, many, touches or None, one_statement=one_statement
        )

    async def with_connection(
        self, use: Callable[[psycopg.AsyncConnection[Any]], Awaitable[T]]
    ) -> T:
        """`use` with a pooled connection, given back at once; Postgres away: 503."""
        self._check_open()
        try:
            async with self.pool.connection() as conn:
                return await use(conn)
        except Exception as exc:
            if is_outage(exc):
                raise outage(cause(exc)) from exc
            raise

    async def query(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        async def run(conn: psycopg.AsyncConnection[Any]) -> list[tuple[Any, ...]]:
            cur = await conn.execute(sql, params)
            return await cur.fetchall()

        return await self.with_connection(run)

    async def _last_seq(self, run_id: str) -> int | None:
        rows = await self.query("SELECT last_seq FROM runs WHERE id = %s", (run_id,))
        return int(rows[0][0]) if rows else None
