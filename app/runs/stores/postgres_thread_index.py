"""The `ThreadIndex` of `PostgresRunStore` (DESIGN §19): a row per thread in `threads`, a row
per run of a thread in `thread_runs`, as in SQLite. `advance` and `remove` are single
compare-and-set statements in the writer's transaction (`UPDATE … WHERE head = %s`, or an
`INSERT … ON CONFLICT DO NOTHING` for a new thread): of two replicas that saw the same head,
one moves it. `owner` is '' for threads without one.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from app.runs.stores.postgres_counters import Query
from app.runs.stores.postgres_rows import Conn, Write
from app.runs.threads.index import ThreadCursor, ThreadEntry

_COLUMNS = "thread_id, owner, head, created_at, updated_at, metadata, runs"
_ONE = f"SELECT {_COLUMNS} FROM threads WHERE owner = %s AND thread_id = %s"


def _entry(row: tuple[Any, ...]) -> ThreadEntry:
    thread_id, owner, head, created, updated, metadata, runs = row
    return ThreadEntry(thread_id, owner or None, head, created, updated, json.loads(metadata), runs)


class PostgresThreadIndex:
    def __init__(self, query: Query, submit: Callable[[Write], Awaitable[Any]]) -> None:
        self._query = query
        self._submit = submit

    async def thread(self, owner: str | None, thread_id: str) -> ThreadEntry | None:
        rows = await self._query(_ONE, (owner or "", thread_id))
        return _entry(rows[0]) if rows else None

    async def advance(
        self, owner: str | None, thread_id: str, *, expected: str | None, run_id: str, at: float
    ) -> bool:
        key = (owner or "", thread_id)

        async def advance(conn: Conn) -> bool:
            if expected is None:
                cur = await conn.execute(
                    "INSERT INTO threads (owner, thread_id, head, created_at, updated_at, runs)"
                    " VALUES (%s, %s, %s, %s, %s, 1) ON CONFLICT DO NOTHING RETURNING runs",
                    (*key, run_id, at, at),
                )
            else:
                cur = await conn.execute(
                    "UPDATE threads SET head = %s, updated_at = %s, runs = runs + 1"
                    " WHERE owner = %s AND thread_id = %s AND head = %s RETURNING runs",
                    (run_id, at, *key, expected),
                )
            moved = await cur.fetchone()
            if moved is None:
                return False
            await conn.execute(
                "INSERT INTO thread_runs (owner, thread_id, pos, run_id) VALUES (%s, %s, %s, %s)"
                " ON CONFLICT (owner, thread_id, pos) DO UPDATE SET run_id = excluded.run_id",
                (*key, moved[0] - 1, run_id),
            )
            return True

        result: bool = await self._submit(advance)
        return result

    async def threads(
        self, owner: str | None, *, limit: int, before: ThreadCursor | None = None
    ) -> list[ThreadEntry]:
        sql = f"SELECT {_COLUMNS} FROM threads WHERE owner = %s"
        params: tuple[Any, ...] = (owner or "",)
        if before is not None:
            sql += " AND (updated_at, thread_id) < (%s, %s)"
            params += (before[0], before[1])
        sql += " ORDER BY updated_at DESC, thread_id DESC LIMIT %s"
        return [_entry(row) for row in await self._query(sql, (*params, limit))]

    async def thread_runs(
        self, owner: str | None, thread_id: str, *, start: int = 0, limit: int = 100
    ) -> list[str]:
        sql = (
            "SELECT run_id FROM thread_runs WHERE owner = %s AND thread_id = %s"
            " AND pos >= %s ORDER BY pos LIMIT %s"
        )
        rows = await self._query(sql, (owner or "", thread_id, start, limit))
        return [str(run_id) for (run_id,) in rows]

    async def set_metadata(
        self, owner: str | None, thread_id: str, metadata: dict[str, Any], *, at: float
    ) -> ThreadEntry | None:
        text = json.dumps(metadata, ensure_ascii=False)

        async def change(conn: Conn) -> ThreadEntry | None:
            cur = await conn.execute(
                "UPDATE threads SET metadata = %s, updated_at = %s"
                f" WHERE owner = %s AND thread_id = %s RETURNING {_COLUMNS}",
                (text, at, owner or "", thread_id),
            )
            row = await cur.fetchone()
            return _entry(row) if row is not None else None

        result: ThreadEntry | None = await self._submit(change)
        return result

    async def remove(self, owner: str | None, thread_id: str, *, expected: str | None) -> bool:
        key = (owner or "", thread_id)

        async def remove(conn: Conn) -> bool:
            cur = await conn.execute(
                "DELETE FROM threads WHERE owner = %s AND thread_id = %s"
                " AND head IS NOT DISTINCT FROM %s RETURNING 1",
                (*key, expected),
            )
            if await cur.fetchone() is None:
                return False
            await conn.execute("DELETE FROM thread_runs WHERE owner = %s AND thread_id = %s", key)
            return True

        result: bool = await self._submit(remove)
        return result
