"""The threads of `SqliteRunStore`: one writer with group commit, a few readers.

Every write is a function of the writer's connection, queued with an asyncio future. The
thread takes whatever is queued (up to `max_batch`), runs it all in one `BEGIN IMMEDIATE`
transaction, commits, and only then hands the outcomes back to the event loop, in queue
order: first the write's `after_commit` hook (the store publishes appended events there),
then its future. Nothing is acknowledged, or shown to a subscriber, before it is durable.
While one batch is being fsynced the next one queues up, so under load many writes share
one commit.

Each write runs inside its own SAVEPOINT: a write that raises (a duplicate run id, say) is
rolled back alone and fails only its own future; the rest of the batch commits. (A batch of
one, the usual case at low load, needs none: its transaction is rolled back instead.) If the
transaction as a whole fails (BEGIN or COMMIT: disk full, I/O error, a lock held too long),
nothing of the batch is durable, every future in it fails, and `on_abort` lets the store
forget state it derived from the batch (its next-seq cache).

`failures` counts the writes that failed either way. A write submitted with
`unless_failures_above=N` is not made, and fails with `WritesFailedError`, once more than N
have (a run's closing write: `RunStore.append_closing`); the writer checks just before it
would make it, after every write submitted before it has been made or has failed.

Reads run on a small thread pool, each thread with its own connection; WAL lets them read the
last commit while the writer writes. `close()` closes every one of those connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from app.runs.store import WritesFailedError

T = TypeVar("T")
Apply = Callable[[sqlite3.Connection], Any]
AfterCommit = Callable[[Any], None]


@dataclass(slots=True)
class _Write:
    apply: Apply
    future: asyncio.Future[Any]
    after_commit: AfterCommit | None
    unless_failures_above: int | None = None


@dataclass(slots=True)
class _Stop:
    done: asyncio.Future[None]


class GroupCommitWriter:
    """Runs writes on one thread and one connection, many writes per transaction."""

    def __init__(
        self,
        connect: Callable[[], sqlite3.Connection],
        *,
        on_abort: Callable[[], None] = lambda: None,
        max_batch: int = 512,
    ) -> None:
        self._connect = connect
        self._on_abort = on_abort
        self._max_batch = max_batch
        self._queue: queue.SimpleQueue[_Write | _Stop] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="sqlite-writer", daemon=True)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready: asyncio.Future[None] | None = None
        self.commits = 0  # transactions committed; written on the writer thread only
        self.failures = 0  # writes that failed; written on the writer thread only
        self.pending = 0  # writes submitted and not yet resolved; loop thread only

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    async def start(self) -> None:
        """Start the thread; raises what connecting (and preparing the schema) raised."""
        self._loop = asyncio.get_running_loop()
        self._ready = self._loop.create_future()
        self._thread.start()
        await self._ready

    def submit(
        self,
        apply: Apply,
        after_commit: AfterCommit | None = None,
        *,
        unless_failures_above: int | None = None,
    ) -> asyncio.Future[Any]:
        """Queue `apply`; the future resolves with its result once the result is committed.
        `unless_failures_above`: see the module's doc."""
        assert self._loop is not None, "start() first"
        future: asyncio.Future[Any] = self._loop.create_future()
        self.pending += 1
        self._queue.put(_Write(apply, future, after_commit, unless_failures_above))
        return future

    async def stop(self) -> None:
        """Commit and resolve everything queued before this call, then end the thread."""
        assert self._loop is not None, "start() first"
        done: asyncio.Future[None] = self._loop.create_future()
        self._queue.put(_Stop(done))
        await done
        await asyncio.to_thread(self._thread.join)

    # -- the writer thread ------------------------------------------------------------------

    def _run(self) -> None:
        try:
            conn = self._connect()
        except BaseException as exc:
            self._to_loop(_fail, self._ready, exc)
            return
        self._to_loop(_succeed, self._ready, None)
        try:
            while True:
                item = self._queue.get()
                batch: list[_Write] = []
                while isinstance(item, _Write):
                    batch.append(item)
                    if len(batch) >= self._max_batch:
                        break
                    try:
                        item = self._queue.get_nowait()
                    except queue.Empty:
                        break
                if batch:
                    self._commit(conn, batch)
                if isinstance(item, _Stop):  # the store queues nothing after it
                    self._to_loop(_succeed, item.done, None)
                    return
        finally:
            conn.close()  # before stop() returns: it joins this thread

    def _commit(self, conn: sqlite3.Connection, batch: list[_Write]) -> None:
        outcomes: list[tuple[_Write, bool, Any]] = []
        if len(batch) == 1:  # alone in its transaction: no savepoint needed
            self._commit_one(conn, batch[0])
            return
        try:
            conn.execute("BEGIN IMMEDIATE")
            for write in batch:
                if (refused := self._refused(write)) is not None:
                    outcomes.append((write, False, refused))
                    continue
                conn.execute("SAVEPOINT write")
                try:
                    value = write.apply(conn)
                except Exception as exc:
                    conn.execute("ROLLBACK TO write")
                    conn.execute("RELEASE write")
                    self.failures += 1
                    outcomes.append((write, False, exc))
                else:
                    conn.execute("RELEASE write")
                    outcomes.append((write, True, value))
            conn.execute("COMMIT")
        except Exception as exc:
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):  # SQLite may have rolled back already
                    conn.execute("ROLLBACK")
            self._on_abort()
            self.failures += len(batch)
            outcomes = [(write, False, exc) for write in batch]
        else:
            self.commits += 1
        self._to_loop(self._deliver, outcomes)

    def _commit_one(self, conn: sqlite3.Connection, write: _Write) -> None:
        """A batch of one: its transaction is its savepoint (what raises rolls it all back)."""
        if (refused := self._refused(write)) is not None:
            self._to_loop(self._deliver, [(write, False, refused)])
            return
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                value = write.apply(conn)
            except Exception as exc:
                conn.execute("ROLLBACK")
                self.failures += 1
                outcome = (write, False, exc)
            else:
                conn.execute("COMMIT")
                self.commits += 1
                outcome = (write, True, value)
        except Exception as exc:
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):  # SQLite may have rolled back already
                    conn.execute("ROLLBACK")
            self._on_abort()
            self.failures += 1
            outcome = (write, False, exc)
        self._to_loop(self._deliver, [outcome])

    def _refused(self, write: _Write) -> WritesFailedError | None:
        limit = write.unless_failures_above
        if limit is None or self.failures <= limit:
            return None
        return WritesFailedError(f"{self.failures - limit} queued writes failed before it")

    def _to_loop(self, callback: Callable[..., None], *args: Any) -> None:
        assert self._loop is not None
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody is waiting any more
            self._loop.call_soon_threadsafe(callback, *args)

    # -- back on the event loop -------------------------------------------------------------

    def _deliver(self, outcomes: list[tuple[_Write, bool, Any]]) -> None:
        assert self._loop is not None
        for write, ok, value in outcomes:
            self.pending -= 1
            if ok and write.after_commit is not None:
                try:
                    write.after_commit(value)
                except Exception as exc:  # our bug; the write is durable all the same
                    self._loop.call_exception_handler(
                        {"message": "after_commit hook failed", "exception": exc}
                    )
            if ok:
                _succeed(write.future, value)
            else:
                _fail(write.future, value)


def _succeed(future: asyncio.Future[Any] | None, value: Any) -> None:
    if future is not None and not future.done():  # a cancelled caller: the write still stands
        future.set_result(value)


def _fail(future: asyncio.Future[Any] | None, exc: BaseException) -> None:
    if future is not None and not future.done():
        future.set_exception(exc)


class ReaderPool:
    """Runs queries on `size` threads, each with its own connection made by `connect`
    (which must allow closing from another thread: `check_same_thread=False`)."""

    def __init__(self, connect: Callable[[], sqlite3.Connection], size: int) -> None:
        self._connect = connect
        self._executor = ThreadPoolExecutor(size, thread_name_prefix="sqlite-read")
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()

    async def run(self, query: Callable[[sqlite3.Connection], T]) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._on_thread, query)

    async def close(self) -> None:
        """Wait for the queries in flight, then close every connection."""
        await asyncio.to_thread(self._executor.shutdown, wait=True)
        with self._lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()

    def _on_thread(self, query: Callable[[sqlite3.Connection], T]) -> T:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            with self._lock:
                self._connections.append(conn)
            self._local.conn = conn
        return query(conn)
