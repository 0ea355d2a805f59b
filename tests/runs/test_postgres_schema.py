"""The Postgres store's schema (DESIGN §18): migrated at start-up under an advisory lock, so
replicas starting at once on an empty database all come up; an older schema is brought up
to date keeping its rows; a schema newer than the code is refused, naming both versions;
every list and filter the API has reads an index (`EXPLAIN`: no sequential scan of events
or runs for a run's events, a key's list, a thread, a tree, the schedules due)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import psycopg
import pytest

from app.runs.records import RunRecord, new_run_id
from app.runs.replicas.postgres_cluster import PostgresCoordinator
from app.runs.replicas.postgres_queue import QUEUED
from app.runs.schedules.records import Schedule, new_schedule_id
from app.runs.store import StoreError
from app.runs.stores.postgres import PostgresRunStore
from app.runs.stores.postgres_reports import UNSUMMARIZED
from app.runs.stores.postgres_rows import INSERT_RUN, run_row
from app.runs.stores.postgres_schema import MIGRATIONS, SCHEMA_VERSION
from tests.runs.test_redis_held import Member
from tests.runs.test_store_contract import record


async def test_three_replicas_starting_at_once_on_an_empty_database_all_come_up(
    postgres_url: str,
) -> None:
    stores = [PostgresRunStore(postgres_url, schema="shared") for _ in range(3)]
    try:
        await asyncio.gather(*(store.open() for store in stores))
        for store in stores:
            await store.ping()
        rows = await stores[0].query("SELECT version FROM schema_version", ())
        assert rows == [(SCHEMA_VERSION,)]
    finally:
        await asyncio.gather(*(store.close() for store in stores))


async def test_a_schema_newer_than_the_code_refuses_start_up_naming_both_versions(
    postgres_url: str,
) -> None:
    first = PostgresRunStore(postgres_url)
    await first.open()
    await first.query("UPDATE schema_version SET version = %s RETURNING 1", (SCHEMA_VERSION + 1,))
    await first.close()
    newer = PostgresRunStore(postgres_url)
    with pytest.raises(StoreError) as refused:
        await newer.open()
    message = str(refused.value)
    assert f"version {SCHEMA_VERSION + 1}" in message
    assert f"({SCHEMA_VERSION})" in message


async def test_a_database_at_schema_1_is_migrated_keeping_its_runs_and_takes_schedules(
    postgres_url: str,
) -> None:
    async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as conn:
        await conn.execute("CREATE SCHEMA finishline")
        await conn.execute("SET search_path TO finishline")
        await conn.execute(MIGRATIONS[0])  # as the first Postgres store left it
        await conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
        await conn.execute("INSERT INTO schema_version (version) VALUES (1)")
        await conn.execute(INSERT_RUN, run_row(old := record()))
    store = PostgresRunStore(postgres_url)
    await store.open()
    try:
        rows = await store.query("SELECT version FROM schema_version", ())
        assert rows == [(SCHEMA_VERSION,)]
        assert await store.get(old.id) == old
        schedule = Schedule(id=new_schedule_id(), cron="* * * * *", run={}, next_due_at=60.0)
        await store.schedules.insert(schedule)
        assert await store.schedules.due(60.0) == [schedule]
    finally:
        await store.close()


async def test_the_service_role_is_not_a_superuser(postgres_url: str) -> None:
    async with await psycopg.AsyncConnection.connect(postgres_url) as conn:
        cur = await conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
        assert await cur.fetchone() == (False,)


PLANS = {
    "a run's events": (
        "SELECT seq, type, ts, step, data FROM events WHERE run_id = %s AND seq > %s"
        " ORDER BY seq LIMIT 1000",
        ("run_x", 0),
    ),
    "a key's list": (
        "SELECT id, owner, record FROM runs WHERE owner = %s ORDER BY id DESC LIMIT 50",
        ("alice",),
    ),
    "a key's list by status": (
        "SELECT id, owner, record FROM runs WHERE owner = %s AND status = ANY(%s)"
        " ORDER BY id DESC LIMIT 50",
        ("alice", ["running", "queued"]),
    ),
    "a run by idempotency key": (
        "SELECT id, owner, record FROM runs WHERE idempotency_key = %s AND owner = %s",
        ("k", "alice"),
    ),
    "a thread": (
        "SELECT head FROM threads WHERE owner = %s AND thread_id = %s",
        ("alice", "t"),
    ),
    "a key's threads": (
        "SELECT thread_id FROM threads WHERE owner = %s ORDER BY updated_at DESC,"
        " thread_id DESC LIMIT 50",
        ("alice",),
    ),
    "a thread's runs": (
        "SELECT run_id FROM thread_runs WHERE owner = %s AND thread_id = %s AND pos >= %s"
        " ORDER BY pos LIMIT 100",
        ("alice", "t", 0),
    ),
    "a tree's children": (
        "SELECT id FROM runs WHERE parent_run_id = %s ORDER BY id DESC LIMIT 50",
        ("run_x",),
    ),
    "a tree's members": ("SELECT COUNT(*) FROM tree_runs WHERE root_id = %s", ("run_x",)),
    "follow-ups": (
        "SELECT id FROM runs WHERE previous_run_id = %s ORDER BY id DESC LIMIT 50",
        ("run_x",),
    ),
    "the queue": (f"SELECT id FROM runs WHERE {QUEUED} ORDER BY queued_at LIMIT 4", ()),
    "approval deadlines": (
        "SELECT id FROM runs WHERE wait_deadline <= %s ORDER BY wait_deadline LIMIT 100",
        (1.0,),
    ),
    "a key's schedules": (
        "SELECT record FROM schedules WHERE owner = %s AND id > %s ORDER BY id LIMIT 50",
        ("alice", ""),
    ),
    "the schedules due": (
        "SELECT record FROM schedules WHERE next_due_at <= %s ORDER BY next_due_at, id LIMIT 100",
        (1.0,),
    ),
    "a key's run summaries in a window": (
        "SELECT model, status, steps FROM run_summaries"
        " WHERE owner = %s AND created_at >= %s AND created_at < %s",
        ("alice", "2026-01-01", "2026-02-01"),
    ),
    "every key's run summaries in a window": (
        "SELECT model, status, steps FROM run_summaries WHERE created_at >= %s AND created_at < %s",
        ("2026-01-01", "2026-02-01"),
    ),
    "ended runs without a summary": (UNSUMMARIZED, (["completed", "failed"], "", 100)),
    "a schedule's firings": (
        "SELECT firing FROM schedule_firings WHERE schedule_id = %s AND due_at < %s"
        " ORDER BY due_at DESC LIMIT 50",
        ("sch_x", 1.0),
    ),
}


@pytest.fixture
async def store(postgres_url: str) -> AsyncIterator[PostgresRunStore]:
    made = PostgresRunStore(postgres_url)
    await made.open()
    try:
        yield made
    finally:
        await made.close()


@pytest.mark.parametrize("name", list(PLANS))
async def test_every_list_and_filter_reads_an_index(store: PostgresRunStore, name: str) -> None:
    sql, params = PLANS[name]

    async def plan(conn: psycopg.AsyncConnection[object]) -> str:
        async with conn.transaction():
            await conn.execute("SET LOCAL enable_seqscan = off")  # an index, if one serves
            cur = await conn.execute("EXPLAIN " + sql, params)  # type: ignore[arg-type]
            return "\n".join(str(row[0]) for row in await cur.fetchall())  # type: ignore[index]

    text = await store.with_connection(plan)
    assert "Seq Scan" not in text, text


async def test_a_replica_whose_own_lease_lapsed_never_takes_its_run_over_itself(
    store: PostgresRunStore,
) -> None:
    running = RunRecord.model_validate(
        {
            "id": new_run_id(),
            "status": "running",
            "request": {"task": "t"},
            "model": "m",
            "settings": {},
        }
    )
    await store.create(running)
    executing = PostgresCoordinator(store, replica="r1")
    other = PostgresCoordinator(store, replica="r2")
    assert await executing.claim(running.id)
    await store.query("UPDATE runs SET lease_until = 0 WHERE id = %s RETURNING 1", (running.id,))
    mine, theirs = Member(), Member()

    assert not await executing._take_over(mine)
    assert mine.taken == []
    assert await other._take_over(theirs)
    assert theirs.taken == [(running.id, 1)]


async def test_retention_deletes_runs_ended_long_enough_ago_in_batches_by_one_replica(
    postgres_url: str,
) -> None:
    store, other = (PostgresRunStore(postgres_url, retention_s=60) for _ in range(2))
    await store.open()
    await other.open()
    try:

        def made(status: str) -> RunRecord:
            return RunRecord.model_validate(
                {"id": new_run_id(), "status": status, "request": {"task": "t"}, "model": "m",
                 "settings": {}}
            )  # fmt: skip

        old = [made("completed") for _ in range(5)]
        recent, running = made("failed"), made("running")
        for run in [*old, recent, running]:
            await store.create(run)
            await store.append(run.id, "thought", 1, {"n": 1})
            await store.save(run)
        ids = [run.id for run in old]
        await store.query(
            "UPDATE runs SET ended_at = ended_at - 120 WHERE id = ANY(%s) RETURNING 1", (ids,)
        )

        async def locked_elsewhere(conn: psycopg.AsyncConnection[object]) -> int:
            async with conn.transaction():  # another replica's pass holds the lock
                await conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))",
                                   (store.channel + ":retention",))  # fmt: skip
                return await store.expire()

        assert await other.with_connection(locked_elsewhere) == 0
        assert await store.expire(batch=2) == 2  # a batch at a time
        assert await store.expire(batch=2) == 2
        assert await store.expire(batch=2) == 1
        assert await store.expire(batch=2) == 0
        for run in old:
            assert await store.get(run.id) is None
            assert await store.read(run.id) == []
        assert await store.get(recent.id) == recent
        assert await store.get(running.id) == running
        assert len(await store.read(recent.id)) == 1
    finally:
        await store.close()
        await other.close()
