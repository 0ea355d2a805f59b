"""Server CPU per run against the floors and LangGraph's server, interleaved in one run.

Four servers stay up side by side, each on a socket of its own: finishline (as the service
benchmark serves it: SQLite, INFO logs, and `127.0.0.1` on the HTTP-tool allow-list), the
floor server (`bench/floor_server.py`), and LangGraph's own server (`langgraph dev`,
`bench/langgraph_server.py`), all calling one fake LLM process with no added latency
(`bench/fake_llm.py`, which also serves the HTTP tool). Contestants:

| contestant | server | what a run is |
|---|---|---|
| finishline, HTTP LLM | finishline | 5 calls to the fake LLM, 4 calculator calls, the answer |
| finishline, HTTP tool | finishline | the same, a request-declared HTTP tool for the calculator |
| floor, HTTP LLM | floor | the same HTTP calls and the same number of SSE events, no store |
| durable floor, HTTP LLM | durable floor | the floor plus a run's durable SQLite commits |
| LangGraph server, HTTP LLM | langgraph dev | its ReAct agent: 5 calls, 4 calculator calls |
| finishline, scripted | finishline | the scripted model in process, 4 calculator calls, finish |
| bare SSE loop, scripted | floor | the same loop and events on the scripted model |
| durable floor, scripted | durable floor | the same loop on the scripted model, with the commits |

The durable floor (`bench/durable_floor.py`) makes the store writes a finishline run makes
(the same events, the same commit points, finishline's own `SqliteRunStore`) and nothing
else: finishline ÷ durable floor is what the rest of finishline costs on top of durability.

At each concurrency (1 and 10 clients) the contestants take turns in shuffled order, round
after round; a turn is one block of runs by fresh client processes, and the server's CPU
(its threads' run time; LangGraph's with its child processes) is read when the clients
start and when they are done, so each block counts only its own server's work (ns
resolution, from /proc/<pid>/task/*/schedstat). Figures are
the sums over all rounds: CPU seconds / runs.
"""

from __future__ import annotations

import json
import random
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import langgraph_server
from bench.common import fmt, say, table
from bench.fake_llm import HTTP_TOOL, TOOL_PATH
from bench.procs import FakeLLM, Server, run_seconds, tree_run_seconds

LEVELS = (1, 10)
ROUNDS = {False: 4, True: 2}
# runs per client worker in one block: (finishline and floors, LangGraph)
RUNS_PER_WORKER = {
    False: {1: (30, 6), 10: (6, 2)},
    True: {1: (12, 3), 10: (3, 1)},
}


@dataclass
class Contestant:
    name: str
    server: str  # "finishline", "floor", "durable", "langgraph"
    mode: str  # service_client --mode
    extra: dict[str, Any]
    cpu_s: float = 0.0
    runs: int = 0
    events: int = 0
    blocks: int = 0


def http_tool_body(llm: FakeLLM) -> dict[str, Any]:
    """The run's tools: one request-declared HTTP tool (the fake LLM process serves it)."""
    return {
        "tools": [],
        "http_tools": [
            {
                "name": HTTP_TOOL,
                "description": "Evaluate an arithmetic expression of integers and + (e.g. 2+3).",
                "parameters": {
                    "type": "object",
                    "properties": {"expression": {"type": "string"}},
                    "required": ["expression"],
                },
                "url": f"http://127.0.0.1:{llm.port}{TOOL_PATH}",
            }
        ],
    }


