"""The statements of `PostgresRunStore` that write a run: its row, its events, its checkpoint,
its tree. Each is a coroutine function of a connection, run by the writer inside its
transaction (`postgres_writer`). A write of a run this process holds the lease of names the
lease's fencing token, and is refused (`LeaseLostError`) once another replica took it over.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
from psycopg import errors as pg_errors

from app.engine.events import EventType
from app.runs.errors import RunUnreadableError
from app.runs.records import Event, RunRecord
from app.runs.store import (
    CHECKPOINT_FORMAT,
    Checkpoint,
    DuplicateRunError,
    LeaseLostError,
    RunGoneError,
    read_record,
)
from app.runs.stores.checkpoints import CheckpointWrite, loaded, stored_count
from app.runs.stores.events import stored
from app.runs.stores.postgres_reports import summary_write

Conn = psycopg.AsyncConnection[Any]
Write = Callable[[Conn], Awaitable[Any]]

NOW_S = "extract(epoch from clock_timestamp())::float8"
"""The database's clock, in epoch seconds: what leases are measured by (one clock for all)."""
DOORBELL = "run_id || ':' || seq"
"""An appended event's notification: `<run id>:<seq>` (the rows are read from the table)."""
_COLUMNS = (
    "id, owner, status, idempotency_key, created_at, previous_run_id, parent_run_id, record,"
    " ended_at, webhook_due"
)
RUN_COLUMNS = _COLUMNS
INSERT_RUN = f"INSERT INTO runs ({_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
_ON_CONFLICT = (
    " ON CONFLICT (id) DO UPDATE SET owner = excluded.owner, status = excluded.status,"
    " idempotency_key = excluded.idempotency_key, created_at = excluded.created_at,"
    " previous_run_id = excluded.previous_run_id, parent_run_id = excluded.parent_run_id,"
    " record = excluded.record, ended_at = COALESCE(runs.ended_at, excluded.ended_at),"
    # the webhook is owed once, as the run ends (the outbox: one replica delivers it)
    " webhook_due = CASE WHEN runs.ended_at IS NULL THEN excluded.webhook_due"
    " ELSE runs.webhook_due END,"
    # out of the queue once it is not queued any more; no deadline once it does not wait
    " queued_at = CASE WHEN excluded.status = 'queued' THEN runs.queued_at END,"
    " wait_deadline = CASE WHEN excluded.status = 'requires_action' THEN runs.wait_deadline END"
)
RUN_ON_CONFLICT = _ON_CONFLICT
_FENCED = " WHERE %s = '' OR (runs.lease_token = %s AND runs.lease_until >= " + NOW_S + ")"
UPSERT_RUN = INSERT_RUN + _ON_CONFLICT + _FENCED + " RETURNING 1"
SAVE_WITH_EVENT = (
    f"WITH u AS (INSERT INTO runs ({_COLUMNS}, last_seq)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, 1)"
    + _ON_CONFLICT
    + ", last_seq = runs.last_seq + 1"
    + _FENCED
    + " RETURNING id, last_seq)"
    " INSERT INTO events (run_id, seq, type, ts, step, data)"
    " SELECT id, last_seq, %s, %s, %s, %s FROM u RETURNING seq, pg_notify(%s, " + DOORBELL + ")"
)
"""A record that does not end its run saved, fenced, and an event appended after it, in one
statement (`append` with `record`)."""
CREATE_WITH_EVENT = (
    f"WITH r AS (INSERT INTO runs ({_COLUMNS}, last_seq)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, 1) RETURNING id)"
    " INSERT INTO events (run_id, seq, type, ts, step, data)"
    " SELECT id, 1, %s, %s, %s, %s FROM r RETURNING seq, pg_notify(%s, " + DOORBELL + ")"
)
"""A new run and its first event (seq 1) in one statement (`create` with `first_event`)."""
APPEND = (
    "WITH s AS (UPDATE runs SET last_seq = last_seq + 1 WHERE id = %s"
    " AND (%s = '' OR (lease_token = %s AND lease_until >= " + NOW_S + "))"
    " RETURNING id, last_seq)"
    " INSERT INTO events (run_id, seq, type, ts, step, data)"
    " SELECT id, last_seq, %s, %s, %s, %s FROM s RETURNING seq, pg_notify(%s, " + DOORBELL + ")"
)


