"""The `ScheduleStore` contract (DESIGN §21), run against every store's: what the scheduler
relies on for exactly-once firing, whichever store a deployment picks. A new store (Postgres)
runs this suite first."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from app.runs.schedules.records import Firing, FiringOutcome, Schedule
from app.runs.schedules.store import Claim, ScheduleStore
from app.runs.stores.memory import MemoryRunStore
from app.runs.stores.postgres import PostgresRunStore
from app.runs.stores.redis_store import RedisRunStore
from app.runs.stores.sqlite import SqliteRunStore

Store = MemoryRunStore | SqliteRunStore | RedisRunStore | PostgresRunStore


@pytest.fixture(params=["memory", "sqlite", "redis", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    made: Store
    if request.param == "memory":
        made = MemoryRunStore()
    elif request.param == "sqlite":
        made = SqliteRunStore(str(tmp_path / "r.db"))
    elif request.param == "postgres":  # a real Postgres, a new database for this test
        made = PostgresRunStore(request.getfixturevalue("postgres_url"))
    else:
        made = RedisRunStore(request.getfixturevalue("redis_url"))
    await made.open()
    try:
        yield made
    finally:
        await made.close()


def schedules(store: Store) -> ScheduleStore:
    port: ScheduleStore = store.schedules
    return port


def sched(sid: str, owner: str | None = "alice", due: float | None = 1000.5) -> Schedule:
    at = datetime(2030, 1, 1, tzinfo=UTC)
    return Schedule(
        id=sid,
        owner=owner,
        cron="* * * * *",
        run={"task": "t"},
        next_due_at=due,
        created_at=at,
        updated_at=at,
    )


def firing(due: float, by: str = "a", until: float = 2000.0) -> Firing:
    return Firing("sch_1", due, by, until)


async def test_schedules_are_kept_listed_per_owner_replaced_and_removed(store: Store) -> None:
    book = schedules(store)
    for sid, owner in [("sch_1", "alice"), ("sch_2", None), ("sch_3", "alice")]:
        await book.insert(sched(sid, owner))
    found = await book.get("sch_1")
    assert found is not None
    assert found == sched("sch_1")
    assert [s.id for s in await book.owned("alice", limit=10)] == ["sch_1", "sch_3"]
    assert [s.id for s in await book.owned("alice", limit=10, after="sch_1")] == ["sch_3"]
    assert [s.id for s in await book.owned(None, limit=10)] == ["sch_2"]
    changed = sched("sch_1", due=None).model_copy(update={"cron": "0 * * * *"})
    assert await book.replace(changed)
    assert await book.get("sch_1") == changed
    assert not await book.replace(sched("sch_9"))
    assert await book.remove("sch_1")
    assert not await book.remove("sch_1")
    assert await book.get("sch_1") is None
    assert [s.id for s in await book.owned("alice", limit=10)] == ["sch_3"]


async def test_due_lists_the_schedules_due_soonest_first_and_advance_is_compare_and_set(
    store: Store,
) -> None:
    book = schedules(store)
    await book.insert(sched("sch_1", due=1000.25))
    await book.insert(sched("sch_2", due=900.0))
    await book.insert(sched("sch_3", due=None))
    assert await book.next_due_at() == 900.0
    assert [s.id for s in await book.due(999.0)] == ["sch_2"]
    assert [s.id for s in await book.due(1000.25)] == ["sch_2", "sch_1"]
    assert not await book.advance("sch_1", expected=999.0, to=2000.0)
    assert await book.advance("sch_1", expected=1000.25, to=1060.125)
    assert not await book.advance("sch_1", expected=1000.25, to=3000.0)
    assert (await book.get("sch_1")).next_due_at == 1060.125  # type: ignore[union-attr]
    assert await book.advance("sch_2", expected=900.0, to=None)
    assert await book.next_due_at() == 1060.125


async def test_one_of_concurrent_claimants_wins_a_due_time(store: Store) -> None:
    book = schedules(store)
    await book.insert(sched("sch_1"))
    claims = await asyncio.gather(*(book.claim(firing(60.0, by=f"r{i}"), now=0) for i in range(8)))
    assert sum(c.won for c in claims) == 1
    winner = next(c.firing for c in claims if c.won)
    assert all(c.firing == winner for c in claims)


async def test_a_claim_is_taken_over_once_its_lease_ran_out_and_settled_only_by_its_holder(
    store: Store,
) -> None:
    book = schedules(store)
    await book.insert(sched("sch_1"))
    first = await book.claim(firing(60.0, by="a", until=100.0), now=50.0)
    assert first.won
    assert not (await book.claim(firing(60.0, by="b", until=200.0), now=99.0)).won
    taken = await book.claim(firing(60.0, by="b", until=200.0), now=100.0)
    assert taken == Claim(Firing("sch_1", 60.0, "b", 200.0, attempt=2), True)
    late = first.firing.settle(FiringOutcome.FIRED, 101.0, run_id="run_a")
    assert not await book.settle(late)  # fenced: b holds it now
    done = taken.firing.settle(FiringOutcome.FIRED, 102.0, run_id="run_b")
    assert await book.settle(done)
    assert not await book.settle(done)
    again = await book.claim(firing(60.0, by="c", until=300.0), now=500.0)
    assert again == Claim(done, False)
    assert await book.firings("sch_1", limit=10) == [done]


async def test_steal_takes_another_claimants_claim_at_once(store: Store) -> None:
    book = schedules(store)
    await book.insert(sched("sch_1"))
    await book.claim(firing(60.0, by="dead", until=10_000.0), now=0.0)
    assert not (await book.claim(firing(60.0, by="dead", until=10_000.0), now=1.0, steal=True)).won
    stolen = await book.claim(firing(60.0, by="new", until=10_000.0), now=1.0, steal=True)
    assert stolen.won
    assert stolen.firing.attempt == 2


async def test_firings_list_newest_first_in_pages_and_go_with_their_schedule(store: Store) -> None:
    book = schedules(store)
    await book.insert(sched("sch_1"))
    for due in (60.0, 120.0, 180.5):
        claimed = await book.claim(firing(due), now=0.0)
        await book.settle(
            claimed.firing.settle(FiringOutcome.REFUSED, due + 1, reason="q", details={"a": 1})
        )
    listed = await book.firings("sch_1", limit=2)
    assert [f.due_at for f in listed] == [180.5, 120.0]
    assert listed[0].details == {"a": 1}
    assert listed[0].reason == "q"
    assert [f.due_at for f in await book.firings("sch_1", limit=5, before=120.0)] == [60.0]
    assert await book.remove("sch_1")
    assert await book.firings("sch_1", limit=5) == []


async def test_postgres_replicas_racing_on_one_firing_have_one_winner_then_one_taker(
    postgres_url: str,
) -> None:
    """Three stores (three replicas' pools) claim one due time at once: one wins, and all
    see its claim; once its lease ran out, they race to take it over: one does (attempt 2)."""
    replicas = [PostgresRunStore(postgres_url) for _ in range(3)]
    await asyncio.gather(*(r.open() for r in replicas))
    try:
        await schedules(replicas[0]).insert(sched("sch_1"))
        claims = await asyncio.gather(
            *(
                schedules(r).claim(firing(60.0, by=f"r{i}", until=100.0), now=50.0)
                for i, r in enumerate(replicas)
            )
        )
        assert sum(c.won for c in claims) == 1
        (winner,) = [c.firing.claimed_by for c in claims if c.won]
        assert {c.firing.claimed_by for c in claims} == {winner}
        takeovers = await asyncio.gather(
            *(
                schedules(r).claim(firing(60.0, by=f"t{i}", until=300.0), now=200.0)
                for i, r in enumerate(replicas)
            )
        )
        assert sum(c.won for c in takeovers) == 1
        (taken,) = [c.firing for c in takeovers if c.won]
        assert taken.attempt == 2
        (stored,) = await schedules(replicas[1]).firings("sch_1", limit=5)
        assert (stored.claimed_by, stored.attempt) == (taken.claimed_by, 2)
    finally:
        await asyncio.gather(*(r.close() for r in replicas))
