"""The `RunStore` contract, run against every implementation: what the rest of finishline may
rely on whichever store a deployment picks."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest
from structlog.testing import capture_logs

from app.engine.policies import StopReason
from app.runs.errors import RunUnreadableError
from app.runs.records import (
    Event,
    RunErrorInfo,
    RunRecord,
    RunResult,
    RunStatus,
    Usage,
    WebhookAttempt,
    WebhookState,
    new_run_id,
)
from app.runs.spec import RunRequest
from app.runs.store import (
    CHECKPOINT_FORMAT,
    Checkpoint,
    DayUsage,
    DuplicateRunError,
    RunStore,
    StoreError,
)
from app.runs.stores.fanout import Fanout
from app.runs.stores.memory import MemoryRunStore
from app.runs.stores.postgres import PostgresRunStore
from app.runs.stores.redis_store import RedisRunStore
from app.runs.stores.sqlite import SqliteRunStore
from tests.runs.raw_records import TOO_BIG, poisoned, raw_record, write_raw_record

Store = MemoryRunStore | SqliteRunStore | RedisRunStore | PostgresRunStore
BOUND_S = 10  # a failure bound, not a wait: every test here finishes in milliseconds


@pytest.fixture(params=["memory", "sqlite", "redis", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    made: Store
    if request.param == "memory":
        made = MemoryRunStore()
    elif request.param == "sqlite":
        made = SqliteRunStore(str(tmp_path / "r.db"))
    elif request.param == "postgres":  # a real Postgres, a new database for this test
        made = PostgresRunStore(request.getfixturevalue("postgres_url"))
    else:  # a real redis-server, its database flushed for this test
        made = RedisRunStore(request.getfixturevalue("redis_url"))
    conforming: RunStore = made  # each satisfies the protocol
    await conforming.open()
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
            "request": {"task": "add two numbers"},
            "model": "scripted",
            "settings": {"max_steps": 10},
            **fields,
        }
    )


async def created(store: Store, **fields: object) -> RunRecord:
    run = record(**fields)
    await store.create(run)
    return run


# -- records ------------------------------------------------------------------------------


async def test_a_run_reads_back_equal_after_create_and_after_save(store: Store) -> None:
    started = datetime(2025, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
    run = record(
        owner="alice",
        key="key-1",
        request={"task": "sum", "tools": ["calculator"], "metadata": {"nested": [1, {"a": None}]}},
        settings={"max_steps": 3, "stop_tool": True, "max_time_s": 1.5},
        request_hash="abc123",
        webhook=WebhookState(url="https://hooks.example/x"),
    )
    await store.create(run)
    assert await store.get(run.id) == run

    run.status = RunStatus.COMPLETED
    run.started_at = started
    run.ended_at = started + timedelta(seconds=2)
    run.result = RunResult(answer="42 ✓", reason=StopReason.FINISHED, degraded=False)
    run.error = RunErrorInfo(type="llm_status", message="retried")
    run.usage = Usage(steps=2, llm_calls=3, tool_calls=1, prompt_tokens=10, total_tokens=15)
    run.webhook = WebhookState(
        url="https://hooks.example/x",
        delivered=True,
        attempts=[
            WebhookAttempt(at=started, status_code=None, error="connect timeout"),
            WebhookAttempt(at=started + timedelta(seconds=1), status_code=204),
        ],
    )
    await store.save(run)

    again = await store.get(run.id)
    assert again == run
    assert again is not None
    assert again.webhook is not None
    assert again.webhook.attempts[1].at == started + timedelta(seconds=1)


async def test_a_typed_result_reads_back_with_its_output_and_errors(store: Store) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    run = await created(store, request={"task": "count", "output_schema": schema})
    run.status = RunStatus.COMPLETED
    output = {"n": 42, "nested": [1.5, None, {"é": "✓"}], "big": 2**63 - 1}
    run.result = RunResult(
        answer=json.dumps(output), output=output, reason=StopReason.FINISHED, degraded=False
    )
    await store.save(run)
    again = await store.get(run.id)
    assert again == run
    assert again is not None
    assert again.result is not None
    assert again.result.output == output
    assert again.request.output_schema == schema

    errors = [{"path": "$.n", "message": "'x' is not of type 'integer'"}]
    run.status = RunStatus.INCOMPLETE
    run.result = RunResult.model_validate(
        {
            "answer": '{"n": "x"}',
            "output": None,
            "output_errors": errors,
            "reason": "invalid_output",
            "degraded": True,
        }
    )
    await store.save(run)
    again = await store.get(run.id)
    assert again is not None
    assert again.result is not None
    shown = again.result.model_dump(mode="json")
    assert (shown["output"], shown["output_errors"]) == (None, errors)
    # a run without a schema keeps a result without them, through the store too
    plain = await created(store)
    plain.result = RunResult(answer="42", reason=StopReason.FINISHED, degraded=False)
    await store.save(plain)
    read = await store.get(plain.id)
    assert read is not None
    assert read.result is not None
    assert read.result.model_dump(mode="json") == {
        "answer": "42",
        "reason": "finished",
        "degraded": False,
    }


async def test_get_returns_a_copy_that_does_not_change_the_store(store: Store) -> None:
    run = await created(store)
    got = await store.get(run.id)
    assert got is not None
    got.status = RunStatus.FAILED
    got.request.task = "changed"
    assert await store.get(run.id) == run


async def test_get_of_an_unknown_run_is_none(store: Store) -> None:
    assert await store.get(new_run_id()) is None


async def test_ping_succeeds_on_an_open_store_and_raises_once_it_is_closed(store: Store) -> None:
    await store.ping()
    await store.close()
    with pytest.raises(StoreError):
        await store.ping()


async def test_creating_a_run_with_an_existing_id_raises_duplicate_run_error(store: Store) -> None:
    run = await created(store, owner="alice")
    copy = run.model_copy(update={"owner": "bob", "request": RunRequest(task="other")})
    with pytest.raises(DuplicateRunError):
        await store.create(copy)
    assert await store.get(run.id) == run  # the first one is untouched


@pytest.mark.parametrize("owner", ["alice", None])
async def test_reusing_an_idempotency_key_for_the_same_owner_raises_duplicate_run_error(
    store: Store, owner: str | None
) -> None:
    first = await created(store, owner=owner, key="k")
    second = record(owner=owner, key="k")
    with pytest.raises(DuplicateRunError):
        await store.create(second)
    assert await store.get(second.id) is None
    assert await store.find_by_idempotency_key(owner, "k") == first


async def test_the_same_idempotency_key_is_free_for_other_owners(store: Store) -> None:
    alice = await created(store, owner="alice", key="k")
    bob = await created(store, owner="bob", key="k")
    nobody = await created(store, owner=None, key="k")
    empty = await created(store, owner="", key="k")
    assert await store.find_by_idempotency_key("alice", "k") == alice
    assert await store.find_by_idempotency_key("bob", "k") == bob
    assert await store.find_by_idempotency_key(None, "k") == nobody
    assert await store.find_by_idempotency_key("", "k") == empty


async def test_runs_without_an_idempotency_key_never_collide(store: Store) -> None:
    for owner in ("alice", "alice", None, None):
        await created(store, owner=owner)
    assert len(await store.list_runs(owner=None, any_owner=True)) == 4


async def test_find_by_idempotency_key_is_none_for_an_unknown_key_or_owner(store: Store) -> None:
    await created(store, owner="alice", key="k")
    assert await store.find_by_idempotency_key("alice", "other") is None
    assert await store.find_by_idempotency_key("bob", "k") is None
    assert await store.find_by_idempotency_key(None, "k") is None


# -- listing ------------------------------------------------------------------------------


async def test_list_runs_returns_newest_first(store: Store) -> None:
    runs = [await created(store) for _ in range(5)]
    listed = await store.list_runs(owner=None)
    assert [r.id for r in listed] == sorted((r.id for r in runs), reverse=True)
    assert [r.id for r in await store.list_runs(owner=None, limit=2)] == [r.id for r in listed[:2]]


async def test_list_runs_filters_by_status(store: Store) -> None:
    queued = await created(store)
    running = await created(store, status=RunStatus.RUNNING)
    done = await created(store, status=RunStatus.COMPLETED)
    failed = await created(store, status=RunStatus.FAILED)

    only_done = await store.list_runs(owner=None, statuses=[RunStatus.COMPLETED])
    assert [r.id for r in only_done] == [done.id]
    active = await store.list_runs(owner=None, statuses=[RunStatus.QUEUED, RunStatus.RUNNING])
    assert {r.id for r in active} == {queued.id, running.id}
    assert len(await store.list_runs(owner=None)) == 4
    failed.status = RunStatus.CANCELLED
    await store.save(failed)
    assert await store.list_runs(owner=None, statuses=[RunStatus.FAILED]) == []


async def test_list_runs_shows_an_owner_only_its_own_runs(store: Store) -> None:
    alice = await created(store, owner="alice")
    bob = await created(store, owner="bob")
    nobody = await created(store, owner=None)
    assert [r.id for r in await store.list_runs(owner="alice")] == [alice.id]
    assert [r.id for r in await store.list_runs(owner="bob")] == [bob.id]
    assert [r.id for r in await store.list_runs(owner=None)] == [nobody.id]
    assert await store.list_runs(owner="carol") == []


async def test_list_runs_with_any_owner_shows_every_run(store: Store) -> None:
    runs = [await created(store, owner=owner) for owner in ("alice", "bob", None)]
    listed = await store.list_runs(owner="carol", any_owner=True)
    assert {r.id for r in listed} == {r.id for r in runs}
    running = await created(store, owner="dave", status=RunStatus.RUNNING)
    active = await store.list_runs(owner=None, statuses=[RunStatus.RUNNING], any_owner=True)
    assert [r.id for r in active] == [running.id]


async def test_list_runs_by_previous_run_id_shows_only_its_follow_ups(store: Store) -> None:
    first = await created(store)
    follow_ups = [await created(store, previous_run_id=first.id) for _ in range(3)]
    await created(store, previous_run_id=follow_ups[0].id)  # a follow-up of a follow-up
    await created(store)

    listed = await store.list_runs(owner=None, previous_run_id=first.id)

    assert listed == list(reversed(follow_ups))
    paged = await store.list_runs(owner=None, previous_run_id=first.id, before_id=follow_ups[2].id)
    assert paged == [follow_ups[1], follow_ups[0]]


async def test_paging_with_before_id_visits_every_run_once_newest_first(store: Store) -> None:
    runs = [await created(store, owner="alice") for _ in range(25)]
    await created(store, owner="bob")
    pages: list[list[str]] = []
    cursor: str | None = None
    while True:
        page = await store.list_runs(owner="alice", limit=10, before_id=cursor)
        if not page:
            break
        pages.append([r.id for r in page])
        cursor = page[-1].id
    assert [len(p) for p in pages] == [10, 10, 5]
    assert [i for p in pages for i in p] == sorted((r.id for r in runs), reverse=True)


# -- delete -------------------------------------------------------------------------------


async def test_delete_removes_the_record_its_events_and_its_checkpoint(store: Store) -> None:
    run = await created(store)
    kept = await created(store)
    for r in (run, kept):
        await store.append(r.id, "run.queued", 0, {})
        await store.save_checkpoint(r.id, 1, {"messages": []})
    await store.delete(run.id)
    assert await store.get(run.id) is None
    assert await store.read(run.id) == []
    assert await store.load_checkpoint(run.id) is None
    assert await store.list_runs(owner=None) == [kept]
    assert len(await store.read(kept.id)) == 1
    assert await store.load_checkpoint(kept.id) is not None


async def test_deleting_an_unknown_run_does_nothing(store: Store) -> None:
    kept = await created(store)
    await store.append(kept.id, "run.queued", 0, {})
    await store.save_checkpoint(kept.id, 1, {"messages": []})

    await store.delete(new_run_id())

    assert await store.list_runs(owner=None, any_owner=True) == [kept]
    assert len(await store.read(kept.id)) == 1
    assert await store.load_checkpoint(kept.id) == Checkpoint(1, {"messages": []})


# -- the event log ------------------------------------------------------------------------


async def test_append_numbers_a_runs_events_from_one_without_gaps(store: Store) -> None:
    run = await created(store)
    other = await created(store)
    appended = [await store.append(run.id, "thought", i, {"text": f"t{i}"}) for i in range(1, 6)]
    assert [e.seq for e in appended] == [1, 2, 3, 4, 5]
    assert (await store.append(other.id, "run.queued", 0, {})).seq == 1
    first = appended[0]
    assert (first.run_id, first.type, first.step, first.data) == (
        run.id,
        "thought",
        1,
        {"text": "t1"},
    )
    assert isinstance(first.ts, float)
    assert await store.read(run.id) == appended


async def test_create_with_a_first_event_stores_the_run_and_its_event_1(store: Store) -> None:
    run = record()
    queued = await store.create(run, first_event=("run.queued", 0, {"task": "t"}))
    assert queued is not None
    assert (queued.run_id, queued.seq, queued.type, queued.data) == (
        run.id,
        1,
        "run.queued",
        {"task": "t"},
    )
    assert await store.get(run.id) == run
    assert await store.read(run.id) == [queued]
    assert (await store.append(run.id, "run.started", 0, {})).seq == 2


async def test_a_refused_create_stores_neither_the_run_nor_its_first_event(store: Store) -> None:
    taken = await created(store, owner="alice", key="k")
    again = record(owner="alice", key="k")
    with pytest.raises(DuplicateRunError):
        await store.create(again, first_event=("run.queued", 0, {}))
    with pytest.raises(DuplicateRunError):
        await store.create(taken, first_event=("run.queued", 0, {}))
    assert await store.get(again.id) is None
    assert await store.read(again.id) == []
    assert await store.read(taken.id) == []


async def test_append_with_the_record_saves_it_and_appends_the_event(store: Store) -> None:
    run = await created(store)
    await store.append(run.id, "run.queued", 0, {})
    run.status = RunStatus.RUNNING
    run.started_at = datetime.now(UTC)
    started = await store.append(run.id, "run.started", 0, {"resumed": True}, record=run)
    assert started.seq == 2
    assert await store.get(run.id) == run
    assert (await store.read(run.id, after=1)) == [started]
    run.status = RunStatus.COMPLETED  # the caller's later changes are not the store's
    stored = await store.get(run.id)
    assert stored is not None
    assert stored.status == RunStatus.RUNNING


async def test_read_returns_the_events_after_a_seq_up_to_a_limit(store: Store) -> None:
    run = await created(store)
    for i in range(10):
        await store.append(run.id, "thought", i, {"i": i, "nested": {"list": [i, None, "x"]}})
    assert [e.seq for e in await store.read(run.id, after=3, limit=4)] == [4, 5, 6, 7]
    assert [e.seq for e in await store.read(run.id, after=8)] == [9, 10]
    assert await store.read(run.id, after=10) == []
    assert (await store.read(run.id, after=4, limit=1))[0].data == {
        "i": 4,
        "nested": {"list": [4, None, "x"]},
    }


async def test_read_of_an_unknown_run_is_empty(store: Store) -> None:
    assert await store.read(new_run_id()) == []


async def test_append_to_an_unknown_run_raises_key_error(store: Store) -> None:
    with pytest.raises(KeyError):
        await store.append(new_run_id(), "thought", 1, {})


async def test_concurrent_appends_keep_every_runs_seq_contiguous(store: Store) -> None:
    runs = [await created(store) for _ in range(8)]

    async def writer(run_id: str, worker: int) -> None:
        for i in range(10):
            await store.append(run_id, "thought", i, {"worker": worker, "i": i})

    with anyio.fail_after(BOUND_S):
        async with anyio.create_task_group() as tg:
            for run in runs:
                for worker in range(5):
                    tg.start_soon(writer, run.id, worker)

    for run in runs:
        events = await store.read(run.id)
        assert [e.seq for e in events] == list(range(1, 51))
        for worker in range(5):  # each task's appends are in the order it made them
            mine = [e.data["i"] for e in events if e.data["worker"] == worker]
            assert mine == list(range(10))


async def test_append_soon_keeps_the_order_of_appends_and_gives_each_stored_event(
    store: Store,
) -> None:
    run = await created(store)
    data = {"text": "as asked"}
    queued = [await store.append_soon(run.id, "thought", 1, data)]
    data["text"] = "changed after"  # the event is what was asked, whenever it is written
    queued.append(await store.append_soon(run.id, "action", 1, {"n": 2}))
    last = await store.append(run.id, "observation", 1, {"n": 3})  # behind the queued ones
    with anyio.fail_after(BOUND_S):
        stored = [await outcome for outcome in queued]
    assert [e.seq for e in stored] == [1, 2]
    assert stored[0].data == {"text": "as asked"}
    assert await store.read(run.id) == [*stored, last]


async def test_append_soon_to_an_unknown_run_fails_with_key_error(store: Store) -> None:
    with pytest.raises(KeyError), anyio.fail_after(BOUND_S):
        await (await store.append_soon(new_run_id(), "thought", 1, {}))


async def test_a_subscriber_sees_an_event_appended_soon_only_once_it_is_stored(
    store: Store,
) -> None:
    run = await created(store)
    outcome = await store.append_soon(run.id, "thought", 1, {})
    with anyio.fail_after(BOUND_S):
        first = await anext(aiter(store.subscribe(run.id)))
        assert first == await outcome
        assert await store.read(run.id) == [first]


# -- subscribe ----------------------------------------------------------------------------


async def append_all(store: Store, run_id: str, types: list[str]) -> list[Event]:
    return [await store.append(run_id, type, 1, {"n": n}) for n, type in enumerate(types)]


async def test_subscribe_replays_then_follows_live_and_stops_at_the_terminal_event(
    store: Store,
) -> None:
    run = await created(store)
    replayed = await append_all(store, run.id, ["run.queued", "run.started", "thought"])
    send, receive = anyio.create_memory_object_stream[Event](100)

    async def follow() -> None:
        async with send:
            async for event in store.subscribe(run.id):
                await send.send(event)

    with anyio.fail_after(BOUND_S), receive:
        async with anyio.create_task_group() as tg:
            tg.start_soon(follow)
            assert [await receive.receive() for _ in range(3)] == replayed
            live = await append_all(store, run.id, ["action", "observation", "run.completed"])
            await store.append(run.id, "thought", 9, {"after": "the end"})
            rest = [event async for event in receive]  # ends when the subscription does
    assert rest == live
    assert rest[-1].type == "run.completed"


async def test_subscribe_after_a_seq_replays_only_the_later_events(store: Store) -> None:
    run = await created(store)
    events = await append_all(store, run.id, ["run.queued", "run.started", "thought"])
    with anyio.fail_after(BOUND_S):
        async with anyio.create_task_group() as tg:
            seen: list[Event] = []

            async def follow() -> None:
                seen.extend([event async for event in store.subscribe(run.id, after=2)])

            tg.start_soon(follow)
            events += await append_all(store, run.id, ["thought", "run.completed"])
    assert seen == events[2:]


async def test_a_subscriber_after_the_terminal_event_gets_the_replay_and_ends(
    store: Store,
) -> None:
    run = await created(store)
    events = await append_all(store, run.id, ["run.queued", "thought", "run.completed"])
    with anyio.fail_after(BOUND_S):
        assert [e async for e in store.subscribe(run.id)] == events
        assert [e async for e in store.subscribe(run.id, after=1)] == events[1:]


async def test_two_subscribers_on_one_run_both_see_every_event(store: Store) -> None:
    run = await created(store)
    first = await append_all(store, run.id, ["run.queued"])
    seen: dict[int, list[Event]] = {0: [], 1: []}
    started = [anyio.Event(), anyio.Event()]

    async def follow(index: int) -> None:
        async for event in store.subscribe(run.id):
            seen[index].append(event)
            started[index].set()

    with anyio.fail_after(BOUND_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(follow, 0)
            tg.start_soon(follow, 1)
            for event in started:
                await event.wait()  # both are following live now
            rest = await append_all(store, run.id, ["thought"] * 20 + ["run.completed"])
    assert seen[0] == seen[1] == first + rest


async def test_a_slow_subscriber_gets_every_event_once_in_order_by_catching_up(
    store: Store,
) -> None:
    store.fanout = Fanout(buffer=4)
    run = await created(store)
    first = await append_all(store, run.id, ["run.queued"])
    with anyio.fail_after(BOUND_S):
        async with contextlib.aclosing(store.subscribe(run.id)) as events:
            assert await anext(events) == first[0]  # following now
            more = await append_all(store, run.id, ["thought"] * 30)  # overflows its buffer
            got = [await anext(events) for _ in range(10)]
            more += await append_all(store, run.id, ["thought"] * 30 + ["run.completed"])
            got += [event async for event in events]
    assert got == more
    assert store.fanout.subscribers == 0


async def test_subscribe_batches_hand_over_everything_ready_at_once(store: Store) -> None:
    run = await created(store)
    replayed = await append_all(store, run.id, ["run.queued", "run.started", "thought"])
    with anyio.fail_after(BOUND_S):
        async with contextlib.aclosing(store.subscribe_batches(run.id)) as batches:
            assert await anext(batches) == replayed  # the stored ones: one page, one batch
            live = await append_all(store, run.id, ["action", "observation", "run.completed"])
            await store.append(run.id, "thought", 9, {"after": "the end"})
            rest = [batch async for batch in batches]
    assert [event for batch in rest for event in batch] == live
    assert all(rest)
    if not isinstance(store, RedisRunStore):
        # published before each append returned: all three wait for the next take.
        # (Redis: a reader task publishes entries as it reads them from the stream)
        assert rest == [live]


async def test_subscribe_batches_after_the_terminal_event_end_at_once(store: Store) -> None:
    run = await created(store)
    events = await append_all(store, run.id, ["run.queued", "thought", "run.completed"])
    with anyio.fail_after(BOUND_S):
        assert [b async for b in store.subscribe_batches(run.id, after=1)] == [events[1:]]
        assert [b async for b in store.subscribe_batches(run.id, after=3)] == []


async def test_a_slow_batch_subscriber_gets_every_event_once_in_order(store: Store) -> None:
    store.fanout = Fanout(buffer=4)
    run = await created(store)
    first = await append_all(store, run.id, ["run.queued"])
    with anyio.fail_after(BOUND_S):
        async with contextlib.aclosing(store.subscribe_batches(run.id)) as batches:
            assert await anext(batches) == first  # following now
            more = await append_all(store, run.id, ["thought"] * 30)  # overflows its buffer
            got = list(await anext(batches))
            more += await append_all(store, run.id, ["thought"] * 30 + ["run.completed"])
            got += [event async for batch in batches for event in batch]
    assert got == more
    assert store.fanout.subscribers == 0


# -- checkpoints --------------------------------------------------------------------------


async def test_load_checkpoint_returns_the_latest_saved(store: Store) -> None:
    run = await created(store)
    assert await store.load_checkpoint(run.id) is None
    await store.save_checkpoint(run.id, 1, {"messages": [{"role": "user", "content": "hi"}]})
    state = {"messages": [{"role": "assistant", "content": "ok"}], "usage": {"steps": 2}}
    await store.save_checkpoint(run.id, 2, state)
    assert await store.load_checkpoint(run.id) == Checkpoint(2, state)


async def test_a_checkpoint_loads_typed_in_the_current_layout(store: Store) -> None:
    run = await created(store)
    await store.save_checkpoint(run.id, 3, {"messages": [{"role": "user", "content": "hi"}]})
    loaded = await store.load_checkpoint(run.id)
    assert isinstance(loaded, Checkpoint)
    assert (loaded.step, loaded.version) == (3, CHECKPOINT_FORMAT)
    assert loaded.state == {"messages": [{"role": "user", "content": "hi"}]}


async def test_a_checkpoint_is_a_snapshot_of_the_state_when_saved(store: Store) -> None:
    run = await created(store)
    messages = [{"role": "user", "content": "hi"}]
    await store.save_checkpoint(run.id, 1, {"messages": messages})
    messages[0]["content"] = "elided"  # the live run goes on changing its state
    messages.append({"role": "assistant", "content": "later"})
    loaded = await store.load_checkpoint(run.id)
    assert loaded == Checkpoint(1, {"messages": [{"role": "user", "content": "hi"}]})
    loaded.state["messages"].clear()
    assert await store.load_checkpoint(run.id) != loaded


@pytest.fixture(params=["sqlite", "redis", "postgres"])
async def reopenable(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[Callable[[], Store]]:
    """Makes stores on one durable place: each a process that starts afresh (knows nothing
    of what another wrote)."""
    made: list[Store] = []
    url = "" if request.param == "sqlite" else request.getfixturevalue(f"{request.param}_url")

    def make() -> Store:
        one: Store
        if not url:
            one = SqliteRunStore(str(tmp_path / "r.db"))
        elif request.param == "postgres":
            one = PostgresRunStore(url)
        else:
            one = RedisRunStore(url)
        made.append(one)
        return one

    try:
        yield make
    finally:
        for one in made:
            await one.close()


def conversation(count: int) -> list[dict[str, object]]:
    return [{"role": "user", "content": f"message {i}", "n": i} for i in range(count)]


async def test_checkpoints_of_a_growing_conversation_read_back_whole_at_every_step(
    store: Store,
) -> None:
    # as the engine does: one live list it appends to, a fresh list per checkpoint
    run = await created(store)
    live = conversation(2)
    for step in range(1, 6):
        live += conversation(step)
        state = {"messages": list(live), "step": step, "acting": step % 2 == 0}
        await store.save_checkpoint(run.id, step, state)
        assert await store.load_checkpoint(run.id) == Checkpoint(step, state)


async def test_a_checkpoint_with_an_earlier_message_replaced_reads_back_the_new_one(
    store: Store,
) -> None:
    run = await created(store)
    live = conversation(4)
    await store.save_checkpoint(run.id, 1, {"messages": list(live)})
    live[1] = {**live[1], "content": "[elided]"}  # trimming replaces, never edits in place
    live.append({"role": "assistant", "content": "next"})
    await store.save_checkpoint(run.id, 2, {"messages": list(live)})
    assert await store.load_checkpoint(run.id) == Checkpoint(2, {"messages": live})


async def test_a_shorter_conversation_replaces_the_stored_one(store: Store) -> None:
    run = await created(store)
    await store.save_checkpoint(run.id, 1, {"messages": conversation(5)})
    await store.save_checkpoint(run.id, 2, {"messages": conversation(2)})
    loaded = await store.load_checkpoint(run.id)
    assert loaded == Checkpoint(2, {"messages": conversation(2)})


async def test_a_run_deleted_and_made_again_gets_a_whole_checkpoint(store: Store) -> None:
    run = await created(store)
    live = conversation(3)
    await store.save_checkpoint(run.id, 1, {"messages": list(live)})
    await store.delete(run.id)
    await store.create(run)  # the same id again, without its checkpoint
    live.append({"role": "assistant", "content": "after"})
    await store.save_checkpoint(run.id, 2, {"messages": list(live)})
    assert await store.load_checkpoint(run.id) == Checkpoint(2, {"messages": live})


async def test_a_new_process_reads_back_exactly_the_conversation_and_carries_on(
    reopenable: Callable[[], Store],
) -> None:
    first = reopenable()
    await first.open()
    run = await created(first)
    live = conversation(3)
    for step in range(1, 4):  # a run checkpointing as it goes, then its process dies
        live.append({"role": "assistant", "content": f"step {step}"})
        await first.save_checkpoint(run.id, step, {"messages": list(live), "acting": True})

    second = reopenable()  # another process: resumes the run from what is stored
    await second.open()
    loaded = await second.load_checkpoint(run.id)
    assert loaded == Checkpoint(3, {"messages": live, "acting": True})
    assert loaded is not None
    resumed = loaded.state["messages"]
    resumed.append({"role": "tool", "content": "redone"})
    await second.save_checkpoint(run.id, 4, {"messages": list(resumed)})
    resumed.append({"role": "assistant", "content": "step 5"})
    await second.save_checkpoint(run.id, 5, {"messages": list(resumed)})

    third = reopenable()
    await third.open()
    assert await third.load_checkpoint(run.id) == Checkpoint(5, {"messages": resumed})


async def test_an_events_stored_data_is_fixed_when_appended(store: Store) -> None:
    run = await created(store)
    data = {"content": "full text", "nested": {"n": 1}}
    await store.append(run.id, "observation", 1, data)
    data["content"] = "changed"
    data["nested"]["n"] = 2
    (stored,) = await store.read(run.id)
    assert stored.data == {"content": "full text", "nested": {"n": 1}}


async def test_a_live_event_equals_its_replay(store: Store) -> None:
    made = record()
    await store.create(made)
    data = {"text": "思考", "kind": StopReason.FINISHED, "pair": (1, 2)}
    live = await store.append(made.id, "thought", 3, data)
    data["text"] = "changed after the append"
    (stored,) = await store.read(made.id)
    assert live.data == stored.data == {"text": "思考", "kind": "finished", "pair": [1, 2]}


# -- a record that does not read back ---------------------------------------------------------


@pytest.mark.parametrize("text", ["poisoned", "{not json", "[]"])
async def test_a_record_that_does_not_read_back_fails_alone(store: Store, text: str) -> None:
    older, bad, _ = [await created(store, owner="alice", key=f"k{i}") for i in range(3)]
    stored = poisoned(await raw_record(store, bad.id)) if text == "poisoned" else text
    await write_raw_record(store, bad.id, stored)

    with capture_logs() as logs, pytest.raises(RunUnreadableError) as raised:
        await store.get(bad.id)
    assert [(e["event"], e["run_id"]) for e in logs] == [("run_read_failed", bad.id)]
    assert raised.value.run_id == bad.id
    assert raised.value.owner == "alice"  # kept beside the record: who may be told
    if text == "poisoned":
        assert "settings.max_total_tokens" in raised.value.problem
        assert str(TOO_BIG) not in raised.value.message  # what is wrong, not the value
    with pytest.raises(RunUnreadableError):
        await store.find_by_idempotency_key("alice", "k1")
    assert await store.get(older.id) == older
    assert await store.find_by_idempotency_key("alice", "k0") == older


async def test_list_runs_leaves_an_unreadable_run_out_names_it_and_lists_on_past_it(
    store: Store,
) -> None:
    parent = new_run_id()
    runs = [await created(store, owner="alice", previous_run_id=parent) for _ in range(5)]
    bad = runs[2]
    await write_raw_record(store, bad.id, poisoned(await raw_record(store, bad.id)))
    unreadable: list[RunUnreadableError] = []

    newest = await store.list_runs(owner="alice", limit=4, unreadable=unreadable)

    assert [r.id for r in newest] == [r.id for r in reversed(runs) if r is not bad]
    assert [e.run_id for e in unreadable] == [bad.id]
    # without a list to report to, it is left out just the same: never raised
    assert await store.list_runs(owner=None, any_owner=True) == newest
    for other in (
        await store.list_runs(owner="bob", unreadable=unreadable),
        await store.list_runs(owner="bob", previous_run_id=parent, unreadable=unreadable),
    ):
        assert other == []
    assert len(unreadable) == 1  # not named to another owner


# -- usage counters (quotas per API key, DESIGN §13) ----------------------------------------

DAY = "2026-03-14"


async def test_a_keys_day_starts_at_zero_and_adds_up_what_is_added(store: Store) -> None:
    counters = store.counters
    assert await counters.day_usage("alice", DAY) == DayUsage()
    first = await counters.add_usage("alice", DAY, DayUsage(runs=1))
    call = DayUsage(llm_calls=1, prompt_tokens=1000, completion_tokens=100, cost_usd=0.0025)
    second = await counters.add_usage("alice", DAY, call)
    unpriced = DayUsage(llm_calls=1, unpriced_calls=1, prompt_tokens=10, completion_tokens=1)
    third = await counters.add_usage("alice", DAY, unpriced)
    for added in (first, second, third):  # queued: each stored once awaited
        await added

    total = await counters.day_usage("alice", DAY)
    assert total == DayUsage(1, 2, 1, 1010, 101, pytest.approx(0.0025, rel=1e-12))
    assert total.total_tokens == 1111


async def test_each_key_and_each_day_count_apart(store: Store) -> None:
    counters = store.counters
    await (await counters.add_usage("alice", DAY, DayUsage(runs=2)))
    await (await counters.add_usage("alice", "2026-03-15", DayUsage(runs=5)))
    await (await counters.add_usage("bob", DAY, DayUsage(runs=3)))
    await (await counters.add_usage(None, DAY, DayUsage(runs=7)))  # auth off: one tenant
    assert (await counters.day_usage("alice", DAY)).runs == 2
    assert (await counters.day_usage("alice", "2026-03-15")).runs == 5
    assert (await counters.day_usage("bob", DAY)).runs == 3
    assert (await counters.day_usage(None, DAY)).runs == 7


async def test_concurrent_adds_all_count(store: Store) -> None:
    counters = store.counters
    call = DayUsage(llm_calls=1, prompt_tokens=3, completion_tokens=2, cost_usd=0.5)

    async def add() -> None:
        await (await counters.add_usage("alice", DAY, call))

    with anyio.fail_after(BOUND_S):
        async with anyio.create_task_group() as tg:
            for _ in range(50):
                tg.start_soon(add)
    assert await counters.day_usage("alice", DAY) == DayUsage(0, 50, 0, 150, 100, 25.0)


async def test_a_take_back_is_an_add_of_minus_one(store: Store) -> None:
    counters = store.counters
    await (await counters.add_usage("alice", DAY, DayUsage(runs=1)))
    await (await counters.add_usage("alice", DAY, DayUsage(runs=-1)))
    assert await counters.day_usage("alice", DAY) == DayUsage()


async def test_admissions_are_noted_per_key_read_since_a_time_and_dropped_by_ticket(
    store: Store,
) -> None:
    counters = store.counters
    await (await counters.admitted("alice", "t1", 1000.0))
    await (await counters.admitted("alice", "t2", 1010.5))
    await (await counters.admitted("bob", "t3", 1011.0))
    assert await counters.admissions_since("alice", 999.0) == [1000.0, 1010.5]
    assert await counters.admissions_since("alice", 1000.0) == [1010.5]  # after, not at
    assert await counters.admissions_since("bob", 0.0) == [1011.0]
    assert await counters.admissions_since(None, 0.0) == []

    await (await counters.unadmitted("alice", "t1"))
    assert await counters.admissions_since("alice", 0.0) == [1010.5]
    await (await counters.unadmitted("alice", "no-such-ticket"))  # nothing to drop


async def test_admissions_older_than_a_minute_are_dropped_as_new_ones_come(store: Store) -> None:
    counters = store.counters
    await (await counters.admitted("alice", "old", 1000.0))
    await (await counters.admitted("alice", "new", 1061.0))
    assert await counters.admissions_since("alice", 0.0) == [1061.0]


async def test_active_runs_counts_a_keys_queued_running_and_waiting_runs(store: Store) -> None:
    counters = store.counters
    assert await counters.active_runs("alice") == 0
    queued = await created(store, owner="alice")
    running = await created(store, owner="alice", status="running")
    await created(store, owner="alice", status="requires_action")
    await created(store, owner="alice", status="completed")
    await created(store, owner="bob")
    await created(store)  # no owner
    assert await counters.active_runs("alice") == 3
    assert await counters.active_runs("bob") == 1
    assert await counters.active_runs(None) == 1

    running.status = RunStatus.CANCELLED  # it ended
    await store.save(running)
    await store.delete(queued.id)  # (only ended runs are deleted; the index must not care)
    assert await counters.active_runs("alice") == 1


async def test_a_new_process_reads_back_the_counters(reopenable: Callable[[], Store]) -> None:
    first = reopenable()
    await first.open()
    call = DayUsage(runs=1, llm_calls=2, prompt_tokens=300, completion_tokens=30, cost_usd=0.75)
    await (await first.counters.add_usage("alice", DAY, call))
    await (await first.counters.admitted("alice", "t1", 1000.0))

    second = reopenable()  # a restart
    await second.open()
    assert await second.counters.day_usage("alice", DAY) == call
    assert await second.counters.admissions_since("alice", 0.0) == [1000.0]