def run_row(record: RunRecord) -> tuple[Any, ...]:
    terminal = record.status.terminal
    return (
        record.id,
        record.owner,
        record.status.value,
        record.idempotency_key,
        record.created_at.isoformat(),
        record.previous_run_id,
        record.parent_run_id,
        record.model_dump_json(),
        time.time() if terminal else None,
        terminal and record.webhook is not None,
    )


def duplicate(exc: pg_errors.UniqueViolation, record: RunRecord) -> DuplicateRunError:
    primary = exc.diag.constraint_name == "runs_pkey"
    return DuplicateRunError(record.id if primary else record.idempotency_key)


async def refused(conn: Conn, run_id: str) -> None:
    """Why a fenced write of the run changed nothing: gone, or taken over."""
    cur = await conn.execute("SELECT 1 FROM runs WHERE id = %s", (run_id,))
    if await cur.fetchone() is None:
        raise RunGoneError(run_id)
    raise LeaseLostError(f"run {run_id!r} was taken over by another replica")


def insert_run(record: RunRecord) -> Write:
    row = run_row(record)

    async def insert(conn: Conn) -> None:
        try:
            await conn.execute(INSERT_RUN, row)
        except pg_errors.UniqueViolation as exc:
            raise duplicate(exc, record) from exc

    return insert


def upsert_run(record: RunRecord, fence: str, channel: str) -> Write:
    """`save`: fenced by `fence` ("" for none); a terminal record's summary with it
    (`postgres_reports`); a run it ends with a webhook rings the replicas' outbox readers
    (`w:` on `channel`)."""
    row = (*run_row(record), fence, fence)
    ends_with_webhook = record.status.terminal and record.webhook is not None
    summary = summary_write(record) if record.status.terminal else None

    async def upsert(conn: Conn) -> None:
        try:
            cur = await conn.execute(UPSERT_RUN, row)
        except pg_errors.UniqueViolation as exc:
            raise duplicate(exc, record) from exc
        if await cur.fetchone() is None:
            await refused(conn, record.id)
        if summary is not None:  # a terminal record's summary, in its transaction
            await summary(conn)
        if ends_with_webhook:
            await conn.execute("SELECT pg_notify(%s, 'w:')", (channel,))

    return upsert


def insert_run_with_event(
    record: RunRecord,
    saved: tuple[Any, ...],
    type: str,
    ts: float,
    step: int,
    payload: str,
    channel: str,
) -> Callable[[Conn], Awaitable[Event]]:
    """`saved`: the record's `run_row`."""
    params = (*saved, type, ts, step, payload, channel)

    async def insert(conn: Conn) -> Event:
        try:
            await conn.execute(CREATE_WITH_EVENT, params)
        except pg_errors.UniqueViolation as exc:
            raise duplicate(exc, record) from exc
        return stored(record.id, 1, type, ts, step, payload)

    return insert


def save_with_event(
    record: RunRecord,
    saved: tuple[Any, ...],
    type: str,
    step: int,
    payload: str,
    fence: str,
    channel: str,
    ts: float,
) -> Callable[[Conn], Awaitable[Event]]:
    """`saved`: the record's `run_row`."""
    assert not record.status.terminal, "a terminal record is saved with its summary"
    params = (*saved, fence, fence, type, ts, step, payload, channel)

    async def save(conn: Conn) -> Event:
        try:
            row = await (await conn.execute(SAVE_WITH_EVENT, params)).fetchone()
        except pg_errors.UniqueViolation as exc:
            raise duplicate(exc, record) from exc
        if row is None:
            await refused(conn, record.id)
        assert row is not None
        return stored(record.id, int(row[0]), type, ts, step, payload)

    return save


