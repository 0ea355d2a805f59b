"""The Postgres store's live events (`postgres_follow`, DESIGN §18): `LISTEN/NOTIFY` is the
doorbell, naming the run and its last seq. While its listener listens, a run's reader reads only
when rung (no read per poll interval per followed run); the listener proves its connection every
quarter of `POLL_S` and gives up one that does not answer; a notification missed while nothing
listened is read within a poll interval, never lost. A new follower reads the run once (its
replay) and its reader only once rung, starting where this process published the run (else
it reads the run's last seq); a run not stored has a feed that ends."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import psycopg
import pytest

from app.engine.events import EventType
from app.runs.records import Event, new_run_id
from app.runs.stores import postgres_follow
from app.runs.stores.postgres import PostgresRunStore
from tests.fakes.postgres_server import PostgresServer
from tests.runs.test_store_contract import record

THOUGHT = EventType.THOUGHT
POLL_S = 0.2  # the listener's proofs every 50 ms, a reader's turns every 100 ms
TIMEOUT_S = 20.0


@pytest.fixture
async def stores(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[PostgresRunStore, PostgresRunStore]]:
    """Two replicas' stores on one database: `here` follows, `there` writes."""
    monkeypatch.setattr(postgres_follow, "POLL_S", POLL_S)
    here, there = PostgresRunStore(postgres_url), PostgresRunStore(postgres_url)
    await here.open()
    await there.open()
    try:
        yield here, there
    finally:
        await here.close()
        await there.close()


async def until(check: Callable[[], bool]) -> None:
    """Poll `check` until it holds, failing after `TIMEOUT_S`."""
    deadline = time.monotonic() + TIMEOUT_S
    while not check():
        assert time.monotonic() < deadline, f"not within {TIMEOUT_S} s"
        await asyncio.sleep(POLL_S / 5)


def counted(store: PostgresRunStore) -> list[int]:
    """The reads of the store's follower, counted (after each, its number)."""
    reads: list[int] = []
    read: Callable[..., Awaitable[list[Event]]] = store.follower._read

    async def counting(*args: Any, **kw: Any) -> list[Event]:
        reads.append(len(reads) + 1)
        return await read(*args, **kw)

    store.follower._read = counting
    return reads


@contextlib.asynccontextmanager
async def following(store: PostgresRunStore, run_id: str) -> AsyncIterator[asyncio.Queue[Event]]:
    """A follower of the run from its start, its events put in a queue."""
    seen: asyncio.Queue[Event] = asyncio.Queue()

    async def follow() -> None:
        async for event in store.subscribe(run_id):
            seen.put_nowait(event)

    task = asyncio.create_task(follow())
    try:
        yield seen
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def next_event(seen: asyncio.Queue[Event]) -> Event:
    return await asyncio.wait_for(seen.get(), TIMEOUT_S)


async def test_a_reader_reads_only_when_rung_while_the_listener_listens(
    stores: tuple[PostgresRunStore, PostgresRunStore],
) -> None:
    here, there = stores
    run = record()
    await there.create(run)
    await there.append(run.id, THOUGHT, 1, {"n": 1})
    await until(here.follower.listening.is_set)
    reads = counted(here)
    async with following(here, run.id) as seen:
        assert (await next_event(seen)).seq == 1
        quiet_from, read_before = here.follower.proofs, len(reads)
        listened = here.follower.listened

        await until(lambda: here.follower.proofs >= quiet_from + 24)  # a dozen turns
        # not one read more (but after the listener listened again, had a proof come late)
        assert len(reads) - read_before <= here.follower.listened - listened

        read_before = len(reads)
        await there.append(run.id, THOUGHT, 1, {"n": 2})  # another replica's: its doorbell
        assert (await next_event(seen)).seq == 2
        assert len(reads) > read_before


