"""What the Redis store promises beyond the common contract (tests/runs/test_store_contract.py
runs that on Redis too): its keys, retention, idempotency under concurrency, one reader per
followed run, and followers in another process (another store on the same Redis) — all on a
real redis-server."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from app.runs.backends import open_store
from app.runs.records import Event, RunRecord, RunStatus, new_run_id
from app.runs.store import Checkpoint, DuplicateRunError, LeaseLostError, StoreError
from app.runs.stores.redis_store import RedisRunStore, owner_tag
from tests.fakes.redis_server import RedisServer

BOUND_S = 10
RETENTION_S = 3600.0


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[RedisRunStore]:
    made = RedisRunStore(redis_url, retention_s=RETENTION_S)
    await made.open()
    try:
        yield made
    finally:
        await made.close()


def record(*, owner: str | None = None, key: str | None = None, **fields: object) -> RunRecord:
    return RunRecord.model_validate(
        {
            "id": new_run_id(),
            "owner": owner,
            "idempotency_key": key,
            "request": {"task": "t"},
            "model": "scripted",
            "settings": {},
            **fields,
        }
    )


async def test_open_store_picks_redis_for_redis_and_rediss_urls(redis_url: str) -> None:
    made = open_store(redis_url, retention_s=5)
    assert isinstance(made, RedisRunStore)
    assert made.retention_s == 5
    await made.close()
    tls = open_store("rediss://127.0.0.1:1/0")
    assert isinstance(tls, RedisRunStore)
    await tls.close()


def test_owner_tags_cannot_collide() -> None:
    assert owner_tag(None) == "n"
    assert owner_tag("") == "o0:"
    assert owner_tag("a:b") != owner_tag("a") + ":b"


async def test_event_entry_ids_are_the_seq_and_the_record_is_the_models_json(
    store: RedisRunStore,
) -> None:
    run = record(owner="alice")
    await store.create(run)
    for i in range(3):
        await store.append(run.id, "thought", i, {"i": i})
    entries = await store.redis.xrange(f"finishline:ev:{run.id}")
    assert [entry_id for entry_id, _ in entries] == ["0-1", "0-2", "0-3"]
    fields = await store.redis.hgetall(f"finishline:run:{run.id}")
    assert RunRecord.model_validate_json(fields["record"]) == run
    assert (fields["status"], fields["tag"], fields["seq"]) == ("queued", "o5:alice", "3")


async def test_a_terminal_run_expires_with_its_events_checkpoint_and_key(
    store: RedisRunStore,
) -> None:
    run = record(key="k")
    await store.create(run)
    await store.append(run.id, "run.queued", 0, {})
    await store.save_checkpoint(run.id, 1, {"messages": [{"role": "user", "content": "hi"}]})
    names = (f"run:{run.id}", f"ev:{run.id}", f"cp:{run.id}", f"cpm:{run.id}")
    keys = [f"finishline:{k}" for k in names]
    keys.append("finishline:idem:n:k")
    assert [await store.redis.ttl(k) for k in keys] == [-1] * 5  # kept while active

    run.status = RunStatus.COMPLETED
    await store.save(run)
    await store.append(run.id, "run.completed", 1, {})
    for key in keys:
        assert RETENTION_S - 60 < await store.redis.ttl(key) <= RETENTION_S


async def test_listing_skips_runs_whose_retention_ended_and_still_fills_the_page(
    store: RedisRunStore,
) -> None:
    runs = [record(owner="alice") for _ in range(6)]
    for run in runs:
        await store.create(run)
    newest = sorted((r.id for r in runs), reverse=True)
    for run_id in newest[1:4]:  # what an expiry does: the keys go, the index entries stay
        await store.redis.delete(f"finishline:run:{run_id}")
    listed = await store.list_runs(owner="alice", limit=3)
    assert [r.id for r in listed] == [newest[0], *newest[4:]]
    assert await store.redis.zcard(f"finishline:idx:{owner_tag('alice')}") == 3


async def test_concurrent_creates_with_one_idempotency_key_make_one_run(
    store: RedisRunStore,
) -> None:
    attempts = [record(owner="alice", key="same") for _ in range(10)]
    made: list[str] = []
    refused: list[str] = []

    async def create(run: RunRecord) -> None:
        try:
            await store.create(run)
            made.append(run.id)
        except DuplicateRunError:
            refused.append(run.id)

    with anyio.fail_after(BOUND_S):
        async with anyio.create_task_group() as tg:
            for run in attempts:
                tg.start_soon(create, run)
    assert len(made) == 1
    assert len(refused) == 9
    found = await store.find_by_idempotency_key("alice", "same")
    assert found is not None
    assert found.id == made[0]
    assert [r.id for r in await store.list_runs(owner="alice")] == made


async def test_followers_of_one_run_share_one_reader_that_stops_with_the_last(
    store: RedisRunStore,
) -> None:
    run = record()
    await store.create(run)
    await store.append(run.id, "run.queued", 0, {})
    with anyio.fail_after(BOUND_S):
        async with (
            contextlib.aclosing(store.subscribe(run.id)) as first,
            contextlib.aclosing(store.subscribe(run.id)) as second,
        ):
            assert (await anext(first)).seq == 1
            assert (await anext(second)).seq == 1
            assert store._follower.readers == 1
            await store.append(run.id, "thought", 1, {})
            assert (await anext(first)).seq == 2
            assert (await anext(second)).seq == 2
    assert store._follower.readers == 0
    assert store.fanout.subscribers == 0


async def test_a_follower_on_another_replica_sees_every_event_live(
    store: RedisRunStore, redis_url: str
) -> None:
    run = record()
    await store.create(run)
    await store.append(run.id, "run.queued", 0, {})
    other = RedisRunStore(redis_url)
    await other.open()
    seen: list[Event] = []
    following = anyio.Event()

    async def follow() -> None:
        async for event in other.subscribe(run.id):
            seen.append(event)
            following.set()

    try:
        with anyio.fail_after(BOUND_S):
            async with anyio.create_task_group() as tg:
                tg.start_soon(follow)
                await following.wait()
                for i in range(1, 50):
                    await store.append(run.id, "thought", i, {"i": i})
                await store.append(run.id, "run.completed", 50, {})
    finally:
        await other.close()
    assert [e.seq for e in seen] == list(range(1, 52))
    assert seen == await store.read(run.id)
    assert seen[-1].terminal


async def test_ping_raises_store_error_while_redis_is_down(tmp_path: Path) -> None:
    with RedisServer(tmp_path) as server:
        made = RedisRunStore(server.url())
        await made.open()
        await made.ping()
        server.stop()
        with pytest.raises(StoreError, match="Redis does not answer"):
            await made.ping()
        await made.close()


async def test_acknowledged_events_survive_a_redis_crash_with_aof_on(tmp_path: Path) -> None:
    aof = ("--appendonly", "yes", "--appendfsync", "always")
    run = record()
    with RedisServer(tmp_path, extra_args=aof) as server:
        first = RedisRunStore(server.url())
        await first.open()
        await first.create(run)
        appended = [await first.append(run.id, "thought", i, {"i": i}) for i in range(1, 21)]
        await first.save_checkpoint(run.id, 20, {"messages": ["kept"]})
        await first.close()
        assert server.process is not None
        server.process.kill()  # SIGKILL: no shutdown, no final save
        server.stop()
    with RedisServer(tmp_path, extra_args=aof) as restarted:  # same directory: reads the AOF
        second = RedisRunStore(restarted.url())
        await second.open()
        try:
            assert await second.get(run.id) == run
            assert await second.read(run.id) == appended
            assert (await second.append(run.id, "run.completed", 21, {})).seq == 21
            assert await second.load_checkpoint(run.id) == Checkpoint(20, {"messages": ["kept"]})
        finally:
            await second.close()


async def test_an_append_with_a_record_writes_neither_when_fenced_or_the_key_is_taken(
    store: RedisRunStore,
) -> None:
    first, second = record(owner="alice", key="k1"), record(owner="alice", key="k2")
    await store.create(first)
    await store.create(second)
    await store.redis.set(store.prefix + "owner:" + second.id, "token-b")  # another replica's
    store.hold(second.id, "token-a")
    second.status = RunStatus.RUNNING
    with pytest.raises(LeaseLostError):
        await store.append(second.id, "run.started", 0, {}, record=second)

    store.release(second.id)
    second.idempotency_key = "k1"  # taken by the first run
    with pytest.raises(DuplicateRunError):
        await store.append(second.id, "run.started", 0, {}, record=second)
    assert await store.read(second.id) == []
    stored = await store.get(second.id)
    assert stored is not None
    assert (stored.status, stored.idempotency_key) == (RunStatus.QUEUED, "k2")


async def test_a_checkpoint_stored_whole_by_an_older_version_loads(store: RedisRunStore) -> None:
    run = record()
    await store.create(run)
    old = {"step": 4, "state": {"messages": [{"role": "user", "content": "hi"}], "step": 4}}
    await store.redis.set(f"finishline:cp:{run.id}", json.dumps(old))  # one string, as before
    assert await store.load_checkpoint(run.id) == Checkpoint(4, old["state"], version=1)


async def test_a_checkpoint_names_its_layout_and_one_stored_before_still_loads(
    store: RedisRunStore,
) -> None:
    run = record()
    await store.create(run)
    await store.save_checkpoint(run.id, 2, {"messages": ["a", "b"]})
    key = f"finishline:cp:{run.id}"
    head = json.loads(await store.redis.get(key))
    assert (head["version"], head["state"]) == (2, {"messages": 2})  # a count: in chunks
    del head["version"]  # as the store wrote it before layouts were named
    await store.redis.set(key, json.dumps(head))
    assert await store.load_checkpoint(run.id) == Checkpoint(2, {"messages": ["a", "b"]}, 2)
