"""The Postgres store against SQLite, in the same pass (issue #36).

    python -m bench.postgres [--quick]

Each figure is taken for SQLite (one process on a file: the floor) and for Postgres (one
replica on a local Postgres with fsync on, as durable as SQLite's `synchronous=FULL`), and
given as the ratio Postgres ÷ SQLite:
1. server CPU per 5-step run (the scripted model, `bench/service_client.py`'s load, the
   server's CPU from /proc, plus Postgres's own for the Postgres row), at `--concurrency`
   runs in flight, in `--rounds` rounds each measuring both in turn (the ratio: the median
   of the rounds' ratios); and a run's first event p50 (POST to its first SSE event), at 1
   and at `--concurrency` clients;
2. events per second one replica's store sustains: `--appenders` runs each appending in a
   loop (each append awaited before the next, as a run does);
3. takeover time after a SIGKILL: two replicas (lease 2 s), a run in flight on one, killed;
   the time until the other's `run.recovered` (target: lease + 5 s).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from app.runs.records import RunRecord, new_run_id
from app.runs.store import RunStore
from app.runs.stores.postgres import PostgresRunStore
from app.runs.stores.sqlite import SqliteRunStore
from bench.common import fmt, machine, machine_line, percentile, say, table, write_results
from bench.workers import SECRET, WorkersServer, complete, run_clients, tree_cpu_seconds
from tests.e2e.test_replicas import executor
from tests.fakes.llm_server import FakeLLMServer, FakeReply, FakeToolCall
from tests.fakes.postgres_server import PostgresServer
from tests.fakes.process import AppProcess

LEASE_S = 2.0


def serve_and_measure(
    url: str, concurrency: int, runs: int, store_pid: Callable[[], int | None]
) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="finishline-bench-pg-"))
    env = {
        "FINISHLINE_STORE_URL": url.format(workdir=workdir),
        "FINISHLINE_MAX_CONCURRENT_RUNS": "1000",
        "FINISHLINE_MAX_QUEUED_RUNS": "5000",
        "FINISHLINE_LOG_FORMAT": "json",
        "FINISHLINE_TOKEN_SECRET": SECRET,
    }
    server = WorkersServer(workdir, env, 1)
    server.start()
    try:
        run_clients(server.url, min(concurrency, 10), 2, workdir, "warmup")
        pid = store_pid()
        server_before = tree_cpu_seconds(server.pid)
        store_before = tree_cpu_seconds(pid) if pid else 0.0
        outputs = run_clients(server.url, concurrency, runs, workdir, "measure")
        server_after = tree_cpu_seconds(server.pid)
        store_after = tree_cpu_seconds(pid) if pid else 0.0
        before, after = server_before + store_before, server_after + store_after
        single = run_clients(server.url, 1, max(3, runs), workdir, "single")
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    def first_events(outs: list[Any]) -> list[float]:
        ok = [run for out in outs for run in out["runs"] if complete(run)]
        return [(run["events"][0][3] - run["posted"]) * 1000 for run in ok]

    ok = [run for out in outputs for run in out["runs"] if complete(run)]
    return {
        "completed": len(ok),
        "runs": sum(len(out["runs"]) for out in outputs),
        "cpu_ms_per_run": (after - before) * 1000 / max(len(ok), 1),
        "store_cpu_ms_per_run": (store_after - store_before) * 1000 / max(len(ok), 1),
        "first_event_p50_ms": percentile(first_events(outputs), 0.5),
        "first_event_p50_ms_1": percentile(first_events(single), 0.5),
    }


def medians(passes: list[dict[str, Any]]) -> dict[str, Any]:
    """Each figure's median over the rounds (the noise of a shared machine is mostly in one)."""
    return {key: statistics.median(p[key] for p in passes) for key in passes[0]}


async def appends_per_s(store: RunStore, appenders: int, seconds: float) -> float:
    await store.open()
    try:
        runs = []
        for _ in range(appenders):
            run = RunRecord.model_validate(
                {"id": new_run_id(), "request": {"task": "t"}, "model": "m", "settings": {}}
            )
            await store.create(run)
            runs.append(run.id)
        count = 0
        stop = time.monotonic() + seconds
        data = {"content": "x" * 200, "step": 1}

        async def append(run_id: str) -> None:
            nonlocal count
            while time.monotonic() < stop:
                await store.append(run_id, "thought", 1, data)
                count += 1

        started = time.monotonic()
        await asyncio.gather(*(append(run_id) for run_id in runs))
        return count / (time.monotonic() - started)
    finally:
        await store.close()


