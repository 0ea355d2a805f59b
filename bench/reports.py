"""What a termination report costs over many ended runs on SQLite (issue #37, DESIGN §20):
N runs (100,000; `--quick`: 20,000) of one key over 30 days, four models, three agent
profiles and every stop reason, their summaries as the store writes them; then
`SqliteRunStore.termination_report` timed (wall, the reader thread's hand-off included) per
group_by, over every run and over a 7-day window.

    python -m bench.reports [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import random
import sqlite3
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from app.engine.policies import StopReason
from app.runs.records import RunRecord, RunResult, Usage, new_run_id, status_for
from app.runs.reports.groups import GroupBy
from app.runs.reports.summaries import RunFilter, summarize
from app.runs.stores.sqlite import SqliteRunStore
from app.runs.stores.sqlite_reports import insert_summary
from app.runs.stores.sqlite_rows import UPSERT_RUN, run_row
from bench.common import fmt, machine, machine_line, say, table, write_results

KEY = "k" * 32
START = datetime(2026, 1, 1, tzinfo=UTC)
ROUNDS = 7
TALLIES = ({}, {"intervention.stop_prompt": 2}, {"retries": 1, "truncations": 3}, {})


def fill(path: str, n: int) -> None:
    """N ended runs and their summaries, written straight into the store's file."""
    rng = random.Random(37)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN")
    for i in range(n):
        reason = rng.choice(list(StopReason))
        agent = rng.choice(["researcher", "writer", "coder", None])
        record = RunRecord.model_validate(
            {
                "id": new_run_id(),
                "owner": KEY,
                "request": {"task": "t"} | ({"agent": agent} if agent else {}),
                "model": f"model-{i % 4}",
                "settings": {},
                "created_at": START + timedelta(seconds=i * 30 * 86400 / n),
            }
        )
        record.status = status_for(reason)
        record.started_at = record.created_at
        record.ended_at = record.created_at + timedelta(seconds=rng.uniform(0.5, 60))
        record.result = RunResult(answer="a", reason=reason, degraded=rng.random() < 0.1)
        steps = rng.randint(1, 10)
        record.usage = Usage(steps=steps, total_tokens=steps * 900, cost_usd=steps * 0.001)
        conn.execute(UPSERT_RUN, run_row(record))
        summary = summarize(record, TALLIES[i % len(TALLIES)])
        insert_summary(conn, dataclasses.replace(summary))
    conn.execute("COMMIT")
    conn.close()


async def measure(path: str) -> dict[str, dict[str, float]]:
    store = SqliteRunStore(path)
    await store.open()
    week = RunFilter(since=START + timedelta(days=10), until=START + timedelta(days=17))
    cases = {f"group_by={g.value}, every run": (g, RunFilter()) for g in GroupBy}
    cases["group_by=model, a 7-day window"] = (GroupBy.MODEL, week)
    out: dict[str, dict[str, float]] = {}
    try:
        for name, (group_by, matching) in cases.items():
            times, cpu, runs = [], [], 0
            for _ in range(ROUNDS):
                began, began_cpu = time.perf_counter(), time.process_time()
                groups = await store.termination_report(
                    owner=KEY,
                    any_owner=group_by is GroupBy.KEY,
                    matching=matching,
                    group_by=group_by,
                )
                times.append(time.perf_counter() - began)
                cpu.append(time.process_time() - began_cpu)
                runs = sum(g["runs"] for g in groups)
            out[name] = {
                "runs": runs,
                "median_s": statistics.median(times),
                "max_s": max(times),
                "cpu_s": statistics.median(cpu),
            }
            say(f"{name}: {runs} runs, median {out[name]['median_s'] * 1000:.0f} ms")
    finally:
        await store.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="20,000 runs instead of 100,000")
    args = parser.parse_args()
    n = 20_000 if args.quick else 100_000
    path = str(Path(tempfile.mkdtemp(prefix="finishline-reports-")) / "runs.db")
    asyncio.run(SqliteRunStore(path).open())  # the schema
    say(f"writing {n:,} ended runs and their summaries …")
    fill(path, n)
    rows = asyncio.run(measure(path))
    body = table(
        ["report", "runs", "wall, median", "wall, slowest of 7", "CPU, median"],
        [
            [
                name,
                f"{int(r['runs']):,}",
                fmt(r["median_s"] * 1000, 0) + " ms",
                fmt(r["max_s"] * 1000, 0) + " ms",
                fmt(r["cpu_s"] * 1000, 0) + " ms",
            ]
            for name, r in rows.items()
        ],
    )
    text = (
        "# A termination report over many runs on SQLite (bench/reports.py)\n\n"
        + machine_line(machine())
        + f"\n\n`GET /reports/termination`'s store call over {n:,} ended runs of one key "
        "(30 days, 4 models, 3 agent profiles and none, every stop reason), from their "
        "summaries: wall and CPU time (the process's, every thread) per report, 7 rounds. "
        f"The 1-minute load average was {os.getloadavg()[0]:.1f} at the end (the wall time "
        "moves with it; the CPU time much less).\n\n" + body + "\n"
    )
    write_results(
        "reports" + ("-quick" if args.quick else ""), text, {"n": n, "rows": rows, **machine()}
    )
    print(text)


if __name__ == "__main__":
    main()
