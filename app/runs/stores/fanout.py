"""Live delivery of a run's events to its subscribers, inside one process.

A store publishes each event once it is durable. A subscriber replays from the store, then
follows the live feed, taking what it has in batches (everything ready at once, so that the
SSE stream serving it makes one write, not one per event). It never blocks the publisher: its
buffer is bounded and, when a slow client lets it overflow, the subscriber drops the buffer
and catches up from the store. Seq numbers make replay and live feed meet without loss or
duplicates.

A store that publishes every event of its runs itself, in commit order (SQLite: one process
per file), can have the fanout keep the last `tail` events of each live run nobody follows:
the first subscriber, whose replay starts inside them (a client following the run it just
created), takes them from memory instead of a read on the store's reader thread, one trip
through a thread and the loop fewer before its first event (issue #29). The kept events are
exactly the last ones published for the run, consecutive by seq (a gap drops what was kept);
they go to the first subscriber, or with the run's terminal event (or `forget`), and none
are kept while the run has a subscriber, so memory holds at most `tail` events of each
unfollowed live run. Redis leaves it off: its fanout holds only what a follower's reader has
taken from Redis so far.
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
    def __init__(self, *, buffer: int = 1024, tail: int = 0) -> None:
        self._buffer = buffer
        self._subscribers: dict[str, set[_Subscriber]] = {}
        self._tail = tail
        self._tails: dict[str, deque[Event]] = {}

    @property
    def subscribers(self) -> int:
        return sum(len(s) for s in self._subscribers.values())

    @property
    def kept(self) -> int:
        """Events kept for replay from memory, over every run (see the module's doc)."""
        return sum(len(t) for t in self._tails.values())

    def publish(self, event: Event) -> None:
        subscribers = self._subscribers.get(event.run_id)
        if subscribers is None:
            if self._tail:
                self._keep(event)
            return
        for subscriber in subscribers:
            subscriber.push(event)

    def forget(self, run_id: str) -> None:
        """Drop what is kept of the run (deleted)."""
        self._tails.pop(run_id, None)

    def _keep(self, event: Event) -> None:
        if event.terminal:
            self._tails.pop(event.run_id, None)
            return
        tail = self._tails.get(event.run_id)
        if tail is None:
            tail = self._tails[event.run_id] = deque(maxlen=self._tail)
        elif tail[-1].seq + 1 != event.seq:  # not the next one: what is kept is not the end
            tail.clear()
        tail.append(event)

    def end(self, run_id: str) -> None:
        """The run will have no more events though none was terminal (the store lost it):
        its subscribers' feeds end once they have taken what they hold."""
        self._tails.pop(run_id, None)
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
        tail = self._tails.pop(run_id, None)  # from now on the subscriber's buffer has them
        last = after
        try:
            while True:
                caught_up = False
                while not caught_up:  # from the store (or what is kept of it)
                    subscriber.overflowed = False
                    kept, tail = _after(tail, last), None
                    page = kept if kept is not None else await read(run_id, after=last, limit=PAGE)
                    caught_up = kept is not None or len(page) < PAGE
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


def _after(tail: deque[Event] | None, after: int) -> list[Event] | None:
    """Every published event after seq `after`, when `tail` (the last ones published, none
    since) reaches back to `after + 1`; None when it does not (the store has them)."""
    if not tail or tail[0].seq > after + 1:
        return None
    return [e for e in tail if e.seq > after]
