"""`uvicorn --workers N` on the Redis store against one SQLite process (issue 11).

    python -m bench.workers [--quick] [--workers 1,2,3] [--concurrency 40] [--runs 15]

The same load as the service benchmark's scripted rows (`bench/service_client.py`: runs of
5 steps, 4 calculator calls then task_finished, through POST /runs and one SSE stream per
run, `--concurrency` runs in flight) against, in turn:
- the floor: one uvicorn process on a SQLite file (the default store);
- `uvicorn --workers N` on one redis-server, for each N of `--workers`: N processes, each a
  full replica (API and executor) sharing the cluster queue.
Measured for each: runs/s, and CPU per run of the server (the uvicorn supervisor and all its
workers, from /proc), of redis-server, and of the clients; the server's cores busy (its CPU
seconds over the wall time); the ratios are against the floor measured in the same
invocation. Every run must end `completed` with its events 1..N.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from app.api.protocols import UVICORN_ARGS
from bench.common import ROOT, fmt, machine, machine_line, say, table, write_results
from bench.procs import child_env, cpu_seconds
from tests.fakes.redis_server import RedisServer
from tests.fakes.serving import loopback_socket

TERMINAL = {"run.completed", "run.incomplete", "run.failed", "run.cancelled"}
STEPS = 5
SECRET = "bench: a secret every worker shares"


def children(pid: int) -> list[int]:
    """Every descendant of a process (uvicorn's workers are its children)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        listed = (task / "children").read_text().split()
        for child in map(int, listed):
            found += [child, *children(child)]
    return found


def tree_cpu_seconds(pid: int) -> float:
    total = 0.0
    for member in (pid, *children(pid)):
        with contextlib.suppress(OSError):  # ended meanwhile
            total += cpu_seconds(member)
    return total


class WorkersServer:
    """`python -m uvicorn --factory app.main:create_app --workers N` on a free loopback port
    (uvicorn's `--fd` cannot be shared by workers), stderr to a file."""

    def __init__(self, workdir: Path, env: dict[str, str], workers: int) -> None:
        self.workdir = workdir
        self.env = env
        self.workers = workers
        self.log_path = workdir / "server.log"
        sock = loopback_socket()
        self.port = sock.getsockname()[1]
        sock.close()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self, timeout_s: float = 60.0) -> None:
        command = [sys.executable, "-m", "uvicorn", "--factory", "app.main:create_app"]
        command += UVICORN_ARGS
        command += ["--host", "127.0.0.1", "--port", str(self.port), "--backlog", "4096"]
        if self.workers > 1:
            command += ["--workers", str(self.workers)]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                command,
                cwd=self.workdir,
                env=child_env(self.env),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        deadline = time.monotonic() + timeout_s
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited: see {self.log_path}")
            try:
                # every worker has started once the supervisor has N children answering
                ready = httpx.get(f"{self.url}/readyz", timeout=1.0).status_code == 200
                if ready and len(children(self.pid)) >= self.workers - (self.workers == 1):
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the server did not start: see {self.log_path}")
            time.sleep(0.05)  # noqa: TID251 (a benchmark polls; tests never do)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def run_clients(url: str, concurrency: int, runs: int, workdir: Path, tag: str) -> list[Any]:
    """Two client processes (one for a concurrency of 1), started together; their outputs."""
    count = 1 if concurrency == 1 else 2
    start_at = time.time() + 2.0
    procs, outs = [], []
    for n in range(count):
        share = concurrency // count + (1 if n < concurrency % count else 0)
        out = workdir / f"client-{tag}-{n}.json"
        outs.append(out)
        command = [sys.executable, "-m", "bench.service_client", url, "--mode", "scripted"]
        command += ["--workers", str(share), "--runs", str(runs), "--steps", str(STEPS)]
        command += ["--start-at", str(start_at), "--out", str(out)]
        procs.append(subprocess.Popen(command, cwd=ROOT, env=child_env({})))
    for proc in procs:
        if proc.wait() != 0:
            raise RuntimeError(f"a client process failed ({proc.returncode})")
    return [json.loads(out.read_text()) for out in outs]


