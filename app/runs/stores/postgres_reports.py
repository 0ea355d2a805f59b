"""`PostgresRunStore`'s run summaries (DESIGN §20; `app.runs.reports.summaries`): the
`run_summaries` row a terminal record's write adds in its transaction (its tally counted from
the run's events there, in SQL: no event's data leaves the database), and the termination
report as two queries from one snapshot: one GROUP BY for the sums, one pass over the
window's per-run figures for the percentiles. As SQLite's (`sqlite_reports`).

`created_at` is the runs table's own text (ISO 8601, UTC), so a window selects the same runs
here as in `GET /runs` (`where_matching`)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg

from app.runs.errors import RunUnreadableError
from app.runs.records import RunRecord, RunStatus
from app.runs.reports.groups import FIGURES, GroupBy, ReportBuilder, percentiles
from app.runs.reports.summaries import TALLIED, RunFilter, RunSummary, summarize, tally_of
from app.runs.store import read_record

Conn = psycopg.AsyncConnection[Any]
Write = Callable[[Conn], Awaitable[Any]]
Query = Callable[[str, tuple[Any, ...]], Awaitable[list[tuple[Any, ...]]]]

# Each event's data parsed once (`OFFSET 0` keeps the subquery, whose `j` would otherwise be
# inlined: three parses of it a row).
_TALLY_SQL = (
    "SELECT type, j ->> 'kind', COALESCE((j -> 'truncated') = 'true', FALSE),"
    " jsonb_typeof(j -> 'cost_usd') FROM (SELECT type, data::jsonb AS j FROM events"
    " WHERE run_id = %s AND type = ANY(%s) OFFSET 0) e"
)
_INSERT = (
    "INSERT INTO run_summaries (run_id, owner, agent, model, created_at, status, reason,"
    " degraded, finish_tool, steps, duration_s, tokens, cost_usd, tally)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
    " ON CONFLICT (run_id) DO UPDATE SET owner = excluded.owner, agent = excluded.agent,"
    " model = excluded.model, created_at = excluded.created_at, status = excluded.status,"
    " reason = excluded.reason, degraded = excluded.degraded,"
    " finish_tool = excluded.finish_tool, steps = excluded.steps,"
    " duration_s = excluded.duration_s, tokens = excluded.tokens,"
    " cost_usd = excluded.cost_usd, tally = excluded.tally"
)
_GROUPS = {
    GroupBy.MODEL: "model",
    GroupBy.AGENT: "agent",
    GroupBy.KEY: "NULLIF(owner, '')",
    GroupBy.DAY: "substr(created_at, 1, 10)",
}
_TALLIED = [t.value for t in TALLIED]


async def tally_in(conn: Conn, run_id: str) -> dict[str, int]:
    """The tally of the run's events as stored (in this transaction)."""
    return tally_from(await (await tally_query(conn, run_id)).fetchall())


async def tally_query(conn: Conn, run_id: str) -> psycopg.AsyncCursor[Any]:
    """The query of the run's events `tally_from` counts (sent: in a pipeline, not read)."""
    return await conn.execute(_TALLY_SQL, (run_id, _TALLIED))


TALLY_MANY = (
    "SELECT run_id, type, j ->> 'kind', COALESCE((j -> 'truncated') = 'true', FALSE),"
    " jsonb_typeof(j -> 'cost_usd') FROM (SELECT run_id, type, data::jsonb AS j FROM events"
    " WHERE run_id = ANY(%s) AND type = ANY(%s) OFFSET 0) e"
)
"""`_TALLY_SQL` for several runs, each row led by its run's id."""


async def tally_many(conn: Conn, run_ids: list[str]) -> dict[str, dict[str, int]]:
    """Each run's tally (`tally_in`), in one query."""
    rows: dict[str, list[tuple[Any, ...]]] = {run_id: [] for run_id in run_ids}
    for run_id, *row in await (await conn.execute(TALLY_MANY, (run_ids, _TALLIED))).fetchall():
        rows[run_id].append(tuple(row))
    return {run_id: tally_from(found) for run_id, found in rows.items()}


def tally_from(rows: list[tuple[Any, ...]]) -> dict[str, int]:
    return tally_of(
        (t, {"kind": kind, "truncated": cut, "cost_usd": None if cost == "null" else 0})
        for t, kind, cut, cost in rows
    )


async def insert_summary(conn: Conn, summary: RunSummary) -> None:
    await conn.execute(_INSERT, summary_params(summary))


async def insert_summaries(conn: Conn, summaries: list[RunSummary]) -> None:
    """Several at once (psycopg's `executemany`: one round trip in pipeline mode)."""
    async with conn.cursor() as cur:
        await cur.executemany(_INSERT, [summary_params(summary) for summary in summaries])


def summary_params(summary: RunSummary) -> tuple[Any, ...]:
    return (
        summary.run_id,
        summary.owner or "",
        summary.agent,
        summary.model,
        summary.created_at.isoformat(),
        summary.status.value,
        summary.reason.value if summary.reason is not None else None,
        summary.degraded,
        summary.finish_tool,
        summary.steps,
        summary.duration_s,
        summary.tokens,
        summary.cost_usd,
        json.dumps(summary.tally, sort_keys=True, separators=(",", ":")),
    )


def summary_write(record: RunRecord) -> Write:
    """The write of a terminal record's summary (made now: the caller may change the record),
    for the transaction that writes the record, after it."""
    summary = summarize(record)

    async def write(conn: Conn) -> None:
        tally = await tally_in(conn, summary.run_id)
        await insert_summary(conn, dataclasses.replace(summary, tally=tally))

    return write


