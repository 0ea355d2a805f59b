"""A run's appends on Postgres (`PostgresRunStore`'s): queued to its writer
(`postgres_writer`), acknowledged once committed. An append alone is made with the appends
queued next to it (`postgres_appends`); one with a running record, with that record in one
statement; one with a terminal record, with its summary (`upsert_run`).

A run's closing write (`RunStore.append_closing`) is queued behind the run's last writes, in
the same commit as they are when they share a batch. As SQLite's, the writer checks its
failures just before it makes the write (`PostgresWriter`'s `unless_failures_above`: those
of earlier batches, and the refusals made before it in its own), and refuses it if more
than `failures` are known: the run's own writes are made before it, in the order asked."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable
from typing import Any

import psycopg
from psycopg import errors as pg_errors

from app.engine.events import EventType
from app.runs.records import Event, RunRecord
from app.runs.reports.summaries import summarize
from app.runs.stores.checkpoints import CheckpointDeltas
from app.runs.stores.events import encode, stored
from app.runs.stores.postgres_appends import Row
from app.runs.stores.postgres_closings import Closing, close_many
from app.runs.stores.postgres_reports import insert_summary, tally_from, tally_query
from app.runs.stores.postgres_rows import (
    APPEND,
    UPSERT_RUN,
    Write,
    append_event,
    duplicate,
    refused,
    run_row,
    save_with_event,
)
from app.runs.stores.postgres_writer import Many, PostgresWriter


class QueuedAppends:
    _writer: PostgresWriter
    _append_many: Many
    channel: str
    deltas: CheckpointDeltas

    def fence_of(self, run_id: str) -> str:
        raise NotImplementedError  # the store's

    def published(self, event: Event) -> None:
        raise NotImplementedError  # the store's

    def _check_open(self) -> None:
        raise NotImplementedError  # the store's

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
        """Queued to the writer: it commits with whatever else is queued (group commit)."""
        return self._queue_append(run_id, type, step, data, record)

    def _queue_append(
        self,
        run_id: str,
        type: EventType,
        step: int,
        data: Any,
        record: RunRecord | None,
        failures: int | None = None,
    ) -> asyncio.Future[Event]:
        """The append (with `record`: saved first, in the same transaction), queued; with
        `failures`, a terminal record's closing write (`append_closing`)."""
        self._check_open()
        row = Row(run_id, self.fence_of(run_id), type, time.time(), step, encode(data))
        self.deltas.appended(run_id, type)
        if record is None:  # made with the appends queued next to it (`postgres_appends`)
            insert = append_event(run_id, type, step, row.payload, row.fence, self.channel, row.ts)
            many: tuple[Many, Any] = (self._append_many, row)
            return self._writer.submit(insert, self.published, many, run_id, one_statement=True)
        if not record.status.terminal:  # made with the batch's other records and events
            saved = run_row(record)
            both = save_with_event(
                record, saved, type, step, row.payload, row.fence, self.channel, row.ts
            )
            many = (close_many, Closing(saved, None, False, row, self.channel))
            return self._writer.submit(both, self.published, many, run_id, one_statement=True)
        # now (the caller may change the record); made with the batch's other closing writes
        closing = Closing(
            run_row(record), summarize(record), record.webhook is not None, row, self.channel
        )
        write = closing_write(closing, record)  # (alone)
        return self._writer.submit(
            write, self.published, (close_many, closing), run_id, unless_failures_above=failures
        )

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
        return self._queue_append(run_id, type, step, data, record, failures)


def closing_write(closing: Closing, record: RunRecord) -> Write:
    """A terminal record saved with its summary, then its terminal event: what `upsert_run`
    then `append_event` make, in two round trips instead of four (psycopg's pipeline mode:
    the record's upsert with the query of the tally, then the summary with the event). A
    refusal (fenced, gone) raises, so the transaction makes none of it. (Several runs' at
    once: `postgres_closings`.)"""
    row, channel, summary = closing.event, closing.channel, closing.summary
    assert summary is not None, "a closing write ends its run"
    saved_row = (*closing.saved, row.fence, row.fence)
    appended_row = (row.run_id, row.fence, row.fence, row.type, row.ts, row.step, row.payload)

    async def write(conn: psycopg.AsyncConnection[Any]) -> Event:
        try:
            async with conn.pipeline():
                saved = await conn.execute(UPSERT_RUN, saved_row)
                counted = await tally_query(conn, row.run_id)
        except pg_errors.UniqueViolation as exc:
            raise duplicate(exc, record) from exc
        if await saved.fetchone() is None:
            await refused(conn, row.run_id)
        tally = tally_from(await counted.fetchall())
        async with conn.pipeline():
            await insert_summary(conn, dataclasses.replace(summary, tally=tally))
            if closing.ring:
                await conn.execute("SELECT pg_notify(%s, 'w:')", (channel,))
            appended = await conn.execute(APPEND, (*appended_row, channel))
        seq = await appended.fetchone()
        if seq is None:
            await refused(conn, row.run_id)
        assert seq is not None
        return stored(row.run_id, int(seq[0]), row.type, row.ts, row.step, row.payload)

    return write
