"""Writes the Postgres writer makes together, one statement for many (`postgres_appends`,
`postgres_checkpoints`, `postgres_counters.add_many`): appends queued from several runs commit
in one transaction with seqs 1..N per run in the order asked; an append or a checkpoint of a
run another replica took over (or of a run that is gone) fails alone, without the others being
made again; a run whose appends name two tokens in one batch is fenced by each; a run's other
writes keep their place among its appends; usage adds of one batch are summed per key and day;
runs stepping in turn take a statement per kind and turn; message takes of several runs are one
statement (`postgres_messages.take_many`); closing writes of several runs, and running
records saved with an event, are made together (`postgres_closings`), a fenced one failing
alone; runs made with their first event are one statement, a duplicate failing alone."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import pytest

from app.engine.events import EventType
from app.runs.live import LiveRuns
from app.runs.records import Event, RunRecord, RunStatus, new_run_id
from app.runs.replicas import postgres_messages
from app.runs.store import Checkpoint, DayUsage, DuplicateRunError, LeaseLostError, RunGoneError
from app.runs.stores import postgres, postgres_queued
from app.runs.stores.postgres import PostgresRunStore
from app.runs.stores.postgres_rows import NOW_S
from tests.runs.test_store_contract import record
from tests.runs.test_store_contract_closing import ended

THOUGHT = EventType.THOUGHT


@pytest.fixture
async def store(postgres_url: str) -> AsyncIterator[PostgresRunStore]:
    store = PostgresRunStore(postgres_url)
    await store.open()
    try:
        yield store
    finally:
        await store.close()


async def leased(store: PostgresRunStore, token: str) -> str:
    """A stored run whose lease `token` holds for a minute."""
    run = record()
    await store.create(run)
    sql = f"UPDATE runs SET lease_token = %s, lease_until = {NOW_S} + 60 WHERE id = %s RETURNING 1"
    rows = await store.query(sql, (token, run.id))
    assert rows == [(1,)]
    return run.id


def made_counted(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[int]:
    """The `Many` `module.name`, counting its calls (how many writes each made together)."""
    calls: list[int] = []
    many = getattr(module, name)

    async def made(conn: Any, items: list[Any]) -> Any:
        calls.append(len(items))
        return await many(conn, items)

    monkeypatch.setattr(module, name, made)
    return calls


async def outcomes(futures: list[Awaitable[Event]]) -> list[Event | BaseException]:
    return list(await asyncio.gather(*futures, return_exceptions=True))


async def test_appends_of_several_runs_commit_together_and_a_fenced_one_fails_alone(
    store: PostgresRunStore,
) -> None:
    mine, other, taken = [await leased(store, token) for token in ("a", "b", "c")]
    store.hold(mine, "a")
    store.hold(other, "b")
    store.hold(taken, "mine-no-more")  # another replica's token "c" holds it
    gone = new_run_id()
    commits = store._writer.commits
    futures: list[Awaitable[Event]] = []
    for n in range(3):  # queued before the writer runs: one batch
        for run_id in (mine, taken, other, gone):
            futures.append(await store.append_soon(run_id, THOUGHT, n, {"n": n, "run": run_id}))
    results = await outcomes(futures)

    assert store._writer.commits == commits + 1  # one transaction, none made again
    by_run = {run_id: results[i::4] for i, run_id in enumerate((mine, taken, other, gone))}
    for run_id in (mine, other):
        events = by_run[run_id]
        assert all(isinstance(e, Event) for e in events)
        assert [(e.seq, e.data) for e in events] == [  # type: ignore[union-attr]
            (n + 1, {"n": n, "run": run_id}) for n in range(3)
        ]
        assert await store.read(run_id) == events
    assert all(isinstance(e, LeaseLostError) for e in by_run[taken])
    assert all(isinstance(e, RunGoneError) for e in by_run[gone])
    assert await store.read(taken) == []
    rows = await store.query("SELECT last_seq FROM runs WHERE id = %s", (taken,))
    assert rows == [(0,)]


async def test_a_run_whose_appends_name_two_tokens_in_one_batch_is_fenced_by_each(
    store: PostgresRunStore,
) -> None:
    run_id = await leased(store, "new")
    store.hold(run_id, "old")
    first = await store.append_soon(run_id, THOUGHT, 1, {"n": 1})
    store.hold(run_id, "new")
    second = await store.append_soon(run_id, THOUGHT, 1, {"n": 2})
    third = await store.append_soon(run_id, THOUGHT, 1, {"n": 3})
    results = await outcomes([first, second, third])

    assert isinstance(results[0], LeaseLostError)
    assert [(e.seq, e.data) for e in results[1:]] == [(1, {"n": 2}), (2, {"n": 3})]  # type: ignore[union-attr]
    assert [e.seq for e in await store.read(run_id)] == [1, 2]


async def test_appends_made_together_reach_a_follower_once_each_in_order(
    store: PostgresRunStore,
) -> None:
    run_id = await leased(store, "a")
    store.hold(run_id, "a")
    feed = store.subscribe(run_id)
    first = asyncio.ensure_future(anext(feed))  # following while the appends are made
    futures = [await store.append_soon(run_id, THOUGHT, 1, {"n": n}) for n in range(5)]
    futures.append(await store.append_soon(run_id, EventType.RUN_COMPLETED, 1, {}))
    await asyncio.gather(*futures)
    seen = [await first] + [event async for event in feed]
    assert [e.seq for e in seen] == [1, 2, 3, 4, 5, 6]


async def test_a_run_s_writes_between_appends_made_together_keep_their_order(
    store: PostgresRunStore,
) -> None:
    first, second = [await leased(store, token) for token in ("a", "b")]
    store.hold(first, "a")
    store.hold(second, "b")
    saved = (await store.get(first)).model_copy(update={"model": "saved"})  # type: ignore[union-attr]
    commits = store._writer.commits
    futures = [
        await store.append_soon(first, THOUGHT, 1, {"n": 1}),
        await store.append_soon(second, THOUGHT, 1, {"n": 1}),
        await store.save_checkpoint_soon(second, 1, {"messages": []}),  # made before the group
        await store.append_soon(first, THOUGHT, 2, {"n": 2}, record=saved),  # after it
        await store.append_soon(first, THOUGHT, 3, {"n": 3}),
        await store.append_soon(second, THOUGHT, 2, {"n": 2}),
    ]
    await asyncio.gather(*futures)

    assert store._writer.commits == commits + 1
    assert [(e.seq, e.data) for e in await store.read(first)] == [
        (1, {"n": 1}),
        (2, {"n": 2}),
        (3, {"n": 3}),
    ]
    assert [e.seq for e in await store.read(second)] == [1, 2]
    assert (await store.get(first)) == saved
    assert (await store.load_checkpoint(second)) is not None


async def test_runs_writing_events_then_a_checkpoint_in_turn_take_a_statement_per_turn(
    store: PostgresRunStore,
) -> None:
    """Ten runs each queue an event, a checkpoint, an event, a checkpoint, an event (as a step
    does): the batch is three appends statements and two checkpoint ones, not one per run and
    turn, and each run's writes are made in the order asked."""
    runs = [await leased(store, f"t{n}") for n in range(10)]
    calls: list[tuple[str, int]] = []

    def counted(name: str, many: Any) -> Any:
        async def made(conn: Any, items: list[Any]) -> Any:
            calls.append((name, len(items)))
            return await many(conn, items)

        return made

    store._append_many = counted("appends", store._append_many)  # type: ignore[method-assign]
    store._save_many = counted("checkpoints", store._save_many)  # type: ignore[method-assign]
    commits = store._writer.commits
    futures: list[Awaitable[Any]] = []
    for n, run_id in enumerate(runs):
        store.hold(run_id, f"t{n}")
        for turn in range(2):
            futures.append(await store.append_soon(run_id, THOUGHT, turn + 1, {"turn": turn}))
            state = {"messages": said(turn + 1)}
            futures.append(await store.save_checkpoint_soon(run_id, turn + 1, state))
        futures.append(await store.append_soon(run_id, THOUGHT, 3, {"turn": 2}))
    await asyncio.gather(*futures)

    assert store._writer.commits == commits + 1
    assert calls == [("appends", 10), ("checkpoints", 10)] * 2 + [("appends", 10)]
    for run_id in runs:
        events = await store.read(run_id)
        assert [(e.seq, e.data) for e in events] == [(n + 1, {"turn": n}) for n in range(3)]
        assert await store.load_checkpoint(run_id) == Checkpoint(2, {"messages": said(2)})


