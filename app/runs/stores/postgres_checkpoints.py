"""Checkpoints the writer found queued in one batch, of different runs, made in one statement
(`save_many`): what `postgres_rows.checkpoint_upsert` does for one, for many.

Each checkpoint's run row is locked against a takeover until the transaction commits, and a
checkpoint naming a lease token another replica's lease replaced (or of a run that is gone)
is not written: only it fails (`Failed`), the others commit. A run's second checkpoint in the
batch goes in the next statement (a row is changed once per statement).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from app.runs.store import CHECKPOINT_FORMAT
from app.runs.stores.checkpoints import CheckpointWrite
from app.runs.stores.postgres_appends import why_refused
from app.runs.stores.postgres_rows import NOW_S, Conn
from app.runs.stores.postgres_writer import Failed

SAVE_MANY = (
    "WITH a AS (SELECT * FROM unnest(%b::text[], %b::text[], %b::int[], %b::text[], %b::int[],"
    " %b::text[]) AS a (run_id, fence, step, state, start, chunk)),"
    " r AS (SELECT a.* FROM a JOIN runs ON runs.id = a.run_id AND (a.fence = ''"
    " OR (runs.lease_token = a.fence AND runs.lease_until >= " + NOW_S + ")) FOR SHARE OF runs),"
    " h AS (INSERT INTO checkpoints (run_id, step, state, version)"
    " SELECT run_id, step, state, %s FROM r ON CONFLICT (run_id) DO UPDATE"
    " SET step = excluded.step, state = excluded.state, version = excluded.version),"
    # a whole checkpoint drops the old chunks, but the one at 0 it writes (changed once)
    " d AS (DELETE FROM checkpoint_chunks k USING r WHERE k.run_id = r.run_id AND r.start = 0"
    " AND (r.chunk IS NULL OR k.start > 0)),"
    " c AS (INSERT INTO checkpoint_chunks (run_id, start, messages)"
    " SELECT run_id, start, chunk FROM r WHERE chunk IS NOT NULL ON CONFLICT (run_id, start)"
    " DO UPDATE SET messages = excluded.messages)"
    " SELECT run_id FROM r"
)


class Saved(NamedTuple):
    """One queued checkpoint: its run, the lease token it names ("" for none), its write."""

    run_id: str
    fence: str
    step: int
    write: CheckpointWrite


async def save_many(
    conn: Conn, items: Sequence[Saved], stored: dict[str, int]
) -> list[Failed | None]:
    """The checkpoints of `items` written (a statement for each stretch in which no run comes
    twice); for each, None, or why it was refused. `stored`: as `checkpoint_upsert`'s."""
    results: list[Failed | None] = []
    start = 0
    while start < len(items):
        runs: set[str] = set()
        end = start
        while end < len(items) and items[end].run_id not in runs:
            runs.add(items[end].run_id)
            end += 1
        results += await _save(conn, items[start:end], stored)
        start = end
    return results


async def _save(conn: Conn, items: Sequence[Saved], stored: dict[str, int]) -> list[Failed | None]:
    columns: list[list[Any]] = [[], [], [], [], [], []]
    for item in items:
        begin, chunk = item.write.start, item.write.chunk
        if begin and stored.get(item.run_id) != begin:  # its earlier chunks are not there
            begin, chunk = 0, item.write.whole()
        row = (item.run_id, item.fence, item.step, item.write.state, begin, chunk)
        for column, value in zip(columns, row, strict=True):
            column.append(value)
    cur = await conn.execute(SAVE_MANY, (*columns, CHECKPOINT_FORMAT))
    saved = {run_id for (run_id,) in await cur.fetchall()}
    results: list[Failed | None] = []
    for item in items:
        if item.run_id not in saved:
            results.append(Failed(await why_refused(conn, item.run_id)))
            continue
        messages = item.write.messages
        if messages is None:
            stored.pop(item.run_id, None)
        else:
            stored[item.run_id] = len(messages)
        results.append(None)
    return results
