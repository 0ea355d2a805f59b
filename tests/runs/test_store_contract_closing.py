"""The `RunStore` contract of a run's closing write (`append_closing`, issue #42), against every
store: queued behind the run's writes, it stores the terminal record with its event after
them; on a store whose writes are queued (SQLite, Postgres) it is refused, nothing written,
when a queued write failed after the run's pending writes began."""

from __future__ import annotations

import sqlite3
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest

from app.runs.records import RunRecord, RunStatus
from app.runs.store import WritesFailedError
from app.runs.stores.postgres import PostgresRunStore
from app.runs.stores.sqlite import SqliteRunStore
from tests.runs.test_store_contract import BOUND_S, Store, created, reopenable, store

__all__ = ["reopenable", "store"]  # the fixtures, every store's


def ended(run: RunRecord) -> RunRecord:
    run.status = RunStatus.COMPLETED
    run.ended_at = datetime.now(UTC)
    return run


async def test_a_closing_write_stores_the_terminal_record_and_event_after_the_runs_writes(
    store: Store,
) -> None:
    run = await created(store)
    failures = store.write_failures()
    queued = [await store.append_soon(run.id, "thought", 1, {"n": n}) for n in range(3)]
    closing = await store.append_closing(
        run.id, "run.completed", 1, {"answer": "42"}, record=ended(run), failures=failures
    )
    with anyio.fail_after(BOUND_S):
        for outcome in queued:
            await outcome
        last = await closing
    assert (last.seq, last.type) == (4, "run.completed")
    assert [e.type for e in await store.read(run.id)] == ["thought"] * 3 + ["run.completed"]
    assert await store.get(run.id) == run


async def _refused_after_a_failed_write(
    store: SqliteRunStore | PostgresRunStore, run: RunRecord, release: threading.Event | None
) -> None:
    """Queue a thought of `run`, a write that fails, and the closing write (then `release`
    the held writer, if any): the closing write is refused, and nothing of it stored."""
    failures = store.write_failures()
    thought = await store.append_soon(run.id, "thought", 1, {})
    failing = store._writer.submit(_failing_sqlite if isinstance(store, SqliteRunStore) else _pg)
    closing = await store.append_closing(
        run.id, "run.completed", 1, {}, record=ended(run.model_copy()), failures=failures
    )
    if release is not None:
        release.set()
    with anyio.fail_after(BOUND_S):
        await thought
        with pytest.raises(OSError, match="disk I/O error"):
            await failing
        with pytest.raises(WritesFailedError):
            await closing
    assert [e.type for e in await store.read(run.id)] == ["thought"]
    assert (await store.get(run.id)).status is RunStatus.QUEUED  # type: ignore[union-attr]
    assert store.write_failures() == failures + 1  # a refusal is not counted as a failure


def _failing_sqlite(conn: sqlite3.Connection) -> None:
    raise OSError("disk I/O error")


async def _pg(conn: psycopg.AsyncConnection[Any]) -> None:
    raise OSError("disk I/O error")


async def test_sqlite_refuses_a_closing_write_made_in_the_transaction_of_a_failed_write(
    tmp_path: Path,
) -> None:
    """The failed write and the closing write in one batch: the failure is known in the
    transaction (the writer's savepoints), and the closing write is not made."""
    sqlite = SqliteRunStore(str(tmp_path / "r.db"))
    await sqlite.open()
    try:
        entered, gate = threading.Event(), threading.Event()

        def hold(conn: sqlite3.Connection) -> bool:
            entered.set()
            return gate.wait(BOUND_S)

        run = await created(sqlite)
        held = sqlite._writer.submit(hold)  # alone in its batch: the next writes queue up
        assert await anyio.to_thread.run_sync(entered.wait, BOUND_S)
        commits = sqlite.commits
        await _refused_after_a_failed_write(sqlite, run, gate)
        assert await held is True
        assert sqlite.commits - commits == 2  # the held batch, then all the others in one
    finally:
        await sqlite.close()


async def test_postgres_refuses_a_closing_write_behind_a_failed_write(postgres_url: str) -> None:
    store = PostgresRunStore(postgres_url)
    await store.open()
    try:
        await _refused_after_a_failed_write(store, await created(store), None)
    finally:
        await store.close()


async def test_sqlite_makes_the_closing_write_in_the_commit_of_the_runs_last_writes(
    tmp_path: Path,
) -> None:
    sqlite = SqliteRunStore(str(tmp_path / "r.db"))
    await sqlite.open()
    try:
        run = await created(sqlite)
        entered, gate = threading.Event(), threading.Event()

        def hold(conn: sqlite3.Connection) -> bool:
            entered.set()
            return gate.wait(BOUND_S)

        held = sqlite._writer.submit(hold)
        assert await anyio.to_thread.run_sync(entered.wait, BOUND_S)
        commits = sqlite.commits
        failures = sqlite.write_failures()
        thought = await sqlite.append_soon(run.id, "thought", 1, {})
        closing = await sqlite.append_closing(
            run.id, "run.completed", 1, {}, record=ended(run), failures=failures
        )
        gate.set()
        with anyio.fail_after(BOUND_S):
            assert await held is True
            await thought
            assert (await closing).seq == 2
        assert sqlite.commits - commits == 2  # the held batch; the thought with the end
    finally:
        await sqlite.close()


async def test_postgres_makes_the_closing_write_in_the_commit_of_the_runs_last_writes(
    postgres_url: str,
) -> None:
    store = PostgresRunStore(postgres_url)
    await store.open()
    try:
        run = await created(store)
        commits = store._writer.commits
        failures = store.write_failures()
        thought = await store.append_soon(run.id, "thought", 1, {})  # queued together
        closing = await store.append_closing(
            run.id, "run.completed", 1, {}, record=ended(run), failures=failures
        )
        with anyio.fail_after(BOUND_S):
            await thought
            assert (await closing).seq == 2
        assert store._writer.commits - commits == 1  # the thought with the end
        assert await store.get(run.id) == run
    finally:
        await store.close()
