"""The `RunStore` contract of queued writes (issue #42), against every store: a checkpoint
queued with `save_checkpoint_soon` keeps its place among the run's writes and reads back
whole, and `append_soon(..., record=)` stores the record with its event, as `append` does."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest

from app.runs.errors import StoreUnavailableError
from app.runs.records import RunStatus
from app.runs.store import Checkpoint
from app.runs.stores.postgres import PostgresRunStore
from app.runs.stores.sqlite import SqliteRunStore
from tests.runs.test_store_contract import (
    BOUND_S,
    Store,
    conversation,
    created,
    reopenable,
    store,
)

__all__ = ["reopenable", "store"]  # the fixtures, every store's


async def test_a_checkpoint_saved_soon_reads_back_once_its_outcome_is_awaited(
    store: Store,
) -> None:
    run = await created(store)
    live = conversation(2)
    state = {"messages": list(live), "step": 1}
    outcome = await store.save_checkpoint_soon(run.id, 1, state)
    live.append({"role": "assistant", "content": "later"})  # the run goes on meanwhile
    with anyio.fail_after(BOUND_S):
        assert await outcome is None
    assert await store.load_checkpoint(run.id) == Checkpoint(1, {"messages": live[:2], "step": 1})


async def test_a_checkpoint_saved_soon_is_stored_before_every_later_write_of_the_run(
    store: Store,
) -> None:
    run = await created(store)
    live = conversation(1)
    queued = []
    for step in range(1, 5):  # as a run does: events and checkpoints queued, nothing awaited
        live.append({"role": "assistant", "content": f"step {step}"})
        queued.append(await store.append_soon(run.id, "llm.call", step, {"n": step}))
        queued.append(await store.save_checkpoint_soon(run.id, step, {"messages": list(live)}))
    last = await store.append(run.id, "observation", 5, {})  # awaited: behind all of them
    assert last.seq == 5
    assert await store.load_checkpoint(run.id) == Checkpoint(4, {"messages": live})
    with anyio.fail_after(BOUND_S):
        for outcome in queued:
            await outcome


async def test_append_soon_with_the_record_saves_it_with_the_event(store: Store) -> None:
    run = await created(store)
    run.status = RunStatus.RUNNING
    run.started_at = datetime.now(UTC)
    outcome = await store.append_soon(run.id, "run.started", 0, {}, record=run)
    with anyio.fail_after(BOUND_S):
        started = await outcome
    assert started.seq == 1
    assert await store.get(run.id) == run
    assert await store.read(run.id) == [started]


async def test_after_a_queued_checkpoint_failed_the_next_one_reads_back_whole(
    tmp_path: Path,
) -> None:
    """SQLite: a delta queued behind a checkpoint whose transaction failed is written whole
    (memory and Redis write at once: a failure is known before the next checkpoint)."""
    sqlite = SqliteRunStore(str(tmp_path / "r.db"))
    await sqlite.open()
    try:
        run = await created(sqlite)
        live = conversation(2)
        await sqlite.save_checkpoint(run.id, 1, {"messages": list(live)})
        entered, gate = threading.Event(), threading.Event()

        def hold(conn: sqlite3.Connection) -> bool:
            entered.set()
            return gate.wait(BOUND_S)

        held = sqlite._writer.submit(hold)  # the writer waits in it, alone in its batch
        assert await anyio.to_thread.run_sync(entered.wait, BOUND_S)
        breaking = sqlite._writer.submit(_end_the_transaction)  # one batch with the next
        live.append({"role": "assistant", "content": "lost"})
        lost = await sqlite.save_checkpoint_soon(run.id, 2, {"messages": list(live)})
        gate.set()
        with anyio.fail_after(BOUND_S):
            assert await held is True
            for outcome in (breaking, lost):
                with pytest.raises(sqlite3.OperationalError):
                    await outcome
        live.append({"role": "assistant", "content": "next"})
        with anyio.fail_after(BOUND_S):  # a delta on the lost chunk, unless written whole
            await (await sqlite.save_checkpoint_soon(run.id, 3, {"messages": list(live)}))
        assert await sqlite.load_checkpoint(run.id) == Checkpoint(3, {"messages": live})
    finally:
        await sqlite.close()


def _end_the_transaction(conn: sqlite3.Connection) -> None:
    """A write that ends its batch's transaction: the batch fails whole, as on a full disk."""
    conn.execute("ROLLBACK")


async def test_a_delta_planned_on_a_checkpoint_whose_transaction_then_died_is_written_whole(
    postgres_url: str,
) -> None:
    """Postgres: the next checkpoint is planned as a delta on one whose batch is in flight;
    that batch's connection then dies (its outcome unknown, the batch failed whole): the
    delta is written whole, not on the chunk that was never committed."""
    store = PostgresRunStore(postgres_url)
    await store.open()
    try:
        run = await created(store)
        live = conversation(2)
        await store.save_checkpoint(run.id, 1, {"messages": list(live)})
        busy, free = _gate()
        held = store._writer.submit(busy.hold)  # the writer waits in it, alone in its batch
        with anyio.fail_after(BOUND_S):
            await busy.entered.wait()
        live.append({"role": "assistant", "content": "lost"})
        lost = await store.save_checkpoint_soon(run.id, 2, {"messages": list(live)})
        dying, die = _gate()
        doomed = store._writer.submit(dying.hold_then_die)  # the next batch: [lost, this]
        free.set()
        with anyio.fail_after(BOUND_S):
            await held
            await dying.entered.wait()  # `lost` is written, not committed
        live.append({"role": "assistant", "content": "next"})
        after = await store.save_checkpoint_soon(run.id, 3, {"messages": list(live)})
        die.set()
        with anyio.fail_after(BOUND_S):
            for outcome in (lost, doomed):
                with pytest.raises(StoreUnavailableError):
                    await outcome
            await after  # a delta on the lost chunk, unless written whole
        assert await store.load_checkpoint(run.id) == Checkpoint(3, {"messages": live})
    finally:
        await store.close()


class _Gated:
    def __init__(self, gate: asyncio.Event) -> None:
        self.entered, self._gate = asyncio.Event(), gate

    async def hold(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self.entered.set()
        await self._gate.wait()

    async def hold_then_die(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Then its connection dies under it, as when Postgres restarts mid-batch."""
        await self.hold(conn)
        await conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")


def _gate() -> tuple[_Gated, asyncio.Event]:
    gate = asyncio.Event()
    return _Gated(gate), gate
