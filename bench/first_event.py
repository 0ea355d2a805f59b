"""First event under load: a new run's first SSE event at 100 clients, finishline ÷ the floor
in the same minutes (issue #29 item 3).

finishline (as the service benchmark serves it: SQLite, INFO logs) and the floor server
(`bench/floor_server.py`, no store) stay up side by side, both calling one fake LLM process
that adds 50 ms to every call. 100 workers (2 client processes, `bench/service_client.py`)
each start their next 5-step run when the previous one ended, so 100 runs are in flight; a
run's first event is the time from its `POST /runs` to the arrival of its first SSE event.
The two servers take turns, block by block, in shuffled order; the figure is the p50 over
all of a side's runs, and the ratio is taken between those. Delivery (arrival − the event's
`ts`) is shown too: the fix must not buy first events with later ones. `--also PATH` adds a
finishline checkout at PATH (another commit), for a before/after in the same minutes.

    python -m bench.first_event [--quick] [--rounds N] [--clients 100] [--also PATH]
"""

from __future__ import annotations

import argparse
import random
import shutil
import tempfile
from functools import partial
from pathlib import Path
from typing import Any

from bench.common import fmt, machine, machine_line, percentile, say, table, write_results
from bench.procs import FakeLLM, Server, run_seconds
from bench.service import LATENCY_MS, STEPS, run_block

TARGET_RATIO = 2.0
RUNS_PER_WORKER = {False: 3, True: 2}


def measure(quick: bool, rounds: int, clients: int, also: Path | None) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="finishline-bench-first-"))
    llm = FakeLLM(LATENCY_MS, STEPS)
    env = {
        "FINISHLINE_MAX_CONCURRENT_RUNS": "5000",
        "FINISHLINE_MAX_QUEUED_RUNS": "5000",
        "FINISHLINE_LOG_LEVEL": "INFO",
        "FINISHLINE_LOG_FORMAT": "json",
        "FINISHLINE_LLM_BASE_URL": llm.base_url,
        "FINISHLINE_LLM_MODEL": "fake-model",
    }
    sides: dict[str, Server] = {}
    for name, tree, factory in (
        ("finishline", None, "app.main:create_app"),
        ("floor", None, "bench.floor_server:create_app"),
        *((("finishline at " + also.name, also, "app.main:create_app"),) if also else ()),
    ):
        home = workdir / f"side{len(sides)}"
        home.mkdir()
        side_env = {**env, "FINISHLINE_STORE_URL": f"sqlite:///{home / 'finishline.db'}"}
        if tree is not None:
            side_env["PYTHONPATH"] = str(tree)
        sides[name] = Server(home, side_env, factory=factory)
    found: dict[str, dict[str, list[float]]] = {
        name: {"first": [], "post": [], "stream": [], "delivery": [], "cpu_s": [], "runs": []}
        for name in sides
    }
    try:
        for server in sides.values():
            server.start()
        extra = {name: {} if name != "floor" else {"floor_events": 26} for name in sides}
        for name, server in sides.items():  # warm-up
            run_block(server.url, "llm", 10, 2, workdir, "warmup", extra[name])
        order = list(sides)
        for number in range(rounds):
            random.shuffle(order)
            for name in order:
                server = sides[name]
                outs, cpu = run_block(
                    server.url,
                    "llm",
                    clients,
                    RUNS_PER_WORKER[quick],
                    workdir,
                    "block",
                    extra[name],
                    partial(run_seconds, server.pid),
                )
                runs = [r for o in outs for r in o["runs"]]
                bad = [r["error"] for r in runs if "error" in r]
                if bad:
                    raise RuntimeError(f"{name}: {len(bad)} runs failed: {bad[:2]}")
                got = found[name]
                got["first"] += [(r["events"][0][3] - r["posted"]) * 1000 for r in runs]
                got["post"] += [(r["created"] - r["posted"]) * 1000 for r in runs]
                got["stream"] += [(r["events"][0][3] - r["created"]) * 1000 for r in runs]
                got["delivery"] += [
                    (arrived - ts) * 1000
                    for r in runs
                    for _seq, _type, ts, arrived in r["events"]
                    if ts >= r["created"]
                ]
                got["cpu_s"].append(cpu)
                got["runs"].append(len(runs))
            say(f"  first event: round {number + 1}/{rounds}")
    finally:
        for server in sides.values():
            server.stop()
        llm.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return {
        "clients": clients,
        "rounds": rounds,
        "sides": {
            name: {
                "runs": sum(got["runs"]),
                **{
                    f"{key}_ms": {"p50": percentile(got[key], 50), "p99": percentile(got[key], 99)}
                    for key in ("first", "post", "stream", "delivery")
                },
                "cpu_ms_per_run": sum(got["cpu_s"]) * 1000 / max(sum(got["runs"]), 1),
            }
            for name, got in found.items()
        },
    }


def ratio(result: dict[str, Any]) -> float:
    sides = result["sides"]
    return float(sides["finishline"]["first_ms"]["p50"] / sides["floor"]["first_ms"]["p50"])


def report(result: dict[str, Any], info: dict[str, Any]) -> str:
    sides = result["sides"]
    floor = sides["floor"]["first_ms"]["p50"]
    rows = [
        [
            name,
            f"{s['runs']:,}",
            f"{fmt(s['first_ms']['p50'])} / {fmt(s['first_ms']['p99'])}",
            f"{s['first_ms']['p50'] / floor:.2f}×",
            f"{fmt(s['post_ms']['p50'])} / {fmt(s['stream_ms']['p50'])}",
            f"{fmt(s['delivery_ms']['p50'])} / {fmt(s['delivery_ms']['p99'])}",
            fmt(s["cpu_ms_per_run"], 2),
        ]
        for name, s in sides.items()
    ]
    headers = [
        "server",
        "runs",
        "first event p50 / p99 ms",
        "p50 × floor",
        "p50: POST answered / then the stream's first event, ms",
        "delivery p50 / p99 ms",
        "server CPU ms/run",
    ]
    r = ratio(result)
    verdict = "met" if r <= TARGET_RATIO else "**missed**"
    return "\n\n".join(
        [
            "# First event under load (bench/first_event.py)",
            machine_line(info),
            f"{result['clients']} clients, 5-step runs, the fake LLM adding {LATENCY_MS:g} ms a "
            "call; finishline (SQLite, INFO logs) and the floor (no store) take turns block by "
            f"block, {result['rounds']} rounds; first event = from the POST to the first SSE "
            "event's arrival, split into the POST's answer (the run stored) and from there to the "
            "first event on its stream (the GET, the replay, the first write).",
            table(headers, rows),
            f"- first event p50 at {result['clients']} clients ≤ {TARGET_RATIO:g}× the floor's: "
            f"{verdict} ({r:.2f}×).",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, help="blocks per side (4; quick 2)")
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--also", type=Path, help="another finishline checkout, side by side")
    parser.add_argument("--name", default="first_event", help="results file name")
    args = parser.parse_args()
    rounds = args.rounds or (2 if args.quick else 4)
    also = args.also.resolve() if args.also else None
    result = measure(args.quick, rounds, args.clients, also)
    info = machine()
    markdown = report(result, info)
    name = f"{args.name}-quick" if args.quick else args.name
    write_results(name, markdown, {"machine": info, **result})
    print(markdown)


if __name__ == "__main__":
    main()
