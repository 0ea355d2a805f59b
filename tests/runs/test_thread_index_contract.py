"""The `ThreadIndex` contract (DESIGN §19), run against every store's: what the `Threads`
part relies on, whichever store a deployment picks. A new store (Postgres) runs this suite
before anything else. Then what each store keeps of the heads it kept before threads were a
resource: they still resolve, as threads of one run."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.runs.records import RunRecord, new_run_id
from app.runs.stores.memory import MemoryRunStore
from app.runs.stores.postgres import PostgresRunStore
from app.runs.stores.redis_store import RedisRunStore
from app.runs.stores.sqlite import SqliteRunStore
from app.runs.stores.sqlite_schema import MIGRATIONS
from app.runs.threads.index import ThreadIndex

Store = MemoryRunStore | SqliteRunStore | RedisRunStore | PostgresRunStore


@pytest.fixture(params=["memory", "sqlite", "redis", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    made: Store
    if request.param == "memory":
        made = MemoryRunStore()
    elif request.param == "sqlite":
        made = SqliteRunStore(str(tmp_path / "r.db"))
    elif request.param == "postgres":
        made = PostgresRunStore(request.getfixturevalue("postgres_url"))
    else:
        made = RedisRunStore(request.getfixturevalue("redis_url"))
    await made.open()
    try:
        yield made
    finally:
        await made.close()


def index(store: Store) -> ThreadIndex:
    threads: ThreadIndex = store.threads  # each satisfies the port
    return threads


async def test_the_first_advance_makes_the_thread_and_each_next_one_moves_its_head(
    store: Store,
) -> None:
    threads = index(store)
    assert await threads.thread("alice", "t") is None
    assert await threads.advance("alice", "t", expected=None, run_id="run_a", at=100.0)
    assert await threads.advance("alice", "t", expected="run_a", run_id="run_b", at=105.5)
    found = await threads.thread("alice", "t")
    assert found is not None
    assert (found.thread_id, found.owner, found.head) == ("t", "alice", "run_b")
    assert (found.created_at, found.updated_at, found.runs) == (100.0, 105.5, 2)
    assert found.metadata == {}
    assert await threads.thread_runs("alice", "t") == ["run_a", "run_b"]
    assert await threads.thread_runs("alice", "t", start=1, limit=5) == ["run_b"]
    assert await threads.thread_runs("alice", "t", start=0, limit=1) == ["run_a"]
    assert await threads.thread_runs("alice", "none") == []


async def test_an_advance_from_a_head_the_thread_is_not_at_changes_nothing(store: Store) -> None:
    threads = index(store)
    assert not await threads.advance("alice", "t", expected="run_x", run_id="run_a", at=1.0)
    assert await threads.thread("alice", "t") is None  # no thread made from a stale head
    assert await threads.advance("alice", "t", expected=None, run_id="run_a", at=1.0)
    assert not await threads.advance("alice", "t", expected=None, run_id="run_b", at=2.0)
    assert not await threads.advance("alice", "t", expected="run_x", run_id="run_b", at=2.0)
    found = await threads.thread("alice", "t")
    assert found is not None
    assert (found.head, found.runs, found.updated_at) == ("run_a", 1, 1.0)
    assert await threads.thread_runs("alice", "t") == ["run_a"]


async def test_of_concurrent_advances_from_one_head_exactly_one_moves_the_thread(
    store: Store,
) -> None:
    threads = index(store)
    made = await asyncio.gather(
        *(threads.advance("alice", "t", expected=None, run_id=f"run_{n}", at=1.0) for n in range(8))
    )
    assert sum(made) == 1
    first = await threads.thread("alice", "t")
    assert first is not None
    assert first.head is not None
    moved = await asyncio.gather(
        *(
            threads.advance("alice", "t", expected=first.head, run_id=f"run_n{n}", at=2.0)
            for n in range(8)
        )
    )
    assert sum(moved) == 1
    assert len(await threads.thread_runs("alice", "t")) == 2


async def test_threads_are_per_owner(store: Store) -> None:
    threads = index(store)
    assert await threads.advance("alice", "t", expected=None, run_id="run_a", at=1.0)
    assert await threads.advance("bob", "t", expected=None, run_id="run_b", at=2.0)
    assert await threads.advance(None, "t", expected=None, run_id="run_n", at=3.0)
    alices, bobs, nobodys = [await threads.thread(o, "t") for o in ("alice", "bob", None)]
    assert alices is not None
    assert bobs is not None
    assert nobodys is not None
    assert (alices.head, bobs.head, nobodys.head) == ("run_a", "run_b", "run_n")
    assert nobodys.owner is None
    assert [t.thread_id for t in await threads.threads("alice", limit=10)] == ["t"]
    assert await threads.threads("carol", limit=10) == []
    assert await threads.set_metadata("carol", "t", {"x": 1}, at=4.0) is None
    assert not await threads.remove("carol", "t", expected="run_a")


async def test_threads_list_most_recently_changed_first_in_pages(store: Store) -> None:
    threads = index(store)
    for n, at in enumerate([5.0, 1.0, 3.0, 3.0, 2.0]):
        assert await threads.advance("alice", f"t{n}", expected=None, run_id=f"run_{n}", at=at)
    assert await threads.advance("alice", "t1", expected="run_1", run_id="run_9", at=9.0)
    pages, before = [], None
    while True:
        page = await threads.threads("alice", limit=2, before=before)
        if not page:
            break
        pages.append([t.thread_id for t in page])
        before = (page[-1].updated_at, page[-1].thread_id)
    assert pages == [["t1", "t0"], ["t3", "t2"], ["t4"]]


async def test_metadata_is_replaced_and_counts_as_a_change(store: Store) -> None:
    threads = index(store)
    assert await threads.advance("alice", "t", expected=None, run_id="run_a", at=1.0)
    changed = await threads.set_metadata("alice", "t", {"topic": "tax", "n": [1, 2]}, at=7.0)
    assert changed is not None
    assert (changed.metadata, changed.updated_at, changed.head) == (
        {"topic": "tax", "n": [1, 2]},
        7.0,
        "run_a",
    )
    again = await threads.set_metadata("alice", "t", {"é": "✓"}, at=8.0)
    assert again is not None
    assert again.metadata == {"é": "✓"}
    found = await threads.thread("alice", "t")
    assert found is not None
    assert found.metadata == {"é": "✓"}
    assert [t.updated_at for t in await threads.threads("alice", limit=5)] == [8.0]


async def test_a_thread_is_removed_only_from_the_head_it_is_at(store: Store) -> None:
    threads = index(store)
    assert await threads.advance("alice", "t", expected=None, run_id="run_a", at=1.0)
    assert not await threads.remove("alice", "t", expected="run_x")
    assert await threads.remove("alice", "t", expected="run_a")
    assert await threads.thread("alice", "t") is None
    assert await threads.thread_runs("alice", "t") == []
    assert await threads.threads("alice", limit=5) == []
    assert not await threads.remove("alice", "t", expected="run_a")
    # made again from nothing: a thread of its own
    assert await threads.advance("alice", "t", expected=None, run_id="run_b", at=2.0)
    assert await threads.thread_runs("alice", "t") == ["run_b"]


async def test_a_thread_outlives_its_runs(store: Store) -> None:
    run = record("alice")
    await store.create(run)
    threads = index(store)
    assert await threads.advance("alice", "t", expected=None, run_id=run.id, at=1.0)
    await store.delete(run.id)
    found = await threads.thread("alice", "t")
    assert found is not None
    assert found.head == run.id


def record(owner: str | None) -> RunRecord:
    return RunRecord.model_validate(
        {
            "id": new_run_id(),
            "owner": owner,
            "request": {"task": "t"},
            "model": "scripted",
            "settings": {},
        }
    )


# -- the heads kept before threads were a resource ---------------------------------------------


async def test_a_sqlite_file_of_schema_7_keeps_its_threads_heads(tmp_path: Path) -> None:
    """A file written before schema 8: each (owner, thread) head becomes a thread of one run,
    made when that run was."""
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    for script in MIGRATIONS[:7]:
        for statement in filter(str.strip, script.split(";")):
            conn.execute(statement)
    conn.execute("PRAGMA user_version = 7")
    old = record("alice")
    anonymous = record(None)
    for run in (old, anonymous):
        conn.execute(
            "INSERT INTO runs (id, owner, status, created_at, record) VALUES (?, ?, ?, ?, ?)",
            (run.id, run.owner, "completed", run.created_at.isoformat(), run.model_dump_json()),
        )
    conn.execute("INSERT INTO threads VALUES ('alice', 'ag-ui:t1', ?)", (old.id,))
    conn.execute("INSERT INTO threads VALUES ('', 'a2a:ops:c1', ?)", (anonymous.id,))
    conn.close()

    store = SqliteRunStore(str(path))
    await store.open()
    try:
        found = await store.threads.thread("alice", "ag-ui:t1")
        assert found is not None
        assert (found.head, found.runs) == (old.id, 1)
        assert found.created_at == pytest.approx(old.created_at.timestamp(), abs=0.002)
        assert await store.threads.thread_runs("alice", "ag-ui:t1") == [old.id]
        mine = await store.threads.thread(None, "a2a:ops:c1")
        assert mine is not None
        assert mine.head == anonymous.id
        assert [t.thread_id for t in await store.threads.threads("alice", limit=5)] == ["ag-ui:t1"]
        assert await store.threads.advance(
            "alice", "ag-ui:t1", expected=old.id, run_id="run_next", at=9e9
        )
    finally:
        await store.close()


async def test_redis_heads_kept_before_become_threads(redis_url: str) -> None:
    """Keys `P thread:T:{id}` (a run id) that a version before wrote: adopted when the store
    opens (listed), or when one is first read (a replica of the old version wrote it since)."""
    store = RedisRunStore(redis_url)
    run = record("alice")
    await store.create(run)
    tag = f"o{len('alice')}:alice"
    await store.redis.set(f"{store.prefix}thread:{tag}:ag-ui:t1", run.id)
    await store.open()
    try:
        found = await store.threads.thread("alice", "ag-ui:t1")
        assert found is not None
        assert (found.head, found.runs) == (run.id, 1)
        assert found.created_at == pytest.approx(run.created_at.timestamp(), abs=0.002)
        assert [t.thread_id for t in await store.threads.threads("alice", limit=5)] == ["ag-ui:t1"]
        assert not await store.redis.exists(f"{store.prefix}thread:{tag}:ag-ui:t1")
        await store.redis.set(f"{store.prefix}thread:n:a2a:ops:c1", run.id)  # written since
        later = await store.threads.thread(None, "a2a:ops:c1")
        assert later is not None
        assert later.head == run.id
    finally:
        await store.close()


async def test_redis_lists_past_threads_that_expired(redis_url: str) -> None:
    """A thread Redis expired (its hash gone, its id still in the owner's listing) is left
    out, and the listing goes on past it, page after page."""
    store = RedisRunStore(redis_url)
    await store.open()
    try:
        for n in range(5):
            assert await store.threads.advance(
                "alice", f"t{n}", expected=None, run_id=f"run_{n}", at=float(n)
            )
        for n in (4, 2):  # as if expired
            await store.redis.delete(f"{store.prefix}th:o5:alice:t{n}")
        first = await store.threads.threads("alice", limit=2)
        rest = await store.threads.threads(
            "alice", limit=5, before=(first[-1].updated_at, first[-1].thread_id)
        )
    finally:
        await store.close()
    assert [t.thread_id for t in first] == ["t3", "t1"]
    assert [t.thread_id for t in rest] == ["t0"]
