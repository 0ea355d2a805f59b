"""`WaitingRuns` on Postgres (DESIGN §9 with §8, §18): runs waiting for a person, shared by
replicas.

A waiting run holds no lease and no slot: the replica that executed it stores it waiting,
sets its deadline (`wait_deadline`) and drops its lease in one transaction, fenced by that
lease. Every later change (a decision, the approval timeout, a cancel) is worked out and
written in one transaction holding the run's row (`SELECT … FOR UPDATE`): a concurrent
change of the run waits for it, then reads what it wrote, where a call decided meanwhile is
refused (409). So exactly one of two replicas deciding one call wins, and a decided run is
queued exactly once (`queued_at`, then a lease): no replica can run it twice. Every replica
polls the deadlines that passed (`due`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import structlog

from app.runs.follow.log import wait_logged
from app.runs.records import Event, RunRecord, RunStatus
from app.runs.replicas.postgres_messages import insert_messages
from app.runs.store import read_record
from app.runs.stores.events import encode
from app.runs.stores.postgres import PostgresRunStore
from app.runs.stores.postgres_rows import NOW_S, Conn, append_event, read_events, upsert_run
from app.runs.waiting import (
    Changer,
    NewEvent,
    WaitChange,
    deadline_of,
    unlogged_wait,
    waiting_event,
)

log = structlog.get_logger("finishline.runs")

POLL_S = 1.0  # how often each replica looks for approval deadlines that passed
DUE_PAGE = 100


class _Reader:
    """The run's log read on the transaction's own connection (`wait_logged`)."""

    def __init__(self, conn: Conn) -> None:
        self.conn = conn

    async def read(self, run_id: str, *, after: int = 0, limit: int = 1000) -> list[Event]:
        return await read_events(self.conn, run_id, after, limit)


class PostgresWaitingRuns:
    def __init__(
        self,
        store: PostgresRunStore,
        *,
        poll_s: float = POLL_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.poll_s = poll_s
        self.clock = clock

    def _append(self, conn: Conn, run_id: str, event: NewEvent) -> Any:
        write = append_event(
            run_id, event.type, event.step, encode(event.data), "", self.store.channel
        )
        return write(conn)

    def _publish(self, events: list[Event]) -> None:
        for event in events:
            self.store.published(event)

    async def suspend(self, record: RunRecord, held: list[str], waited: NewEvent) -> None:
        """Fenced by the executing replica's lease, which the same transaction drops; the
        messages the run held go back to the front of its inbox, in order."""
        save = upsert_run(record, self.store.fence_of(record.id), self.store.channel)
        deadline = deadline_of(record)

        async def suspend(conn: Conn) -> list[Event]:
            await save(conn)  # fenced: LeaseLostError once another replica holds it
            event = await self._append(conn, record.id, waited)
            await insert_messages(conn, record.id, held, front=True)
            await conn.execute(
                "UPDATE runs SET wait_deadline = %s, lease_token = NULL, lease_owner = NULL"
                " WHERE id = %s",
                (deadline, record.id),
            )
            return [event]

        await self.store.submit(suspend, self._publish)
        self.store.release(record.id)  # not this replica's any more: its writes are unfenced

    async def change(self, run_id: str, changer: Changer) -> WaitChange | None:
        channel = self.store.channel
        made: list[WaitChange | None] = [None]

        async def change(conn: Conn) -> list[Event]:
            made[0] = None
            cur = await conn.execute(
                "SELECT owner, record, status FROM runs WHERE id = %s FOR UPDATE", (run_id,)
            )
            row = await cur.fetchone()
            record = read_record(run_id, row[1], owner=row[0]) if row is not None else None
            waiting = record is not None and record.status == RunStatus.REQUIRES_ACTION
            held: list[str] = []
            if waiting:
                sql = "SELECT content FROM run_messages WHERE run_id = %s ORDER BY pos"
                held = [c for (c,) in await (await conn.execute(sql, (run_id,))).fetchall()]
            elif row is not None:
                sql = "UPDATE runs SET wait_deadline = NULL WHERE id = %s"
                await conn.execute(sql, (run_id,))
            found = changer(record, held)
            if found is None:
                return []
            assert waiting, "a change is made to a waiting run only"
            events = [await self._append(conn, run_id, event) for event in found.events]
            await upsert_run(found.record, "", channel)(conn)
            if found.final is not None:
                events.append(await self._append(conn, run_id, found.final))
                await conn.execute("DELETE FROM run_messages WHERE run_id = %s", (run_id,))
            if found.requeue:
                sql = f"UPDATE runs SET queued_at = {NOW_S} WHERE id = %s"
                await conn.execute(sql, (run_id,))
                await conn.execute("SELECT pg_notify(%s, 'q:')", (channel,))
            made[0] = found
            return events

        await self.store.submit(change, self._publish)
        return made[0]

    async def due(self) -> list[str]:
        await asyncio.sleep(self.poll_s)
        try:
            rows = await self.store.query(
                "SELECT id FROM runs WHERE wait_deadline <= %s ORDER BY wait_deadline LIMIT %s",
                (self.clock(), DUE_PAGE),
            )
        except Exception as exc:
            log.warning("approval_deadlines_read_failed", error=str(exc))
            return []
        return [str(run_id) for (run_id,) in rows]

    async def rearm(self) -> int:
        """The deadlines are the cluster's, in the runs' rows: nothing to arm. Runs stored
        waiting without their wait in their log have it logged, once."""
        cursor = None
        while True:
            page = await self.store.list_runs(
                owner=None,
                statuses=(RunStatus.REQUIRES_ACTION,),
                limit=DUE_PAGE,
                before_id=cursor,
                any_owner=True,
            )
            for record in page:
                await self.log_wait(record.id)
            if len(page) < DUE_PAGE:
                break
            cursor = page[-1].id
        rows = await self.store.query(
            "SELECT COUNT(*) FROM runs WHERE wait_deadline IS NOT NULL", ()
        )
        return int(rows[0][0])

    async def log_wait(self, run_id: str) -> bool:
        async def log_wait(conn: Conn) -> list[Event]:
            cur = await conn.execute(
                "SELECT owner, record FROM runs WHERE id = %s FOR UPDATE", (run_id,)
            )
            row = await cur.fetchone()
            record = read_record(run_id, row[1], owner=row[0]) if row is not None else None
            if not unlogged_wait(record) or await wait_logged(_Reader(conn), run_id):
                return []
            assert record is not None
            waited = waiting_event(record, record.usage.steps)
            if record.approval is not None:
                sql = "UPDATE runs SET wait_deadline = %s WHERE id = %s"
                await conn.execute(sql, (deadline_of(record), run_id))
            return [await self._append(conn, run_id, waited)]

        events: list[Event] = await self.store.submit(log_wait, self._publish)
        if events:
            log.info("run_wait_logged", run_id=run_id)
        return bool(events)
