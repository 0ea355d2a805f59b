"""Steering messages of runs (DESIGN §10): the `Inbox` seam, and its one-process side.

A message joins the run's conversation before its next LLM call, in the order it was
accepted. The engine takes them from the run's live list (`ActiveRun.inbox`); an inbox is
where a message is kept until then:
- `LocalInbox` (memory, SQLite): a run executing or queued in this process holds its
  messages in that list at once; a run waiting for a person holds them on its stored record
  (`LocalWaitingRuns.hold`), for its resume;
- `RedisInbox` (`app/runs/replicas/redis_messages.py`, replicas): a message may be posted on
  any replica while the run is queued, waiting, or running on another; the run's inbox is in
  the store, and the replica executing the run is told and moves the messages into the list.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Protocol

import structlog

from app.runs.errors import RunAlreadyEndedError, TooManyMessagesError
from app.runs.live import ActiveRun, LiveRuns
from app.runs.records import RunRecord, RunStatus
from app.runs.waiting import LocalWaitingRuns

log = structlog.get_logger("finishline.runs")


def already_ended(run_id: str, status: str) -> RunAlreadyEndedError:
    return RunAlreadyEndedError(
        f"run {run_id!r} has ended ({status}): start a follow-up with previous_run_id instead",
        run_id=run_id,
    )


class RunLocks:
    """One lock per run, kept while someone holds it or waits for it: a replica's takes of
    one run's messages go one at a time (so they join its list in order), while other runs'
    takes go on meanwhile (one lock for all made every run wait for the others' commits)."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @contextlib.asynccontextmanager
    async def held(self, run_id: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(run_id) or (asyncio.Lock(), 0)
        self._locks[run_id] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[run_id]
            if users == 1:
                del self._locks[run_id]
            else:
                self._locks[run_id] = (lock, users - 1)

    def __len__(self) -> int:
        return len(self._locks)


class Inbox(Protocol):
    async def post(self, record: RunRecord, content: str) -> RunRecord:
        """Keep a message for the run (`record`: as the caller read it, live if it is);
        the run as it is then. `RunAlreadyEndedError` once the run ended or took its last
        message, `TooManyMessagesError` at the cap of undelivered ones."""

    async def pull(self, active: ActiveRun) -> None:
        """Move the messages kept for a run executing here into its live list, oldest
        first (as it starts or resumes)."""

    async def close(self, run_id: str) -> list[str]:
        """The run took its last message (it ends): refuse any more; those still kept, in
        order (the live list's are the caller's)."""

    async def listen(self) -> None:
        """Forever: hand messages posted on any replica to the runs executing here."""


class LocalInbox:
    """One process: a message goes to the run's live list at once (a run waiting for a
    person keeps it on its record until it resumes)."""

    def __init__(self, *, live: LiveRuns, waiting: LocalWaitingRuns, max_pending: int) -> None:
        self.live = live
        self.waiting = waiting
        self.max_pending = max_pending

    async def post(self, record: RunRecord, content: str) -> RunRecord:
        if record.status == RunStatus.REQUIRES_ACTION:
            held = await self.waiting.hold(record.id, content, max_pending=self.max_pending)
            if held is not None:
                return held
            # it just resumed: the message joins its live list
        active = self.live.get(record.id)
        if active is None:
            record = await self.waiting.store.get(record.id) or record
            raise already_ended(record.id, record.status.value)
        if active.inbox_closed or active.record.status.terminal:
            raise already_ended(record.id, active.record.status.value)
        if len(active.inbox) >= self.max_pending:
            raise TooManyMessagesError(
                f"run {record.id!r} already holds {len(active.inbox)} undelivered messages",
                run_id=record.id,
                cap=self.max_pending,
            )
        active.inbox.append(content)
        log.info("user_message_queued", run_id=record.id, chars=len(content))
        return active.record

    async def pull(self, active: ActiveRun) -> None:
        return None  # they are in its list already

    async def close(self, run_id: str) -> list[str]:
        return []

    async def listen(self) -> None:
        return None  # nothing is posted anywhere else
