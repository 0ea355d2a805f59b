"""The `ScheduleStore` of `PostgresRunStore` (schema 2): a row per schedule in `schedules`, a
row per firing in `schedule_firings`, as in SQLite. Every write runs in the writer's
transaction (`postgres_writer`) and compares and changes in one place, whichever replica
asks: `advance` and `settle` are one `UPDATE … WHERE`; `claim` inserts the firing (the
primary key refuses a second claimant, who waits for the first's commit) or else locks the
row (`FOR UPDATE`) before it decides a takeover. `owner` is '' for schedules without one."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from app.runs.schedules.records import Firing, Schedule
from app.runs.schedules.store import FIRINGS_KEPT, Claim
from app.runs.stores.postgres_counters import Query
from app.runs.stores.postgres_rows import Conn, Write

_TRIM = (
    "DELETE FROM schedule_firings WHERE schedule_id = %s AND due_at < ("
    " SELECT due_at FROM schedule_firings WHERE schedule_id = %s"
    " ORDER BY due_at DESC LIMIT 1 OFFSET %s)"
)


def _schedule(record: str, next_due_at: float | None) -> Schedule:
    schedule = Schedule.model_validate_json(record)
    schedule.next_due_at = next_due_at
    return schedule


def _row(schedule: Schedule) -> tuple[str, str, float | None, str]:
    record = schedule.model_dump_json(exclude={"next_due_at"})
    return schedule.id, schedule.owner or "", schedule.next_due_at, record


def _text(firing: Firing) -> str:
    return json.dumps(firing.to_json())


class PostgresSchedules:
    def __init__(self, query: Query, submit: Callable[[Write], Awaitable[Any]]) -> None:
        self._query = query
        self._submit = submit

    async def _changed(self, sql: str, params: tuple[Any, ...]) -> bool:
        """One statement in the writer's transaction: did it change a row?"""

        async def write(conn: Conn) -> bool:
            return (await conn.execute(sql, params)).rowcount == 1

        changed: bool = await self._submit(write)
        return changed

    async def insert(self, schedule: Schedule) -> None:
        sql = "INSERT INTO schedules (id, owner, next_due_at, record) VALUES (%s, %s, %s, %s)"
        await self._changed(sql, _row(schedule))

    async def replace(self, schedule: Schedule) -> bool:
        sid, _, due, record = _row(schedule)
        sql = "UPDATE schedules SET next_due_at = %s, record = %s WHERE id = %s"
        return await self._changed(sql, (due, record, sid))

    async def get(self, schedule_id: str) -> Schedule | None:
        sql = "SELECT record, next_due_at FROM schedules WHERE id = %s"
        rows = await self._query(sql, (schedule_id,))
        return _schedule(*rows[0]) if rows else None

    async def owned(
        self, owner: str | None, *, limit: int, after: str | None = None
    ) -> list[Schedule]:
        sql = (
            "SELECT record, next_due_at FROM schedules WHERE owner = %s AND id > %s"
            " ORDER BY id LIMIT %s"
        )
        rows = await self._query(sql, (owner or "", after or "", limit))
        return [_schedule(*row) for row in rows]

    async def remove(self, schedule_id: str) -> bool:
        async def remove(conn: Conn) -> bool:
            sql = "DELETE FROM schedule_firings WHERE schedule_id = %s"
            await conn.execute(sql, (schedule_id,))
            cur = await conn.execute("DELETE FROM schedules WHERE id = %s", (schedule_id,))
            return cur.rowcount == 1

        removed: bool = await self._submit(remove)
        return removed

    async def due(self, now: float, *, limit: int = 100) -> list[Schedule]:
        sql = (
            "SELECT record, next_due_at FROM schedules WHERE next_due_at <= %s"
            " ORDER BY next_due_at, id LIMIT %s"
        )
        rows = await self._query(sql, (now, limit))
        return [_schedule(*row) for row in rows]

    async def next_due_at(self) -> float | None:
        rows = await self._query("SELECT min(next_due_at) FROM schedules", ())
        return float(rows[0][0]) if rows and rows[0][0] is not None else None

    async def advance(self, schedule_id: str, *, expected: float, to: float | None) -> bool:
        sql = "UPDATE schedules SET next_due_at = %s WHERE id = %s AND next_due_at = %s"
        return await self._changed(sql, (to, schedule_id, expected))

    async def claim(self, firing: Firing, *, now: float, steal: bool = False) -> Claim:
        key = (firing.schedule_id, firing.due_at)

        async def claim(conn: Conn) -> Claim:
            made = await conn.execute(
                "INSERT INTO schedule_firings"
                " (schedule_id, due_at, settled, claimed_by, lease_until, firing)"
                " VALUES (%s, %s, FALSE, %s, %s, %s) ON CONFLICT DO NOTHING",
                (*key, firing.claimed_by, firing.lease_until, _text(firing)),
            )
            if made.rowcount == 1:
                sid = firing.schedule_id
                await conn.execute(_TRIM, (sid, sid, FIRINGS_KEPT - 1))
                return Claim(firing, True)
            cur = await conn.execute(
                "SELECT firing FROM schedule_firings WHERE schedule_id = %s AND due_at = %s"
                " FOR UPDATE",  # another claimant waits here until this one commits
                key,
            )
            found = await cur.fetchone()
            if found is None:  # removed with its schedule meanwhile
                return Claim(firing, False)
            held = Firing.from_json(json.loads(found[0]))
            if held.settled or not (
                held.lease_until <= now or (steal and held.claimed_by != firing.claimed_by)
            ):
                return Claim(held, False)
            taken = replace(
                held,
                claimed_by=firing.claimed_by,
                lease_until=firing.lease_until,
                attempt=held.attempt + 1,
            )
            await conn.execute(
                "UPDATE schedule_firings SET claimed_by = %s, lease_until = %s, firing = %s"
                " WHERE schedule_id = %s AND due_at = %s",
                (taken.claimed_by, taken.lease_until, _text(taken), *key),
            )
            return Claim(taken, True)

        claimed: Claim = await self._submit(claim)
        return claimed

    async def settle(self, firing: Firing) -> bool:
        sql = (
            "UPDATE schedule_firings SET settled = TRUE, firing = %s WHERE schedule_id = %s"
            " AND due_at = %s AND NOT settled AND claimed_by = %s"
        )
        params = (_text(firing), firing.schedule_id, firing.due_at, firing.claimed_by)
        return await self._changed(sql, params)

    async def firings(
        self, schedule_id: str, *, limit: int, before: float | None = None
    ) -> list[Firing]:
        sql = "SELECT firing FROM schedule_firings WHERE schedule_id = %s"
        params: tuple[Any, ...] = (schedule_id,)
        if before is not None:
            sql += " AND due_at < %s"
            params += (before,)
        rows = await self._query(sql + " ORDER BY due_at DESC LIMIT %s", (*params, limit))
        return [Firing.from_json(json.loads(text)) for (text,) in rows]
