"""The cluster's queue on Postgres counts the places POSTs being admitted hold (DESIGN §8):
a place younger than `ADMIT_HOLD_S` counts towards the cap, an older one (its replica died
between the place and the run) is dropped by the next admission and counts no more."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from app.runs.replicas.postgres_cluster import ADMIT_HOLD_S, PostgresCoordinator
from app.runs.stores.postgres import PostgresRunStore
from app.runs.stores.postgres_rows import NOW_S


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
    await coordinator.unreserve(ticket)
    assert await places(coordinator) == ["a fresh place"]


async def test_an_empty_queue_admits_a_run_a_free_slot_takes_even_at_a_cap_of_zero(
    coordinator: PostgresCoordinator,
) -> None:
    ticket, queued = await coordinator.reserve(cap=0, busy=False)
    assert ticket is not None
    assert queued == 0
    assert await coordinator.reserve(cap=0, busy=True) == (None, 1)
