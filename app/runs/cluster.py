"""The seam between `RunManager` and the replicas it shares a store with (DESIGN §8).

Without a coordinator (SQLite, memory) the manager queues and executes runs in this process
alone. With one (the Redis store), every replica is API and worker at once:
- `create` enqueues the run in the cluster's queue; whichever replica has a free slot claims
  it (`serve` calls `on_claimed`), takes ownership (`claim`) and executes it;
- a cancel asked on any replica takes ownership of a run still queued and ends it there, or
  asks the owner to stop (`request_cancel`: a stored flag plus a broadcast `serve` turns into
  `on_cancel` on the executing replica);
- wait and follow on a replica that does not execute the run read the shared store
  (`wait_for_end`);
- the executing replica holds the run's lease; a run whose lease expired is taken over by
  another replica (`on_takeover`), which resumes it from its checkpoint;
- a run's webhook is owed from the moment the store ends the run (an outbox written with
  the terminal record) and delivered by one replica (`on_webhook`).
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import TYPE_CHECKING, Protocol, cast

import anyio

from app.runs.records import RunRecord
from app.runs.store import RunStore

if TYPE_CHECKING:
    from app.runs.redis_store import RedisRunStore


class RunCoordinator(Protocol):
    replica: str
    max_attempts: int  # takeovers of one run before it fails "interrupted"

    async def queued(self) -> int:
        """Runs waiting in the cluster's queue, not yet claimed by a replica."""

    async def enqueue(self, run_id: str) -> None:
        """Offer a new (already stored) run to every replica."""

    async def reserve(self, *, cap: int, busy: bool) -> tuple[str | None, int]:
        """Check the cluster queue's cap and take a place in it, in one atomic step:
        (a ticket, queued) when there was room, (None, queued) when the queue is full. The
        place counts as queued until `unreserve(ticket)` (after `enqueue`, or on failure).
        `busy`: this replica has no free slot (a cap of 0 then refuses even an empty queue)."""

    async def unreserve(self, ticket: str) -> None:
        """Give the place back (the run is in the queue now, or was not stored)."""

    async def claim(self, run_id: str) -> bool:
        """Take ownership (the lease) of a queued run: True for exactly one caller. This
        process then renews the lease, and its writes of the run are fenced by it."""

    def release(self, run_id: str) -> None:
        """The run ended here (or was given up): stop renewing its lease."""

    def stop(self) -> None:
        """Make `serve` return (after the drain: leases are renewed until then)."""

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
        on_lost: Callable[[str], None],
        on_takeover: Callable[[str, int], Awaitable[None]],
        on_webhook: Callable[[str], Awaitable[None]],
    ) -> None:
        """Until `stop()`: claim queued runs while `free_slots()` > 0 (waiting on
        `slot_freed` otherwise; -1 means draining: claim no more), relay cancel requests to
        `on_cancel`, renew the leases held (`on_lost` when one was lost), take over runs
        whose lease expired (`on_takeover(run_id, attempt)`), and deliver the webhooks of
        ended runs from the outbox, each by one replica (`on_webhook`)."""

    async def close(self) -> None: ...


def redis_store_of(store: RunStore) -> RedisRunStore | None:
    """`store` when it is the Redis store (the one replicas share), else None, without
    importing the Redis client for the others: a Redis store exists only once its module
    was imported."""
    module = sys.modules.get("app.runs.redis_store")
    if module is None or not isinstance(store, module.RedisRunStore):
        return None
    return cast("RedisRunStore", store)


def replica_name() -> str:
    """This process among the replicas: host, pid and a random suffix (pids repeat)."""
    return f"{socket.gethostname()}-{os.getpid()}-{os.urandom(3).hex()}"


def coordinator_for(
    store: RunStore, *, replica: str, lease_s: float = 15.0, max_attempts: int = 3
) -> RunCoordinator | None:
    """The coordinator of a store several replicas share; None for a one-process store."""
    shared = redis_store_of(store)
    if shared is None:
        return None
    from app.runs.redis_cluster import RedisCoordinator

    return RedisCoordinator(shared, replica=replica, lease_s=lease_s, max_attempts=max_attempts)


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
