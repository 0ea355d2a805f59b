"""Start-up and idle memory: what a deployment pays per replica (issue #29).

Each contestant's server process is started `--starts` times, the contestants taking turns in
shuffled order round after round (the same minutes, the same load), each start on a socket
bound here before the process begins (`uvicorn --fd`), so one `GET /healthz` sent the moment
the process is spawned waits in the listen backlog and its 200 says when the server first
answered. Measured per start:

- **to /healthz**: wall time from spawning the process to the 200 (imports, app build,
  lifespan: the store opened, start-up recovery);
- **CPU to ready**: the process's utime + stime at that moment (load-independent-ish: what
  the start costs, not how long it waited for a core);
- **idle RSS**: VmRSS after a warm-up of 20 `GET /healthz` and 2 scripted 5-step runs through
  `POST /runs` and their SSE streams, then a moment idle.

Contestants: *finishline* with the demo defaults (what `make run` serves with no settings:
SQLite under ./data in a fresh directory, the demo model, INFO logs; uvicorn as the service's
command line), and the *floor* (`bench/floor_server.py`: a bare FastAPI app with the same
API, served alike). `--also PATH` adds a finishline checkout at PATH (another commit, for a
before/after in the same minutes), run with the same interpreter and packages. The CLI extra
(rich, pygments, markdown-it, mdurl) is hidden from every contestant, as in the image and any
`pip install finishline` without `[cli]` (structlog imports rich whenever it can).

    python -m bench.startup [--quick] [--starts N] [--also PATH]
"""

from __future__ import annotations

import argparse
import random
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
from bench.service_client import scripted_body
from tests.fakes.serving import loopback_socket

TARGETS = {"healthz_s": 1.0, "idle_rss_mb": 80.0}
CLI_EXTRA = ("rich", "pygments", "markdown_it", "mdurl")
LAUNCH = (
    "import sys\n"
    f"for name in {CLI_EXTRA!r}:\n"
    "    sys.modules[name] = None\n"
    "from uvicorn.main import main\n"
    "sys.argv[0] = 'uvicorn'\n"
    "main()\n"
)
"""`python -m uvicorn ...` with the CLI extra hidden (an install without `[cli]`)."""
WARM_REQUESTS = 20
WARM_RUNS = 2


def _vm_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _run_one(client: httpx.Client, body: dict[str, Any]) -> None:
    run_id = client.post("/runs", json=body).raise_for_status().json()["id"]
    with client.stream("GET", f"/runs/{run_id}/events") as stream:
        for line in stream.iter_lines():
            if line in ("event: run.completed", "event: run.failed"):
                return


def start_once(name: str, tree: Path, factory: str, floor_events: int) -> dict[str, float]:
    """Spawn the server, time its first 200 from /healthz, warm it, read its RSS, stop it."""
    workdir = Path(tempfile.mkdtemp(prefix=f"finishline-bench-startup-{name[:3]}-"))
    sock = loopback_socket(4096)
    port = sock.getsockname()[1]
    args = ["--factory", factory, "--fd", str(sock.fileno())]
    if factory == "app.main:create_app":
        args += list(UVICORN_ARGS)
    env = child_env({"PYTHONPATH": str(tree)})
    url = f"http://127.0.0.1:{port}"
    with httpx.Client(base_url=url, timeout=60) as client:
        with (workdir / "server.log").open("ab") as log:
            started = time.monotonic()
            process = subprocess.Popen(
                [sys.executable, "-c", LAUNCH, *args],
                cwd=workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                pass_fds=(sock.fileno(),),
            )
        sock.close()
        try:
            while True:  # the request waits in the backlog until the server accepts it
                try:
                    answered = client.get("/healthz").status_code == 200
                except httpx.HTTPError:
                    answered = False
                if answered:
                    break
                if process.poll() is not None or time.monotonic() - started > 60:
                    raise RuntimeError(f"{name} did not start: see {workdir / 'server.log'}")
            ready_s = time.monotonic() - started
            cpu_s = cpu_seconds(process.pid)
            for _ in range(WARM_REQUESTS):
                client.get("/healthz").raise_for_status()
            body = scripted_body(5)
            if factory != "app.main:create_app":
                body["floor_events"] = floor_events
            for _ in range(WARM_RUNS):
                _run_one(client, body)
            time.sleep(0.5)  # noqa: TID251 (idle: what the runs left behind settles)
            rss = _vm_rss_mb(process.pid)
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    return {"healthz_s": ready_s, "cpu_s": cpu_s, "idle_rss_mb": rss}


