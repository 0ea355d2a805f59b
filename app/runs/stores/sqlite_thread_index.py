"""The `ThreadIndex` of `SqliteRunStore` (schema 8): a row per thread in `threads` (its head,
times, metadata and count of runs), a row per run of a thread in `thread_runs` (its place).

`advance` and `remove` run on the store's one writer thread, inside its transaction: the head
is compared and changed in one write there (`UPDATE … WHERE head = ?`, or an `INSERT` that the
primary key refuses to a second maker of a thread), so two requests that saw the same head
cannot both move it. `owner` is '' for threads without one, as everywhere in this file.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from app.runs.stores.sqlite_threads import GroupCommitWriter
from app.runs.threads.index import ThreadCursor, ThreadEntry

T = TypeVar("T")
Reader = Callable[[Callable[[sqlite3.Connection], Any]], Awaitable[Any]]

_COLUMNS = "thread_id, owner, head, created_at, updated_at, metadata, runs"
_ONE = f"SELECT {_COLUMNS} FROM threads WHERE owner = ? AND thread_id = ?"


def _entry(row: tuple[Any, ...]) -> ThreadEntry:
    thread_id, owner, head, created, updated, metadata, runs = row
    return ThreadEntry(thread_id, owner or None, head, created, updated, json.loads(metadata), runs)


class SqliteThreadIndex:
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

    async def thread(self, owner: str | None, thread_id: str) -> ThreadEntry | None:
        rows = await self._read(lambda c: c.execute(_ONE, (owner or "", thread_id)).fetchall())
        return _entry(rows[0]) if rows else None

    async def advance(
        self, owner: str | None, thread_id: str, *, expected: str | None, run_id: str, at: float
    ) -> bool:
        key = (owner or "", thread_id)

        def advance(conn: sqlite3.Connection) -> bool:
            if expected is None:
                made = conn.execute(
                    "INSERT INTO threads (owner, thread_id, head, created_at, updated_at, runs)"
                    " VALUES (?, ?, ?, ?, ?, 1) ON CONFLICT DO NOTHING",
                    (*key, run_id, at, at),
                )
                if made.rowcount != 1:
                    return False
                position = 0
            else:
                moved = conn.execute(
                    "UPDATE threads SET head = ?, updated_at = ?, runs = runs + 1"
                    " WHERE owner = ? AND thread_id = ? AND head = ? RETURNING runs",
                    (run_id, at, *key, expected),
                ).fetchall()
                if not moved:
                    return False
                position = moved[0][0] - 1
            conn.execute(
                "INSERT OR REPLACE INTO thread_runs (owner, thread_id, pos, run_id)"
                " VALUES (?, ?, ?, ?)",
                (*key, position, run_id),
            )
            return True

        return await self._write(advance)

    async def threads(
        self, owner: str | None, *, limit: int, before: ThreadCursor | None = None
    ) -> list[ThreadEntry]:
        sql = f"SELECT {_COLUMNS} FROM threads WHERE owner = ?"
        params: tuple[Any, ...] = (owner or "",)
        if before is not None:
            sql += " AND (updated_at < ? OR (updated_at = ? AND thread_id < ?))"
            params += (before[0], before[0], before[1])
        sql += " ORDER BY updated_at DESC, thread_id DESC LIMIT ?"
        rows = await self._read(lambda c: c.execute(sql, (*params, limit)).fetchall())
        return [_entry(row) for row in rows]

    async def thread_runs(
        self, owner: str | None, thread_id: str, *, start: int = 0, limit: int = 100
    ) -> list[str]:
        sql = (
            "SELECT run_id FROM thread_runs WHERE owner = ? AND thread_id = ?"
            " ORDER BY pos LIMIT ? OFFSET ?"
        )
        params = (owner or "", thread_id, limit, start)
        rows = await self._read(lambda c: c.execute(sql, params).fetchall())
        return [str(run_id) for (run_id,) in rows]

    async def set_metadata(
        self, owner: str | None, thread_id: str, metadata: dict[str, Any], *, at: float
    ) -> ThreadEntry | None:
        text = json.dumps(metadata, ensure_ascii=False)

        def change(conn: sqlite3.Connection) -> ThreadEntry | None:
            conn.execute(
                "UPDATE threads SET metadata = ?, updated_at = ? WHERE owner = ? AND thread_id = ?",
                (text, at, owner or "", thread_id),
            )
            rows = conn.execute(_ONE, (owner or "", thread_id)).fetchall()
            return _entry(rows[0]) if rows else None

        return await self._write(change)

    async def remove(self, owner: str | None, thread_id: str, *, expected: str | None) -> bool:
        key = (owner or "", thread_id)

        def remove(conn: sqlite3.Connection) -> bool:
            gone = conn.execute(
                "DELETE FROM threads WHERE owner = ? AND thread_id = ? AND head IS ?",
                (*key, expected),
            )
            if gone.rowcount != 1:
                return False
            conn.execute("DELETE FROM thread_runs WHERE owner = ? AND thread_id = ?", key)
            return True

        return await self._write(remove)
