"""The `ScheduleStore` of `SqliteRunStore` (schema 9): a row per schedule in `schedules`, a row
per firing in `schedule_firings`. `advance`, `claim` and `settle` run on the store's one writer
thread, inside its transaction: each compares and changes in one write there (`UPDATE … WHERE`,
an `INSERT` the primary key refuses to a second claimant). `owner` is '' for none."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, TypeVar

from app.runs.schedules.records import Firing, Schedule
from app.runs.schedules.store import FIRINGS_KEPT, Claim
from app.runs.stores.sqlite_threads import GroupCommitWriter

T = TypeVar("T")
Reader = Callable[[Callable[[sqlite3.Connection], Any]], Awaitable[Any]]


def _schedule(record: str, next_due_at: float | None) -> Schedule:
    schedule = Schedule.model_validate_json(record)
    schedule.next_due_at = next_due_at
    return schedule


def _row(schedule: Schedule) -> tuple[str, str, float | None, str]:
    record = schedule.model_dump_json(exclude={"next_due_at"})
    return schedule.id, schedule.owner or "", schedule.next_due_at, record


def _firing(text: str) -> Firing:
    return Firing.from_json(json.loads(text))


class SqliteSchedules:
    def __init__(
        self, read: Reader, writer: GroupCommitWriter, check_open: Callable[[], None]
    ) -> None:
        self._read = read
        self._writer = writer
        self._check_open = check_open

    async def _write(self, apply: Callable[[sqlite3.Connection], T]) -> T:
        self._check_open()
        result: T = await self._writer.submit(apply)
        return result

    async def insert(self, schedule: Schedule) -> None:
        row = _row(schedule)
        await self._write(
            lambda c: c.execute(
                "INSERT INTO schedules (id, owner, next_due_at, record) VALUES (?, ?, ?, ?)", row
            )
        )

    async def replace(self, schedule: Schedule) -> bool:
        sid, _, due, record = _row(schedule)
        changed = await self._write(
            lambda c: (
                c.execute(
                    "UPDATE schedules SET next_due_at = ?, record = ? WHERE id = ?",
                    (due, record, sid),
                ).rowcount
            )
        )
        return bool(changed == 1)

    async def get(self, schedule_id: str) -> Schedule | None:
        sql = "SELECT record, next_due_at FROM schedules WHERE id = ?"
        rows = await self._read(lambda c: c.execute(sql, (schedule_id,)).fetchall())
        return _schedule(*rows[0]) if rows else None

    async def owned(
        self, owner: str | None, *, limit: int, after: str | None = None
    ) -> list[Schedule]:
        sql = (
            "SELECT record, next_due_at FROM schedules WHERE owner = ? AND id > ?"
            " ORDER BY id LIMIT ?"
        )
        params = (owner or "", after or "", limit)
        rows = await self._read(lambda c: c.execute(sql, params).fetchall())
        return [_schedule(*row) for row in rows]

    async def remove(self, schedule_id: str) -> bool:
        def remove(conn: sqlite3.Connection) -> bool:
            conn.execute("DELETE FROM schedule_firings WHERE schedule_id = ?", (schedule_id,))
            return conn.execute("DELETE FROM schedules WHERE id = ?", (schedule_id,)).rowcount == 1

        return await self._write(remove)

    async def due(self, now: float, *, limit: int = 100) -> list[Schedule]:
        sql = (
            "SELECT record, next_due_at FROM schedules WHERE next_due_at <= ?"
            " ORDER BY next_due_at, id LIMIT ?"
        )
        rows = await self._read(lambda c: c.execute(sql, (now, limit)).fetchall())
        return [_schedule(*row) for row in rows]

    async def next_due_at(self) -> float | None:
        sql = "SELECT min(next_due_at) FROM schedules"
        rows = await self._read(lambda c: c.execute(sql).fetchall())
        return rows[0][0] if rows and rows[0][0] is not None else None

    async def advance(self, schedule_id: str, *, expected: float, to: float | None) -> bool:
        moved = await self._write(
            lambda c: (
                c.execute(
                    "UPDATE schedules SET next_due_at = ? WHERE id = ? AND next_due_at = ?",
                    (to, schedule_id, expected),
                ).rowcount
            )
        )
        return bool(moved == 1)

    async def claim(self, firing: Firing, *, now: float, steal: bool = False) -> Claim:
        key = (firing.schedule_id, firing.due_at)

        def claim(conn: sqlite3.Connection) -> Claim:
            made = conn.execute(
                "INSERT INTO schedule_firings"
                " (schedule_id, due_at, settled, claimed_by, lease_until, firing)"
                " VALUES (?, ?, 0, ?, ?, ?) ON CONFLICT DO NOTHING",
                (*key, firing.claimed_by, firing.lease_until, json.dumps(firing.to_json())),
            )
            if made.rowcount == 1:
                conn.execute(
                    "DELETE FROM schedule_firings WHERE schedule_id = ? AND due_at < ("
                    " SELECT due_at FROM schedule_firings WHERE schedule_id = ?"
                    " ORDER BY due_at DESC LIMIT 1 OFFSET ?)",
                    (firing.schedule_id, firing.schedule_id, FIRINGS_KEPT - 1),
                )
                return Claim(firing, True)
            (text,) = conn.execute(
                "SELECT firing FROM schedule_firings WHERE schedule_id = ? AND due_at = ?", key
            ).fetchone()
            held = _firing(text)
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
            conn.execute(
                "UPDATE schedule_firings SET claimed_by = ?, lease_until = ?, firing = ?"
                " WHERE schedule_id = ? AND due_at = ?",
                (taken.claimed_by, taken.lease_until, json.dumps(taken.to_json()), *key),
            )
            return Claim(taken, True)

        return await self._write(claim)

    async def settle(self, firing: Firing) -> bool:
        values = (json.dumps(firing.to_json()), firing.schedule_id, firing.due_at)
        settled = await self._write(
            lambda c: (
                c.execute(
                    "UPDATE schedule_firings SET settled = 1, firing = ?"
                    " WHERE schedule_id = ? AND due_at = ? AND settled = 0 AND claimed_by = ?",
                    (*values, firing.claimed_by),
                ).rowcount
            )
        )
        return bool(settled == 1)

    async def firings(
        self, schedule_id: str, *, limit: int, before: float | None = None
    ) -> list[Firing]:
        sql = (
            "SELECT firing FROM schedule_firings WHERE schedule_id = ? AND due_at < ?"
            " ORDER BY due_at DESC LIMIT ?"
        )
        params = (schedule_id, before if before is not None else float("inf"), limit)
        rows = await self._read(lambda c: c.execute(sql, params).fetchall())
        return [_firing(text) for (text,) in rows]