def said(n: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"message {i}"} for i in range(n)]


async def test_checkpoints_of_several_runs_commit_together_and_a_fenced_one_fails_alone(
    store: PostgresRunStore,
) -> None:
    mine, other, taken = [await leased(store, token) for token in ("a", "b", "c")]
    store.hold(mine, "a")
    store.hold(other, "b")
    store.hold(taken, "mine-no-more")
    live = said(5)  # the run's conversation, growing: its checkpoints after the first, deltas
    await store.save_checkpoint(mine, 1, {"messages": live[:2]})
    commits = store._writer.commits
    futures = [
        await store.save_checkpoint_soon(mine, 2, {"messages": live[:3]}),
        await store.save_checkpoint_soon(other, 1, {"messages": said(1)}),
        await store.save_checkpoint_soon(taken, 1, {"messages": said(1)}),
        await store.save_checkpoint_soon(mine, 3, {"messages": live}),  # in the next statement
        await store.save_checkpoint_soon(other, 2, {"messages": said(2)}),
    ]
    results = await asyncio.gather(*futures, return_exceptions=True)

    assert store._writer.commits == commits + 1
    assert results[:2] + results[3:] == [None] * 4
    assert isinstance(results[2], LeaseLostError)
    assert await store.load_checkpoint(mine) == Checkpoint(3, {"messages": said(5)})
    assert await store.load_checkpoint(other) == Checkpoint(2, {"messages": said(2)})
    assert await store.load_checkpoint(taken) is None
    chunks = await store.query("SELECT start FROM checkpoint_chunks WHERE run_id = %s", (mine,))
    assert sorted(chunks) == [(0,), (2,), (3,)]  # deltas on the whole of step 1
    store.hold(taken, "c")  # its lease again: its next checkpoint is whole
    await store.save_checkpoint(taken, 2, {"messages": said(2)})
    assert await store.load_checkpoint(taken) == Checkpoint(2, {"messages": said(2)})


