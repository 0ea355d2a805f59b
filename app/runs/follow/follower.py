"""Following a run: its events from a seq to its terminal event, or to its next wait for a
person (DESIGN §19). The one follow loop every face uses: the native SSE streams (to the end),
AG-UI's interrupt, A2A's INPUT_REQUIRED (to the next wait). A run's wait is an event
(`run.waiting`, logged with the record saved waiting), so following is reading the log: live
while the run has not ended (here, waiting, queued, or on another replica: the store's
subscription), stored pages otherwise. Any replica follows any run.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Collection
from enum import StrEnum
from typing import Protocol

from app.engine.events import EventType
from app.runs.follow.log import RESUMED, last_seq, stored_pages, until_stop
from app.runs.live import LiveRuns
from app.runs.records import Event, RunRecord
from app.runs.store import RunStore
from app.runs.waiting import unlogged_wait


class Until(StrEnum):
    """Where a follower stops."""

    END = "end"
    """The run's terminal event (the native SSE streams: a wait is on the way)."""
    WAIT = "wait"
    """Its terminal event, or its wait for a person: the one it is in at the seq followed
    from (its `run.waiting` handed over again, at once), else its next (AG-UI's interrupt;
    A2A's INPUT_REQUIRED on a message to a task)."""
    NEXT_WAIT = "next_wait"
    """Its terminal event, or its next wait after the seq followed from (a follower that
    joins a run waiting already follows it past that wait: A2A's SubscribeToTask)."""


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
    ) -> AsyncGenerator[list[Event], None]:
        """The run's events after seq `after`, in batches of what is ready at once (never
        empty), through its terminal event; or through its wait for a person (`until`), if
        that comes first (the batch is cut after its `run.waiting`). A run deleted while
        followed ends the batches without either."""
        await self.visible(run_id, owner, any_owner=any_owner)
        if until == Until.WAIT:
            current = await self._current_wait(run_id, after)
            if current is not None:
                yield [current]
                return
        at_wait = until != Until.END
        async for batch in until_stop(self._batches(run_id, after), at_wait=at_wait):
            yield batch

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

    async def _batches(self, run_id: str, after: int) -> AsyncIterator[list[Event]]:
        """Live until the terminal event while the run has not ended; else the stored log."""
        live = run_id in self.live or await self._unended(run_id)
        if live or run_id in self.live:  # (it may have resumed during that read)
            async for batch in self.store.subscribe_batches(run_id, after=after):
                yield batch
            return
        async for page in stored_pages(self.store, run_id, after):
            yield page

    async def _unended(self, run_id: str) -> bool:
        """Whether the run has not ended though no task here runs it: it waits for a person,
        was just decided and is being queued again, or another replica holds it."""
        record = await self.store.get(run_id)
        return record is not None and not record.status.terminal

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
