"""What only the SQLite store promises: durability across restarts, group commit, one writer."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, cast

import anyio
import pytest
from anyio.lowlevel import checkpoint

from app.runs.backends import open_store
from app.runs.records import Event, RunRecord, RunStatus, new_run_id
from app.runs.store import CHECKPOINT_FORMAT, Checkpoint, DayUsage, DuplicateRunError, StoreError
from app.runs.stores.fanout import Fanout
from app.runs.stores.sqlite import QUEUE_LIMIT, SqliteRunStore, StoreClosedError
from app.runs.stores.sqlite_schema import SCHEMA_VERSION

BOUND_S = 10


@pytest.fixture
def path(tmp_path: Path) -> str:
    return str(tmp_path / "runs.db")


@contextlib.asynccontextmanager
async def opened(path: str, **options: Any) -> AsyncIterator[SqliteRunStore]:
    store = SqliteRunStore(path, **options)
    await store.open()
    try:
        yield store
    finally:
        await store.close()


@contextlib.contextmanager
def write_lock(path: str) -> Iterator[Callable[[], None]]:
    """Hold SQLite's write lock from another connection, so that the writer thread waits at
    BEGIN and writes pile up in its queue; call the yielded function to let go."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")

    def release() -> None:
        if conn.in_transaction:
            conn.execute("ROLLBACK")

    try:
        yield release
    finally:
        release()
        conn.close()


async def pending(store: SqliteRunStore, count: int) -> None:
    """Until `count` writes are queued and unacknowledged."""
    while store.pending_writes < count:
        await checkpoint()


def has_wal(path: str) -> bool:
    return Path(path + "-wal").exists()


def record(**fields: object) -> RunRecord:
    return RunRecord.model_validate(
        {"id": new_run_id(), "request": {"task": "t"}, "model": "m", "settings": {}, **fields}
    )


async def test_runs_events_and_checkpoints_survive_a_restart_and_seq_continues(
    path: str,
) -> None:
    run = record(owner="alice", idempotency_key="k", status=RunStatus.RUNNING)
    async with opened(path) as store:
        await store.create(run)
        events = [await store.append(run.id, "thought", i, {"i": i}) for i in range(3)]
        await store.save_checkpoint(run.id, 3, {"messages": ["m"]})

    async with opened(path) as store:
        assert await store.get(run.id) == run
        assert await store.find_by_idempotency_key("alice", "k") == run
        assert await store.list_runs(owner="alice") == [run]
        assert await store.read(run.id) == events
        assert await store.load_checkpoint(run.id) == Checkpoint(3, {"messages": ["m"]})
        assert (await store.append(run.id, "thought", 4, {})).seq == 4
        with pytest.raises(DuplicateRunError):
            await store.create(record(owner="alice", idempotency_key="k"))


async def test_numbering_continues_after_a_terminal_event(path: str) -> None:
    run = record()
    async with opened(path) as store:
        await store.create(run)
        await store.append(run.id, "run.completed", 1, {})
        assert (await store.append(run.id, "thought", 1, {})).seq == 2


async def test_concurrent_appends_to_one_run_get_contiguous_seqs(path: str) -> None:
    run = record()
    async with opened(path) as store:
        await store.create(run)
        seqs: list[int] = []

        async def append(i: int) -> None:
            seqs.append((await store.append(run.id, "thought", 1, {"i": i})).seq)

        with anyio.fail_after(BOUND_S):
            async with anyio.create_task_group() as tg:
                for i in range(200):
                    tg.start_soon(append, i)
        assert sorted(seqs) == list(range(1, 201))
        assert [e.seq for e in await store.read(run.id)] == list(range(1, 201))


async def test_writes_queued_together_share_one_commit(path: str) -> None:
    runs = [record() for _ in range(10)]
    async with opened(path) as store:
        for run in runs:
            await store.create(run)
        before = store.commits
        with anyio.fail_after(BOUND_S), write_lock(path) as release:
            async with anyio.create_task_group() as tg:
                for i in range(200):
                    tg.start_soon(store.append, runs[i % 10].id, "thought", 1, {"i": i})
                await pending(store, 200)
                release()
        assert store.commits - before <= 2  # the writer took one, or all, before it waited
        for run in runs:
            assert [e.seq for e in await store.read(run.id)] == list(range(1, 21))


