"""Reading a run's event log: its stored pages, where it ends, and where a follower stops.

Everything that reads a log page by page does it here (`stored_pages`), and everything that
follows a run to its next stop cuts its batches here (`until_stop`): the terminal event, or,
for a follower that stops there, the run's next wait for a person (`run.waiting`, DESIGN
§19). A run's wait is an event, appended with its record saved waiting (the record first),
so a follower needs nothing but the log to know where the run is.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

from app.engine.events import EventType
from app.runs.records import Event

PAGE = 1000
"""Events read from the store at once."""
RESUMED = frozenset({EventType.RUN_STARTED, EventType.RUN_RECOVERED})
"""Events a run appends when its task (re)starts: a wait before one of them is over."""


class EventReader(Protocol):
    """What reads a log (`RunStore.read`)."""

    async def read(self, run_id: str, *, after: int = 0, limit: int = 1000) -> list[Event]: ...


async def stored_pages(
    store: EventReader, run_id: str, after: int = 0
) -> AsyncIterator[list[Event]]:
    """The run's stored events after seq `after`, a page at a time (never an empty one), up
    to the end of the log as it is read."""
    while True:
        page = await store.read(run_id, after=after, limit=PAGE)
        if page:
            yield page
            after = page[-1].seq
        if len(page) < PAGE:
            return


async def last_seq(store: EventReader, run_id: str, after: int = 0) -> int:
    """The seq of the run's last stored event (`after` when there is none past it)."""
    async for page in stored_pages(store, run_id, after):
        after = page[-1].seq
    return after


def stop_index(batch: list[Event], *, at_wait: bool) -> int | None:
    """Where in `batch` a follower stops: the index of its terminal event, or (`at_wait`)
    of its first `run.waiting`; None when it goes on past the batch."""
    for index, event in enumerate(batch):
        if event.terminal or (at_wait and event.type == EventType.RUN_WAITING):
            return index
    return None


async def until_stop(
    batches: AsyncIterator[list[Event]], *, at_wait: bool
) -> AsyncIterator[list[Event]]:
    """`batches` up to and including the follower's stop (`stop_index`): the batch that holds
    it is cut after it, and nothing is read past it (`batches` is closed on leaving)."""
    try:
        async for batch in batches:
            stop = stop_index(batch, at_wait=at_wait)
            if stop is None:
                yield batch
                continue
            yield batch[: stop + 1]
            return
    finally:
        aclose = getattr(batches, "aclose", None)
        if aclose is not None:
            await aclose()


async def wait_logged(store: EventReader, run_id: str) -> bool:
    """Whether the run's log says it waits: its last `run.waiting` comes after its last
    (re)start. False for a run stored waiting by a version that did not log its wait (before
    issue #35): `WaitingRuns.rearm` logs it then."""
    logged = False
    async for page in stored_pages(store, run_id):
        for event in page:
            if event.type == EventType.RUN_WAITING:
                logged = True
            elif event.type in RESUMED:
                logged = False
    return logged
