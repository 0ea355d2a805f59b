"""`SqliteRunStore`'s run summaries (DESIGN §20; `app.runs.reports.summaries`): the `run_summaries`
row a terminal record's write adds in its transaction (its tally read from the run's events
there), and the termination report as two queries: one GROUP BY for the sums, one pass over
the window's per-run figures for the percentiles.

`created_at` is the runs table's own text (ISO 8601, UTC), so a window selects the same
runs here as in `GET /runs` (`where_matching`)."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from collections.abc import Awaitable, Callable
from typing import Any

from app.runs.errors import RunUnreadableError
from app.runs.records import RunRecord
from app.runs.reports.groups import FIGURES, GroupBy, ReportBuilder, percentiles
from app.runs.reports.summaries import TALLIED, RunFilter, RunSummary, summarize, tally_of
from app.runs.store import read_record

_TALLY_SQL = (
    "SELECT type, json_extract(data, '$.kind'), json_extract(data, '$.truncated'),"
    " json_type(data, '$.cost_usd') FROM events"
    f" WHERE run_id = ? AND type IN ({', '.join('?' * len(TALLIED))})"
)
_INSERT = """
    INSERT OR REPLACE INTO run_summaries (run_id, owner, agent, model, created_at, status,
        reason, degraded, finish_tool, steps, duration_s, tokens, cost_usd, tally)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""
_GROUPS = {
    GroupBy.MODEL: "model",
    GroupBy.AGENT: "agent",
    GroupBy.KEY: "NULLIF(owner, '')",
    GroupBy.DAY: "substr(created_at, 1, 10)",
}


def tally_in(conn: sqlite3.Connection, run_id: str) -> dict[str, int]:
    """The tally of the run's events as stored."""
    rows = conn.execute(_TALLY_SQL, (run_id, *(t.value for t in TALLIED))).fetchall()
    return tally_of(
        (t, {"kind": kind, "truncated": bool(cut), "cost_usd": None if cost == "null" else 0})
        for t, kind, cut, cost in rows
    )


INT64_MAX = 2**63 - 1
"""SQLite's largest integer: a run's tokens past it (each call's count is within 64 bits, their
sum need not be) are kept as a REAL, rounded, rather than failing the terminal write."""


def insert_summary(conn: sqlite3.Connection, summary: RunSummary) -> None:
    conn.execute(
        _INSERT,
        (
            summary.run_id,
            summary.owner or "",
            summary.agent,
            summary.model,
            summary.created_at.isoformat(),
            summary.status.value,
            summary.reason.value if summary.reason is not None else None,
            int(summary.degraded),
            int(summary.finish_tool),
            summary.steps,
            summary.duration_s,
            summary.tokens if summary.tokens <= INT64_MAX else float(summary.tokens),
            summary.cost_usd,
            json.dumps(summary.tally, sort_keys=True, separators=(",", ":")),
        ),
    )


def summary_write(record: RunRecord) -> Callable[[sqlite3.Connection], None]:
    """The write of a terminal record's summary (made now: the caller may change the record),
    for the transaction that writes the record."""
    summary = summarize(record)

    def write(conn: sqlite3.Connection) -> None:
        insert_summary(conn, dataclasses.replace(summary, tally=tally_in(conn, summary.run_id)))

    return write


def where_matching(
    owner: str | None, any_owner: bool, matching: RunFilter | None, *, summaries: bool
) -> tuple[list[str], list[Any]]:
    """The WHERE clauses (and their parameters) of an owner and a filter, on `runs` or on
    `run_summaries` (where model and agent are columns)."""
    where: list[str] = []
    params: list[Any] = []
    if not any_owner and summaries:
        where.append("owner = ?")  # ('' for none)
        params.append(owner or "")
    elif not any_owner:
        where.append("owner IS NULL" if owner is None else "owner = ?")
        params += [] if owner is None else [owner]
    if matching is None:
        return where, params
    if matching.since is not None:
        where.append("created_at >= ?")
        params.append(matching.since.isoformat())
    if matching.until is not None:
        where.append("created_at < ?")
        params.append(matching.until.isoformat())
    model = "model" if summaries else "json_extract(record, '$.model')"
    agent = "agent" if summaries else "json_extract(record, '$.request.agent')"
    for column, value in ((model, matching.model), (agent, matching.agent)):
        if value is not None:  # (a column of ours: no injection)
            where.append(f"{column} = ?")
            params.append(value)
    return where, params


