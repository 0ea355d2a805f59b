"""The reads of `PostgresRunStore` that need more than one plain query: a run's events (also
read by the waiting runs' loop, `replicas.postgres_waiting`), its record, its checkpoint (the
head and its chunks from one snapshot)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg

from app.engine.events import EventType
from app.runs.errors import RunUnreadableError
from app.runs.records import Event, RunRecord
from app.runs.store import Checkpoint, read_record
from app.runs.stores.checkpoints import loaded, stored_count

_EVENT_TYPES = {t.value: t for t in EventType}


async def read_events(
    conn: psycopg.AsyncConnection[Any], run_id: str, after: int, limit: int
) -> list[Event]:
    """The run's events after seq `after`, up to `limit`, read on `conn`."""
    cur = await conn.execute(
        "SELECT seq, type, ts, step, data FROM events"
        " WHERE run_id = %s AND seq > %s ORDER BY seq LIMIT %s",
        (run_id, after, limit),
    )
    return [
        Event(run_id, seq, _EVENT_TYPES[t], ts, step, json.loads(d))
        for seq, t, ts, step, d in await cur.fetchall()
    ]


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


async def checkpoint_query(conn: psycopg.AsyncConnection[Any], run_id: str) -> Checkpoint | None:
    """`RunStore.load_checkpoint` on `conn`: the head and its messages from one snapshot."""
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
