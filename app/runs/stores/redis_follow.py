"""Live events from Redis into the in-process `Fanout`: one reader per followed run.

The first follower of a run in this process starts a reader task: it notes the run's last
seq L, then loops on a blocking `XREAD` of the run's stream from L and publishes every entry
to the fan-out, until the terminal event. The follower itself replays from the store through
the same stream (`XRANGE`), after registering with the fan-out, so whatever the reader
published before it registered is in that replay, and seq numbers make the two meet without
loss or duplicates (see `Fanout.follow`). Later followers of the run share the reader; the
last one to leave stops it. Each reader holds one connection while it blocks.

While Redis is away, followers wait (their SSE streams keep sending keep-alives): the reader
and the replay try again every `redis_errors.RETRY_S`. When Redis is back, the reader checks
that the run is still stored; one that is not (Redis came back without its data) ends its
followers' feeds (`Fanout.end`): their streams close, and a client that reconnects is told the
run is gone.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import structlog
from redis.asyncio import Redis
from redis.exceptions import RedisError

from app.engine.events import EventType
from app.runs.errors import StoreUnavailableError
from app.runs.records import Event
from app.runs.stores.fanout import PAGE, Fanout, each_event
from app.runs.stores.redis_errors import waited_out

log = structlog.get_logger("finishline.runs")

BLOCK_MS = 2_000  # one blocking read's bound (half the socket timeout); then it reads again


def event_from_entry(run_id: str, entry_id: str, fields: dict[str, str]) -> Event:
    return Event(
        run_id,
        int(entry_id.partition("-")[2]),
        EventType(fields["t"]),
        float(fields["ts"]),
        int(fields["s"]),
        json.loads(fields["d"]),
        fields["d"],
    )


@dataclass(eq=False)
class _Reader:
    task: asyncio.Task[None] | None = None
    followers: int = 0
    stopped: bool = False  # checked by the loop too: a cancel is not always delivered

    def stop(self) -> None:
        self.stopped = True
        if self.task is not None:
            self.task.cancel()

    @property
    def done(self) -> bool:
        return self.stopped or (self.task is not None and self.task.done())


class StreamFollower:
    """`follow(run_id, after)`: the run's events after `after`, replayed then live;
    `follow_batches` hands them over in batches."""

    def __init__(
        self,
        redis: Redis,
        stream_key: Callable[[str], str],
        read: Callable[..., Awaitable[list[Event]]],
        fanout: Callable[[], Fanout],
        run_key: Callable[[str], str],
    ) -> None:
        self._redis = redis
        self._stream_key = stream_key
        self._run_key = run_key
        self._read = read
        self._fanout = fanout  # the store's current fan-out (tests may swap it)
        self._readers: dict[str, _Reader] = {}

    @property
    def readers(self) -> int:
        return len(self._readers)

    def follow(self, run_id: str, after: int) -> AsyncIterator[Event]:
        return each_event(self.follow_batches(run_id, after))

    async def follow_batches(self, run_id: str, after: int) -> AsyncIterator[list[Event]]:
        """As `follow`, in batches (`Fanout.follow_batches`)."""
        reader = self._readers.get(run_id)
        if reader is None or reader.done:
            last = await self._last_seq(run_id)
            reader = self._readers.get(run_id)  # another follower may have started one
            if reader is None or reader.done:
                reader = self._readers[run_id] = _Reader()
                reader.task = asyncio.create_task(
                    self._run(run_id, last, reader), name=f"xread {run_id}"
                )
        reader.followers += 1
        try:
            live = self._fanout().follow_batches(run_id, after, self._read_patiently)
            try:
                async for batch in live:
                    yield batch
            finally:
                if isinstance(live, AsyncGenerator):
                    await live.aclose()
        finally:
            reader.followers -= 1
            if reader.followers == 0:
                reader.stop()
                if self._readers.get(run_id) is reader:
                    del self._readers[run_id]

    async def close(self) -> None:
        readers, self._readers = list(self._readers.values()), {}
        for reader in readers:
            reader.stop()
        tasks = [reader.task for reader in readers if reader.task is not None]
        if tasks:  # a blocked read ends within BLOCK_MS whatever happens to the cancel
            await asyncio.wait(tasks, timeout=BLOCK_MS / 1000 + 1)

    async def _last_seq(self, run_id: str) -> int:
        while True:
            try:
                entries: Any = await self._redis.xrevrange(self._stream_key(run_id), count=1)
            except RedisError as exc:
                await waited_out(exc, "event_reader_failed", self._redis, run_id=run_id)
                continue
            return int(str(entries[0][0]).partition("-")[2]) if entries else 0

    async def _read_patiently(self, run_id: str, *, after: int, limit: int) -> list[Event]:
        """The store's `read`, tried again while Redis is away (a follower waits it out)."""
        while True:
            try:
                return await self._read(run_id, after=after, limit=limit)
            except StoreUnavailableError as exc:
                await waited_out(exc, "event_replay_failed", run_id=run_id)

    async def _run(self, run_id: str, last: int, reader: _Reader) -> None:
        key = self._stream_key(run_id)
        outage = True  # once at the start too: Redis may have lost the run as it began
        while not reader.stopped:
            try:
                reply: Any = await self._redis.xread({key: f"0-{last}"}, count=PAGE, block=BLOCK_MS)
                if outage and not await self._redis.exists(self._run_key(run_id)):
                    log.warning("run_lost_by_the_store", run_id=run_id)
                    self._fanout().end(run_id)  # Redis came back without it
                    return
                outage = False
            except RedisError as exc:
                outage = True
                await waited_out(exc, "event_reader_failed", self._redis, run_id=run_id)
                continue
            for _stream, entries in reply or ():
                for entry_id, fields in entries:
                    if reader.done:  # stopped while the read was blocked
                        return
                    event = event_from_entry(run_id, entry_id, fields)
                    self._fanout().publish(event)
                    last = event.seq
                    if event.terminal:
                        return
