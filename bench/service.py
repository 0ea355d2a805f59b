"""The service under load: runs through the HTTP API, each followed by its own SSE client.

For each configuration a fresh server process (`uvicorn --factory app.main:create_app` on a
socket bound here, default uvicorn settings: uvloop and httptools when installed, as
`uvicorn[standard]` installs them) with its default store, SQLite on a file in a temporary
directory (WAL, synchronous=FULL, group commit), log level INFO (JSON lines to a file).
Client processes (`bench/service_client.py`, httpx) start runs of 5 steps (4 calculator
calls, then task_finished) with N workers in all, each worker starting its next run as soon
as its previous one ended, so N runs are in flight at once. Models: (a) the in-process
scripted model (zero latency), (b) a fake OpenAI-compatible server in a process of its own
adding 50 ms to every call (`bench/fake_llm.py`).

Server CPU (utime + stime from /proc) and peak RSS (VmHWM) are the server process's alone.
Events lost: per run, seqs must be 1..N without a gap, ending with the terminal event, and N
must equal what GET /runs/{id}/events (JSON) reports. Delivery delay = arrival at the client
- the event's `ts` (set when the server appends it; the wire format has ms resolution, so
each delay is over-stated by up to 1 ms), over the events appended after the client's
stream was asked for (earlier ones are replayed, not delivered live).

    python -m bench.service [--quick] [--only scripted|llm] [--levels 1,10,100,1000]
                            [--log-level INFO] [--store sqlite|memory] [--profile LEVEL]
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from bench import compare
from bench.common import (
    RESULTS,
    ROOT,
    fmt,
    machine,
    machine_line,
    percentile,
    say,
    table,
    write_results,
)
from bench.procs import FakeLLM, Server, child_env, cpu_seconds, peak_rss_mb

STEPS = 5
LATENCY_MS = 50.0
LEVELS = (1, 10, 100, 1000)
# runs per worker at each concurrency: (scripted, llm), full and quick
RUNS_PER_WORKER = {
    False: {1: (200, 60), 10: (30, 15), 100: (5, 4), 1000: (2, 2)},
    True: {1: (40, 15), 10: (6, 4), 100: (2, 2), 1000: (1, 1)},
}
TERMINAL = {"run.completed", "run.incomplete", "run.failed", "run.cancelled"}
TARGETS = {
    "first_event_p50_ms_at_1": 5.0,
    "delivery_p99_ms_at_1000": 100.0,
    "rss_mb_at_1000": 300.0,
}
"""Issue #10's, as this table shows them; CPU per run is judged against the floors
(bench/compare.py), the whole list by `python -m bench --summary`."""


def client_processes(concurrency: int) -> int:
    return 1 if concurrency <= 10 else (2 if concurrency <= 100 else 4)


def run_clients(
    url: str, mode: str, workers: int, runs: int, workdir: Path, tag: str
) -> list[dict[str, Any]]:
    """Start the client processes, wait for them; their outputs."""
    return run_block(url, mode, workers, runs, workdir, tag)[0]


def run_block(
    url: str,
    mode: str,
    workers: int,
    runs: int,
    workdir: Path,
    tag: str,
    extra: dict[str, Any] | None = None,
    meter: Callable[[], float] | None = None,
) -> tuple[list[dict[str, Any]], float]:
    """Start the client processes, wait for them; their outputs, and how much `meter` (a
    server's CPU seconds) grew from the moment they start working to their end."""
    count = client_processes(workers)
    start_at = time.time() + 1.5 + 0.25 * count  # they import httpx meanwhile
    procs = []
    outs = []
    for n in range(count):
        share = workers // count + (1 if n < workers % count else 0)
        out = workdir / f"client-{tag}-{n}.json"
        outs.append(out)
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "bench.service_client",
                    url,
                    "--mode",
                    mode,
                    "--workers",
                    str(share),
                    "--runs",
                    str(runs),
                    "--steps",
                    str(STEPS),
                    "--start-at",
                    str(start_at),
                    "--out",
                    str(out),
                    "--extra-body",
                    json.dumps(extra or {}),
                ],
                cwd=ROOT,
                env=child_env({}),
            )
        )
    before = 0.0
    if meter is not None:
        time.sleep(max(0.0, start_at - time.time()))  # noqa: TID251 (until the clients start)
        before = meter()
    for proc in procs:
        if proc.wait() != 0:
            raise RuntimeError(f"a client process failed ({proc.returncode})")
    used = meter() - before if meter is not None else 0.0
    return [json.loads(out.read_text()) for out in outs], used


