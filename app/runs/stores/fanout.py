"""Live delivery of a run's events to its subscribers, inside one process.

A store publishes each event once it is durable. A subscriber replays from the store, then
follows the live feed, taking what it has in batches (everything ready at once, so that the
SSE stream serving it makes one write, not one per event). It never blocks the publisher: its
buffer is bounded and, when a slow client lets it overflow, the subscriber drops the buffer
and catches up from the store. Seq numbers make replay and live feed meet without loss or
duplicates.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable

from app.runs.records import Event

Reader = Callable[..., Awaitable[list[Event]]]
PAGE = 1000


async def each_event(batches: AsyncIterator[list[Event]]) -> AsyncIterator[Event]:
    """The events of `batches`, one at a time; closes `batches` when it is closed itself."""
    try:
        async for batch in batches:
            for event in batch:
                yield event
    finally:
        if isinstance(batches, AsyncGenerator):
            await batches.aclose()


class _Subscriber:
    __slots__ = ("buffer", "ended", "maxlen", "overflowed", "wake")

    def __init__(self, maxlen: int) -> None:
        self.buffer: deque[Event] = deque()
        self.maxlen = maxlen
        self.overflowed = False
        self.ended = False
        self.wake = asyncio.Event()

    def push(self, event: Event) -> None:
        if len(self.buffer) >= self.maxlen:
            self.buffer.clear()
            self.overflowed = True
        elif not self.overflowed:
            self.buffer.append(event)
        self.wake.set()


class Fanout:
    def __init__(self, *, buffer: int = 1024) -> None:
        self._buffer = buffer
        self._subscribers: dict[str, set[_Subscriber]] = {}

    @property
    def subscribers(self) -> int:
        return sum(len(s) for s in self._subscribers.values())

    def publish(self, event: Event) -> None:
        for subscriber in self._subscribers.get(event.run_id, ()):
            subscriber.push(event)

    def end(self, run_id: str) -> None:
        """The run will have no more events though none was terminal (the store lost it):
        its subscribers' feeds end once they have taken what they hold."""
        for subscriber in self._subscribers.get(run_id, ()):
            subscriber.ended = True
            subscriber.wake.set()

    async def follow(self, run_id: str, after: int, read: Reader) -> AsyncIterator[Event]:
        """Events of `run_id` after seq `after`, one at a time (see `follow_batches`)."""
        async for event in each_event(self.follow_batches(run_id, after, read)):
            yield event

    async def follow_batches(
        self, run_id: str, after: int, read: Reader
    ) -> AsyncIterator[list[Event]]:
        """Events of `run_id` after seq `after`: the stored ones, then live ones, until the
        terminal event; in batches, each holding every event that was ready when it was
        taken (a page of the replay, or all the live ones published since the last batch),
        in seq order, never empty."""
        if after > 0:
            # resuming right after the terminal event (EventSource reconnects whenever a
            # stream closes): nothing follows it, so end now instead of waiting forever
            seen = await read(run_id, after=after - 1, limit=1)
            if seen and seen[0].terminal:
                return
        subscriber = _Subscriber(self._buffer)
        self._subscribers.setdefault(run_id, set()).add(subscriber)
        last = after
        try:
            while True:
                caught_up = False
                while not caught_up:  # from the store
                    subscriber.overflowed = False
                    page = await read(run_id, after=last, limit=PAGE)
                    caught_up = len(page) < PAGE
                    if not page:
                        continue
                    ended = next((i for i, e in enumerate(page) if e.terminal), None)
                    if ended is not None:
                        yield page[: ended + 1]
                        return
                    last = page[-1].seq
                    yield page
                while not subscriber.overflowed:  # live
                    buffer = subscriber.buffer
                    if not buffer and subscriber.ended:
                        return
                    if not buffer:
                        subscriber.wake.clear()
                        await subscriber.wake.wait()
                        continue
                    batch: list[Event] = []
                    gap = ended_early = False
                    while buffer:
                        event = buffer.popleft()
                        if event.seq <= last:
                            if event.terminal:  # the client resumed past the end
                                ended_early = True
                                break
                            continue
                        if event.seq != last + 1:  # a gap: fill it from the store
                            buffer.appendleft(event)
                            gap = True
                            break
                        batch.append(event)
                        last = event.seq
                        if event.terminal:
                            ended_early = True
                            break
                    if batch:
                        yield batch
                    if ended_early:
                        return
                    if gap:
                        break
        finally:
            subscribers = self._subscribers.get(run_id)
            if subscribers is not None:
                subscribers.discard(subscriber)
                if not subscribers:
                    del self._subscribers[run_id]