def compare(
    quick: bool, run_clients: Callable[..., tuple[list[dict[str, Any]], float]]
) -> dict[str, Any]:
    """Run the comparison; `run_clients(url, mode, workers, runs, workdir, tag, extra, meter)`
    is the service benchmark's (returns the outputs and the CPU `meter` read over the block)."""
    why_not = langgraph_server.available()
    workdir = Path(tempfile.mkdtemp(prefix="finishline-bench-compare-"))
    llm = FakeLLM(0.0, 5)
    env = {
        "FINISHLINE_STORE_URL": f"sqlite:///{workdir / 'finishline.db'}",
        "FINISHLINE_MAX_CONCURRENT_RUNS": "5000",
        "FINISHLINE_MAX_QUEUED_RUNS": "5000",
        "FINISHLINE_LOG_LEVEL": "INFO",
        "FINISHLINE_LOG_FORMAT": "json",
        "FINISHLINE_LLM_BASE_URL": llm.base_url,
        "FINISHLINE_LLM_MODEL": "fake-model",
        "FINISHLINE_HTTP_TOOL_ALLOW_HOSTS": "127.0.0.1",
    }
    (workdir / "fl").mkdir()
    (workdir / "floor").mkdir()
    (workdir / "durable").mkdir()
    finishline = Server(workdir / "fl", env)
    floor = Server(workdir / "floor", env, factory="bench.floor_server:create_app")
    durable_env = {**env, "FINISHLINE_STORE_URL": f"sqlite:///{workdir / 'durable.db'}"}
    durable = Server(workdir / "durable", durable_env, factory="bench.durable_floor:create_app")
    peer = None if why_not else langgraph_server.LangGraphServer(llm.base_url)
    contestants = [
        Contestant("finishline, HTTP LLM", "finishline", "llm", {}),
        Contestant("finishline, HTTP tool", "finishline", "llm", http_tool_body(llm)),
        Contestant("floor, HTTP LLM", "floor", "llm", {}),
        Contestant("durable floor, HTTP LLM", "durable", "llm", {}),
        Contestant("finishline, scripted", "finishline", "scripted", {}),
        Contestant("bare SSE loop, scripted", "floor", "scripted", {}),
        Contestant("durable floor, scripted", "durable", "scripted", {}),
    ]
    if peer is not None:
        contestants.append(Contestant("LangGraph server, HTTP LLM", "langgraph", "llm", {}))
    results: dict[int, list[dict[str, Any]]] = {}
    try:
        finishline.start()
        floor.start()
        durable.start()
        if peer is not None:
            say("  starting langgraph dev")
            peer.start()
        urls = {"finishline": finishline.url, "floor": floor.url, "durable": durable.url}
        meters: dict[str, Callable[[], float]] = {
            "finishline": lambda: run_seconds(finishline.pid),
            "floor": lambda: run_seconds(floor.pid),
            "durable": lambda: run_seconds(durable.pid),
        }
        if peer is not None:
            urls["langgraph"] = peer.url
            meters["langgraph"] = lambda: tree_run_seconds(peer.pid)
        # warm-up, finishline first: the floors stream as many events as it did
        events_per_run: dict[str, float] = {}
        for c in contestants:
            if c.server == "floor":
                c.extra = {"floor_events": round(events_per_run[c.mode])}
            mode = "langgraph" if c.server == "langgraph" else c.mode
            outs, _ = run_clients(
                urls[c.server], mode, 2, 2, workdir, "warmup", c.extra, meters[c.server]
            )
            done = [r for o in outs for r in o["runs"] if "error" not in r]
            if len(done) != 4:
                errors = [r["error"] for o in outs for r in o["runs"] if "error" in r]
                raise RuntimeError(f"{c.name}: warm-up runs failed: {errors[:2]}")
            if c.server == "finishline" and not c.extra:
                events_per_run[c.mode] = sum(len(r["events"]) for r in done) / len(done)
        for level in LEVELS:
            for c in contestants:
                c.cpu_s, c.runs, c.events, c.blocks = 0.0, 0, 0, 0
            order = list(contestants)
            for number in range(ROUNDS[quick]):
                random.shuffle(order)
                for c in order:
                    per_worker = RUNS_PER_WORKER[quick][level][c.server == "langgraph"]
                    mode = "langgraph" if c.server == "langgraph" else c.mode
                    outs, cpu = run_clients(
                        urls[c.server],
                        mode,
                        level,
                        per_worker,
                        workdir,
                        "block",
                        c.extra,
                        meters[c.server],
                    )
                    runs = [r for o in outs for r in o["runs"]]
                    bad = [r["error"] for r in runs if "error" in r]
                    bad += [
                        f"ended with {r['events'][-1][1]}"
                        for r in runs
                        if "error" not in r
                        and c.server != "langgraph"
                        and r["events"][-1][1] != "run.completed"
                    ]
                    if bad:
                        raise RuntimeError(f"{c.name}: {len(bad)} runs failed: {bad[:2]}")
                    c.cpu_s += cpu
                    c.runs += len(runs)
                    c.events += sum(len(r["events"]) for r in runs)
                    c.blocks += 1
                say(f"  compare: {level} client(s), round {number + 1}/{ROUNDS[quick]}")
            results[level] = [
                {
                    "name": c.name,
                    "runs": c.runs,
                    "blocks": c.blocks,
                    "events_per_run": c.events / max(c.runs, 1),
                    "cpu_ms_per_run": c.cpu_s * 1000 / max(c.runs, 1),
                }
                for c in contestants
            ]
            for r in results[level]:
                say(f"    {r['name']}: {fmt(r['cpu_ms_per_run'], 2)} ms/run over {r['runs']} runs")
    finally:
        finishline.stop()
        floor.stop()
        durable.stop()
        if peer is not None:
            peer.stop()
        llm.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return {"levels": {str(k): v for k, v in results.items()}, "langgraph_skipped": why_not}


