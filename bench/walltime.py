"""Wall time next to the floor, quiet and with neighbours (issue #42).

finishline (SQLite, INFO logs, as the service benchmark serves it) and the floor
(`bench/floor_server.py`: the same HTTP work, no store) stay up side by side and take turns,
block by block in shuffled order, so both see the same minutes of the machine. Two cells:

- **first event**: 100 clients, the fake LLM answering at once (0 ms); a run's first event is
  the time from its `POST /runs` to the arrival of its first SSE event; p50 / p99.
- **run**: 10 clients, the fake LLM adding 50 ms a call; a 5-step run's end-to-end time (POST
  to its terminal event's arrival) p50 / p99, and runs/s (runs over the block's wall time).

Each under two conditions, alternating round by round: *quiet* (what else the machine runs)
and *neighbours*: the benchmark starts a CPU neighbour (a process spinning) and a disk
neighbour (a process writing 1 MiB and fsyncing it, over and over) for the block. Each figure
is also a ratio to the floor's in the same pass; the load average is noted per block.

`--probe` measures the breakdown instead (`bench/walltime_probe.py`: where a new run and a
running step wait) at 1, 10 and 100 clients, quiet and with neighbours. `--also PATH` adds a
finishline checkout at PATH (another commit) as a side, for a before/after in the same
minutes (with `--probe`, PATH needs `bench/walltime_probe.py` too).

    python -m bench.walltime [--quick] [--rounds N] [--also PATH] [--probe]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import httpx

from bench.common import machine, percentile, say, write_results
from bench.procs import FakeLLM, Server, child_env, run_seconds
from bench.service import STEPS, run_block
from bench.walltime_report import FINISHLINE, FLOOR, report

CELLS = {"first": (100, 0.0), "run": (10, 50.0)}
"""Cell -> (clients, ms the fake LLM adds to a call)."""
RUNS_PER_WORKER = {"first": {False: 3, True: 2}, "run": {False: 12, True: 6}}
PROBE_LEVELS = (1, 10, 100)
CONDITIONS = ("quiet", "neighbours")

CPU_NEIGHBOUR = "while True: pass"
DISK_NEIGHBOUR = """
import os, sys
block = os.urandom(1 << 20)
with open(sys.argv[1], "wb") as f:
    while True:
        f.seek(0)
        f.write(block)
        f.flush()
        os.fsync(f.fileno())