def append_event(
    run_id: str, type: str, step: int, payload: str, fence: str, channel: str, ts: float = 0.0
) -> Callable[[Conn], Awaitable[Event]]:
    ts = ts or time.time()
    params = (run_id, fence, fence, type, ts, step, payload, channel)

    async def append(conn: Conn) -> Event:
        cur = await conn.execute(APPEND, params)
        row = await cur.fetchone()
        if row is None:
            await refused(conn, run_id)
        assert row is not None
        return stored(run_id, int(row[0]), type, ts, step, payload)

    return append


async def delete_runs(conn: Conn, where: str, params: tuple[Any, ...]) -> list[str]:
    """The runs `where` picks deleted with their events and checkpoint, in the caller's
    transaction; their ids. The runs' rows go first, in a statement of their own: a write
    of their events or checkpoint goes through the row, locked, so once the row is gone none
    can come after, and the next statement (a new snapshot) sees every one made before."""
    cur = await conn.execute(f"DELETE FROM runs WHERE {where} RETURNING id", params)
    ids = [run_id for (run_id,) in await cur.fetchall()]
    if ids:
        await conn.execute(
            "WITH e AS (DELETE FROM events WHERE run_id = ANY(%s)),"
            " c AS (DELETE FROM checkpoint_chunks WHERE run_id = ANY(%s))"
            " DELETE FROM checkpoints WHERE run_id = ANY(%s)",
            (ids, ids, ids),
        )
    return ids


def checkpoint_sql(fenced: bool, whole: bool, chunk: bool) -> str:
    """A checkpoint's write as one statement: the run's row (locked against a takeover until
    this commits when `fenced`), its head, its old chunks dropped (`whole`), its new chunk
    (`chunk`); the rows of the run found (0: nothing written)."""
    # (unfenced, the row is still locked, as a key: a deletion waits for this to commit)
    lease = f" AND lease_token = %(fence)s AND lease_until >= {NOW_S} FOR SHARE" if fenced else ""
    lease = lease or " FOR KEY SHARE"
    sql = f"WITH r AS (SELECT id FROM runs WHERE id = %(run_id)s{lease}),"
    sql += (
        " h AS (INSERT INTO checkpoints (run_id, step, state, version)"
        " SELECT id, %(step)s, %(state)s, %(version)s FROM r ON CONFLICT (run_id) DO UPDATE"
        " SET step = excluded.step, state = excluded.state, version = excluded.version)"
    )
    if whole:  # (not the chunk at 0 the same statement writes: a row is changed once)
        sql += ", d AS (DELETE FROM checkpoint_chunks WHERE run_id IN (SELECT id FROM r)"
        sql += " AND start > 0)" if chunk else ")"
    if chunk:
        sql += (
            ", c AS (INSERT INTO checkpoint_chunks (run_id, start, messages)"
            " SELECT id, %(start)s, %(chunk)s FROM r ON CONFLICT (run_id, start)"
            " DO UPDATE SET messages = excluded.messages)"
        )
    return sql + " SELECT count(*) FROM r"


_CHECKPOINT_SQL = {
    (f, w, c): checkpoint_sql(f, w, c)
    for f in (False, True)
    for w in (False, True)
    for c in (False, True)
}


def checkpoint_upsert(
    run_id: str, step: int, write: CheckpointWrite, fence: str, stored: dict[str, int]
) -> Write:
    """A checkpoint's head, and its chunk of messages since this process's last (`start` 0:
    a full snapshot, the old chunks dropped), in one statement (`checkpoint_sql`). `stored`
    (the writer's: the run's messages in chunks as of the transaction so far, cleared when a
    transaction fails): a delta whose earlier chunks are not all there (a queued checkpoint
    before it failed) is written whole."""
    count = len(write.messages) if write.messages is not None else None

    async def upsert(conn: Conn) -> None:
        start, chunk = write.start, write.chunk
        if start and stored.get(run_id) != start:
            start, chunk = 0, write.whole()
        sql = _CHECKPOINT_SQL[(bool(fence), not start, chunk is not None)]
        params = {"run_id": run_id, "fence": fence, "step": step, "state": write.state}
        params |= {"version": CHECKPOINT_FORMAT, "start": start, "chunk": chunk}
        cur = await conn.execute(sql, params)
        found = await cur.fetchone()
        if found is None or not found[0]:  # gone, or (fenced) taken over
            await refused(conn, run_id)
        if count is None:
            stored.pop(run_id, None)
        else:
            stored[run_id] = count

    return upsert