def figures(comparison: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per concurrency: the ratios and the HTTP-tool cost the targets name."""
    out = {}
    for level, rows in comparison["levels"].items():
        cpu = {r["name"]: r["cpu_ms_per_run"] for r in rows}
        fl = cpu["finishline, HTTP LLM"]
        fig = {
            "finishline_ms": fl,
            "floor_ratio": fl / cpu["floor, HTTP LLM"],
            "scripted_ratio": cpu["finishline, scripted"] / cpu["bare SSE loop, scripted"],
            "http_tool_ms_per_call": (cpu["finishline, HTTP tool"] - fl) / 4,
        }
        if "durable floor, HTTP LLM" in cpu:  # results from before issue #29 have none
            fig["durable_ratio"] = fl / cpu["durable floor, HTTP LLM"]
            fig["durable_scripted_ratio"] = (
                cpu["finishline, scripted"] / cpu["durable floor, scripted"]
            )
            fig["durability_ratio"] = cpu["durable floor, HTTP LLM"] / cpu["floor, HTTP LLM"]
        if "LangGraph server, HTTP LLM" in cpu:
            fig["langgraph_ratio"] = fl / cpu["LangGraph server, HTTP LLM"]
        out[level] = fig
    return out


def report(comparison: dict[str, Any]) -> str:
    parts = [
        "## Against the floors and LangGraph's server (interleaved, fake LLM at 0 ms)",
        "",
        "Server CPU per 5-step run (ms), summed over interleaved blocks. The floor makes the "
        "same HTTP calls with finishline's client stack and streams as many SSE events, with "
        "no store, logs or guards; the bare SSE loop does the same on the in-process scripted "
        "model. The durable floor adds a run's durable SQLite commits to the floor (the same "
        "events and commit points, finishline's own store), nothing else. LangGraph: "
        "`langgraph dev` (in memory, no reload) running its prebuilt ReAct "
        "agent with `ChatOpenAI` against the same fake LLM, followed with `POST /runs/stream`.",
        "",
    ]
    rows = []
    durable = any(
        r["name"].startswith("durable floor") for rs in comparison["levels"].values() for r in rs
    )
    for level, results in comparison["levels"].items():
        base = {r["name"]: r["cpu_ms_per_run"] for r in results}
        for r in results:
            http = "HTTP" in r["name"]
            against = base["floor, HTTP LLM"] if http else base["bare SSE loop, scripted"]
            row = [
                level,
                r["name"],
                f"{r['runs']:,}",
                fmt(r["events_per_run"], 1),
                fmt(r["cpu_ms_per_run"], 2),
                f"{r['cpu_ms_per_run'] / against:.2f}×",
            ]
            if durable:
                floor = base["durable floor, HTTP LLM" if http else "durable floor, scripted"]
                mine = r["name"].startswith(("finishline", "durable"))
                row.append(f"{r['cpu_ms_per_run'] / floor:.2f}×" if mine else "–")
            rows.append(row)
    headers = ["clients", "contestant", "runs", "SSE events/run", "server CPU ms/run", "× floor"]
    if durable:
        headers.append("× durable floor")
    parts.append(table(headers, rows))
    if comparison.get("langgraph_skipped"):
        parts += ["", f"LangGraph's server skipped: {comparison['langgraph_skipped']}."]
    parts += ["", "Figures:", ""]
    for level, fig in figures(comparison).items():
        line = (
            f"- {level} client(s): finishline ÷ floor {fig['floor_ratio']:.2f}×; scripted ÷ "
            f"bare SSE loop {fig['scripted_ratio']:.2f}×; HTTP tool "
            f"{fmt(fig['http_tool_ms_per_call'], 2)} ms CPU per call over the calculator"
        )
        if "durable_ratio" in fig:
            line += (
                f"; finishline ÷ durable floor {fig['durable_ratio']:.2f}× (scripted "
                f"{fig['durable_scripted_ratio']:.2f}×), durable floor ÷ floor "
                f"{fig['durability_ratio']:.2f}×"
            )
        if "langgraph_ratio" in fig:
            line += f"; finishline ÷ LangGraph's server {fig['langgraph_ratio']:.2f}×"
        parts.append(line + ".")
    return "\n".join(parts)


def dump(comparison: dict[str, Any]) -> str:
    return json.dumps(comparison, indent=1)
