"""How long the heaviest request within every cap stalls the event loop.

The request: `FINISHLINE_MAX_TOOLS` (64) HTTP tools whose distinct schemas fill
`FINISHLINE_MAX_TOOL_SCHEMAS_TOTAL_BYTES` (64 KB) with as many properties as fit (checking a
schema against the metaschema costs milliseconds a property), POSTed over loopback HTTP
(from a client process) to the app served by uvicorn in this process on a SQLite file, then
run to its end (a scripted finish). Meanwhile a monitor task sleeps 2 ms at a time on the
server's loop and records how late it wakes (the loop's lag), and a thread asks `/healthz`
every 10 ms and records how long each answer takes.

Three cases: one request at a time with schemas new to the server (each checked once, in the
worker thread); one at a time with nothing remembered (the compiled-schema cache off: each
schema checked at parsing, creation and start, all in the worker thread); eight requests at
once (new schemas). Before the fix the loop itself checked the schemas at creation and start
on a cache miss (190-540 ms stalls on this machine), and with eight at once, eight worker
threads took turns with the loop (250-590 ms).

    python -m bench.loop_stall [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import threading
import time
from argparse import SUPPRESS
from pathlib import Path
from typing import Any

import httpx

from app.main import create_app
from app.settings import Settings
from app.tools import base
from bench.common import ROOT, fmt, machine, machine_line, say, summary, table, write_results
from tests.fakes.serving import Served

TOOLS = 64
PROPERTIES = 12  # 64 schemas of ~950 characters: ~60 KB of the 64 KB cap


def heavy_body(round_: int) -> dict[str, Any]:
    tools = [
        {
            "name": f"lookup_{i}",
            "description": "Look up.",
            "url": "https://api.example.com/lookup",
            "parameters": {
                "type": "object",
                "title": f"round {round_}",  # new to the server every round
                "properties": {
                    f"p{i}_{j}": {"type": "string", "description": "xxxxxxxx", "maxLength": 100}
                    for j in range(PROPERTIES)
                },
                "required": [f"p{i}_0"],
            },
        }
        for i in range(TOOLS)
    ]
    finish = {"tool_calls": [{"name": "task_finished", "arguments": {"answer": "done"}}]}
    return {"task": "t", "model": "scripted", "model_script": [finish], "http_tools": tools}


class HealthProbe:
    """Asks /healthz every 10 ms from a thread of its own (so a stalled loop shows as a slow
    answer, not as a probe that was never sent) and keeps the slowest answer since reset."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.slowest = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._probe, daemon=True)

    def _probe(self) -> None:
        with httpx.Client(timeout=30) as client:
            while not self._stop.wait(0.01):
                before = time.perf_counter()
                client.get(self.url).raise_for_status()
                self.slowest = max(self.slowest, time.perf_counter() - before)

    def __enter__(self) -> HealthProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def clients(url: str, at_once: int, round_: int) -> None:
    """`at_once` clients, each creating a heavy run and waiting for its end (the client side,
    run in a process of its own so that its work does not load the server's interpreter)."""
    bodies = [heavy_body(round_ * 100 + i) for i in range(at_once)]
    start = threading.Barrier(at_once)

    def one(body: dict[str, Any]) -> None:
        with httpx.Client(base_url=url, timeout=120) as client:
            start.wait()
            response = client.post("/runs", json=body)
            assert response.status_code == 202, response.text
            ended = client.get(f"/runs/{response.json()['id']}/wait", params={"timeout_s": 60})
            assert ended.json()["status"] == "completed", ended.text

    threads = [threading.Thread(target=one, args=(body,)) for body in bodies]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


async def one_round(url: str, probe: HealthProbe, at_once: int, round_: int) -> tuple[float, float]:
    """The loop's longest lag and the slowest /healthz (ms) while `at_once` heavy requests
    are created and run."""
    loop = asyncio.get_running_loop()
    lags: list[float] = []
    done = asyncio.Event()

    async def monitor() -> None:
        while not done.is_set():
            before = loop.time()
            await asyncio.sleep(0.002)
            lags.append(loop.time() - before - 0.002)

    task = asyncio.create_task(monitor())
    command = [sys.executable, "-m", "bench.loop_stall", "--clients", url, str(at_once)]
    client = await asyncio.create_subprocess_exec(*command, str(round_), cwd=ROOT)
    await asyncio.sleep(0.02)
    probe.slowest = 0.0
    assert await client.wait() == 0, "a client failed"
    done.set()
    await task
    return max(lags) * 1000, probe.slowest * 1000


async def measure(rounds: int, remember: bool, at_once: int) -> dict[str, Any]:
    folder = tempfile.mkdtemp(prefix="finishline-stall-")
    settings = Settings(
        _env_file=None,
        store_url=f"sqlite:///{Path(folder) / 'runs.db'}",
        http_tool_allow_hosts=["api.example.com"],
        log_level="WARNING",
        log_format="json",
    )
    kept = base.COMPILED_SCHEMAS
    base.COMPILED_SCHEMAS = kept if remember else 0
    lags, health = [], []
    try:
        async with Served(create_app(settings), lifespan="on") as server:
            with HealthProbe(server.url("/healthz")) as probe:
                await one_round(server.url(), probe, 1, 99)  # warm-up
                for index in range(rounds):
                    lag, slowest = await one_round(server.url(), probe, at_once, index)
                    lags.append(lag)
                    health.append(slowest)
    finally:
        base.COMPILED_SCHEMAS = kept
        shutil.rmtree(folder, ignore_errors=True)
    return {"rounds": rounds, "loop_lag_ms": summary(lags), "healthz_ms": summary(health)}


CASES = (
    # name, schemas remembered, requests at once
    ("one at a time, new schemas", True, 1),
    ("one at a time, nothing remembered", False, 1),
    ("eight at once, new schemas", True, 8),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--clients", nargs=3, metavar=("URL", "AT_ONCE", "ROUND"), help=SUPPRESS)
    args = parser.parse_args()
    if args.clients:
        url, at_once, round_ = args.clients
        clients(url, int(at_once), int(round_))
        return
    rounds = 5 if args.quick else 20
    body = heavy_body(0)
    schema_chars = sum(len(json.dumps(t["parameters"])) for t in body["http_tools"])
    cases = {}
    for name, remember, at_once in CASES:
        say(f"{name}: {rounds} rounds of {TOOLS} tools, {schema_chars:,} chars of schemas")
        cases[name] = asyncio.run(measure(rounds, remember, at_once))
    info = machine()
    rows = [
        [
            name,
            fmt(case["loop_lag_ms"]["median"]),
            fmt(case["loop_lag_ms"]["p90"]),
            fmt(case["loop_lag_ms"]["max"]),
            fmt(case["healthz_ms"]["median"]),
            fmt(case["healthz_ms"]["p90"]),
            fmt(case["healthz_ms"]["max"]),
        ]
        for name, case in cases.items()
    ]
    headers = [
        *("case", "loop lag median (ms)", "p90", "max"),
        *("slowest /healthz median (ms)", "p90", "max"),
    ]
    markdown = (
        f"# Event-loop stall of the heaviest request\n\n{machine_line(info)}\n\n"
        f"{TOOLS} HTTP tools, {schema_chars:,} characters of distinct schemas; per round, the "
        "loop's longest lag and the slowest /healthz while the request is created and run.\n\n"
        f"{table(headers, rows)}\n"
    )
    path = write_results("loop_stall", markdown, {"machine": info, "cases": cases})
    say(markdown)
    say(f"written: {path}")


if __name__ == "__main__":
    main()
