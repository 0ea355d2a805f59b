"""The seam between this replica and the others it shares a store with (DESIGN §8): the
`RunCoordinator` (implemented on Redis by `redis_cluster.RedisCoordinator`) and the one
`ClusterMember` protocol through which it hands this replica its work (`ReplicaPlacement`).

Every replica is API and worker at once:
- `create` enqueues the run in the cluster's queue; whichever replica has a free slot claims
  it (`serve` calls `member.claimed`), takes ownership (`claim`) and executes it;
- a cancel asked on any replica takes ownership of a run still queued and ends it there, or
  asks the owner to stop (`request_cancel`: a stored flag plus a broadcast that `serve` turns
  into `member.cancel_asked` on the executing replica);
- wait and follow on a replica that does not execute the run read the shared store
  (`app.runs.replicas.follow`);
- the executing replica holds the run's lease; a run whose lease expired is taken over by
  another replica (`member.taken_over`), which resumes it from its checkpoint;
- a run's webhook is owed from the moment the store ends the run (an outbox written with
  the terminal record) and delivered by one replica (`member.deliver_webhook`).
"""

from __future__ import annotations

import asyncio
import os
import socket
from typing import Protocol

from app.runs.records import RunRecord


class ClusterMember(Protocol):
    """This replica, as its coordinator sees it (`ReplicaPlacement`)."""

    slot_freed: asyncio.Event
    """Set when a slot may have come free (or the replica drains): claim again."""

    def free_slots(self) -> int:
        """Slots free for claimed runs; -1 once draining (the coordinator then stops)."""

    async def claimed(self, run_id: str, record: RunRecord | None = None) -> None:
        """A queued run the cluster handed to this replica: execute it if it is still ours.
        `record`: the run as the coordinator read it as it took it (else it is read)."""

    def cancel_asked(self, run_id: str) -> None:
        """A cancel of the run was asked on some replica (or its lease here was lost)."""

    async def taken_over(self, run_id: str, attempt: int) -> None:
        """A running run whose replica lost its lease: resume it here (this lease is held)."""

    async def deliver_webhook(self, run_id: str) -> None:
        """Deliver the ended run's webhook (this replica holds its outbox entry)."""


class RunCoordinator(Protocol):
    replica: str
    max_attempts: int  # takeovers of one run before it fails "interrupted"

    async def queued(self) -> int:
        """Runs waiting in the cluster's queue, not yet claimed by a replica."""

    async def enqueue(self, run_id: str, place: str | None = None) -> None:
        """Offer a new (already stored) run to every replica. `place`: its POST's ticket
        (`reserve`), given back in the same step (the run counts as queued instead), so the
        POST does not `unreserve` it. May return before the run is in the queue (Postgres:
        queued to the writer; a run whose queueing is lost is queued by a sweep)."""

    async def hold(self, run_id: str, behind: str) -> None:
        """Keep a new (already stored) run out of the queue until `release_held(behind)`."""

    async def release_held(self, behind: str) -> None:
        """Offer the run held behind `behind` (which ended) to every replica, once whoever
        calls it (the replica that ended it, a sweep)."""

    async def reserve(self, *, cap: int, busy: bool) -> tuple[str | None, int]:
        """Check the cluster queue's cap and take a place in it, in one atomic step:
        (a ticket, queued) when there was room, (None, queued) when the queue is full. The
        place counts as queued until `unreserve(ticket)` (on failure) or `enqueue` with it.
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

    async def serve(self, member: ClusterMember) -> None:
        """Until `stop()`: claim queued runs while `member.free_slots()` > 0 (waiting on
        `member.slot_freed` otherwise; -1 means draining: claim no more), relay cancel
        requests, renew the leases held, take over runs whose lease expired, release held
        runs whose run ended (its replica died before it did), and deliver the webhooks of
        ended runs from the outbox, each by one replica."""

    async def close(self) -> None: ...


def replica_name() -> str:
    """This process among the replicas: host, pid and a random suffix (pids repeat)."""
    return f"{socket.gethostname()}-{os.getpid()}-{os.urandom(3).hex()}"
