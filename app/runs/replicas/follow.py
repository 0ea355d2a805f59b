"""Reading a run another replica executes (DESIGN §8): until it ends (a cancel asked of its
owner), or until it settles (`/wait`: it ended, or waits for a person)."""

from __future__ import annotations

from collections.abc import AsyncGenerator

import anyio

from app.engine.events import EventType
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


SETTLE_POLL_S = 0.05  # how often /wait re-reads a run that may be about to wait


async def wait_until_settled(store: RunStore, record: RunRecord, timeout_s: float) -> RunRecord:
    """A run executing elsewhere (replicas): the run once it ended or waits for a person, or
    as it is when `timeout_s` runs out. Its end is an event; its wait is not (the record
    changes after the step's `approval.requested` events), so once such an event is seen
    the record is re-read every SETTLE_POLL_S."""
    if record.status.terminal or record.status == RunStatus.REQUIRES_ACTION:
        return record
    latest = record
    with anyio.move_on_after(timeout_s):
        async with anyio.create_task_group() as tasks:
            asked = anyio.Event()

            async def follow() -> None:
                events = store.subscribe(record.id)
                try:
                    async for event in events:
                        if event.terminal:
                            break
                        if event.type == EventType.APPROVAL_REQUESTED:
                            asked.set()
                finally:
                    aclose = getattr(events, "aclose", None)
                    if aclose is not None:
                        await aclose()
                tasks.cancel_scope.cancel()

            async def poll() -> None:
                nonlocal latest
                await asked.wait()
                while True:
                    fresh = await store.get(record.id)
                    if fresh is None or fresh.status == RunStatus.REQUIRES_ACTION:
                        latest = fresh or latest
                        tasks.cancel_scope.cancel()
                        return
                    await anyio.sleep(SETTLE_POLL_S)

            tasks.start_soon(follow)
            tasks.start_soon(poll)
    return await store.get(record.id) or latest
