"""The cluster's queue on Postgres counts the places POSTs being admitted hold (DESIGN §8):
a place younger than `ADMIT_HOLD_S` counts towards the cap, an older one (its replica died
between the place and the run) is dropped by the next admission and counts no more. A place
given back is queued, not awaited (the POST answers without a commit more); every later
admission counts after it, and a batch's are one statement. A run's queueing takes its POST's
place in the same statement (counted once, by one or the other) and is not awaited. Releases
of held runs of one batch are one statement, made after the holds asked before them. A cancel
asked while the listener was away reaches the run held here once it listens again. A run a
POST made but did not queue (its replica died, or Postgres went away, between the two writes)
is queued by a sweep."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from app.engine.events import EventType
from app.runs.replicas import postgres_cluster
from app.runs.replicas.postgres_cluster import ADMIT_HOLD_S, PostgresCoordinator
from app.runs.replicas.postgres_queue import QUEUED
from app.runs.stores.postgres import PostgresRunStore
from app.runs.stores.postgres_rows import NOW_S
from tests.fakes.postgres_server import PostgresServer
from tests.runs.test_postgres_follow import until
from tests.runs.test_postgres_together import made_counted
from tests.runs.test_store_contract import record


@pytest.fixture
async def coordinator(postgres_url: str) -> AsyncIterator[PostgresCoordinator]:
    store = PostgresRunStore(postgres_url)
    await store.open()
    try:
        yield PostgresCoordinator(store, replica="r1")
    finally:
        await store.close()


async def places(coordinator: PostgresCoordinator) -> list[str]:
    rows = await coordinator.store.query("SELECT ticket FROM queue_places ORDER BY ticket", ())
    return [ticket for (ticket,) in rows]


async def place(coordinator: PostgresCoordinator, ticket: str, age_s: float) -> None:
    sql = f"INSERT INTO queue_places (ticket, at) VALUES (%s, {NOW_S} - %s) RETURNING 1"
    assert await coordinator.store.query(sql, (ticket, age_s)) == [(1,)]


async def test_a_place_held_by_a_post_being_admitted_counts_until_it_is_too_old(
    coordinator: PostgresCoordinator,
) -> None:
    await place(coordinator, "a fresh place", 1.0)
    await place(coordinator, "a stale place", ADMIT_HOLD_S + 5)

    assert await coordinator.reserve(cap=1, busy=True) == (None, 1)  # the fresh one counts
    assert await places(coordinator) == ["a fresh place"]  # the stale one dropped

    ticket, queued = await coordinator.reserve(cap=2, busy=True)
    assert ticket is not None
    assert queued == 1
    assert sorted(await places(coordinator)) == sorted(["a fresh place", ticket])
    await coordinator.unreserve(ticket)  # queued: the next admission counts after it
    again, queued = await coordinator.reserve(cap=2, busy=True)
    assert again is not None
    assert queued == 1
    assert sorted(await places(coordinator)) == sorted(["a fresh place", again])


async def test_places_given_back_together_are_one_statement_made_before_the_next_count(
    coordinator: PostgresCoordinator, monkeypatch: pytest.MonkeyPatch
) -> None:
    tickets = []
    for _ in range(3):
        ticket, _queued = await coordinator.reserve(cap=10, busy=True)
        assert ticket is not None
        tickets.append(ticket)
    calls = made_counted(monkeypatch, postgres_cluster, "unreserve_many")
    for ticket in tickets:  # a POST answers without waiting for its place to be given back
        await coordinator.unreserve(ticket)
    last, queued = await coordinator.reserve(cap=1, busy=True)  # counted after them

    assert (last is not None, queued) == (True, 0)
    assert calls == [3]
    assert await places(coordinator) == [last]


async def test_an_empty_queue_admits_a_run_a_free_slot_takes_even_at_a_cap_of_zero(
    coordinator: PostgresCoordinator,
) -> None:
    ticket, queued = await coordinator.reserve(cap=0, busy=False)
    assert ticket is not None
    assert queued == 0
    assert await coordinator.reserve(cap=0, busy=True) == (None, 1)


async def test_releases_of_one_batch_are_one_statement_after_the_holds_asked_before(
    coordinator: PostgresCoordinator, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = coordinator.store
    first, second, held_a, held_b, held_c = [record() for _ in range(5)]
    for run in (first, second, held_a, held_b, held_c):
        await store.create(run)
    await coordinator.hold(held_a.id, first.id)
    calls = made_counted(monkeypatch, postgres_cluster, "release_many")
    asked = [  # queued together: one batch
        asyncio.ensure_future(coordinator.hold(held_b.id, second.id)),
        asyncio.ensure_future(coordinator.release_held(first.id)),
        asyncio.ensure_future(coordinator.release_held(second.id)),
        asyncio.ensure_future(coordinator.hold(held_c.id, first.id)),  # after: stays held
    ]
    await asyncio.gather(*asked)

    assert calls == [2]
    rows = await store.query(
        "SELECT id, held_behind FROM runs WHERE id = ANY(%s)", ([held_a.id, held_b.id, held_c.id],)
    )
    assert dict(rows) == {held_a.id: None, held_b.id: None, held_c.id: first.id}


async def test_admissions_of_one_batch_count_in_turn_under_one_lock(
    coordinator: PostgresCoordinator, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = made_counted(monkeypatch, postgres_cluster, "reserve_many")
    asked = [asyncio.ensure_future(coordinator.reserve(cap=2, busy=True)) for _ in range(3)]
    results = await asyncio.gather(*asked)  # queued together: one batch

    assert calls == [3]
    assert [queued for _ticket, queued in results] == [0, 1, 2]  # each counts the ones before
    tickets = [ticket for ticket, _queued in results]
    assert tickets[2] is None  # the queue was full by then
    assert await places(coordinator) == sorted(t for t in tickets if t is not None)


class Starter:
    """The replica's side a take hands runs to: it asks, as each starts, whether a cancel
    was asked (after a cancel of each run of `hear`, its notification heard at once)."""

    def __init__(
        self, coordinator: PostgresCoordinator, hear: set[str], *, relisten: bool = False
    ) -> None:
        self.coordinator = coordinator
        self.hear = hear
        self.relisten = relisten
        self.slot_freed = asyncio.Event()
        self.asked: dict[str, bool] = {}

    def free_slots(self) -> int:
        return 10

    async def claimed(self, run_id: str, record: Any = None) -> None:
        if run_id in self.hear:  # a cancel asked after the take, its notification heard
            await self.coordinator.request_cancel(run_id)
            self.coordinator._told("c:" + run_id)
        if self.relisten:  # the listener listened again meanwhile: it may have missed some
            self.coordinator.store.follower.listened += 1
        self.asked[run_id] = await self.coordinator.cancel_requested(run_id)

    def cancel_asked(self, run_id: str) -> None:
        pass


@pytest.mark.parametrize("relisten", [False, True])
async def test_a_run_taken_knows_its_cancel_from_the_take_or_the_listener_without_a_read(
    coordinator: PostgresCoordinator, monkeypatch: pytest.MonkeyPatch, relisten: bool
) -> None:
    """Read only when the listener listened again since the take (a cancel may be unheard)."""
    store = coordinator.store
    before, after, none = [record() for _ in range(3)]
    for run in (before, after, none):
        await store.create(run)
        await coordinator.enqueue(run.id)
    await coordinator.request_cancel(before.id)  # asked before the take: the take reads it
    async with asyncio.timeout(20):
        await store.follower.listening.wait()
    reads: list[str] = []
    query = store.query

    async def counted(sql: str, params: tuple[Any, ...]) -> Any:
        reads.append(sql)
        return await query(sql, params)

    monkeypatch.setattr(store, "query", counted)
    starter = Starter(coordinator, hear={after.id}, relisten=relisten)
    await coordinator._claim_runs(starter)  # type: ignore[arg-type]

    assert starter.asked == {before.id: True, after.id: True, none.id: False}
    read = [sql for sql in reads if "cancel_requested FROM" in sql]
    assert len(read) == (3 if relisten else 0)


class Listening:
    """A replica's side with runs in hand: the cancels it is told of."""

    def __init__(self) -> None:
        self.slot_freed = asyncio.Event()
        self.cancels: list[str] = []

    def free_slots(self) -> int:
        return 0  # (takes nothing from the queue)

    def cancel_asked(self, run_id: str) -> None:
        self.cancels.append(run_id)