def report_query(
    owner: str | None, any_owner: bool, matching: RunFilter, group_by: GroupBy
) -> Callable[[sqlite3.Connection], list[dict[str, Any]]]:
    where, params = where_matching(owner, any_owner, matching, summaries=True)
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    group = _GROUPS[group_by]
    sums = (
        f"SELECT {group}, status, reason, COUNT(*), SUM(degraded), SUM(finish_tool), tally,"
        " TOTAL(cost_usd), COUNT(cost_usd)"
        f" FROM run_summaries{clause} GROUP BY 1, 2, 3, 7"
    )
    figures = f"SELECT {group}, steps, duration_s, tokens FROM run_summaries{clause}"

    def query(conn: sqlite3.Connection) -> list[dict[str, Any]]:
        report = ReportBuilder(group_by)
        conn.execute("BEGIN")  # both queries from one commit
        try:
            for grp, status, reason, runs, degraded, finish, tally, usd, priced in conn.execute(
                sums, params
            ):
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
            for grp, steps, duration_s, tokens in conn.execute(figures, params):
                lists = per_group.get(grp) or per_group.setdefault(grp, ([], [], []))
                lists[0].append(steps)
                lists[1].append(duration_s)
                lists[2].append(tokens)
            for grp, lists in per_group.items():
                for figure, values in zip(FIGURES, lists, strict=True):
                    report.spread(grp, figure, percentiles(values))
        finally:
            conn.execute("COMMIT")
        return report.groups()

    return query


UNSUMMARIZED = """
    SELECT id, owner, record FROM runs r
    WHERE status IN ('completed', 'incomplete', 'failed', 'cancelled')
      AND NOT EXISTS (SELECT 1 FROM run_summaries s WHERE s.run_id = r.id) AND id > ?
    ORDER BY id LIMIT ?
"""


def summary_save(summary: RunSummary) -> Callable[[sqlite3.Connection], None]:
    """`save_summary` as a write: a summary made by the backfill (a run deleted meanwhile:
    nothing)."""

    def write(conn: sqlite3.Connection) -> None:
        if conn.execute("SELECT 1 FROM runs WHERE id = ?", (summary.run_id,)).fetchone():
            insert_summary(conn, summary)

    return write


class SqliteSummaries:
    """`SqliteRunStore`'s part of the `RunStore` protocol about summaries (a mixin: the store
    has `_read` and `_write`)."""

    _read: Callable[..., Awaitable[Any]]
    _write: Callable[..., Awaitable[Any]]

    async def termination_report(
        self, *, owner: str | None, any_owner: bool, matching: RunFilter, group_by: GroupBy
    ) -> list[dict[str, Any]]:
        groups: list[dict[str, Any]] = await self._read(
            report_query(owner, any_owner, matching, group_by)
        )
        return groups

    async def unsummarized(
        self, limit: int, *, after: str | None = None
    ) -> list[tuple[str, RunRecord | None]]:
        def query(conn: sqlite3.Connection) -> list[tuple[str, str | None, str]]:
            return conn.execute(UNSUMMARIZED, (after or "", limit)).fetchall()

        found: list[tuple[str, RunRecord | None]] = []
        for row in await self._read(query):
            try:
                found.append((row[0], read_record(row[0], row[2], owner=row[1])))
            except RunUnreadableError:  # (logged by read_record)
                found.append((row[0], None))
        return found

    async def save_summary(self, summary: RunSummary) -> None:
        await self._write(summary_save(summary))