async def test_usage_adds_of_one_batch_are_summed_per_key_and_day(
    store: PostgresRunStore,
) -> None:
    call = DayUsage(llm_calls=1, prompt_tokens=10, completion_tokens=2, cost_usd=0.25)
    commits = store._writer.commits
    futures = [
        await store.counters.add_usage("key-a", "2026-12-03", DayUsage(runs=1)),
        await store.counters.add_usage("key-a", "2026-12-03", call),
        await store.counters.add_usage("key-b", "2026-12-03", call),
        await store.counters.add_usage("key-a", "2026-12-03", call),
        await store.counters.add_usage("key-a", "2026-12-04", call),
        await store.counters.add_usage("key-a", "2026-12-03", DayUsage(runs=-1)),
    ]
    await asyncio.gather(*futures)

    assert store._writer.commits == commits + 1
    assert await store.counters.day_usage("key-a", "2026-12-03") == DayUsage(
        runs=0, llm_calls=2, prompt_tokens=20, completion_tokens=4, cost_usd=0.5
    )
    assert await store.counters.day_usage("key-b", "2026-12-03") == call
    assert await store.counters.day_usage("key-a", "2026-12-04") == call


async def test_a_lone_append_or_checkpoint_is_its_own_transaction_and_fenced_alike(
    store: PostgresRunStore,
) -> None:
    """A batch of one append (or one checkpoint) is made without BEGIN/COMMIT: its statement
    checks the lease and writes, or writes nothing."""
    run_id = await leased(store, "theirs")
    store.hold(run_id, "mine-no-more")
    with pytest.raises(LeaseLostError):
        await store.append(run_id, THOUGHT, 1, {"n": 1})
    with pytest.raises(LeaseLostError):
        await store.save_checkpoint(run_id, 1, {"messages": said(1)})
    assert await store.read(run_id) == []
    assert await store.load_checkpoint(run_id) is None
    with pytest.raises(RunGoneError):
        await store.append(new_run_id(), THOUGHT, 1, {"n": 1})
    store.hold(run_id, "theirs")
    assert (await store.append(run_id, THOUGHT, 1, {"n": 1})).seq == 1
    await store.save_checkpoint(run_id, 1, {"messages": said(1)})
    assert await store.load_checkpoint(run_id) == Checkpoint(1, {"messages": said(1)})


