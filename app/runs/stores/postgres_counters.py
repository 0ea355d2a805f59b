"""The `UsageCounters` of `PostgresRunStore`: a row per API key and UTC day in `key_days`, a
row per admission of the last minute in `key_admissions`, and the runs table (its
`runs_by_owner_status` index) for a key's unended runs. As in SQLite, increments are made in
SQL (`runs = runs + excluded.runs`), so concurrent adds from every replica all count; writes
are queued to the store's writer, behind every write asked of it before.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from app.runs.records import RunStatus
from app.runs.store import DayUsage
from app.runs.stores.postgres_rows import Conn

Query = Callable[[str, tuple[Any, ...]], Awaitable[list[tuple[Any, ...]]]]

WINDOW_S = 60.0
_ON_CONFLICT = """
ON CONFLICT (owner, day) DO UPDATE SET runs = key_days.runs + excluded.runs,
    llm_calls = key_days.llm_calls + excluded.llm_calls,
    unpriced_calls = key_days.unpriced_calls + excluded.unpriced_calls,
    prompt_tokens = key_days.prompt_tokens + excluded.prompt_tokens,
    completion_tokens = key_days.completion_tokens + excluded.completion_tokens,
    cost_usd = key_days.cost_usd + excluded.cost_usd
"""
_COLUMNS = "owner, day, runs, llm_calls, unpriced_calls, prompt_tokens, completion_tokens, cost_usd"
_ADD = f"INSERT INTO key_days ({_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) {_ON_CONFLICT}"
_ADD_MANY = (
    f"INSERT INTO key_days ({_COLUMNS}) SELECT * FROM unnest(%b::text[], %b::text[],"
    f" %b::int8[], %b::int8[], %b::int8[], %b::int8[], %b::int8[], %b::float8[]) {_ON_CONFLICT}"
)


async def add_many(conn: Conn, rows: list[tuple[Any, ...]]) -> list[None]:
    """The usage adds the writer found in one batch, summed per key and day: one statement
    (`UsageCounters.add_usage` made together)."""
    sums: dict[tuple[str, str], list[Any]] = {}
    for owner, day, *figures in rows:
        summed = sums.setdefault((owner, day), [0, 0, 0, 0, 0, 0.0])
        for n, figure in enumerate(figures):
            summed[n] += figure
    columns: list[list[Any]] = [[] for _ in range(8)]
    for key, figures in sums.items():
        for column, value in zip(columns, (*key, *figures), strict=True):
            column.append(value)
    await conn.execute(_ADD_MANY, columns)
    return [None] * len(rows)


_DAY = """
SELECT runs, llm_calls, unpriced_calls, prompt_tokens, completion_tokens, cost_usd
FROM key_days WHERE owner = %s AND day = %s
"""
_UNENDED = tuple(s.value for s in (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.REQUIRES_ACTION))


class PostgresCounters:
    def __init__(self, query: Query, submit: Callable[..., Awaitable[Any]]) -> None:
        self._query = query
        self._submit = submit

    async def day_usage(self, owner: str | None, day: str) -> DayUsage:
        rows = await self._query(_DAY, (owner or "", day))
        if not rows:
            return DayUsage()
        runs, calls, unpriced, prompt, completion, cost = rows[0]
        return DayUsage(int(runs), int(calls), int(unpriced), int(prompt), int(completion), cost)

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

        async def add(conn: Conn) -> None:
            await conn.execute(_ADD, row)

        # made with the other adds of the writer's batch (`add_many`); no run's rows
        key = f"key_days {owner or ''}"
        return self._submit(add, None, key, (add_many, row), one_statement=True)

    async def admitted(self, owner: str | None, ticket: str, at: float) -> Awaitable[None]:
        async def note(conn: Conn) -> None:
            sql = "DELETE FROM key_admissions WHERE owner = %s AND at <= %s"
            await conn.execute(sql, (owner or "", at - WINDOW_S))
            await conn.execute(
                "INSERT INTO key_admissions (owner, ticket, at) VALUES (%s, %s, %s)"
                " ON CONFLICT (owner, ticket) DO UPDATE SET at = excluded.at",
                (owner or "", ticket, at),
            )

        return self._submit(note)

    async def unadmitted(self, owner: str | None, ticket: str) -> Awaitable[None]:
        async def drop(conn: Conn) -> None:
            sql = "DELETE FROM key_admissions WHERE owner = %s AND ticket = %s"
            await conn.execute(sql, (owner or "", ticket))

        return self._submit(drop)

    async def admissions_since(self, owner: str | None, since: float) -> list[float]:
        sql = "SELECT at FROM key_admissions WHERE owner = %s AND at > %s ORDER BY at"
        return [at for (at,) in await self._query(sql, (owner or "", since))]

    async def active_runs(self, owner: str | None) -> int:
        where = "owner IS NULL" if owner is None else "owner = %s"
        sql = f"SELECT COUNT(*) FROM runs WHERE {where} AND status = ANY(%s)"
        params = (*(() if owner is None else (owner,)), list(_UNENDED))
        rows = await self._query(sql, params)
        return int(rows[0][0])
