"""Reading a run another replica executes (DESIGN §8): until it ends (a cancel asked of its
owner), or until it settles (`/wait`: it ended, or waits for a person)."""

from __future__ import annotations

from collections.abc import AsyncGenerator

import anyio

from app.runs.follow.log import last_seq, until_stop
from app.runs.records import RunRecord, RunStatus
from app.runs.store import RunStore


async def wait_for_end(store: RunStore, record: RunRecord, timeout_s: float) -> RunRecord:
    """The run once its terminal event is stored, or as it is when `timeout_s` runs out."""
    if record.status.terminal:
        return record
    with anyio.move_on_after(timeout_s):
        events = store.subscribe(record.id)
        try:
            async for event in events:
                if event.terminal:
                    break
        finally:
            if isinstance(events, AsyncGenerator):
                await events.aclose()
    return await store.get(record.id) or record


def _settled(record: RunRecord) -> bool:
    return record.status.terminal or record.status == RunStatus.REQUIRES_ACTION


async def wait_until_settled(store: RunStore, record: RunRecord, timeout_s: float) -> RunRecord:
    """A run executing elsewhere (replicas): the run once it ended or waits for a person, or
    as it is when `timeout_s` runs out. Both are events (a wait's `run.waiting` is stored
    with its record, the record first): the run's log is followed from its end as it
    stands, to the first of them."""
    if _settled(record):
        return record
    latest = record
    with anyio.move_on_after(timeout_s):
        after = await last_seq(store, record.id)  # first: a wait logged before it shows below
        fresh = await store.get(record.id)
        if fresh is None or _settled(fresh):
            return fresh or record
        latest = fresh
        batches = until_stop(store.subscribe_batches(record.id, after=after), at_wait=True)
        async for _ in batches:
            pass
    return await store.get(record.id) or latest