async def test_message_takes_of_several_runs_are_one_statement_and_a_fenced_one_fails_alone(
    store: PostgresRunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine, other, taken = [await leased(store, token) for token in ("a", "b", "c")]
    store.hold(mine, "a")
    store.hold(other, "b")
    store.hold(taken, "mine-no-more")  # another replica's token "c" holds it
    gone = new_run_id()  # unfenced: a run gone has no messages
    for run_id, contents in ((mine, ["one", "two"]), (taken, ["kept"])):
        await store.submit(
            lambda conn, run_id=run_id, contents=contents: postgres_messages.insert_messages(
                conn, run_id, contents, front=False
            )
        )
    calls = made_counted(monkeypatch, postgres_messages, "take_many")
    inbox = postgres_messages.PostgresInbox(store, live=LiveRuns(4), max_pending=10)
    commits = store._writer.commits
    results = await asyncio.gather(
        inbox._taken(mine, close=False),
        inbox._taken(other, close=True),
        inbox._taken(taken, close=False),
        inbox._taken(gone, close=False),
        return_exceptions=True,
    )

    assert store._writer.commits == commits + 1
    assert calls == [4]
    assert results[:2] + results[3:] == [["one", "two"], [], []]
    assert isinstance(results[2], LeaseLostError)
    closed = "SELECT id, inbox_closed FROM runs WHERE id IN (%s, %s, %s)"
    assert sorted(await store.query(closed, (mine, other, taken))) == sorted(
        [(mine, False), (other, True), (taken, False)]
    )
    left = await store.query("SELECT run_id, content FROM run_messages", ())
    assert left == [(taken, "kept")]  # a fenced take took nothing


async def test_a_lone_write_of_several_statements_is_made_in_a_transaction(
    store: PostgresRunStore,
) -> None:
    """A write made with others (`many`) that is alone in its batch, and is more than one
    statement (an admission: its lock, then its count), gets a transaction: an advisory lock
    taken by its first statement still holds at its second."""

    async def apply(conn: Any) -> int:
        await conn.execute("SELECT pg_advisory_xact_lock(4242)")
        sql = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
        row = await (await conn.execute(sql)).fetchone()
        return int(row[0])

    async def many(conn: Any, items: list[None]) -> list[int]:
        return [await apply(conn) for _ in items]

    assert await store.queue(apply, None, "admissions", (many, None)) == 1


async def test_closing_writes_of_several_runs_are_made_together_and_a_fenced_one_fails_alone(
    store: PostgresRunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine, other, taken = [await leased(store, token) for token in ("a", "b", "c")]
    store.hold(mine, "a")
    store.hold(other, "b")
    store.hold(taken, "mine-no-more")  # another replica's token "c" holds it
    calls = made_counted(monkeypatch, postgres_queued, "close_many")
    closings = []
    for run_id in (mine, taken, other):
        if run_id != taken:
            await store.append(run_id, THOUGHT, 1, {"n": 1})
        run = await store.get(run_id)
        assert run is not None
        closings.append((run_id, ended(run)))
    failures = store.write_failures()
    futures = [  # queued together: one batch
        await store.append_closing(
            run_id, EventType.RUN_COMPLETED, 1, {"answer": "a"}, record=run, failures=failures
        )
        for run_id, run in closings
    ]
    results = await asyncio.gather(*futures, return_exceptions=True)

    assert calls == [3]
    assert isinstance(results[1], LeaseLostError)
    assert [(e.run_id, e.seq, e.type) for e in results if isinstance(e, Event)] == [
        (mine, 2, EventType.RUN_COMPLETED),
        (other, 2, EventType.RUN_COMPLETED),
    ]
    for run_id, run in closings:
        stored = await store.get(run_id)
        summaries = await store.query(
            "SELECT status FROM run_summaries WHERE run_id = %s", (run_id,)
        )
        if run_id == taken:  # nothing of it written
            assert stored is not None
            assert stored.status is not RunStatus.COMPLETED
            assert summaries == []
            assert await store.read(run_id) == []
        else:
            assert stored == run
            assert summaries == [("completed",)]


async def test_running_records_saved_with_an_event_are_made_together_and_a_fenced_one_alone(
    store: PostgresRunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine, other, taken = [await leased(store, token) for token in ("a", "b", "c")]
    gone = record()  # never stored: a fenced save must not make it
    for run_id, token in ((mine, "a"), (other, "b"), (taken, "mine-no-more"), (gone.id, "g")):
        store.hold(run_id, token)
    calls = made_counted(monkeypatch, postgres_queued, "close_many")
    running = {}
    for run_id in (mine, taken, other):
        run = await store.get(run_id)
        assert run is not None
        running[run_id] = run.model_copy(update={"status": RunStatus.RUNNING})
    running[gone.id] = gone.model_copy(update={"status": RunStatus.RUNNING})
    futures = [  # queued together: one batch
        await store.append_soon(run_id, EventType.RUN_STARTED, 0, {}, record=run)
        for run_id, run in running.items()
    ]
    results = await outcomes(futures)

    assert calls == [4]
    assert isinstance(results[1], LeaseLostError)
    assert isinstance(results[3], RunGoneError)
    assert [(e.run_id, e.seq, e.type) for e in results if isinstance(e, Event)] == [
        (mine, 1, EventType.RUN_STARTED),
        (other, 1, EventType.RUN_STARTED),
    ]
    for run_id in (mine, other):
        assert await store.get(run_id) == running[run_id]
    taken_now = await store.get(taken)
    assert taken_now is not None
    assert taken_now.status is RunStatus.QUEUED
    assert await store.read(taken) == []
    assert await store.get(gone.id) is None
    assert await store.read(gone.id) == []


async def test_runs_made_together_are_one_statement_and_a_duplicate_fails_alone(
    store: PostgresRunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    create_many = postgres.create_many

    async def counted(conn: Any, items: list[Any], channel: str) -> Any:
        calls.append(len(items))
        return await create_many(conn, items, channel)

    monkeypatch.setattr(postgres, "create_many", counted)
    first = (EventType.RUN_QUEUED, 0, {"n": 1})

    async def made(runs: list[RunRecord]) -> list[Event | BaseException]:
        tasks = [store.create(run, first_event=first) for run in runs]  # one batch
        return list(await asyncio.gather(*tasks, return_exceptions=True))

    a, b = record(), record()
    results = await made([a, b])
    assert [(e.run_id, e.seq) for e in results if isinstance(e, Event)] == [(a.id, 1), (b.id, 1)]
    assert calls == [2]
    c, d = record(), record()
    results = await made([c, a, d])  # `a` again: refused, alone

    assert calls == [2, 3]  # then each alone
    assert isinstance(results[1], DuplicateRunError)
    assert [(e.run_id, e.seq) for e in results if isinstance(e, Event)] == [(c.id, 1), (d.id, 1)]
    for run in (a, b, c, d):
        assert await store.get(run.id) == run
        events = await store.read(run.id)
        assert [(e.seq, e.type, e.data) for e in events] == [(1, EventType.RUN_QUEUED, {"n": 1})]
