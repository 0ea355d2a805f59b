"""Appends the writer found queued one after another, made in one statement (`append_many`):
what `postgres_rows.APPEND` does for one event, for many, of one run or of several.

Each run's seq goes up by its number of events in the statement, its row locked by that
update, and its events take the seqs after the old `last_seq` in the order they were queued:
no gap, no duplicate. A fenced append names its lease token in the same statement: the events
of a run whose lease another replica holds (or that is gone) are not written, and only those
appends fail (`Failed`), the others' commit with the transaction. One notification per run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from app.runs.records import Event
from app.runs.store import LeaseLostError, RunGoneError
from app.runs.stores.events import stored
from app.runs.stores.postgres_rows import NOW_S, Conn
from app.runs.stores.postgres_writer import Failed

APPEND_MANY = (
    "WITH a AS (SELECT * FROM unnest(%s::text[], %s::text[], %s::text[], %s::float8[],"
    " %s::int[], %s::text[]) WITH ORDINALITY AS a (run_id, fence, type, ts, step, data, n)),"
    " k AS (SELECT run_id, min(fence) AS fence, count(*) AS c FROM a GROUP BY run_id),"
    " s AS (UPDATE runs SET last_seq = runs.last_seq + k.c FROM k WHERE runs.id = k.run_id"
    " AND (k.fence = '' OR (runs.lease_token = k.fence AND runs.lease_until >= " + NOW_S + "))"
    " RETURNING runs.id, runs.last_seq - k.c AS base, pg_notify(%s, runs.id)),"
    " q AS (SELECT a.n, a.run_id, s.base + row_number() OVER (PARTITION BY a.run_id ORDER BY a.n)"
    " AS seq, a.type, a.ts, a.step, a.data FROM a JOIN s ON s.id = a.run_id),"
    " i AS (INSERT INTO events (run_id, seq, type, ts, step, data)"
    " SELECT run_id, seq, type, ts, step, data FROM q)"
    " SELECT n, seq FROM q"
)


class Row(NamedTuple):
    """One queued append: the event, and the lease token it names ("" for none)."""

    run_id: str
    fence: str
    type: str
    ts: float
    step: int
    payload: str


async def append_many(conn: Conn, rows: Sequence[Row], channel: str) -> list[Event | Failed]:
    """The events of `rows` appended (a statement for each stretch in which no run's
    appends name two tokens); for each, its `Event`, or why it was refused."""
    results: list[Event | Failed] = []
    start = 0
    while start < len(rows):
        fences: dict[str, str] = {}
        end = start
        while end < len(rows) and fences.setdefault(rows[end].run_id, rows[end].fence) == (
            rows[end].fence
        ):
            end += 1
        results += await _append(conn, rows[start:end], channel)
        start = end
    return results


async def _append(conn: Conn, rows: Sequence[Row], channel: str) -> list[Event | Failed]:
    columns: list[list[Any]] = [[], [], [], [], [], []]
    for row in rows:
        for column, value in zip(columns, row, strict=True):
            column.append(value)
    cur = await conn.execute(APPEND_MANY, (*columns, channel))
    seqs = {int(n): int(seq) for n, seq in await cur.fetchall()}
    refusals: dict[str, Failed] = {}
    results: list[Event | Failed] = []
    for n, row in enumerate(rows, start=1):
        seq = seqs.get(n)
        if seq is not None:
            results.append(stored(row.run_id, seq, row.type, row.ts, row.step, row.payload))
            continue
        if row.run_id not in refusals:
            refusals[row.run_id] = Failed(await why_refused(conn, row.run_id))
        results.append(refusals[row.run_id])
    return results


async def why_refused(conn: Conn, run_id: str) -> Exception:
    cur = await conn.execute("SELECT 1 FROM runs WHERE id = %s", (run_id,))
    if await cur.fetchone() is None:
        return RunGoneError(run_id)
    return LeaseLostError(f"run {run_id!r} was taken over by another replica")
