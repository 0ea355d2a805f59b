"""The `UsageCounters` of `SqliteRunStore` (schema 6): a row per API key and UTC day in
`key_days`, a row per admission of the last minute in `key_admissions`, and the runs table
(its `runs_by_owner_status` index) for a key's unended runs.

Writes go to the store's one writer thread, queued like `append_soon`: each commits with
whatever else is queued (group commit), in order, so a note written before a run's insert is
durable once the insert is. Increments are made in SQL (`runs = runs + ?`), never read and
written back from Python, so nothing counted is lost whatever the order of writes.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from app.runs.records import RunStatus
from app.runs.store import DayUsage
from app.runs.stores.sqlite_threads import GroupCommitWriter

T = TypeVar("T")
Reader = Callable[[Callable[[sqlite3.Connection], Any]], Awaitable[Any]]

WINDOW_S = 60.0
"""Admissions older than this are dropped as new ones are noted (the runs-per-minute window)."""

_ADD = """
INSERT INTO key_days (owner, day, runs, llm_calls, unpriced_calls, prompt_tokens,
    completion_tokens, cost_usd) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (owner, day) DO UPDATE SET runs = runs + excluded.runs,
    llm_calls = llm_calls + excluded.llm_calls,
    unpriced_calls = unpriced_calls + excluded.unpriced_calls,
    prompt_tokens = prompt_tokens + excluded.prompt_tokens,
    completion_tokens = completion_tokens + excluded.completion_tokens,
    cost_usd = cost_usd + excluded.cost_usd
"""
_DAY = """
SELECT runs, llm_calls, unpriced_calls, prompt_tokens, completion_tokens, cost_usd
FROM key_days WHERE owner = ? AND day = ?
"""
_UNENDED = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.REQUIRES_ACTION)


class SqliteCounters:
    def __init__(
        self, read: Reader, writer: GroupCommitWriter, check_open: Callable[[], None]
    ) -> None:
        self._read = read
        self._writer = writer
        self._check_open = check_open

    def _submit(self, apply: Callable[[sqlite3.Connection], T]) -> Awaitable[T]:
        self._check_open()
        future: Awaitable[T] = self._writer.submit(apply)
        return future

    async def day_usage(self, owner: str | None, day: str) -> DayUsage:
        rows = await self._read(lambda conn: conn.execute(_DAY, (owner or "", day)).fetchall())
        return DayUsage(*rows[0]) if rows else DayUsage()

    async def add_usage(self, owner: str | None, day: str, usage: DayUsage) -> Awaitable[None]:
        row = (
            owner or "",
            day,
            usage.runs,
            usage.llm_calls,
            usage.unpriced_calls,
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.cost_usd,
        )

        def add(conn: sqlite3.Connection) -> None:
            conn.execute(_ADD, row)

        return self._submit(add)

    async def admitted(self, owner: str | None, ticket: str, at: float) -> Awaitable[None]:
        def note(conn: sqlite3.Connection) -> None:
            sql = "DELETE FROM key_admissions WHERE owner = ? AND at <= ?"
            conn.execute(sql, (owner or "", at - WINDOW_S))
            sql = "INSERT OR REPLACE INTO key_admissions (owner, ticket, at) VALUES (?, ?, ?)"
            conn.execute(sql, (owner or "", ticket, at))

        return self._submit(note)

    async def unadmitted(self, owner: str | None, ticket: str) -> Awaitable[None]:
        def drop(conn: sqlite3.Connection) -> None:
            sql = "DELETE FROM key_admissions WHERE owner = ? AND ticket = ?"
            conn.execute(sql, (owner or "", ticket))

        return self._submit(drop)

    async def admissions_since(self, owner: str | None, since: float) -> list[float]:
        sql = "SELECT at FROM key_admissions WHERE owner = ? AND at > ? ORDER BY at"
        rows = await self._read(lambda conn: conn.execute(sql, (owner or "", since)).fetchall())
        return [at for (at,) in rows]

    async def active_runs(self, owner: str | None) -> int:
        marks = ", ".join("?" * len(_UNENDED))
        where = "owner IS NULL" if owner is None else "owner = ?"
        sql = f"SELECT COUNT(*) FROM runs WHERE {where} AND status IN ({marks})"
        params = (*(() if owner is None else (owner,)), *(s.value for s in _UNENDED))
        rows = await self._read(lambda conn: conn.execute(sql, params).fetchall())
        return int(rows[0][0])