async def test_append_soon_queues_until_the_writer_is_queue_limit_behind_then_waits(
    path: str,
) -> None:
    run = record()
    async with opened(path) as store:
        await store.create(run)
        with anyio.fail_after(BOUND_S), write_lock(path) as release:
            queued = [
                await store.append_soon(run.id, "thought", 1, {"i": i}) for i in range(QUEUE_LIMIT)
            ]
            assert not any(cast(asyncio.Future[Event], f).done() for f in queued)
            asyncio.get_running_loop().call_soon(release)  # runs once the next call waits
            last = await store.append_soon(run.id, "thought", 1, {"i": QUEUE_LIMIT})
            assert cast(asyncio.Future[Event], last).done()  # it waited for its commit
        assert [e.seq for e in await store.read(run.id)] == list(range(1, QUEUE_LIMIT + 2))


async def test_a_failing_write_fails_alone_and_its_batch_commits(path: str) -> None:
    run = record()
    async with opened(path) as store:
        await store.create(run)
        before = store.commits
        outcomes: dict[str, object] = {}

        async def attempt(name: str, write: Callable[[], Awaitable[object]]) -> None:
            try:
                outcomes[name] = await write()
            except Exception as exc:
                outcomes[name] = exc

        with anyio.fail_after(BOUND_S), write_lock(path) as release:
            async with anyio.create_task_group() as tg:
                tg.start_soon(attempt, "first", lambda: store.append(run.id, "thought", 1, {}))
                tg.start_soon(attempt, "duplicate", lambda: store.create(run))
                tg.start_soon(attempt, "orphan", lambda: store.append("nope", "thought", 1, {}))
                tg.start_soon(attempt, "second", lambda: store.append(run.id, "thought", 2, {}))
                await pending(store, 4)
                release()
        assert isinstance(outcomes["duplicate"], DuplicateRunError)
        assert isinstance(outcomes["orphan"], KeyError)
        assert [e.seq for e in await store.read(run.id)] == [1, 2]
        assert outcomes["second"] == (await store.read(run.id))[1]
        assert store.commits - before <= 2


async def test_a_failing_write_alone_in_its_transaction_leaves_nothing_behind(path: str) -> None:
    run = record()
    async with opened(path) as store:
        await store.create(run)
        with anyio.fail_after(BOUND_S):
            first = await store.append(run.id, "thought", 1, {})
            with pytest.raises(DuplicateRunError):
                await store.create(run)
            with pytest.raises(KeyError):
                await store.append("nope", "thought", 1, {})
            second = await store.append(run.id, "thought", 2, {})
        assert await store.read(run.id) == [first, second]
        assert second.seq == 2
        assert await store.get("nope") is None


async def test_subscribers_see_an_event_only_once_it_is_committed(path: str) -> None:
    seen_in_file: list[bool] = []

    class CheckingFanout(Fanout):
        def publish(self, event: Event) -> None:
            with contextlib.closing(sqlite3.connect(path)) as conn:
                row = conn.execute(
                    "SELECT 1 FROM events WHERE run_id = ? AND seq = ?", (event.run_id, event.seq)
                ).fetchone()
            seen_in_file.append(row is not None)
            super().publish(event)

    run = record()
    async with opened(path) as store:
        store.fanout = CheckingFanout()
        await store.create(run)
        with anyio.fail_after(BOUND_S):
            async with anyio.create_task_group() as tg:
                for i in range(20):
                    tg.start_soon(store.append, run.id, "thought", 1, {"i": i})
    assert seen_in_file == [True] * 20