"""


@contextmanager
def neighbours(on: bool, workdir: Path) -> Iterator[None]:
    """A CPU and a disk neighbour for the block (none when `on` is False)."""
    procs: list[subprocess.Popen[bytes]] = []
    if on:
        for code, args in ((CPU_NEIGHBOUR, []), (DISK_NEIGHBOUR, [str(workdir / "disk.bin")])):
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-c", code, *args], env=child_env({}), cwd=workdir
                )
            )
    try:
        yield
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait()


def start_sides(
    workdir: Path, llm: FakeLLM, also: Path | None, probe: bool, tag: str
) -> dict[str, Server]:
    env = {
        "FINISHLINE_MAX_CONCURRENT_RUNS": "5000",
        "FINISHLINE_MAX_QUEUED_RUNS": "5000",
        "FINISHLINE_LOG_LEVEL": "INFO",
        "FINISHLINE_LOG_FORMAT": "json",
        "FINISHLINE_LLM_BASE_URL": llm.base_url,
        "FINISHLINE_LLM_MODEL": "fake-model",
    }
    app = "bench.walltime_probe:create_app" if probe else "app.main:create_app"
    wanted: list[tuple[str, Path | None, str]] = [(FINISHLINE, None, app)]
    if not probe:
        wanted.append((FLOOR, None, "bench.floor_server:create_app"))
    if also is not None:
        wanted.append((f"{FINISHLINE} at {also.name}", also, app))
    sides: dict[str, Server] = {}
    for name, tree, factory in wanted:
        home = workdir / f"{tag}-side{len(sides)}"
        home.mkdir()
        side_env = {**env, "FINISHLINE_STORE_URL": f"sqlite:///{home / 'finishline.db'}"}
        if tree is not None:
            side_env["PYTHONPATH"] = str(tree)
        server = Server(home, side_env, factory=factory)
        server.start()
        sides[name] = server
    return sides


def block(
    server: Server, name: str, clients: int, runs: int, workdir: Path, probe: bool
) -> dict[str, Any]:
    extra = {"floor_events": 26} if name == FLOOR else {}
    if probe:
        httpx.post(f"{server.url}/_probe", timeout=30)  # forget the warm-up's
    outs, cpu = run_block(
        server.url, "llm", clients, runs, workdir, "block", extra, partial(run_seconds, server.pid)
    )
    done = [r for o in outs for r in o["runs"]]
    bad = [r["error"] for r in done if "error" in r]
    if bad:
        raise RuntimeError(f"{name}: {len(bad)} runs failed: {bad[:2]}")
    wall = max(o["ended"] for o in outs) - min(o["started"] for o in outs)
    got: dict[str, Any] = {
        "first_ms": [(r["events"][0][3] - r["posted"]) * 1000 for r in done],
        "run_ms": [(r["events"][-1][3] - r["posted"]) * 1000 for r in done],
        "runs": len(done),
        "wall_s": wall,
        "cpu_s": cpu,
        "load": os.getloadavg()[0],
    }
    if probe:
        got["probe"] = httpx.post(f"{server.url}/_probe", timeout=30).json()
    return got


def measure(
    cells: list[tuple[str, int, float]], rounds: int, quick: bool, also: Path | None, probe: bool
) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="finishline-bench-walltime-"))
    found: dict[str, Any] = {}
    try:
        for cell, clients, latency in cells:
            llm = FakeLLM(latency, STEPS)
            sides: dict[str, Server] = {}
            try:
                sides = start_sides(workdir, llm, also, probe, f"{cell}{clients}")
                for name, server in sides.items():  # warm-up
                    extra = {"floor_events": 26} if name == FLOOR else {}
                    run_block(server.url, "llm", 10, 2, workdir, "warmup", extra)
                runs = RUNS_PER_WORKER["run" if clients <= 10 else "first"][quick]
                key = f"{cell}@{clients}"
                for number in range(rounds):
                    for condition in CONDITIONS:
                        order = list(sides)
                        random.shuffle(order)
                        with neighbours(condition == "neighbours", workdir):
                            for name in order:
                                got = block(sides[name], name, clients, runs, workdir, probe)
                                slot = found.setdefault(key, {}).setdefault(condition, {})
                                slot.setdefault(name, []).append(got)
                    say(f"  {key}: round {number + 1}/{rounds}, load {os.getloadavg()[0]:.1f}")
            finally:
                for server in sides.values():
                    server.stop()
                llm.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return {"rounds": rounds, "cells": summarise(found, probe)}


def summarise(found: dict[str, Any], probe: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, conditions in found.items():
        for condition, sides in conditions.items():
            for name, blocks in sides.items():
                first = [v for b in blocks for v in b["first_ms"]]
                run = [v for b in blocks for v in b["run_ms"]]
                runs = sum(b["runs"] for b in blocks)
                figures: dict[str, Any] = {
                    "runs": runs,
                    "first_ms": {"p50": percentile(first, 50), "p99": percentile(first, 99)},
                    "run_ms": {"p50": percentile(run, 50), "p99": percentile(run, 99)},
                    "runs_per_s": runs / sum(b["wall_s"] for b in blocks),
                    "cpu_ms_per_run": sum(b["cpu_s"] for b in blocks) * 1000 / max(runs, 1),
                    "load": [round(b["load"], 2) for b in blocks],
                }
                if probe:
                    figures["probe"] = probed([b["probe"] for b in blocks], runs)
                out.setdefault(key, {}).setdefault(condition, {})[name] = figures
    return out


def probed(probes: list[dict[str, Any]], runs: int) -> dict[str, Any]:
    samples: dict[str, list[float]] = {}
    for p in probes:
        for name, values in p["samples"].items():
            samples.setdefault(name, []).extend(values)
    commits = sum(p["counts"].get("commits", 0) for p in probes)
    return {
        "commits_per_run": commits / max(runs, 1),
        **{
            name: {
                "p50": percentile(values, 50),
                "p99": percentile(values, 99),
                "mean": sum(values) / len(values),
                "count": len(values),
            }
            for name, values in samples.items()
            if values
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, help="rounds per cell (3; quick 2)")
    parser.add_argument("--also", type=Path, help="another finishline checkout, side by side")
    parser.add_argument("--probe", action="store_true", help="the breakdown instead")
    parser.add_argument("--probe-latency-ms", type=float, default=50.0)
    parser.add_argument("--name", help="results file name (walltime / walltime-probe)")
    args = parser.parse_args()
    rounds = args.rounds or (2 if args.quick else 3)
    also = args.also.resolve() if args.also else None
    if args.probe:
        cells = [("probe", level, args.probe_latency_ms) for level in PROBE_LEVELS]
    else:
        cells = [(cell, clients, latency) for cell, (clients, latency) in CELLS.items()]
    result = measure(cells, rounds, args.quick, also, args.probe)
    info = machine()
    markdown = report(result, info, args.probe)
    name = args.name or ("walltime-probe" if args.probe else "walltime")
    write_results(f"{name}-quick" if args.quick else name, markdown, {"machine": info, **result})
    print(markdown)


if __name__ == "__main__":
    main()