async def test_a_cancel_asked_while_the_listener_was_away_reaches_the_run_once_it_listens_again(
    postgres_url: str, postgres_server: PostgresServer
) -> None:
    store = PostgresRunStore(postgres_url)
    await store.open()
    coordinator = PostgresCoordinator(store, replica="r1", lease_s=600)  # (no renewal in it)
    mine, other = record(), record()
    for run in (mine, other):
        await store.create(run)
        coordinator._hold(run.id, "token of " + run.id)
    member = Listening()
    serving = asyncio.create_task(coordinator.serve(member))  # type: ignore[arg-type]
    try:
        await until(store.follower.listening.is_set)
        listened = store.follower.listened
        # a cancel whose notification this listener never hears (none is sent here: as one
        # sent while it was away), then its backend ends: it listens again
        sql = "UPDATE runs SET cancel_requested = TRUE WHERE id = %s RETURNING 1"
        assert await store.query(sql, (mine.id,)) == [(1,)]
        with postgres_server.admin() as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (store.follower.listener_pid,))
        await until(lambda: store.follower.listened > listened)

        await until(lambda: mine.id in member.cancels)
        assert other.id not in member.cancels
    finally:
        coordinator.stop()
        serving.cancel()
        await asyncio.gather(serving, return_exceptions=True)
        await coordinator.close()
        await store.close()