async def takeover_s(url: str, workdir: Path) -> float:
    replies = [
        FakeReply(content="c", tool_calls=[FakeToolCall("calculator", {"expression": "2+3"})]),
        FakeReply(content="thinking", hang=True),
        FakeReply.finish("5"),
    ]
    env = {
        "FINISHLINE_STORE_URL": url,
        "FINISHLINE_TOKEN_SECRET": SECRET,
        "FINISHLINE_SHUTDOWN_GRACE_S": "0",
        "FINISHLINE_LOG_LEVEL": "INFO",
        "FINISHLINE_LEASE_S": str(LEASE_S),
    }
    async with FakeLLMServer(replies) as llm, contextlib.AsyncExitStack() as stack:
        apps = []
        for n in range(2):
            (workdir / f"r{n}").mkdir()
            app = AppProcess(workdir / f"r{n}", {**env, "FINISHLINE_LLM_BASE_URL": llm.base_url})
            await stack.enter_async_context(app)
            apps.append(app)
        async with httpx.AsyncClient(base_url=apps[1].url(), timeout=30) as client:
            body = {"task": "add", "tools": ["calculator"]}
            run_id = (await client.post("/runs", json=body)).json()["id"]
            await llm.wait_for_requests(2, timeout_s=20)
            executing = await executor(apps, run_id)
            survivor = apps[1 - executing]
            apps[executing].kill()
            killed = time.monotonic()
            await survivor.wait_for_log("run_recovered", timeout_s=60)
            return time.monotonic() - killed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--runs", type=int, default=10, help="runs per client worker")
    parser.add_argument("--appenders", type=int, default=50)
    parser.add_argument(
        "--rounds", type=int, default=5, help="SQLite and Postgres measured in turn, medians"
    )
    args = parser.parse_args()
    runs = 2 if args.quick else args.runs
    seconds = 3.0 if args.quick else 10.0
    info = machine()
    directory = Path(tempfile.mkdtemp(prefix="finishline-bench-postgres-"))
    results: dict[str, Any] = {}
    try:
        with PostgresServer(directory, durable=True, own=True) as pg:
            rounds: list[dict[str, dict[str, Any]]] = []
            for n in range(1 if args.quick else args.rounds):
                say(f"round {n + 1}: SQLite, then Postgres")
                sqlite = "sqlite:///{workdir}/finishline.db"
                rounds.append(
                    {
                        "sqlite": serve_and_measure(sqlite, args.concurrency, runs, lambda: None),
                        "postgres": serve_and_measure(
                            pg.url(pg.database()), args.concurrency, runs, pg.pid
                        ),
                    }
                )
            results["rounds"] = rounds
            results["sqlite"] = medians([r["sqlite"] for r in rounds])
            results["postgres"] = medians([r["postgres"] for r in rounds])
            say("appends/s")
            sqlite_dir = Path(tempfile.mkdtemp(prefix="finishline-bench-pg-sqlite-"))
            results["sqlite"]["appends_per_s"] = asyncio.run(
                appends_per_s(SqliteRunStore(str(sqlite_dir / "a.db")), args.appenders, seconds)
            )
            shutil.rmtree(sqlite_dir, ignore_errors=True)
            results["postgres"]["appends_per_s"] = asyncio.run(
                appends_per_s(PostgresRunStore(pg.url(pg.database())), args.appenders, seconds)
            )
            say("takeover after SIGKILL")
            takeover_dir = Path(tempfile.mkdtemp(prefix="finishline-bench-pg-takeover-"))
            takeover_dir.chmod(0o755)
            results["postgres"]["takeover_s"] = asyncio.run(
                takeover_s(pg.url(pg.database()), takeover_dir)
            )
            shutil.rmtree(takeover_dir, ignore_errors=True)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    s, p = results["sqlite"], results["postgres"]
    # paired: each round measures both in the same minutes (a shared machine drifts between)
    results["cpu_ratio"] = statistics.median(
        r["postgres"]["cpu_ms_per_run"] / r["sqlite"]["cpu_ms_per_run"] for r in rounds
    )
    rows = [
        ["server CPU ms per 5-step run", fmt(s["cpu_ms_per_run"], 2), fmt(p["cpu_ms_per_run"], 2),
         f"{results['cpu_ratio']:.2f}×", "≤ 1.5×"],
        ["… of which Postgres's own", "—", fmt(p["store_cpu_ms_per_run"], 2), "", ""],
        ["first event p50 ms, 1 client", fmt(s["first_event_p50_ms_1"], 1),
         fmt(p["first_event_p50_ms_1"], 1),
         f"{p['first_event_p50_ms_1'] / s['first_event_p50_ms_1']:.2f}×", ""],
        [f"first event p50 ms, {args.concurrency} clients", fmt(s["first_event_p50_ms"], 1),
         fmt(p["first_event_p50_ms"], 1),
         f"{p['first_event_p50_ms'] / s['first_event_p50_ms']:.2f}×", ""],
        [f"events/s, {args.appenders} appenders", fmt(s["appends_per_s"], 0),
         fmt(p["appends_per_s"], 0), f"{p['appends_per_s'] / s['appends_per_s']:.2f}×", ""],
        ["takeover after SIGKILL, s", "— (one process)", fmt(p["takeover_s"], 1), "",
         f"≤ lease + 5 = {LEASE_S + 5:.0f}"],
    ]  # fmt: skip
    note = (
        f"Runs of 5 steps with the scripted model (CPU-bound), {args.concurrency} in flight "
        f"from 2 client processes, {runs} runs per client worker after a warm-up; Postgres "
        "CPU counted with the server's. Postgres: a local server (fsync on), one replica. "
        f"Each figure of the first four rows is the median of {len(rounds)} rounds, SQLite and "
        "Postgres measured in turn in each; the CPU ratio is the median of the rounds' ratios "
        "(CPU per run, SQLite / Postgres by round: "
        + ", ".join(
            f"{fmt(r['sqlite']['cpu_ms_per_run'], 2)} / {fmt(r['postgres']['cpu_ms_per_run'], 2)}"
            f" = {r['postgres']['cpu_ms_per_run'] / r['sqlite']['cpu_ms_per_run']:.2f}×"
            for r in rounds
        )
        + f"). Completed (median): SQLite {s['completed']:.0f} of {s['runs']:.0f}, Postgres "
        f"{p['completed']:.0f} of {p['runs']:.0f}."
    )
    markdown = "\n\n".join(
        [
            "# The Postgres store against SQLite",
            machine_line(info),
            note,
            table(["figure", "SQLite", "Postgres", "Postgres ÷ SQLite", "target"], rows),
        ]
    )
    path = write_results("postgres-quick" if args.quick else "postgres", markdown, results)
    say(markdown)
    say(f"\nwritten: {path}")


if __name__ == "__main__":
    main()