def measure(starts: int, also: Path | None) -> dict[str, Any]:
    contestants = {
        "finishline": (ROOT, "app.main:create_app"),
        "floor": (ROOT, "bench.floor_server:create_app"),
    }
    if also is not None:
        contestants[f"finishline at {also.name}"] = (also, "app.main:create_app")
    samples: dict[str, list[dict[str, float]]] = {name: [] for name in contestants}
    order = list(contestants)
    for number in range(starts):
        random.shuffle(order)
        for name in order:
            tree, factory = contestants[name]
            samples[name].append(start_once(name, tree, factory, floor_events=26))
        say(f"  start-up: round {number + 1}/{starts}")
    medians = {
        name: {key: statistics.median(s[key] for s in got) for key in got[0]}
        for name, got in samples.items()
    }
    return {"starts": starts, "samples": samples, "medians": medians}


def figures(result: dict[str, Any]) -> dict[str, float]:
    m = result["medians"]
    fl, floor = m["finishline"], m["floor"]
    return {
        "healthz_s": fl["healthz_s"],
        "idle_rss_mb": fl["idle_rss_mb"],
        "healthz_ratio": fl["healthz_s"] / floor["healthz_s"],
        "cpu_ratio": fl["cpu_s"] / floor["cpu_s"],
        "rss_ratio": fl["idle_rss_mb"] / floor["idle_rss_mb"],
    }


def report(result: dict[str, Any], info: dict[str, Any]) -> str:
    m = result["medians"]
    floor = m["floor"]
    rows = []
    for name, got in m.items():
        spread = [s["healthz_s"] for s in result["samples"][name]]
        rows.append(
            [
                name,
                str(len(spread)),
                fmt(got["healthz_s"], 2),
                f"{min(spread):.2f}–{max(spread):.2f}",
                f"{got['healthz_s'] / floor['healthz_s']:.2f}×",
                fmt(got["cpu_s"], 2),
                f"{got['cpu_s'] / floor['cpu_s']:.2f}×",
                fmt(got["idle_rss_mb"], 1),
                f"{got['idle_rss_mb'] / floor['idle_rss_mb']:.2f}×",
            ]
        )
    headers = [
        "server",
        "starts",
        "to /healthz s (median)",
        "min–max",
        "× floor",
        "CPU to ready s",
        "× floor",
        "idle RSS MB",
        "× floor",
    ]
    fig = figures(result)
    met = {key: "met" if fig[key] <= target else "**missed**" for key, target in TARGETS.items()}
    return "\n\n".join(
        [
            "# Start-up and idle memory (bench/startup.py)",
            machine_line(info),
            f"Each server started {result['starts']} times, the contestants alternating in "
            "shuffled order; time from spawning the process to the first 200 from `/healthz` "
            "(asked at once on a socket bound before the spawn), the process's CPU by then, "
            f"and VmRSS after {WARM_REQUESTS} `/healthz` and {WARM_RUNS} scripted 5-step runs. "
            "finishline with the demo defaults (SQLite in a fresh directory, the demo model, "
            "INFO logs); the floor is `bench/floor_server.py`. The CLI extra is hidden, as in "
            "a server install. Medians.",
            table(headers, rows),
            f"- /healthz after process start ≤ {TARGETS['healthz_s']:g} s: {met['healthz_s']} "
            f"({fmt(fig['healthz_s'], 2)} s, {fig['healthz_ratio']:.2f}× the floor's).\n"
            f"- idle RSS ≤ {TARGETS['idle_rss_mb']:g} MB: {met['idle_rss_mb']} "
            f"({fmt(fig['idle_rss_mb'], 1)} MB, {fig['rss_ratio']:.2f}× the floor's).",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--starts", type=int, help="starts per contestant (10; quick 5)")
    parser.add_argument("--also", type=Path, help="another finishline checkout to start too")
    parser.add_argument("--name", default="startup", help="results file name")
    args = parser.parse_args()
    starts = args.starts or (5 if args.quick else 10)
    result = measure(starts, args.also.resolve() if args.also else None)
    info = machine()
    markdown = report(result, info)
    name = f"{args.name}-quick" if args.quick else args.name
    write_results(name, markdown, {"machine": info, **result})
    print(markdown)


if __name__ == "__main__":
    main()