async def test_a_run_a_post_made_but_did_not_queue_is_queued_once_older_than_a_post_takes(
    coordinator: PostgresCoordinator,
) -> None:
    store = coordinator.store
    stranded, _fresh, held, queued = runs = [record() for _ in range(4)]  # _fresh: just made
    for run in runs:  # each as a POST makes it: the run and its run.queued, not queued yet
        await store.create(run, first_event=(EventType.RUN_QUEUED, 0, {}))
    await coordinator.enqueue(queued.id)
    await coordinator.hold(held.id, queued.id)  # held behind a run not ended
    sql = "UPDATE runs SET created_at = %s WHERE id = ANY(%s) RETURNING 1"
    long_ago = (datetime.now(UTC) - timedelta(seconds=ADMIT_HOLD_S + 5)).isoformat()
    others = [stranded.id, held.id, queued.id]
    assert len(await store.query(sql, (long_ago, others))) == 3
    assert await coordinator.queued() == 1

    await coordinator._queue_stranded()  # (a replica's sweep)

    rows = await store.query(f"SELECT id FROM runs WHERE {QUEUED}", ())
    assert sorted(run_id for (run_id,) in rows) == sorted([stranded.id, queued.id])


async def test_a_runs_queueing_takes_its_posts_place_in_one_step_and_the_post_does_not_wait(
    coordinator: PostgresCoordinator, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = coordinator.store
    ticket, queued = await coordinator.reserve(cap=10, busy=True)
    assert ticket is not None
    assert queued == 0
    run = record()
    await store.create(run, first_event=(EventType.RUN_QUEUED, 0, {}))
    gate = asyncio.Event()
    enqueue_many = postgres_cluster.enqueue_many

    async def held_back(conn: Any, items: list[Any]) -> Any:
        await gate.wait()
        return await enqueue_many(conn, items)

    monkeypatch.setattr(postgres_cluster, "enqueue_many", held_back)
    await coordinator.enqueue(run.id, ticket)  # returns before the write is made
    assert await places(coordinator) == [ticket]  # still counted by its place
    assert await coordinator.queued() == 0
    gate.set()

    _, counted = await coordinator.reserve(cap=10, busy=True)  # made after it: counts it once
    assert counted == 1
    assert await coordinator.queued() == 1
    assert ticket not in await places(coordinator)
