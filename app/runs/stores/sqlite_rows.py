"""A run's record as a row of the `runs` table (`SqliteRunStore`'s writes of it, and its
reads: `record_of`), its checkpoint's rows, the members of its tree of runs, and what a
failed foreign key on a write means."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable
from typing import Any

from app.engine.events import TERMINAL_EVENT_TYPES, EventType
from app.runs.records import Event, RunRecord
from app.runs.store import CHECKPOINT_FORMAT, Checkpoint, DuplicateRunError, read_record
from app.runs.stores.checkpoints import CheckpointWrite, loaded, stored_count
from app.runs.stores.events import encode, stored
from app.runs.stores.sqlite_reports import summary_write

# Never INSERT OR REPLACE a run: REPLACE deletes the row first, and the cascade its events.
UPSERT_RUN = """
    INSERT INTO runs (id, owner, status, idempotency_key, created_at, previous_run_id,
        parent_run_id, record)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?)
"""
ON_CONFLICT = """
    ON CONFLICT (id) DO UPDATE SET owner = excluded.owner, status = excluded.status,
        idempotency_key = excluded.idempotency_key, created_at = excluded.created_at,
        previous_run_id = excluded.previous_run_id, parent_run_id = excluded.parent_run_id,
        record = excluded.record
"""


def raise_if_no_such_run(exc: sqlite3.IntegrityError, run_id: str) -> None:
    """A foreign key failure means the run does not exist: KeyError, as `MemoryRunStore`."""
    if exc.sqlite_errorname == "SQLITE_CONSTRAINT_FOREIGNKEY":
        raise KeyError(run_id) from exc


def upsert_run(record: RunRecord) -> Callable[[sqlite3.Connection], None]:
    """`save(record)` as a write (its row built now: the caller may change the record); a
    terminal record's summary with it, in its transaction."""
    row = run_row(record)
    summary = summary_write(record) if record.status.terminal else None

    def upsert(conn: sqlite3.Connection) -> None:
        try:
            conn.execute(UPSERT_RUN + ON_CONFLICT, row)
        except sqlite3.IntegrityError as exc:
            raise DuplicateRunError(record.idempotency_key) from exc
        if summary is not None:
            summary(conn)

    return upsert


def run_row(record: RunRecord) -> tuple[str | None, ...]:
    return (
        record.id,
        record.owner,
        record.status.value,
        record.idempotency_key,
        record.created_at.isoformat(),
        record.previous_run_id,
        record.parent_run_id,
        record.model_dump_json(),
    )


def record_of(row: tuple[str, str | None, str]) -> RunRecord:
    """The record of a row read as `id, owner, record` (`RunUnreadableError` if it does not
    read back: `app.runs.store.read_record`)."""
    run_id, owner, raw = row
    return read_record(run_id, raw, owner=owner)


def checkpoint_upsert(
    run_id: str, step: int, write: CheckpointWrite, stored: dict[str, int]
) -> Callable[[sqlite3.Connection], None]:
    """The write of a checkpoint (`stores.checkpoints`): its head, and the chunk of messages
    since this process's last one (`start` 0: a full snapshot, the old chunks dropped).
    `stored` (the writer thread's: the run's messages in chunks as of the transaction so far,
    cleared when a transaction aborts): a delta whose earlier chunks are not all there (a
    queued checkpoint before it failed) is written whole instead."""
    state = write.state
    count = len(write.messages) if write.messages is not None else None

    def upsert(conn: sqlite3.Connection) -> None:
        start, chunk = write.start, write.chunk
        if start and stored.get(run_id) != start:
            start, chunk = 0, write.whole()
        try:
            conn.execute(
                "INSERT INTO checkpoints (run_id, step, state, version) VALUES"
                " (?, ?, ?, ?) ON CONFLICT (run_id) DO UPDATE SET step = excluded.step,"
                " state = excluded.state, version = excluded.version",
                (run_id, step, state, CHECKPOINT_FORMAT),
            )
        except sqlite3.IntegrityError as exc:
            raise_if_no_such_run(exc, run_id)
            raise
        if not start:  # a full snapshot; a delta follows this process's last
            conn.execute("DELETE FROM checkpoint_chunks WHERE run_id = ?", (run_id,))
        if chunk is not None:
            conn.execute(
                "INSERT OR REPLACE INTO checkpoint_chunks (run_id, start, messages)"
                " VALUES (?, ?, ?)",
                (run_id, start, chunk),
            )
        if count is None:
            stored.pop(run_id, None)
        else:
            stored[run_id] = count

    return upsert


def tree_member(root_run_id: str, member: str, cap: int) -> Callable[[sqlite3.Connection], bool]:
    """`RunStore.add_tree_run` as a write: one transaction, so the count cannot be passed."""

    def add(conn: sqlite3.Connection) -> bool:
        sql = "SELECT COUNT(*), SUM(member = ?) FROM tree_runs WHERE root_id = ?"
        count, known = conn.execute(sql, (member, root_run_id)).fetchone()
        if known:
            return True
        if count >= cap:
            return False
        try:
            conn.execute(
                "INSERT INTO tree_runs (root_id, member) VALUES (?, ?)", (root_run_id, member)
            )
        except sqlite3.IntegrityError as exc:
            raise_if_no_such_run(exc, root_run_id)
            raise
        return True

    return add


def checkpoint_query(run_id: str, conn: sqlite3.Connection) -> Checkpoint | None:
    """`RunStore.load_checkpoint` as a read: the head and its messages from one commit."""
    conn.execute("BEGIN")
    try:
        sql = "SELECT step, state, version FROM checkpoints WHERE run_id = ?"
        found = conn.execute(sql, (run_id,)).fetchone()
        if found is None:
            return None
        state: dict[str, Any] = json.loads(found[1])
        count = stored_count(state)
        chunks: list[str] = []
        if count is not None:
            sql = "SELECT messages FROM checkpoint_chunks WHERE run_id = ? AND start < ?"
            rows = conn.execute(sql + " ORDER BY start", (run_id, count)).fetchall()
            chunks = [m for (m,) in rows]
        return loaded(found[0], state, chunks, found[2])
    finally:
        conn.execute("COMMIT")


def event_insert(
    next_seq: dict[str, int],
    chunked: dict[str, Any],
    run_id: str,
    type: EventType,
    step: int,
    data: dict[str, Any],
) -> Callable[[sqlite3.Connection], Event]:
    """The write that appends an event of the run, its seq from `next_seq` (the store's
    cache: read from the table when missing), dropping the run's entries of both caches at
    its terminal event. Its JSON is made now: the caller may change `data`."""
    payload = encode(data)
    ts = time.time()

    def insert(conn: sqlite3.Connection) -> Event:
        seq = next_seq.get(run_id)
        if seq is None:
            (last,) = conn.execute(
                "SELECT MAX(seq) FROM events WHERE run_id = ?", (run_id,)
            ).fetchone()
            seq = (last or 0) + 1
        try:
            conn.execute(
                "INSERT INTO events (run_id, seq, type, ts, step, data) VALUES (?,?,?,?,?,?)",
                (run_id, seq, type, ts, step, payload),
            )
        except sqlite3.IntegrityError as exc:
            raise_if_no_such_run(exc, run_id)
            raise
        if type in TERMINAL_EVENT_TYPES:  # the run is over: free its cache entries
            next_seq.pop(run_id, None)
            chunked.pop(run_id, None)
        else:
            next_seq[run_id] = seq + 1
        return stored(run_id, seq, type, ts, step, payload)  # as replayed

    return insert
