"""Live events from Postgres into the in-process `Fanout`, with `LISTEN/NOTIFY` as the doorbell.

Every append notifies `<schema>_events` with `<run id>:<seq>` (its run's last seq) in its own
transaction (delivered at commit). One connection per process, outside the pool, listens; a
notification rings the run's bell (unless its reader has that seq already). The first follower
of a run in this process starts a reader task: once rung, it reads the rows after the last
seq it published (at first, the run's `last_seq`: the follower's replay reads the ones
before), publishes them to the fan-out, and waits for the bell again. Appends made in this process
ring the bell at once, without waiting for the notification, and their notifications (sent by a
backend of this process's pool: `own`) ring no bell: the reader would read nothing new.

A notification is missed only while no connection listens. The listener proves its
connection every `POLL_S / 4` (a round trip: every notification committed before it was sent
has arrived by its answer; one not answered within `POLL_S / 4` gives the connection up, as
on a network that drops silently), and each time it listens again it rings every reader. A
reader waits for its bell in turns of `POLL_S / 2` and reads at the end of a turn unless the
listener proved itself within the last `POLL_S / 2`: so a healthy listener spares a read per
poll interval per followed run, and a missed notification still costs at most one poll
interval, never an event: rows are always read from the table.

While Postgres is away, readers and replays wait it out (their SSE streams keep sending
keep-alives) and read again once it is back; a run no longer stored ends its followers' feeds.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg
import structlog

from app.runs.errors import StoreUnavailableError
from app.runs.records import Event
from app.runs.stores.fanout import PAGE, Fanout, each_event
from app.runs.stores.postgres_errors import RETRY_S, is_outage

log = structlog.get_logger("finishline.runs")

POLL_S = 1.0
"""The longest a missed notification delays a reader (the listener's proofs every quarter of
it, the reader's turns every half)."""


MAX_PUBLISHED = 10_000
"""Runs whose last published seq is kept (a follower's reader starts there without a read)."""

PROOF = "SELECT 1"
"""The listener's proof of life: any answer will do."""


@dataclass(eq=False)
class _Reader:
    bell: asyncio.Event = field(default_factory=asyncio.Event)
    started: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once the run's last seq is read (or the reader ended): a follower's replay reads
    after that, so it has every event up to where the reader starts."""
    gone: bool = False
    """The run is not stored (deleted, or never made): its followers' feeds end."""
    task: asyncio.Task[None] | None = None
    followers: int = 0
    stopped: bool = False
    last: int = 0
    """The last seq published to the fan-out (by this reader, or by this process's writer)."""

    def stop(self) -> None:
        self.stopped = True
        if self.task is not None:
            self.task.cancel()

    @property
    def done(self) -> bool:
        return self.stopped or (self.task is not None and self.task.done())


class PostgresFollower:
    """`follow(run_id, after)`: the run's events after `after`, replayed then live."""

    def __init__(
        self,
        conninfo: str,
        channel: str,
        read: Callable[..., Awaitable[list[Event]]],
        last_seq: Callable[[str], Awaitable[int | None]],
        fanout: Callable[[], Fanout],
        listeners: list[Callable[[str], None]] | None = None,
    ) -> None:
        self._conninfo = conninfo
        self._channel = channel
        self._read = read
        self._last_seq = last_seq
        self._fanout = fanout
        self._readers: dict[str, _Reader] = {}
        self._listener: asyncio.Task[None] | None = None
        self.listeners = listeners if listeners is not None else []
        """Also told of every notification's payload (cancels, messages: the replicas)."""
        self.reconnected: list[Callable[[], None]] = []
        """Told each time the listener (re)connects: notifications may have been missed."""
        self.listening = asyncio.Event()
        self.listened = 0
        """How many times the listener has started listening (each time, missed
        notifications rang every reader)."""
        self.proven_at = -math.inf
        """When the last proof the listener's connection answered was sent (monotonic)."""
        self.proofs = 0
        self.listener_pid: int | None = None
        """The backend pid of the listening connection (for tests and logs)."""
        self._published: dict[str, int] = {}
        """The last seq this process published of each of its unended runs (a lower bound of
        the run's `last_seq`: another replica may have appended since)."""
        self.own: set[int] = set()
        """The backend pids of this process's pool: their appends are published here at
        commit (`published`), their notifications need not wake a reader."""

    def start(self) -> None:
        self._listener = asyncio.create_task(self._listen(), name="postgres listen")

    def ring(self, payload: str) -> None:
        """An event notification, `<run id>:<seq>` (a bare run id is heard too): the run's
        reader reads on, unless it has published that seq already."""
        run_id, known, seq = payload.rpartition(":")
        if not known:
            run_id, seq = payload, ""
        reader = self._readers.get(run_id)
        if reader is not None and not (seq.isdigit() and int(seq) <= reader.last):
            reader.bell.set()

    def published(self, event: Event) -> None:
        """`event` was committed and published by this process: the run's reader need not
        read it back (it reads on only after a gap, or when another replica wrote)."""
        if event.terminal:
            self._published.pop(event.run_id, None)
        elif event.seq > self._published.get(event.run_id, 0):
            self._published[event.run_id] = event.seq
            if len(self._published) > MAX_PUBLISHED:  # (runs another replica executes and
                del self._published[next(iter(self._published))]  # ends: the oldest go)
        reader = self._readers.get(event.run_id)
        if reader is None:
            return
        if reader.last + 1 == event.seq:
            reader.last = event.seq
            if event.terminal:
                reader.stopped = True
                reader.bell.set()
        else:
            reader.bell.set()

    def follow(self, run_id: str, after: int) -> AsyncIterator[Event]:
        return each_event(self.follow_batches(run_id, after))

    async def follow_batches(self, run_id: str, after: int) -> AsyncIterator[list[Event]]:
        reader = self._readers.get(run_id)
        if reader is None or reader.done:
            reader = self._readers[run_id] = _Reader()
            reader.task = asyncio.create_task(self._run(run_id, reader), name=f"pg follow {run_id}")
        reader.followers += 1
        try:
            await reader.started.wait()
            if reader.gone:
                return
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

    def forget(self, run_id: str) -> None:
        """The run is deleted (or no longer this process's to know)."""
        self._published.pop(run_id, None)

    async def close(self) -> None:
        readers, self._readers = list(self._readers.values()), {}
        for reader in readers:
            reader.stop()
        tasks = [r.task for r in readers if r.task is not None]
        if self._listener is not None:
            self._listener.cancel()
            tasks.append(self._listener)
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _patiently(self, query: Callable[..., Awaitable[Any]], *args: Any, **kw: Any) -> Any:
        while True:
            try:
                return await query(*args, **kw)
            except StoreUnavailableError as exc:
                log.warning("event_reader_failed", error=exc.message)
                await asyncio.sleep(RETRY_S)

    async def _read_patiently(self, run_id: str, *, after: int, limit: int) -> list[Event]:
        events: list[Event] = await self._patiently(self._read, run_id, after=after, limit=limit)
        return events

    async def _run(self, run_id: str, reader: _Reader) -> None:
        """The reader, registered before its run's last seq is read: a bell rung meanwhile
        (a notification, or a gap in what this process published) is kept, and it reads
        only once rung (the followers' replays, made after that read, have the rest)."""
        heard = self._heard()
        try:
            # where it starts: what this process published of the run (its reader reads any
            # later ones once rung; earlier ones are the followers' replays'), else a read
            last = self._published.get(run_id) or await self._patiently(self._last_seq, run_id)
            if last is None:  # not stored (deleted, or never made)
                reader.gone = True
                self._fanout().end(run_id)  # (followers subscribed before: a deletion)
                return
            reader.last = max(reader.last, last)
        finally:
            reader.started.set()
        await self._rung(reader, heard)
        while not reader.stopped:
            reader.bell.clear()
            heard = self._heard()
            events = await self._read_patiently(run_id, after=reader.last, limit=PAGE)
            for event in events:
                if reader.done:
                    return
                if event.seq <= reader.last:  # this process published it meanwhile
                    continue
                self._fanout().publish(event)
                reader.last = event.seq
                if event.terminal:
                    return
            if len(events) == PAGE:
                continue
            await self._rung(reader, heard)

    def _heard(self) -> int:
        return self.listened if self.listening.is_set() else -1

    async def _rung(self, reader: _Reader, heard: int) -> None:
        """Until the bell rings; or the end of a turn in which the listener did not prove it
        heard everything since the read (`heard`: which listener listened then, -1 none)."""
        turn = POLL_S / 2
        while not reader.stopped:
            # (asyncio.timeout, not wait_for: on 3.11 wait_for may swallow a cancel that
            # comes as the wait ends, and the task would never stop)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(turn):
                    await reader.bell.wait()
                return
            proven = time.monotonic() - self.proven_at <= turn
            if not proven or heard < 0 or self.listened != heard:
                return

    async def _prove(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """A round trip on the listening connection (notifications arriving meanwhile are
        kept for the next `notifies`); one not answered within `POLL_S / 4` gives it up."""
        sent = time.monotonic()
        try:
            async with asyncio.timeout(POLL_S / 4):  # (not wait_for: see `_rung`)
                await conn.execute(PROOF)
        except TimeoutError as exc:
            raise psycopg.OperationalError("the listening connection did not answer") from exc
        self.proven_at = sent
        self.proofs += 1

    async def _listen(self) -> None:
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True)
            except Exception as exc:
                if not is_outage(exc):
                    raise
                await asyncio.sleep(RETRY_S)
                continue
            try:
                async with conn:
                    await conn.execute(f'LISTEN "{self._channel}"')
                    self.listener_pid = conn.info.backend_pid
                    self.listened += 1
                    self.listening.set()
                    for reader in list(self._readers.values()):
                        reader.bell.set()  # what was missed while not listening
                    for told in self.reconnected:
                        told()
                    while True:
                        async for note in conn.notifies(timeout=POLL_S / 4):
                            if note.pid not in self.own:
                                self.ring(note.payload)
                            for listener in self.listeners:
                                listener(note.payload)
                        await self._prove(conn)
            except Exception as exc:
                if not is_outage(exc):
                    log.exception("store_listen_failed")
                self.listening.clear()
                await asyncio.sleep(RETRY_S)