async def test_close_completes_the_writes_still_queued(path: str) -> None:
    run = record()
    store = SqliteRunStore(path)
    await store.open()
    await store.create(run)
    appended: list[Event] = []

    async def append(i: int) -> None:
        appended.append(await store.append(run.id, "thought", 1, {"i": i}))

    async def closing() -> None:
        while True:  # until close() has begun
            try:
                await store.ping()
            except StoreClosedError:
                return

    with anyio.fail_after(BOUND_S), write_lock(path) as release:
        async with anyio.create_task_group() as tg:
            for i in range(50):
                tg.start_soon(append, i)
            await pending(store, 50)
            tg.start_soon(store.close)
            await closing()
            release()
    assert len(appended) == 50
    assert store.pending_writes == 0
    async with opened(path) as reopened:
        assert [e.seq for e in await reopened.read(run.id)] == list(range(1, 51))


async def test_calls_before_open_or_after_close_raise_store_closed_error(path: str) -> None:
    store = SqliteRunStore(path)
    with pytest.raises(StoreClosedError, match="not open"):
        await store.get("run_x")
    await store.open()
    await store.close()
    await store.close()  # twice is fine
    with pytest.raises(StoreClosedError, match="closed"):
        await store.append("run_x", "thought", 1, {})
    with pytest.raises(StoreClosedError):
        await store.ping()
    with pytest.raises(StoreClosedError):
        await anext(store.subscribe("run_x"))


async def test_reads_are_served_while_another_connection_holds_the_write_lock(path: str) -> None:
    run = record()
    async with opened(path) as store:
        await store.create(run)
        with anyio.fail_after(BOUND_S), write_lock(path):
            assert await store.get(run.id) == run


async def test_saving_a_run_keeps_its_events(path: str) -> None:
    run = record()
    async with opened(path) as store:
        await store.create(run)
        await store.append(run.id, "run.queued", 0, {})
        run.status = RunStatus.RUNNING
        await store.save(run)
        assert len(await store.read(run.id)) == 1


async def test_open_creates_the_parent_directory_of_the_default_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    store = open_store("sqlite:///./data/finishline.db")
    assert isinstance(store, SqliteRunStore)
    await store.open()
    await store.close()
    assert (tmp_path / "data" / "finishline.db").is_file()


async def test_the_file_is_in_wal_mode_with_the_schema_version_recorded(path: str) -> None:
    async with opened(path, synchronous="normal"):
        pass
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)


async def test_a_database_from_a_newer_version_is_refused(path: str) -> None:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA user_version = 99")
    store = SqliteRunStore(path)
    with pytest.raises(StoreError, match="newer"):
        await store.open()
    await store.close()


def test_an_unknown_synchronous_mode_is_refused(path: str) -> None:
    with pytest.raises(ValueError, match="synchronous"):
        SqliteRunStore(path, synchronous="FULL; DROP TABLE runs")


async def test_close_closes_every_connection(path: str) -> None:
    run = record()
    async with opened(path, readers=4) as store:
        await store.create(run)
        with anyio.fail_after(BOUND_S):
            async with anyio.create_task_group() as tg:
                for _ in range(20):  # reads on several reader threads
                    tg.start_soon(store.get, run.id)
        assert has_wal(path)
    assert not has_wal(path)  # SQLite removes the WAL when the last connection closes


async def test_a_version_1_database_is_migrated_on_open_and_keeps_its_runs(path: str) -> None:
    from app.runs.stores.sqlite_schema import MIGRATIONS

    old = record()
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.executescript(MIGRATIONS[0])
        conn.execute(
            "INSERT INTO runs (id, owner, status, idempotency_key, created_at, record) "
            "VALUES (?, NULL, 'queued', NULL, ?, ?)",
            (old.id, old.created_at.isoformat(), old.model_dump_json()),
        )
        conn.execute("PRAGMA user_version = 1")
        conn.commit()

    async with opened(path) as store:
        assert await store.get(old.id) == old
        follow_up = record(previous_run_id=old.id)
        await store.create(follow_up)
        assert await store.list_runs(owner=None, previous_run_id=old.id) == [follow_up]
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)


