"""Records saved with an event, that the writer found queued together, of different runs,
made together (`close_many`): what `postgres_queued.closing_write` does for one run (its
terminal record saved, fenced, with its summary, then its terminal event), and
`postgres_rows.save_with_event` for a running one (`run.started` with its record), for
several, in four statements whatever their number: the records' upsert, the tallies of the
ended runs' events, their summaries (one round trip), the events (`postgres_appends`).

A record whose lease another replica holds (or whose run is gone) is not saved, and only its
write fails (`Failed`): its summary and event are not written, the others commit."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, NamedTuple

from app.runs.records import Event
from app.runs.reports.summaries import RunSummary
from app.runs.stores.postgres_appends import Row, append_many, why_refused
from app.runs.stores.postgres_reports import insert_summaries, tally_many
from app.runs.stores.postgres_rows import NOW_S, RUN_COLUMNS, RUN_ON_CONFLICT, Conn
from app.runs.stores.postgres_writer import Failed

UPSERT_MANY = (
    f"INSERT INTO runs ({RUN_COLUMNS}, lease_token) SELECT * FROM unnest(%b::text[],"
    " %b::text[], %b::text[], %b::text[], %b::text[], %b::text[], %b::text[], %b::text[],"
    f" %b::float8[], %b::bool[], %b::text[]) AS u ({RUN_COLUMNS}, lease_token)"
    # a fenced record of a run that is gone is not made again (nor its event)
    " WHERE u.lease_token IS NULL OR EXISTS (SELECT 1 FROM runs WHERE runs.id = u.id)"
    + RUN_ON_CONFLICT
    # the fence rides in the row's lease token (NULL: none): a new row keeps it as its own
    + " WHERE excluded.lease_token IS NULL OR (runs.lease_token = excluded.lease_token"
    " AND runs.lease_until >= " + NOW_S + ") RETURNING id"
)
"""`UPSERT_RUN` for several runs (each once), each fenced by its own token."""


class Closing(NamedTuple):
    """One queued record saved with an event: the record's row (`run_row`), its summary if
    it ended its run (its tally still to count), whether it rings the webhook outbox, the
    event, the store's channel."""

    saved: tuple[Any, ...]
    summary: RunSummary | None
    ring: bool
    event: Row
    channel: str


async def close_many(conn: Conn, items: Sequence[Closing]) -> list[Event | Failed]:
    """The closing writes of `items` made (a round of statements for each stretch in which
    no run comes twice); for each, its terminal `Event`, or why it was refused."""
    results: list[Event | Failed] = []
    start = 0
    while start < len(items):
        runs: set[str] = set()
        end = start
        while end < len(items) and items[end].event.run_id not in runs:
            runs.add(items[end].event.run_id)
            end += 1
        results += await _close(conn, items[start:end])
        start = end
    return results


async def _close(conn: Conn, items: Sequence[Closing]) -> list[Event | Failed]:
    columns: list[list[Any]] = [[] for _ in range(11)]
    for item in items:
        for column, value in zip(columns, (*item.saved, item.event.fence or None), strict=True):
            column.append(value)
    saved = {run_id for (run_id,) in await (await conn.execute(UPSERT_MANY, columns)).fetchall()}
    kept = [item for item in items if item.event.run_id in saved]
    events: dict[str, Event | Failed] = {}
    ended = [item.summary for item in kept if item.summary is not None]
    if ended:
        tallies = await tally_many(conn, [summary.run_id for summary in ended])
        await insert_summaries(
            conn, [dataclasses.replace(s, tally=tallies[s.run_id]) for s in ended]
        )
    if kept:
        if any(item.ring for item in kept):
            await conn.execute("SELECT pg_notify(%s, 'w:')", (kept[0].channel,))
        made = await append_many(conn, [item.event for item in kept], kept[0].channel)
        events = {item.event.run_id: event for item, event in zip(kept, made, strict=True)}
    results: list[Event | Failed] = []
    for item in items:
        run_id = item.event.run_id
        results.append(
            events[run_id] if run_id in events else Failed(await why_refused(conn, run_id))
        )
    return results
