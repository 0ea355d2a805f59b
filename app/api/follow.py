"""Following a run for a protocol stream (A2A's SendStreamingMessage and SubscribeToTask):
its events in batches until its terminal one, or the run itself once it waits for a person.

A run's end is an event; its wait is not (the record changes after the step's
`approval.requested` events), so two tasks feed one queue: the event batches
(`RunManager.event_batches`) and the run each time `RunManager.wait` answers. Once the run
waits, the events stored before the wait are read (`read_events`) and yielded first, and the
run is read again: a wait decided meanwhile does not end the stream. Only the manager's
public methods are used, so any replica follows any run (Redis).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Collection

from app.api.auth import Caller
from app.runs.manager import RunManager
from app.runs.records import Event, RunRecord, RunStatus

WAIT_S = 300.0
"""How long one `RunManager.wait` blocks before it is asked again."""
EVENT_PAGE = 1000


def waiting_on(record: RunRecord) -> frozenset[str]:
    """The calls the run waits on a person's decision for (empty: it waits on none, or is
    decided and about to be queued again)."""
    if record.status != RunStatus.REQUIRES_ACTION or record.approval is None:
        return frozenset()
    return frozenset(p.call_id for p in record.approval.undecided())


async def last_seq(manager: RunManager, run_id: str) -> int:
    """The seq of the run's last stored event (0: none yet)."""
    after = 0
    while True:
        events = await manager.read_events(run_id, after, EVENT_PAGE)
        if events:
            after = events[-1].seq
        if len(events) < EVENT_PAGE:
            return after


async def follow_run(
    manager: RunManager,
    run_id: str,
    caller: Caller,
    after: int,
    *,
    joined_wait: Collection[str] = (),
) -> AsyncIterator[list[Event] | RunRecord]:
    """The run's events after seq `after`, in batches, ending with the batch that holds its
    terminal event; or, once it waits for a person, the events stored before that wait and
    then the run (the last item). `joined_wait`: the calls the run waited on when the caller
    began to follow; that same wait does not end the stream (a follower that joins a waiting
    run follows it to its next wait or its end)."""
    skip = frozenset(joined_wait)
    while True:
        waiting: RunRecord | None = None
        items = _batches_or_wait(manager, run_id, caller, after, skip)
        async with contextlib.aclosing(items):
            async for item in items:
                if isinstance(item, RunRecord):
                    waiting = item
                    break
                after = item[-1].seq
                yield item
                if item[-1].terminal:
                    return
        if waiting is None:
            return  # the events ended without a terminal one (the run was deleted)
        rest = await _stored_after(manager, run_id, after)
        if rest:
            after = rest[-1].seq
            yield rest
            if rest[-1].terminal:
                return
        fresh = await manager.get(run_id, caller.owner, any_owner=caller.any_owner)
        pending = waiting_on(fresh)
        if pending and pending != skip:
            yield fresh
            return
        skip = pending  # decided meanwhile, or the same wait: follow on


async def _stored_after(manager: RunManager, run_id: str, after: int) -> list[Event]:
    events: list[Event] = []
    while True:
        page = await manager.read_events(run_id, after, EVENT_PAGE)
        events += page
        if page:
            after = page[-1].seq
        if len(page) < EVENT_PAGE:
            return events


async def _batches_or_wait(
    manager: RunManager, run_id: str, caller: Caller, after: int, skip: frozenset[str]
) -> AsyncGenerator[list[Event] | RunRecord, None]:
    """The event batches as they come; a run record (the last item) once `wait` says the run
    waits on calls other than `skip`."""
    queue: asyncio.Queue[list[Event] | RunRecord | None] = asyncio.Queue()
    arrived = asyncio.Event()
    batches = 0

    async def pump() -> None:
        nonlocal batches
        try:
            async for batch in manager.event_batches(run_id, after):
                queue.put_nowait(batch)
                batches += 1
                arrived.set()
        finally:
            queue.put_nowait(None)  # the events ended (or this task did)

    async def watch() -> None:
        while True:
            seen = batches
            record = await manager.wait(run_id, caller.owner, WAIT_S, any_owner=caller.any_owner)
            if record.status.terminal:  # its terminal event ends the stream
                return
            pending = waiting_on(record)
            if pending and pending != skip:
                queue.put_nowait(record)
                return
            while batches == seen:  # ask again once something happened
                arrived.clear()
                await arrived.wait()

    tasks = [asyncio.ensure_future(pump()), asyncio.ensure_future(watch())]
    try:
        while True:
            item = await queue.get()
            if item is None:
                await tasks[0]  # the events' error, if they ended with one
                return
            yield item
            if isinstance(item, RunRecord) or item[-1].terminal:
                return
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
