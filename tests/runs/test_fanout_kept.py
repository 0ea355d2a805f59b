"""The fanout keeps the last events of a live run nobody follows, for its first subscriber
(issue #29: a client following the run it just created gets its first events without a read
on the store's reader thread). What it keeps must be exactly the run's last published events:
never a replay with a hole, never memory held for runs that ended or are followed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from app.engine.events import EventType
from app.runs.records import Event, RunRecord, new_run_id
from app.runs.stores.fanout import Fanout
from app.runs.stores.sqlite import SqliteRunStore
from tests.runs.test_sqlite import record

RUN = "run_kept"
BOUND_S = 10


def event(seq: int, kind: EventType = EventType.THOUGHT) -> Event:
    return Event(RUN, seq, kind, 0.0, 1, {"seq": seq})


class Reads:
    """The store's `read`, over `stored`, counting its calls."""

    def __init__(self, stored: list[Event]) -> None:
        self.stored = stored
        self.calls = 0

    async def __call__(self, run_id: str, *, after: int = 0, limit: int = 1000) -> list[Event]:
        self.calls += 1
        return [e for e in self.stored if e.seq > after][:limit]


async def take(batches: AsyncIterator[list[Event]], count: int) -> list[int]:
    """The seqs of the first `count` events `batches` gives."""
    seqs: list[int] = []
    with anyio.fail_after(BOUND_S):
        async for batch in batches:
            seqs += [e.seq for e in batch]
            if len(seqs) >= count:
                break
    return seqs


async def test_the_first_subscriber_replays_what_is_kept_without_reading_the_store() -> None:
    fanout = Fanout(tail=8)
    stored = [event(n) for n in range(1, 6)]
    for e in stored:
        fanout.publish(e)
    reads = Reads(stored)
    batches = fanout.follow_batches(RUN, 0, reads)
    assert await take(batches, 5) == [1, 2, 3, 4, 5]
    assert reads.calls == 0
    fanout.publish(event(6))  # live from there
    assert await take(batches, 1) == [6]
    await batches.aclose()  # type: ignore[attr-defined]
    assert reads.calls == 0


async def test_a_replay_reaching_before_what_is_kept_reads_the_store() -> None:
    fanout = Fanout(tail=3)
    stored = [event(n) for n in range(1, 7)]
    for e in stored:
        fanout.publish(e)  # keeps 4, 5, 6
    assert fanout.kept == 3
    reads = Reads(stored)
    batches = fanout.follow_batches(RUN, 0, reads)
    assert await take(batches, 6) == [1, 2, 3, 4, 5, 6]
    assert reads.calls == 1
    await batches.aclose()  # type: ignore[attr-defined]


async def test_a_gap_in_what_was_published_drops_what_was_kept() -> None:
    fanout = Fanout(tail=8)
    stored = [event(n) for n in range(1, 6)]
    for seq in (1, 2, 4, 5):  # 3 was never published here
        fanout.publish(stored[seq - 1])
    reads = Reads(stored)
    batches = fanout.follow_batches(RUN, 0, reads)
    assert await take(batches, 5) == [1, 2, 3, 4, 5]
    assert reads.calls == 1  # 4, 5 kept do not reach back to 1: read
    await batches.aclose()  # type: ignore[attr-defined]


async def test_nothing_is_kept_of_a_followed_or_ended_run() -> None:
    fanout = Fanout(tail=8)
    fanout.publish(event(1))
    reads = Reads([event(1), event(2)])
    batches = fanout.follow_batches(RUN, 0, reads)
    assert await take(batches, 1) == [1]
    assert fanout.kept == 0  # the subscriber took them
    fanout.publish(event(2))
    assert fanout.kept == 0  # followed: its buffer has it
    assert await take(batches, 1) == [2]
    await batches.aclose()  # type: ignore[attr-defined]
    fanout.publish(event(3))
    assert fanout.kept == 1
    fanout.publish(event(4, EventType.RUN_COMPLETED))
    assert fanout.kept == 0
    fanout.publish(Event("run_other", 1, EventType.THOUGHT, 0.0, 1, {}))
    fanout.forget("run_other")
    assert fanout.kept == 0


async def test_off_by_default() -> None:
    fanout = Fanout()
    fanout.publish(event(1))
    assert fanout.kept == 0


@pytest.mark.parametrize("kind", ["create", "failed write"])
async def test_sqlite_subscriber_of_a_new_run_sees_every_event_once(
    tmp_path: Path, kind: str
) -> None:
    """Through the SQLite store: what the first subscriber takes from memory is what the
    file holds, in order, also after a write failed (its events never published)."""
    store = SqliteRunStore(str(tmp_path / "runs.db"))
    await store.open()
    try:
        run: RunRecord = record()
        await store.create(run, first_event=(EventType.RUN_QUEUED, 0, {"task": "t"}))
        for i in range(3):
            await store.append(run.id, EventType.THOUGHT, 1, {"i": i})
        if kind == "failed write":
            with pytest.raises(KeyError):  # a write the store refuses: nothing published
                await store.append(new_run_id(), EventType.THOUGHT, 1, {})
        await store.append(run.id, EventType.THOUGHT, 1, {"i": 3})
        assert store.fanout.kept == 5
        seen: list[dict[str, Any]] = []
        with anyio.fail_after(BOUND_S):
            async for batch in store.subscribe_batches(run.id):
                seen += [{"seq": e.seq, **e.data} for e in batch]
                if len(seen) == 5:
                    break
        assert seen == [{"seq": e.seq, **e.data} for e in await store.read(run.id)]
        assert [s["seq"] for s in seen] == [1, 2, 3, 4, 5]
    finally:
        await store.close()