async def test_a_new_follower_reads_the_run_once_and_its_reader_only_when_rung(
    stores: tuple[PostgresRunStore, PostgresRunStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The replay reads what is stored; the run's reader, started with the run's last seq,
    reads nothing until a bell rings (it read once at start, always finding nothing new)."""
    here, there = stores
    run = record()
    await there.create(run)
    await until(here.follower.listening.is_set)
    for n in range(3):
        await there.append(run.id, THOUGHT, 1, {"n": n})
    proofs = here.follower.proofs  # two proofs later, their notifications were heard here
    await until(lambda: here.follower.proofs >= proofs + 2)
    monkeypatch.setattr(postgres_follow, "POLL_S", 60.0)  # no turn ends within the test
    reads = counted(here)
    async with following(here, run.id) as seen:
        assert [(await next_event(seen)).seq for _ in range(3)] == [1, 2, 3]
        await there.append(run.id, THOUGHT, 1, {"n": 3})  # another replica's: its doorbell
        assert (await next_event(seen)).seq == 4
    assert len(reads) == 2  # the replay, then the reader once rung


async def test_a_notification_missed_while_nothing_listened_is_read_once_it_listens_again(
    stores: tuple[PostgresRunStore, PostgresRunStore], postgres_server: PostgresServer
) -> None:
    here, there = stores
    run = record()
    await there.create(run)
    await until(here.follower.listening.is_set)
    listened = here.follower.listened
    async with following(here, run.id) as seen:
        await until(lambda: run.id in here.follower._readers)

        with postgres_server.admin() as admin:  # the listener's backend ended
            admin.execute("SELECT pg_terminate_backend(%s)", (here.follower.listener_pid,))
        await until(lambda: not here.follower.listening.is_set())
        await there.append(run.id, THOUGHT, 1, {"n": 1})  # its notification: unheard here

        assert (await next_event(seen)).seq == 1
        await until(lambda: here.follower.listened == listened + 1)


async def test_a_listening_connection_that_does_not_answer_is_given_up_and_replaced(
    stores: tuple[PostgresRunStore, PostgresRunStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    here, _ = stores
    await until(here.follower.listening.is_set)
    listened, pid = here.follower.listened, here.follower.listener_pid
    monkeypatch.setattr(postgres_follow, "PROOF", "SELECT pg_sleep(60)")  # never in time
    await until(lambda: here.follower.listened > listened and here.follower.listening.is_set())
    monkeypatch.setattr(postgres_follow, "PROOF", "SELECT 1")
    assert here.follower.listener_pid != pid


async def test_the_doorbell_names_the_run_and_its_last_seq(
    stores: tuple[PostgresRunStore, PostgresRunStore], postgres_url: str
) -> None:
    here, _ = stores
    run = record()
    await here.create(run, first_event=(THOUGHT, 0, {"n": 1}))
    with psycopg.connect(postgres_url, autocommit=True) as listener:
        listener.execute(f'LISTEN "{here.channel}"')
        await here.append(run.id, THOUGHT, 1, {"n": 2})
        queued = [await here.append_soon(run.id, THOUGHT, 1, {"n": n}) for n in (3, 4)]
        await asyncio.gather(*queued)  # committed (made together)
        heard = []
        for note in listener.notifies(timeout=TIMEOUT_S):
            heard.append(note.payload)
            if note.payload == f"{run.id}:4":  # (3 and 4 made together: one notification)
                break
    assert heard[0] == f"{run.id}:2"
    assert heard[-1] == f"{run.id}:4"


async def test_a_follower_of_a_run_not_stored_has_a_feed_that_ends(
    stores: tuple[PostgresRunStore, PostgresRunStore],
) -> None:
    here, _ = stores
    async with asyncio.timeout(TIMEOUT_S):
        feed = [event async for event in here.subscribe(new_run_id())]
    assert feed == []


async def test_a_reader_starts_where_this_process_published_else_it_reads_the_last_seq(
    stores: tuple[PostgresRunStore, PostgresRunStore],
) -> None:
    here, there = stores
    mine, theirs = record(), record()
    await here.create(mine, first_event=(THOUGHT, 0, {"n": 1}))  # published here
    await there.create(theirs, first_event=(THOUGHT, 0, {"n": 1}))
    asked: list[str] = []
    last_seq = here.follower._last_seq

    async def counting(run_id: str) -> int | None:
        asked.append(run_id)
        return await last_seq(run_id)

    here.follower._last_seq = counting
    for run, writer in ((mine, here), (theirs, there)):
        async with following(here, run.id) as seen:
            assert (await next_event(seen)).seq == 1
            await writer.append(run.id, THOUGHT, 1, {"n": 2})
            assert (await next_event(seen)).seq == 2
    assert asked == [theirs.id]
