"""What `PostgresRunStore` does besides serving runs: taking in a run copied from another
store (`finishline store copy`), and retention (`FINISHLINE_RETENTION_S`)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

import psycopg
import structlog

from app.runs.records import Event, RunRecord
from app.runs.store import Checkpoint
from app.runs.stores.checkpoints import CheckpointDeltas
from app.runs.stores.events import encode
from app.runs.stores.postgres_reports import summary_write
from app.runs.stores.postgres_rows import Write, checkpoint_upsert, delete_runs, insert_run


class _Store(Protocol):
    """What of `PostgresRunStore` these need."""

    retention_s: float
    channel: str

    @property
    def deltas(self) -> CheckpointDeltas: ...

    async def submit(self, apply: Write) -> Any: ...

    async def with_connection(
        self, use: Callable[[psycopg.AsyncConnection[Any]], Awaitable[T]]
    ) -> T: ...


log = structlog.get_logger("finishline.runs")
T = TypeVar("T")

RETENTION_BATCH = 500
"""Runs one retention pass deletes at most, in one transaction (short locks, small WAL)."""


async def _in_transaction(
    conn: psycopg.AsyncConnection[Any], use: Callable[[psycopg.AsyncConnection[Any]], Awaitable[T]]
) -> T:
    async with conn.transaction():
        return await use(conn)


async def import_run(
    store: _Store, record: RunRecord, events: list[Event], checkpoint: Checkpoint | None
) -> None:
    """A run copied from another store (`stores.copying`), in one transaction: its row,
    its events as they were (seq and timestamps kept), its checkpoint, an ended run's
    summary (`postgres_reports`)."""
    insert = insert_run(record)
    rows = [(record.id, e.seq, e.type, e.ts, e.step, encode(e.data)) for e in events]
    last = events[-1].seq if events else 0
    summary = summary_write(record) if record.status.terminal else None

    def write(saved: Write | None) -> Write:
        async def copy(conn: psycopg.AsyncConnection[Any]) -> None:
            await insert(conn)
            sql = "UPDATE runs SET last_seq = %s WHERE id = %s"
            await conn.execute(sql, (last, record.id))
            async with conn.cursor() as cur:
                await cur.executemany(
                    "INSERT INTO events (run_id, seq, type, ts, step, data)"
                    " VALUES (%s, %s, %s, %s, %s, %s)",
                    rows,
                )
            if saved is not None:
                await saved(conn)
            if summary is not None:  # an ended run is in reports at once (its events are in)
                await summary(conn)

        return copy

    if checkpoint is None:
        await store.submit(write(None))
        return
    with store.deltas.writing(record.id, checkpoint.state) as delta:  # (whole: start 0)
        saved = checkpoint_upsert(record.id, checkpoint.step, delta, "", {})
        await store.submit(write(saved))


async def expire(store: _Store, batch: int = RETENTION_BATCH) -> int:
    """Delete up to `batch` runs that ended more than `retention_s` ago (their events,
    checkpoints and trees go with them), in one transaction; one replica at a time (the
    others find the advisory lock taken and delete nothing). How many were deleted."""
    if not store.retention_s:
        return 0

    async def expire(conn: psycopg.AsyncConnection[Any]) -> int:
        cur = await conn.execute(
            "SELECT pg_try_advisory_xact_lock(hashtext(%s))", (store.channel + ":retention",)
        )
        row = await cur.fetchone()
        if row is None or not row[0]:
            return 0
        where = "id IN (SELECT id FROM runs WHERE ended_at < %s ORDER BY ended_at LIMIT %s"
        where += " FOR UPDATE SKIP LOCKED)"
        return len(await delete_runs(conn, where, (time.time() - store.retention_s, batch)))

    deleted: int = await store.with_connection(lambda conn: _in_transaction(conn, expire))
    if deleted:
        log.info("runs_expired", count=deleted, retention_s=store.retention_s)
    return deleted