def verify(url: str, runs: list[dict[str, Any]]) -> tuple[int, int, int]:
    """(runs checked, runs with a lost or extra event, events the server stored)."""
    bad = 0
    stored = 0
    with httpx.Client(base_url=url, timeout=60) as client:
        for run in runs:
            if "error" in run:
                bad += 1
                continue
            seqs = [event[0] for event in run["events"]]
            count, after = 0, 0
            while True:
                page = client.get(
                    f"/runs/{run['id']}/events",
                    params={"after": after, "limit": 1000},
                    headers={"Accept": "application/json"},
                ).json()
                count += len(page["events"])
                after = page["next_after"]
                if page["done"] or not page["events"]:
                    break
            stored += count
            complete = seqs == list(range(1, len(seqs) + 1)) and run["events"][-1][1] in TERMINAL
            if not complete or count != len(seqs):
                bad += 1
    return len(runs), bad, stored


def peak_in_flight(runs: list[dict[str, Any]]) -> int:
    edges = []
    for run in runs:
        if "error" not in run and run["events"]:
            edges += [(run["posted"], 1), (run["events"][-1][3], -1)]
    edges.sort()
    level = peak = 0
    for _, step in edges:
        level += step
        peak = max(peak, level)
    return peak


def measure(
    mode: str,
    concurrency: int,
    runs_per_worker: int,
    *,
    log_level: str,
    store: str,
    llm: FakeLLM | None,
    profile: bool,
    executing: int = 5000,
) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="finishline-bench-"))
    env = {
        "FINISHLINE_STORE_URL": (
            f"sqlite:///{workdir / 'finishline.db'}" if store == "sqlite" else "memory://"
        ),
        "FINISHLINE_MAX_CONCURRENT_RUNS": str(executing),
        "FINISHLINE_MAX_QUEUED_RUNS": "5000",
        "FINISHLINE_LOG_LEVEL": log_level,
        "FINISHLINE_LOG_FORMAT": "json",
    }
    if llm is not None:
        env["FINISHLINE_LLM_BASE_URL"] = llm.base_url
        env["FINISHLINE_LLM_MODEL"] = "fake-model"
    server = Server(workdir, env)
    server.start()
    spy: subprocess.Popen[bytes] | None = None
    try:
        # warm-up: first requests, imports, caches
        run_clients(server.url, mode, min(concurrency, 10), 2, workdir, "warmup")
        cpu_before = cpu_seconds(server.pid)
        llm_before = cpu_seconds(llm.pid) if llm else 0.0
        if profile:
            spy = subprocess.Popen(
                [
                    str(Path(sys.executable).parent / "py-spy"),
                    "record",
                    "--pid",
                    str(server.pid),
                    "--rate",
                    "250",
                    "--nonblocking",
                    "--format",
                    "raw",
                    "--output",
                    str(workdir / "profile.raw"),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        outputs = run_clients(server.url, mode, concurrency, runs_per_worker, workdir, "measure")
        cpu_after = cpu_seconds(server.pid)
        llm_after = cpu_seconds(llm.pid) if llm else 0.0
        rss = peak_rss_mb(server.pid)
        if spy is not None:
            spy.send_signal(2)
            spy.wait(timeout=60)
        runs = [run for out in outputs for run in out["runs"]]
        checked, lost_runs, stored = verify(server.url, runs)
    finally:
        server.stop()
    ok = [run for run in runs if "error" not in run]
    errors = [run["error"] for run in runs if "error" in run]
    first = [(run["events"][0][3] - run["posted"]) * 1000 for run in ok]
    last = [(run["events"][-1][3] - run["posted"]) * 1000 for run in ok]
    delays = [
        (arrived - ts) * 1000
        for run in ok
        for _seq, _type, ts, arrived in run["events"]
        if ts >= run["created"]
    ]
    started = min(out["started"] for out in outputs)
    ended = max(run["events"][-1][3] for run in ok) if ok else started
    client_cpu = sum(out["cpu_s"] for out in outputs)
    endings: dict[str, int] = {}
    for run in ok:
        endings[run["events"][-1][1]] = endings.get(run["events"][-1][1], 0) + 1
    result = {
        "executing_cap": executing,
        "endings": endings,
        "mode": mode,
        "concurrency": concurrency,
        "store": store,
        "log_level": log_level,
        "runs": len(runs),
        "errors": errors[:5],
        "error_count": len(errors),
        "wall_s": ended - started,
        "runs_per_s": len(ok) / (ended - started) if ended > started else float("nan"),
        "cpu_ms_per_run": (cpu_after - cpu_before) * 1000 / max(len(ok), 1),
        "llm_cpu_ms_per_run": (llm_after - llm_before) * 1000 / max(len(ok), 1),
        "client_cpu_ms_per_run": client_cpu * 1000 / max(len(ok), 1),
        "first_ms": {"p50": percentile(first, 50), "p99": percentile(first, 99)},
        "last_ms": {"p50": percentile(last, 50), "p99": percentile(last, 99)},
        "delivery_ms": {
            "p50": percentile(delays, 50),
            "p99": percentile(delays, 99),
            "max": max(delays) if delays else float("nan"),
            "n": len(delays),
        },
        "events": sum(len(run["events"]) for run in ok),
        "events_stored": stored,
        "runs_checked": checked,
        "runs_with_lost_events": lost_runs,
        "peak_rss_mb": rss,
        "peak_in_flight": peak_in_flight(runs),
        "server_log_lines": sum(1 for _ in server.log_path.open("rb")),
    }
    if profile:
        result["profile_raw"] = str(workdir / "profile.raw")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return result


def not_completed(r: dict[str, Any]) -> int:
    return sum(n for kind, n in r["endings"].items() if kind != "run.completed")


def row(r: dict[str, Any]) -> list[str]:
    lost = r["runs_with_lost_events"]
    return [
        "scripted (0 ms)" if r["mode"] == "scripted" else f"HTTP fake ({LATENCY_MS:g} ms)",
        f"{r['concurrency']:,}",
        f"{r['runs']:,}"
        + (f" ({r['error_count']} failed)" if r["error_count"] else "")
        + (f" ({not_completed(r)} not completed)" if not_completed(r) else ""),
        f"{r['peak_in_flight']:,}",
        fmt(r["runs_per_s"]),
        fmt(r["cpu_ms_per_run"], 2),
        f"{fmt(r['first_ms']['p50'])} / {fmt(r['first_ms']['p99'])}",
        f"{fmt(r['last_ms']['p50'])} / {fmt(r['last_ms']['p99'])}",
        f"{fmt(r['delivery_ms']['p50'])} / {fmt(r['delivery_ms']['p99'])}",
        f"{lost} of {r['events']:,}" if lost else f"0 of {r['events']:,}",
        fmt(r["peak_rss_mb"], 0),
        fmt(r["client_cpu_ms_per_run"], 2),
        fmt(r["llm_cpu_ms_per_run"], 2) if r["mode"] == "llm" else "–",
    ]


HEADERS = [
    "model",
    "concurrency",
    "runs",
    "peak in flight",
    "runs/s",
    "server CPU ms/run",
    "first event p50 / p99 ms",
    "last event p50 / p99 ms",
    "delivery p50 / p99 ms",
    "runs losing events",
    "peak RSS MB",
    "client CPU ms/run",
    "fake LLM CPU ms/run",
]


def verdicts(results: list[dict[str, Any]]) -> list[str]:
    lines = []
    base = [
        r
        for r in results
        if r["store"] == "sqlite" and r["log_level"] == "INFO" and r["executing_cap"] == 5000
    ]
    first = [r for r in base if r["concurrency"] == 1 and r["mode"] == "scripted"]
    if first:
        v = first[0]["first_ms"]["p50"]
        target = TARGETS["first_event_p50_ms_at_1"]
        lines.append(
            f"- First event ≤ {target:g} ms p50 at concurrency 1: "
            f"{'met' if v <= target else 'MISSED'} ({fmt(v)} ms, scripted model)."
        )
    big = [r for r in base if r["concurrency"] == 1000]
    for r in big:
        delay = r["delivery_ms"]["p99"]
        rss = r["peak_rss_mb"]
        ok = (
            delay <= TARGETS["delivery_p99_ms_at_1000"]
            and rss <= TARGETS["rss_mb_at_1000"]
            and r["runs_with_lost_events"] == 0
            and r["error_count"] == 0
        )
        lines.append(
            f"- 1,000 concurrent runs ({row(r)[0]}): {'met' if ok else 'MISSED'}: "
            f"p99 delivery {fmt(delay)} ms (≤ {TARGETS['delivery_p99_ms_at_1000']:g}), "
            f"{r['runs_with_lost_events']} runs losing events (0), "
            f"peak RSS {fmt(rss, 0)} MB (≤ 300), peak in flight {r['peak_in_flight']:,}."
        )
    return lines


def report(results: list[dict[str, Any]], info: dict[str, Any], note: str) -> str:
    groups: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for r in results:
        groups.setdefault((r["store"], r["log_level"], r["executing_cap"]), []).append(r)
    parts = [
        "# The service under load",
        "",
        machine_line(info),
        "",
        "Runs of 5 steps (4 calculator calls, then task_finished) through the HTTP API, each "
        "followed by its own SSE client; the server, the fake LLM server and the clients "
        "are separate processes sharing the machine's cores. Times are from the POST; "
        "delivery = client arrival − the event's `ts` (append time; ms resolution, so up to "
        "1 ms high), over events appended after the stream was asked for.",
    ]
    for (store, level, executing), rows in groups.items():
        what = (
            "SQLite file (the default store: WAL, synchronous=FULL, group commit)"
            if store == "sqlite"
            else "memory://"
        )
        cap = (
            f"; at most {executing} runs executing at once, the rest queued with their "
            "subscribers live"
            if executing < 5000
            else ""
        )
        parts += ["", f"## Store: {what}; log level {level}{cap}", ""]
        parts.append(table(HEADERS, [row(r) for r in rows]))
    parts += ["", "## Targets", "", *verdicts(results)]
    if note:
        parts += ["", note]
    return "\n".join(parts)


def profile_summary(raw: Path, top: int = 45) -> str:
    """Self and inclusive time per function from py-spy's collapsed stacks."""
    import collections

    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        count = int(count_text)
        total += count
        names = []
        for frame in stack.split(";"):
            name, _, where = frame.strip().partition(" (")
            where = where.rstrip(")").rsplit(":", 1)[0]
            for prefix in (str(ROOT) + "/", ".venv/lib/python3.11/site-packages/"):
                where = where.replace(prefix, "")
            names.append(f"{name} ({where})")
        own[names[-1]] += count
        for name in set(names):
            inclusive[name] += count
    lines = [f"{total} samples", "", "self:"]
    lines += [f"{100 * c / total:5.1f}%  {n}" for n, c in own.most_common(top)]
    lines += ["", "inclusive:"]
    lines += [f"{100 * c / total:5.1f}%  {n}" for n, c in inclusive.most_common(top)]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", choices=["scripted", "llm"])
    parser.add_argument("--levels", default=",".join(map(str, LEVELS)))
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument("--store", choices=["sqlite", "memory"], default="sqlite")
    parser.add_argument(
        "--extra", action="store_true", help="also 1,000 runs at WARNING and with memory://"
    )
    parser.add_argument(
        "--profile", type=int, metavar="LEVEL", help="py-spy the server at this concurrency"
    )
    parser.add_argument("--name", default="service", help="results file name")
    parser.add_argument(
        "--no-compare",
        action="store_true",
        help="skip the interleaved comparison with the floors and LangGraph's server",
    )
    args = parser.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    modes = [args.only] if args.only else ["scripted", "llm"]
    info = machine()
    results = []
    comparison = None
    if not args.no_compare and args.profile is None and args.only is None:
        say("service bench: against the floors and LangGraph's server, interleaved")
        comparison = compare.compare(args.quick, run_block)
    llm = FakeLLM(LATENCY_MS, STEPS) if "llm" in modes else None
    try:
        plan = [(mode, c, args.log_level, args.store, 5000) for mode in modes for c in levels]
        if args.extra:
            plan += [(mode, 1000, "WARNING", "sqlite", 5000) for mode in modes]
            plan += [(mode, 1000, "INFO", "memory", 5000) for mode in modes]
            plan += [(mode, 1000, "INFO", "sqlite", 64) for mode in modes]
        for mode, concurrency, level, store, executing in plan:
            if args.profile is not None and concurrency != args.profile:
                continue
            # the extra rows take the quick pass's runs: the full bench stays near 15 minutes
            base = (level, store, executing) == (args.log_level, args.store, 5000)
            per_worker = RUNS_PER_WORKER[args.quick or not base][concurrency][mode == "llm"]
            say(
                f"service bench: {mode}, {concurrency} concurrent, {level}, {store}, "
                f"{executing} executing at most"
            )
            result = measure(
                mode,
                concurrency,
                per_worker,
                log_level=level,
                store=store,
                llm=llm if mode == "llm" else None,
                profile=args.profile is not None,
                executing=executing,
            )
            say(
                f"  {result['runs']} runs, {fmt(result['runs_per_s'])} runs/s, "
                f"cpu {fmt(result['cpu_ms_per_run'], 2)} ms/run, first p50 "
                f"{fmt(result['first_ms']['p50'])} ms, delivery p99 "
                f"{fmt(result['delivery_ms']['p99'])} ms, lost {result['runs_with_lost_events']}"
                f", rss {fmt(result['peak_rss_mb'], 0)} MB, in flight {result['peak_in_flight']}"
            )
            if "profile_raw" in result:
                raw = Path(result.pop("profile_raw"))
                name = f"profile-service-{mode}-{concurrency}.txt"
                (RESULTS / name).write_text(profile_summary(raw) + "\n", encoding="utf-8")
                say(f"  profile: bench/results/{name}")
                shutil.rmtree(raw.parent, ignore_errors=True)
            results.append(result)
    finally:
        if llm is not None:
            llm.stop()
    if args.profile is not None:
        return
    note = (
        f"Client processes: {', '.join(f'{c}: {client_processes(c)}' for c in levels)} "
        "(concurrency: processes). Each configuration gets a fresh server; a warm-up of a "
        "few runs precedes each measurement."
    )
    markdown = report(results, info, note)
    if comparison is not None:
        markdown += "\n\n" + compare.report(comparison)
    name = f"{args.name}-quick" if args.quick else args.name
    raw = {"machine": info, "results": results, "comparison": comparison}
    write_results(name, markdown, raw)
    print(markdown)
    if not math.isfinite(sum(r["runs_per_s"] for r in results)):
        say("some configuration finished no run")


if __name__ == "__main__":
    main()
