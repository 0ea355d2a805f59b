"""The seam between `RunManager` and the replicas it shares a store with (DESIGN §8).

Without a coordinator (SQLite, memory) the manager queues and executes runs in this process
alone. With one (the Redis store), every replica is API and worker at once:
- `create` enqueues the run in the cluster's queue; whichever replica has a free slot claims
  it (`serve` calls `on_claimed`), takes ownership (`claim`) and executes it;
- a cancel asked on any replica takes ownership of a run still queued and ends it there, or
  asks the owner to stop (`request_cancel`: a stored flag plus a broadcast `serve` turns into
  `on_cancel` on the executing replica);
- wait and follow on a replica that does not execute the run read the shared store
  (`wait_for_end`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Awaitable, Callable
from typing import Protocol

import anyio

from app.runs.records import RunRecord
from app.runs.store import RunStore


class RunCoordinator(Protocol):
    async def queued(self) -> int:
        """Runs waiting in the cluster's queue, not yet claimed by a replica."""

    async def enqueue(self, run_id: str) -> None:
        """Offer a new (already stored) run to every replica."""

    async def claim(self, run_id: str) -> bool:
        """Take ownership of a queued run: True for exactly one caller."""

    async def request_cancel(self, run_id: str) -> None:
        """Ask the replica executing the run to cancel it."""

    async def cancel_requested(self, run_id: str) -> bool:
        """True if a cancel was asked (for a run claimed just as the cancel came)."""

    async def serve(
        self,
        *,
        free_slots: Callable[[], int],
        slot_freed: asyncio.Event,
        on_claimed: Callable[[str], Awaitable[None]],
        on_cancel: Callable[[str], None],
    ) -> None:
        """Until `free_slots()` < 0 (draining) or cancelled: claim queued runs while
        `free_slots()` > 0 (waiting on `slot_freed` otherwise), and relay cancel requests
        to `on_cancel`."""

    async def close(self) -> None: ...


def replica_name() -> str:
    """This process among the replicas: host, pid and a random suffix (pids repeat)."""
    return f"{socket.gethostname()}-{os.getpid()}-{os.urandom(3).hex()}"


def coordinator_for(store: RunStore, *, replica: str) -> RunCoordinator | None:
    """The coordinator of a store several replicas share; None for a one-process store."""
    from app.runs.redis_store import RedisRunStore

    if isinstance(store, RedisRunStore):
        from app.runs.redis_cluster import RedisCoordinator

        return RedisCoordinator(store, replica=replica)
    return None


async def wait_for_end(store: RunStore, record: RunRecord, timeout_s: float) -> RunRecord:
    """The run once its terminal event is stored, or as it is when `timeout_s` runs out."""
    if record.status.terminal:
        return record
    with anyio.move_on_after(timeout_s):
        async with contextlib.aclosing(store.subscribe(record.id)) as events:
            async for event in events:
                if event.terminal:
                    break
    return await store.get(record.id) or record