def complete(run: dict[str, Any]) -> bool:
    if "error" in run or not run["events"]:
        return False
    seqs = [event[0] for event in run["events"]]
    return seqs == list(range(1, len(seqs) + 1)) and run["events"][-1][1] == "run.completed"


def measure(
    label: str,
    store_url: str,
    workers: int,
    concurrency: int,
    runs: int,
    redis: RedisServer | None,
) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="finishline-bench-workers-"))
    env = {
        "FINISHLINE_STORE_URL": store_url.format(workdir=workdir),
        "FINISHLINE_MAX_CONCURRENT_RUNS": "1000",
        "FINISHLINE_MAX_QUEUED_RUNS": "5000",
        "FINISHLINE_LOG_FORMAT": "json",
        "FINISHLINE_TOKEN_SECRET": SECRET,
    }
    server = WorkersServer(workdir, env, workers)
    server.start()
    try:
        run_clients(server.url, min(concurrency, 10), 2, workdir, "warmup")
        redis_pid = redis.process.pid if redis is not None and redis.process else None
        cpu_before = tree_cpu_seconds(server.pid)
        redis_before = cpu_seconds(redis_pid) if redis_pid else 0.0
        outputs = run_clients(server.url, concurrency, runs, workdir, "measure")
        cpu_after = tree_cpu_seconds(server.pid)
        redis_after = cpu_seconds(redis_pid) if redis_pid else 0.0
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    measured = [run for out in outputs for run in out["runs"]]
    ok = [run for run in measured if complete(run)]
    started = min(out["started"] for out in outputs)
    ended = max(run["events"][-1][3] for run in ok) if ok else started
    done = max(len(ok), 1)
    server_ms = (cpu_after - cpu_before) * 1000 / done
    redis_ms = (redis_after - redis_before) * 1000 / done
    return {
        "label": label,
        "workers": workers,
        "store": "redis" if redis is not None else "sqlite",
        "concurrency": concurrency,
        "runs": len(measured),
        "bad_runs": len(measured) - len(ok),
        "errors": [run["error"] for run in measured if "error" in run][:5],
        "wall_s": ended - started,
        "runs_per_s": len(ok) / (ended - started) if ended > started else float("nan"),
        "server_cpu_ms_per_run": server_ms,
        "redis_cpu_ms_per_run": redis_ms,
        "total_cpu_ms_per_run": server_ms + redis_ms,
        "client_cpu_ms_per_run": sum(out["cpu_s"] for out in outputs) * 1000 / done,
        "server_cores_busy": (cpu_after - cpu_before) / (ended - started) if ok else 0.0,
    }