def tree_member(root_run_id: str, member: str, cap: int) -> Callable[[Conn], Awaitable[bool]]:
    """`add_tree_run`: the root's row locked, so two replicas cannot both pass the cap."""

    async def add(conn: Conn) -> bool:
        cur = await conn.execute("SELECT 1 FROM runs WHERE id = %s FOR UPDATE", (root_run_id,))
        if await cur.fetchone() is None:
            raise RunGoneError(root_run_id)
        cur = await conn.execute(
            "SELECT COUNT(*), COUNT(*) FILTER (WHERE member = %s) FROM tree_runs"
            " WHERE root_id = %s",
            (member, root_run_id),
        )
        count, known = await cur.fetchone() or (0, 0)
        if known:
            return True
        if count >= cap:
            return False
        sql = "INSERT INTO tree_runs (root_id, member) VALUES (%s, %s)"
        await conn.execute(sql, (root_run_id, member))
        return True

    return add


# -- reads ------------------------------------------------------------------------------------

_EVENT_TYPES = {t.value: t for t in EventType}


async def read_events(conn: Conn, run_id: str, after: int, limit: int) -> list[Event]:
    """The run's events after seq `after`, up to `limit`, read on `conn`."""
    cur = await conn.execute(
        "SELECT seq, type, ts, step, data FROM events"
        " WHERE run_id = %s AND seq > %s ORDER BY seq LIMIT %s",
        (run_id, after, limit),
    )
    return [
        Event(run_id, seq, _EVENT_TYPES[t], ts, step, json.loads(d), d)
        for seq, t, ts, step, d in await cur.fetchall()
    ]


async def checkpoint_of(conn: Conn, run_id: str) -> Checkpoint | None:
    """The run's checkpoint: its head and its messages from one snapshot."""
    async with conn.transaction():
        await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        sql = "SELECT step, state, version FROM checkpoints WHERE run_id = %s"
        found = await (await conn.execute(sql, (run_id,))).fetchone()
        if found is None:
            return None
        state: dict[str, Any] = json.loads(found[1])
        count = stored_count(state)
        chunks: list[str] = []
        if count is not None:
            sql = "SELECT messages FROM checkpoint_chunks WHERE run_id = %s AND start < %s"
            cur = await conn.execute(sql + " ORDER BY start", (run_id, count))
            chunks = [m for (m,) in await cur.fetchall()]
        return loaded(found[0], state, chunks, found[2])


def record_of(row: tuple[Any, ...]) -> RunRecord:
    """A run's record from its row's (id, owner, record)."""
    run_id, owner, raw = row
    return read_record(run_id, raw, owner=owner)


Query = Callable[[str, tuple[Any, ...]], Awaitable[list[tuple[Any, ...]]]]


async def paged(
    query: Query,
    where: list[str],
    params: list[Any],
    limit: int,
    before_id: str | None,
    unreadable: list[RunUnreadableError] | None,
) -> list[RunRecord]:
    """`list_runs`: the runs matching `where`, newest first, from before `before_id`, up to
    `limit` that read back (one that does not is noted in `unreadable`, and skipped)."""
    found: list[RunRecord] = []
    cursor = before_id
    while len(found) < limit:  # again past rows that did not read back
        want = limit - len(found)
        clauses = [*where, "id < %s"] if cursor is not None else where
        sql = "SELECT id, owner, record FROM runs"
        sql += f" WHERE {' AND '.join(clauses)}" if clauses else ""
        values = (*params, cursor) if cursor is not None else tuple(params)
        rows = await query(sql + " ORDER BY id DESC LIMIT %s", (*values, want))
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
