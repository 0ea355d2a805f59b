"""Following a run: its events from a seq to its terminal event, or to its wait for a person
(DESIGN §19). The one follow loop every face uses: the native SSE streams (to the end),
AG-UI's interrupt, A2A's INPUT_REQUIRED (to the wait). A run's wait is an event
(`run.waiting`, logged with the record saved waiting), so following is reading the log: live
while the run has not ended (here, waiting, queued, or on another replica: the store's
subscription), stored pages otherwise. Any replica follows any run.

A follower stops at a `run.waiting` only while the run is still in that wait: one the log
shows over (the run started again after it), or whose calls are all decided by the time the
follower reaches it, is passed (a replay from the start goes on through the waits a run has
had; a wait decided meanwhile does not end a stream).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Collection
from enum import StrEnum
from typing import Protocol

from app.engine.events import EventType
from app.runs.follow.log import RESUMED, last_seq, stored_pages
from app.runs.live import LiveRuns
from app.runs.records import Event, RunRecord
from app.runs.store import RunStore
from app.runs.waiting import unlogged_wait


class Until(StrEnum):
    """Where a follower stops."""

    END = "end"
    """The run's terminal event (the native SSE streams: a wait is on the way)."""
    WAIT = "wait"
    """Its terminal event, or the wait for a person it is in: the one it is in at the seq
    followed from (its `run.waiting` handed over again, at once), else the next it reaches
    (AG-UI's interrupt; A2A's INPUT_REQUIRED on a message to a task)."""
    NEXT_WAIT = "next_wait"
    """Its terminal event, or the next wait it is in after the seq followed from (a follower
    that joins a run waiting already follows it past that wait: A2A's SubscribeToTask)."""


class Visible(Protocol):
    """A run its owner may see (`RunManager.get`): `RunNotFoundError` otherwise."""

    async def __call__(
        self, run_id: str, owner: str | None, *, any_owner: bool = False
    ) -> RunRecord: ...


class RunFollower:
    def __init__(self, *, store: RunStore, live: LiveRuns, visible: Visible) -> None:
        self.store = store
        self.live = live
        self.visible = visible

    async def follow(
        self,
        run_id: str,
        owner: str | None,
        after: int = 0,
        *,
        any_owner: bool = False,
        until: Until = Until.END,
        seen: RunRecord | None = None,
    ) -> AsyncGenerator[list[Event], None]:
        """The run's events after seq `after`, in batches of what is ready at once (never
        empty), through its terminal event; or through its wait for a person (`until`), if
        that comes first (the batch is cut after its `run.waiting`). A run deleted while
        followed ends the batches without either. `seen`: the run as the caller read it
        (`visible` to it) just before, not read again."""
        record = seen or await self.visible(run_id, owner, any_owner=any_owner)
        if until == Until.WAIT:
            current = await self._current_wait(run_id, after)
            if current is not None:
                yield [current]
                return
        batches = self._batches(run_id, after, record)
        async with contextlib.aclosing(batches):
            async for batch in batches:
                stop = await self._stop(run_id, batch, at_wait=until != Until.END)
                if stop is None:
                    yield batch
                    continue
                yield batch[: stop + 1]
                return

    async def _stop(self, run_id: str, batch: list[Event], *, at_wait: bool) -> int | None:
        """Where in `batch` the follower stops: its terminal event, or (`at_wait`) the first
        `run.waiting` the run is still in; None to go on past the batch."""
        for index, event in enumerate(batch):
            if event.terminal:
                return index
            if not at_wait or event.type != EventType.RUN_WAITING:
                continue
            if any(later.type in RESUMED for later in batch[index + 1 :]):
                continue  # the log shows it over
            if await self._still_waits(run_id, event):
                return index
        return None

    async def _still_waits(self, run_id: str, waited: Event) -> bool:
        """Whether the run still waits on a call its `run.waiting` listed (its record is
        stored before the event: a follower that sees the event reads the wait, or later)."""
        record = await self.store.get(run_id)
        if not unlogged_wait(record):
            return False
        assert record is not None
        assert record.approval is not None
        listed = {p.get("call_id") for p in waited.data.get("pending", [])}
        return any(p.call_id in listed for p in record.approval.undecided())

    async def _current_wait(self, run_id: str, after: int) -> Event | None:
        """The `run.waiting` of the wait the run is in, when it was logged at or before seq
        `after` (a follower joining there would not see it again)."""
        if not unlogged_wait(await self.store.get(run_id)):
            return None  # it waits on nothing undecided
        current: Event | None = None
        async for page in stored_pages(self.store, run_id):
            for event in page:
                if event.type == EventType.RUN_WAITING:
                    current = event
                elif event.type in RESUMED:
                    current = None
        return current if current is not None and current.seq <= after else None

    async def _batches(
        self, run_id: str, after: int, record: RunRecord
    ) -> AsyncGenerator[list[Event], None]:
        """Live until the terminal event while the run has not ended (`record`: as it was
        read just before, live or stored: one not running here may wait for a person, have
        been just decided and being queued again, or be another replica's); else the stored
        log."""
        if run_id in self.live or not record.status.terminal:
            async for batch in self.store.subscribe_batches(run_id, after=after):
                yield batch
            return
        async for page in stored_pages(self.store, run_id, after):
            yield page

    async def last_seq(self, run_id: str) -> int:
        """The seq of the run's last stored event (0: none)."""
        return await last_seq(self.store, run_id)

    async def wait_began(self, run_id: str, call_ids: Collection[str]) -> tuple[int, set[str]]:
        """Where the run's wait on any of `call_ids` began: the seq of the last `run.waiting`
        that listed one of them (the end of its log when none did), and which of them it ever
        waited on."""
        point: int | None = None
        end, known = 0, set()
        async for page in stored_pages(self.store, run_id):
            end = page[-1].seq
            for event in page:
                if event.type != EventType.RUN_WAITING:
                    continue
                listed = {p.get("call_id") for p in event.data.get("pending", [])}
                found = listed.intersection(call_ids)
                if found:
                    point = event.seq
                    known |= found
        return (end if point is None else point), known
