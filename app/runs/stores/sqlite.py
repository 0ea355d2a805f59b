"""`sqlite:///path/to/file.db`: the embedded default store, for one process.

Durability: the database is in WAL mode and, by default, `synchronous=FULL`, so a commit is
on disk (the WAL fsynced) before it returns. Every write goes through one writer thread
(`sqlite_threads.GroupCommitWriter`) that batches whatever is queued into one transaction;
`create`, `save`, `delete`, `append` and `save_checkpoint` return only after their batch
committed (the `_soon` ones hand back a future of it), and an appended event reaches
subscribers only after that commit. A crash (of the process, the OS or the power) can
therefore lose only writes that were never acknowledged, and nobody has seen them. With
`synchronous="NORMAL"` the WAL is fsynced at checkpoints only: a process crash still loses
nothing acknowledged, a power cut or OS crash may lose the last commits. Group commit keeps
FULL affordable: under load, many writes share one fsync. Reads run on a pool of reader
threads, each with its own connection (WAL: they read the last commit while the writer writes).

One process per file: the writer keeps each run's next `seq` in memory (read from
`MAX(seq)` on first use) and live fan-out is in-process. The schema and its migrations are in
`sqlite_schema`; `open()` brings the file up to date; a run's row is `sqlite_rows`.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from functools import partial
from typing import Any, TypeVar

from app.engine.events import EventType
from app.runs.errors import RunUnreadableError
from app.runs.records import Event, RunRecord, RunStatus
from app.runs.reports.summaries import RunFilter
from app.runs.store import Checkpoint, DuplicateRunError, FirstEvent, StoreError
from app.runs.stores.checkpoints import CheckpointDeltas
from app.runs.stores.fanout import Fanout
from app.runs.stores.sqlite_counters import SqliteCounters
from app.runs.stores.sqlite_reports import SqliteSummaries, where_matching
from app.runs.stores.sqlite_rows import (
    UPSERT_RUN,
    checkpoint_query,
    checkpoint_upsert,
    event_insert,
    record_of,
    run_row,
    tree_member,
    upsert_run,
)
from app.runs.stores.sqlite_schedules import SqliteSchedules
from app.runs.stores.sqlite_schema import SYNCHRONOUS_MODES, connect, prepare_writer
from app.runs.stores.sqlite_thread_index import SqliteThreadIndex
from app.runs.stores.sqlite_threads import GroupCommitWriter, ReaderPool

T = TypeVar("T")

KEPT_EVENTS = 32
"""Events kept of each live run nobody follows yet, for its first subscriber (`Fanout`)."""
QUEUE_LIMIT = 128
"""Writes the writer may be behind before `append_soon` waits for its own: under a load
the disk or the loop cannot keep up with, a run waits for each event again instead of
queueing events that would each wait longer to be seen."""

_EVENT_TYPES = {t.value: t for t in EventType}
"""A stored type back to its member: a dict lookup, cheaper than EventType(t) per row."""


class StoreClosedError(StoreError):
    """The store is not open: `open()` was not called, or `close()` was."""


class SqliteRunStore(SqliteSummaries):
    """A `RunStore` in one SQLite file (run summaries: `SqliteSummaries`). See the module
    docstring for the durability story.

    `synchronous`: FULL (default) or NORMAL (EXTRA, OFF); `readers`: reader threads;
    `busy_timeout_s`: how long a connection waits for a lock another process holds.
    Writes are queued in the order their coroutines start; a caller cancelled while waiting
    does not withdraw its write. `append` or `save_checkpoint` on an unknown run raise
    KeyError (as `MemoryRunStore` does for `append`); after `close()`, every method raises
    `StoreClosedError`. `commits` and `pending_writes` are there for tests and metrics.
    """

    def __init__(
        self,
        path: str,
        *,
        synchronous: str = "FULL",
        readers: int = 4,
        busy_timeout_s: float = 5.0,
    ) -> None:
        if synchronous.upper() not in SYNCHRONOUS_MODES:
            raise ValueError(f"synchronous must be one of {SYNCHRONOUS_MODES}, not {synchronous!r}")
        if path in ("", ":memory:") or path.startswith("file:"):
            raise ValueError(f"SqliteRunStore needs a file path, not {path!r}")
        self.path = path
        self.synchronous = synchronous.upper()
        self.busy_timeout_s = busy_timeout_s
        self.fanout = Fanout(tail=KEPT_EVENTS)  # every event of its runs is published here
        self._state = "new"  # new -> open -> closed
        self._next_seq: dict[str, int] = {}  # the writer thread's alone
        self._chunked: dict[str, int] = {}  # the writer thread's: messages in chunks, per run
        self._deltas = CheckpointDeltas()  # the loop thread's
        self._writer = GroupCommitWriter(
            partial(
                prepare_writer, path, synchronous=self.synchronous, busy_timeout_s=busy_timeout_s
            ),
            on_abort=self._aborted,
        )
        self._readers = ReaderPool(self._connect_reader, readers)
        self.counters = SqliteCounters(self._read, self._writer, self._check_open)
        self.threads = SqliteThreadIndex(self._read, self._writer, self._check_open)
        self.schedules = SqliteSchedules(self._read, self._writer, self._check_open)

    def _aborted(self) -> None:
        """A transaction failed (writer thread): what it derived from the batch is forgotten."""
        self._next_seq.clear()
        self._chunked.clear()

    @property
    def commits(self) -> int:
        """Transactions committed so far: fewer than writes when group commit batches them."""
        return self._writer.commits

    @property
    def pending_writes(self) -> int:
        """Writes queued or in flight, not yet acknowledged."""
        return self._writer.pending

    # -- lifecycle --------------------------------------------------------------------------

    async def open(self) -> None:
        if self._state != "new":
            raise StoreClosedError("a SqliteRunStore opens once; make a new one")
        try:
            await self._writer.start()  # creates the directory, the file and the schema
        except BaseException:
            self._state = "closed"  # the writer thread has ended: this store cannot open
            raise
        self._state = "open"

    async def close(self) -> None:
        """Commit the writes already queued, then stop the threads and close every connection."""
        was_open, self._state = self._state == "open", "closed"
        if was_open:
            await self._writer.stop()
            await self._readers.close()

    async def ping(self) -> None:
        self._check_open()
        if not self._writer.alive:
            raise StoreError("the SQLite writer thread has stopped")
        await self._read(lambda conn: conn.execute("SELECT 1").fetchone())

    # -- runs -------------------------------------------------------------------------------

    async def create(
        self, record: RunRecord, *, first_event: FirstEvent | None = None
    ) -> Event | None:
        row = run_row(record)
        append = self._event_insert(record.id, *first_event) if first_event else None

        def insert(conn: sqlite3.Connection) -> Event | None:
            try:
                conn.execute(UPSERT_RUN, row)
            except sqlite3.IntegrityError as exc:
                primary = exc.sqlite_errorname == "SQLITE_CONSTRAINT_PRIMARYKEY"
                raise DuplicateRunError(record.id if primary else record.idempotency_key) from exc
            return append(conn) if append is not None else None  # the same transaction

        def publish(event: Event | None) -> None:
            if event is not None:
                self.fanout.publish(event)

        event: Event | None = await self._write(insert, publish)
        return event

    async def save(self, record: RunRecord) -> None:
        await self._write(upsert_run(record))

    async def get(self, run_id: str) -> RunRecord | None:
        sql = "SELECT id, owner, record FROM runs WHERE id = ?"
        rows = await self._read(_query(sql, (run_id,)))
        return record_of(rows[0]) if rows else None

    async def find_by_idempotency_key(self, owner: str | None, key: str) -> RunRecord | None:
        sql = "SELECT id, owner, record FROM runs WHERE idempotency_key = ? AND owner "
        sql += "IS NULL" if owner is None else "= ?"
        params = (key,) if owner is None else (key, owner)
        rows = await self._read(_query(sql, params))
        return record_of(rows[0]) if rows else None

    async def list_runs(
        self,
        *,
        owner: str | None,
        statuses: Sequence[RunStatus] = (),
        limit: int = 50,
        before_id: str | None = None,
        any_owner: bool = False,
        previous_run_id: str | None = None,
        unreadable: list[RunUnreadableError] | None = None,
        parent_run_id: str | None = None,
        matching: RunFilter | None = None,
    ) -> list[RunRecord]:
        where, params = where_matching(owner, any_owner, matching, summaries=False)
        if statuses:
            where.append(f"status IN ({', '.join('?' * len(statuses))})")
            params += [RunStatus(s).value for s in statuses]
        for column, value in (
            ("previous_run_id", previous_run_id),
            ("parent_run_id", parent_run_id),
        ):
            if value is not None:  # (a column name of ours: no injection)
                where.append(f"{column} = ?")
                params.append(value)
        found: list[RunRecord] = []
        cursor = before_id
        while len(found) < limit:  # again past rows that did not read back
            want = limit - len(found)
            clauses = [*where, "id < ?"] if cursor is not None else where
            sql = "SELECT id, owner, record FROM runs"
            sql += f" WHERE {' AND '.join(clauses)}" if clauses else ""
            values = (*params, cursor) if cursor is not None else tuple(params)
            rows = await self._read(_query(sql + " ORDER BY id DESC LIMIT ?", (*values, want)))
            for row in rows:
                try:
                    found.append(record_of(row))
                except RunUnreadableError as exc:
                    if unreadable is not None:
                        unreadable.append(exc)
            if len(rows) < want:
                break
            cursor = rows[-1][0]
        return found

    async def delete(self, run_id: str) -> None:
        self._deltas.forget(run_id)
        self.fanout.forget(run_id)

        def delete(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM runs WHERE id = ?", (run_id,))  # cascades
            self._next_seq.pop(run_id, None)
            self._chunked.pop(run_id, None)

        await self._write(delete)

    async def add_tree_run(self, root_run_id: str, member: str, cap: int) -> bool:
        counted: bool = await self._write(tree_member(root_run_id, member, cap))
        return counted

    # -- events -----------------------------------------------------------------------------

    async def append(
        self,
        run_id: str,
        type: EventType,
        step: int,
        data: dict[str, Any],
        *,
        record: RunRecord | None = None,
    ) -> Event:
        event: Event = await self._queue_append(run_id, type, step, data, record)
        return event

    async def append_soon(
        self,
        run_id: str,
        type: EventType,
        step: int,
        data: dict[str, Any],
        *,
        record: RunRecord | None = None,
    ) -> Awaitable[Event]:
        """Queued to the writer: it commits with whatever else is queued (group commit).
        While the writer is `QUEUE_LIMIT` writes behind, made before returning, as `append`."""
        future = self._queue_append(run_id, type, step, data, record)
        if self._writer.pending > QUEUE_LIMIT:
            await future
        return future

    def write_failures(self) -> int:
        return self._writer.failures

    async def append_closing(
        self,
        run_id: str,
        type: EventType,
        step: int,
        data: dict[str, Any],
        *,
        record: RunRecord,
        failures: int,
    ) -> Awaitable[Event]:
        """Queued with the run's last writes, guarded by the writer (`sqlite_threads`)."""
        return self._queue_append(run_id, type, step, data, record, failures)

    def _queue_append(
        self,
        run_id: str,
        type: EventType,
        step: int,
        data: Any,
        record: RunRecord | None,
        unless_failures_above: int | None = None,
    ) -> asyncio.Future[Event]:
        """The append (with `record`: saved first, in the same transaction), queued."""
        self._check_open()
        save = upsert_run(record) if record is not None else None
        insert = self._event_insert(run_id, type, step, data)
        self._deltas.appended(run_id, type)

        def write(conn: sqlite3.Connection) -> Event:
            save(conn)  # type: ignore[misc]  # (only with a record)
            return insert(conn)

        return self._writer.submit(
            insert if save is None else write,
            self.fanout.publish,
            unless_failures_above=unless_failures_above,
        )

    def _event_insert(
        self, run_id: str, type: EventType, step: int, data: dict[str, Any]
    ) -> Callable[[sqlite3.Connection], Event]:
        """The write that appends an event (its JSON made now: the caller may change `data`)."""
        return event_insert(self._next_seq, self._chunked, run_id, type, step, data)

    async def read(self, run_id: str, *, after: int = 0, limit: int = 1000) -> list[Event]:
        sql = (
            "SELECT seq, type, ts, step, data FROM events"
            " WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?"
        )
        rows = await self._read(_query(sql, (run_id, after, limit)))
        return [
            Event(run_id, seq, _EVENT_TYPES[t], ts, step, json.loads(d), d)
            for seq, t, ts, step, d in rows
        ]

    def subscribe(self, run_id: str, *, after: int = 0) -> AsyncIterator[Event]:
        return self.fanout.follow(run_id, after, self.read)

    def subscribe_batches(self, run_id: str, *, after: int = 0) -> AsyncIterator[list[Event]]:
        return self.fanout.follow_batches(run_id, after, self.read)

    # -- checkpoints ------------------------------------------------------------------------

    async def save_checkpoint(self, run_id: str, step: int, state: dict[str, Any]) -> None:
        with self._deltas.writing(run_id, state) as write:  # incremental: stores.checkpoints
            await self._write(checkpoint_upsert(run_id, step, write, self._chunked))

    async def save_checkpoint_soon(
        self, run_id: str, step: int, state: dict[str, Any]
    ) -> Awaitable[None]:
        """Queued to the writer, as `append_soon`: it commits with the run's next events. A
        delta queued behind a checkpoint that then failed is written whole (`checkpoint_upsert`)."""
        self._check_open()
        write = checkpoint_upsert(run_id, step, self._deltas.plan(run_id, state), self._chunked)
        future: asyncio.Future[None] = self._writer.submit(write)
        future.add_done_callback(lambda done: self._forget_if_failed(run_id, done))
        if self._writer.pending > QUEUE_LIMIT:
            await future
        return future

    def _forget_if_failed(self, run_id: str, done: asyncio.Future[None]) -> None:
        if done.cancelled() or done.exception() is not None:
            self._deltas.forget(run_id)  # the next checkpoint whole

    async def load_checkpoint(self, run_id: str) -> Checkpoint | None:
        return await self._read(partial(checkpoint_query, run_id))

    # -- plumbing ---------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._state != "open":
            what = "closed" if self._state == "closed" else "not open yet: call open() first"
            raise StoreClosedError(f"SqliteRunStore({self.path!r}) is {what}")

    async def _write(
        self,
        apply: Callable[[sqlite3.Connection], T],
        after_commit: Callable[[T], None] | None = None,
    ) -> T:
        self._check_open()
        result: T = await self._writer.submit(apply, after_commit)
        return result

    async def _read(self, query: Callable[[sqlite3.Connection], T]) -> T:
        self._check_open()
        return await self._readers.run(query)

    def _connect_reader(self) -> sqlite3.Connection:
        # closed by close(), on another thread than the reader's own
        conn = connect(self.path, busy_timeout_s=self.busy_timeout_s, check_same_thread=False)
        conn.execute("PRAGMA query_only = ON")
        return conn


def _query(sql: str, params: Sequence[Any]) -> Callable[[sqlite3.Connection], list[Any]]:
    return lambda conn: conn.execute(sql, params).fetchall()