def summarise(rounds: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per configuration, the median over rounds of each figure, and of each ratio against
    the floor measured in the same round (the first configuration of each round's list)."""
    out = []
    for index, first in enumerate(rounds[0]):
        mine = [measured[index] for measured in rounds]
        floors = [measured[0] for measured in rounds]
        row: dict[str, Any] = {"label": first["label"], "rounds": len(mine)}
        for key in (
            "runs_per_s",
            "server_cpu_ms_per_run",
            "redis_cpu_ms_per_run",
            "total_cpu_ms_per_run",
            "client_cpu_ms_per_run",
            "server_cores_busy",
        ):
            row[key] = statistics.median(m[key] for m in mine)
        row["runs_per_s_range"] = (
            min(m["runs_per_s"] for m in mine),
            max(m["runs_per_s"] for m in mine),
        )
        row["x_runs_per_s"] = statistics.median(
            m["runs_per_s"] / f["runs_per_s"] for m, f in zip(mine, floors, strict=True)
        )
        row["x_cpu"] = statistics.median(
            m["total_cpu_ms_per_run"] / f["total_cpu_ms_per_run"]
            for m, f in zip(mine, floors, strict=True)
        )
        row["runs"] = sum(m["runs"] for m in mine)
        row["completed"] = sum(m["runs"] - m["bad_runs"] for m in mine)
        out.append(row)
    return out


def report(rows: list[dict[str, Any]], info: dict[str, Any], note: str) -> str:
    lines = [
        [
            r["label"],
            f"{r['completed']} of {r['runs']}",
            "{} ({}–{})".format(fmt(r["runs_per_s"]), *map(fmt, r["runs_per_s_range"])),
            f"{r['x_runs_per_s']:.2f}×",
            fmt(r["server_cpu_ms_per_run"], 2),
            fmt(r["redis_cpu_ms_per_run"], 2),
            fmt(r["total_cpu_ms_per_run"], 2),
            f"{r['x_cpu']:.2f}×",
            fmt(r["server_cores_busy"], 2),
            fmt(r["client_cpu_ms_per_run"], 2),
        ]
        for r in rows
    ]
    headers = [
        "server",
        "runs completed",
        "runs/s median (min–max)",
        "× floor runs/s",
        "server CPU ms/run",
        "redis CPU ms/run",
        "server + redis CPU ms/run",
        "× floor CPU",
        "server cores busy",
        "client CPU ms/run",
    ]
    return "\n\n".join(
        [
            "# `uvicorn --workers N` on Redis against one SQLite process",
            machine_line(info),
            note,
            table(headers, lines),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="one round, fewer runs (noisier)")
    parser.add_argument("--workers", default="1,2,3", help="worker counts on Redis")
    parser.add_argument("--concurrency", type=int, default=40, help="runs in flight")
    parser.add_argument("--runs", type=int, default=10, help="runs per client worker")
    parser.add_argument("--rounds", type=int, default=3, help="rounds over every server")
    args = parser.parse_args()
    runs = max(2, args.runs // 3) if args.quick else args.runs
    rounds = 1 if args.quick else args.rounds
    counts = [int(n) for n in args.workers.split(",")]
    info = machine()
    measured: list[list[dict[str, Any]]] = []
    with RedisServer(Path(tempfile.mkdtemp(prefix="finishline-bench-redis-"))) as redis:
        configs: list[tuple[str, str, int, RedisServer | None]] = [
            ("SQLite file, 1 process (floor)", "sqlite:///{workdir}/finishline.db", 1, None)
        ]
        for count in counts:
            label = f"Redis, uvicorn --workers {count}"
            configs.append((label, redis.url(), count, redis))
        for round_no in range(rounds):
            results: dict[int, dict[str, Any]] = {}
            order = list(range(len(configs)))
            shift = round_no % len(order)
            for index in order[shift:] + order[:shift]:  # each server first in turn
                label, url, workers, server_redis = configs[index]
                if server_redis is not None:
                    with server_redis.client() as client:
                        client.flushdb()
                say(f"round {round_no + 1}/{rounds}: {label}")
                results[index] = measure(label, url, workers, args.concurrency, runs, server_redis)
            measured.append([results[i] for i in range(len(configs))])
    rows = summarise(measured)
    note = (
        f"Runs of {STEPS} steps with the scripted model (no LLM latency: CPU-bound), "
        f"{args.concurrency} in flight from 2 client processes, {runs} runs per client "
        f"worker after a warm-up, log level INFO; {rounds} round(s) over every server, each "
        "server first in turn; medians over the rounds, each ratio against the floor of its "
        f"own round. The machine has {info['cores']} cores, shared by the server, "
        "redis-server and the clients (and by anything else running: see min–max for how "
        "much runs/s moved between rounds); no number of workers can use more cores than "
        "the machine has."
    )
    markdown = report(rows, info, note)
    name = "workers-quick" if args.quick else "workers"
    path = write_results(name, markdown, {"machine": info, "rows": rows, "rounds": measured})
    say(markdown)
    say(f"\nwritten: {path}")


if __name__ == "__main__":
    main()