async def test_a_version_5_database_gets_the_quota_counters_and_counts_its_runs(
    path: str,
) -> None:
    from app.runs.stores.sqlite_schema import MIGRATIONS

    waiting = record(owner="k", status="requires_action")
    with contextlib.closing(sqlite3.connect(path)) as conn:
        for script in MIGRATIONS[:5]:
            conn.executescript(script)
        conn.execute(
            "INSERT INTO runs (id, owner, status, idempotency_key, created_at, record) "
            "VALUES (?, 'k', 'requires_action', NULL, ?, ?)",
            (waiting.id, waiting.created_at.isoformat(), waiting.model_dump_json()),
        )
        conn.execute("PRAGMA user_version = 5")
        conn.commit()

    async with opened(path) as store:
        assert await store.counters.active_runs("k") == 1  # made before quotas: counted
        await (await store.counters.add_usage("k", "2026-03-14", DayUsage(runs=1)))
        assert await store.counters.day_usage("k", "2026-03-14") == DayUsage(runs=1)
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)


async def test_an_append_with_a_record_is_one_commit_and_writes_neither_if_the_save_fails(
    path: str,
) -> None:
    first = record(owner="alice", idempotency_key="k1")
    second = record(owner="alice", idempotency_key="k2")
    async with opened(path) as store:
        await store.create(first)
        await store.create(second)
        commits = store.commits
        first.status = RunStatus.RUNNING
        await store.append(first.id, "run.started", 0, {}, record=first)
        assert store.commits == commits + 1
        assert await store.get(first.id) == first

        second.idempotency_key = "k1"  # taken: the save fails, and so does the append
        with pytest.raises(DuplicateRunError):
            await store.append(second.id, "run.started", 0, {}, record=second)
        assert await store.read(second.id) == []
        stored = await store.get(second.id)
        assert stored is not None
        assert stored.idempotency_key == "k2"
        assert (await store.append(second.id, "thought", 0, {})).seq == 1


async def test_a_checkpoint_stored_whole_by_an_older_version_loads_and_is_replaced(
    path: str,
) -> None:
    run = record()
    old = {"messages": [{"role": "user", "content": "hi"}], "step": 2}
    async with opened(path) as store:
        await store.create(run)
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:  # as schema version 2 did
        conn.execute(
            "INSERT INTO checkpoints (run_id, step, state) VALUES (?, ?, ?)",
            (run.id, 2, json.dumps(old)),
        )
    async with opened(path) as store:
        loaded = await store.load_checkpoint(run.id)
        assert loaded == Checkpoint(2, old, version=1)  # the layout before chunks
        assert loaded is not None
        messages = loaded.state["messages"]
        messages.append({"role": "assistant", "content": "on"})
        await store.save_checkpoint(run.id, 3, {"messages": list(messages), "step": 3})
        assert await store.load_checkpoint(run.id) == Checkpoint(
            3, {"messages": messages, "step": 3}, version=CHECKPOINT_FORMAT
        )


async def test_a_chunked_checkpoint_stored_before_layouts_were_named_loads(path: str) -> None:
    """A checkpoint written by schema 3 (chunks, no `version`) is told by its count."""
    run = record()
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "on"}]
    async with opened(path) as store:
        await store.create(run)
        await store.save_checkpoint(run.id, 2, {"messages": list(messages), "step": 2})
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("UPDATE checkpoints SET version = NULL WHERE run_id = ?", (run.id,))
    async with opened(path) as store:
        assert await store.load_checkpoint(run.id) == Checkpoint(
            2, {"messages": messages, "step": 2}, version=2
        )


async def test_a_checkpoint_in_a_newer_layout_is_refused_by_name(path: str) -> None:
    run = record()
    async with opened(path) as store:
        await store.create(run)
        await store.save_checkpoint(run.id, 1, {"messages": []})
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("UPDATE checkpoints SET version = ? WHERE run_id = ?", (99, run.id))
    async with opened(path) as store:
        with pytest.raises(StoreError, match="checkpoint format 99 is newer"):
            await store.load_checkpoint(run.id)
