"""A run's deletion on Postgres leaves none of its rows (schema 4: no foreign keys from its
events and checkpoint to `runs`, `postgres_rows.delete_runs`). Every write of a run's events
or checkpoint goes through the run's row, locked until it commits; the deletion deletes that
row first, so it waits for such a write in flight, and then deletes what it wrote."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest

from app.runs.records import RunStatus
from app.runs.stores.postgres import PostgresRunStore
from app.runs.stores.postgres_rows import APPEND, checkpoint_sql
from tests.runs.test_store_contract import record

TIMEOUT_S = 10.0


@pytest.fixture
async def store(postgres_url: str) -> AsyncIterator[PostgresRunStore]:
    store = PostgresRunStore(postgres_url)
    await store.open()
    yield store
    await store.close()


async def rows_of(store: PostgresRunStore, run_id: str) -> dict[str, int]:
    counts = {}
    for table in ("runs", "events", "checkpoints", "checkpoint_chunks"):
        column = "id" if table == "runs" else "run_id"
        sql = f"SELECT count(*) FROM {table} WHERE {column} = %s"
        counts[table] = (await store.query(sql, (run_id,)))[0][0]
    return counts


async def blocked(store: PostgresRunStore) -> None:
    """Until a statement of the store's waits for a lock."""
    deadline = time.monotonic() + TIMEOUT_S
    sql = "SELECT count(*) FROM pg_stat_activity"
    sql += " WHERE datname = current_database() AND wait_event_type = 'Lock'"
    while (await store.query(sql, ()))[0][0] == 0:
        assert time.monotonic() < deadline, f"no statement waited within {TIMEOUT_S} s"
        await asyncio.sleep(0.01)


WRITES: dict[str, tuple[str, Any]] = {
    "events": (APPEND, lambda run_id: (run_id, "", "", "thought", 1.0, 1, "{}", "c")),
    "a checkpoint": (
        checkpoint_sql(fenced=False, whole=True, chunk=True),
        lambda run_id: {
            "run_id": run_id,
            "step": 1,
            "state": "{}",
            "version": 1,
            "start": 0,
            "chunk": "[]",
        },
    ),
}


@pytest.mark.parametrize("written", list(WRITES))
async def test_a_deletion_waits_for_a_write_in_flight_and_leaves_none_of_its_rows(
    store: PostgresRunStore, postgres_url: str, written: str
) -> None:
    run = record()
    await store.create(run)
    await store.append(run.id, "run.queued", 0, {})
    sql, params = WRITES[written]  # rows of its own (no row of the run's it would lock)
    async with await psycopg.AsyncConnection.connect(postgres_url) as other:
        await other.execute("SET search_path TO finishline")
        await other.execute(sql, params(run.id))  # in a transaction, not committed yet
        deleting = asyncio.create_task(store.delete(run.id))
        await blocked(store)
        assert not deleting.done()
        await other.commit()
    await asyncio.wait_for(deleting, TIMEOUT_S)
    assert await rows_of(store, run.id) == {
        "runs": 0, "events": 0, "checkpoints": 0, "checkpoint_chunks": 0
    }  # fmt: skip


async def test_retention_leaves_none_of_a_runs_rows(postgres_url: str) -> None:
    store = PostgresRunStore(postgres_url, retention_s=60)
    await store.open()
    try:
        await expired(store)
    finally:
        await store.close()


async def expired(store: PostgresRunStore) -> None:
    run = record()
    await store.create(run)
    await store.append(run.id, "thought", 1, {"n": 1})
    await store.save_checkpoint(run.id, 1, {"messages": [{"role": "user", "content": "t"}]})
    ended = run.model_copy(update={"status": RunStatus.COMPLETED})
    await store.save(ended)
    await store.query("UPDATE runs SET ended_at = 0 WHERE id = %s RETURNING 1", (run.id,))
    assert (await rows_of(store, run.id))["checkpoint_chunks"] == 1
    assert await store.expire() == 1
    assert await rows_of(store, run.id) == {
        "runs": 0, "events": 0, "checkpoints": 0, "checkpoint_chunks": 0
    }  # fmt: skip