def where_matching(
    owner: str | None, any_owner: bool, matching: RunFilter | None, *, summaries: bool
) -> tuple[list[str], list[Any]]:
    """The WHERE clauses (and their parameters) of an owner and a filter, on `runs` or on
    `run_summaries` (where model and agent are columns)."""
    where: list[str] = []
    params: list[Any] = []
    if not any_owner and summaries:
        where.append("owner = %s")  # ('' for none)
        params.append(owner or "")
    elif not any_owner:
        where.append("owner IS NULL" if owner is None else "owner = %s")
        params += [] if owner is None else [owner]
    if matching is None:
        return where, params
    if matching.since is not None:
        where.append("created_at >= %s")
        params.append(matching.since.isoformat())
    if matching.until is not None:
        where.append("created_at < %s")
        params.append(matching.until.isoformat())
    model = "model" if summaries else "(record::jsonb ->> 'model')"
    agent = "agent" if summaries else "(record::jsonb -> 'request' ->> 'agent')"
    for column, value in ((model, matching.model), (agent, matching.agent)):
        if value is not None:  # (a column of ours: no injection)
            where.append(f"{column} = %s")
            params.append(value)
    return where, params


def report_query(
    owner: str | None, any_owner: bool, matching: RunFilter, group_by: GroupBy
) -> Callable[[Conn], Awaitable[list[dict[str, Any]]]]:
    where, params = where_matching(owner, any_owner, matching, summaries=True)
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    group = _GROUPS[group_by]
    sums = (
        f"SELECT {group}, status, reason, COUNT(*), SUM(degraded::int), SUM(finish_tool::int),"
        " tally, COALESCE(SUM(cost_usd), 0), COUNT(cost_usd)"
        f" FROM run_summaries{clause} GROUP BY 1, 2, 3, 7"
    )
    figures = f"SELECT {group}, steps, duration_s, tokens FROM run_summaries{clause}"

    async def query(conn: Conn) -> list[dict[str, Any]]:
        report = ReportBuilder(group_by)
        async with conn.transaction():  # both queries from one snapshot
            await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            cur = await conn.execute(sums, tuple(params))
            for (
                grp,
                status,
                reason,
                runs,
                degraded,
                finish,
                tally,
                usd,
                priced,
            ) in await cur.fetchall():
                report.add(
                    grp,
                    status,
                    reason,
                    runs=runs,
                    degraded=degraded,
                    finish_tool=finish,
                    tally={k: v * runs for k, v in json.loads(tally).items()},
                    usd=usd,
                    priced_runs=priced,
                )
            per_group: dict[Any, tuple[list[float], list[float], list[float]]] = {}
            cur = await conn.execute(figures, tuple(params))
            for grp, steps, duration_s, tokens in await cur.fetchall():
                lists = per_group.get(grp) or per_group.setdefault(grp, ([], [], []))
                lists[0].append(steps)
                lists[1].append(duration_s)
                lists[2].append(int(tokens))  # (NUMERIC: exact, read as Decimal)
        for grp, lists in per_group.items():
            for figure, values in zip(FIGURES, lists, strict=True):
                report.spread(grp, figure, percentiles(values))
        return report.groups()

    return query


UNSUMMARIZED = (
    "SELECT id, owner, record FROM runs r"
    " WHERE status = ANY(%s)"
    " AND NOT EXISTS (SELECT 1 FROM run_summaries s WHERE s.run_id = r.id) AND id > %s"
    " ORDER BY id LIMIT %s"
)
_ENDED = [s.value for s in RunStatus if s.terminal]


def summary_save(summary: RunSummary) -> Write:
    """`save_summary` as a write: a summary made by the backfill (a run deleted meanwhile, or
    one that has a summary now: nothing)."""

    async def write(conn: Conn) -> None:
        cur = await conn.execute("SELECT 1 FROM runs WHERE id = %s FOR SHARE", (summary.run_id,))
        if await cur.fetchone() is None:
            return
        cur = await conn.execute("SELECT 1 FROM run_summaries WHERE run_id = %s", (summary.run_id,))
        if await cur.fetchone() is None:
            await insert_summary(conn, summary)

    return write


class PostgresSummaries:
    """`PostgresRunStore`'s part of the `RunStore` protocol about summaries (a mixin: the
    store has `with_connection`, `query` and `submit`)."""

    with_connection: Callable[..., Awaitable[Any]]
    query: Query
    submit: Callable[..., Awaitable[Any]]

    async def termination_report(
        self, *, owner: str | None, any_owner: bool, matching: RunFilter, group_by: GroupBy
    ) -> list[dict[str, Any]]:
        groups: list[dict[str, Any]] = await self.with_connection(
            report_query(owner, any_owner, matching, group_by)
        )
        return groups

    async def unsummarized(
        self, limit: int, *, after: str | None = None
    ) -> list[tuple[str, RunRecord | None]]:
        found: list[tuple[str, RunRecord | None]] = []
        for run_id, owner, raw in await self.query(UNSUMMARIZED, (_ENDED, after or "", limit)):
            try:
                found.append((run_id, read_record(run_id, raw, owner=owner)))
            except RunUnreadableError:  # (logged by read_record)
                found.append((run_id, None))
        return found

    async def save_summary(self, summary: RunSummary) -> None:
        await self.submit(summary_save(summary))
