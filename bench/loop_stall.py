"""How long the heaviest request within every cap stalls the event loop.

The request: `FINISHLINE_MAX_TOOLS` (64) HTTP tools whose distinct schemas fill
`FINISHLINE_MAX_TOOL_SCHEMAS_TOTAL_BYTES` (64 KB) with as many properties as fit (checking a
schema against the metaschema costs milliseconds a property), POSTed over loopback HTTP to the app
served by uvicorn in this process on a SQLite file, then run to its end (a scripted finish).
Meanwhile a monitor task sleeps 2 ms at a time on the server's loop and records how late it
wakes (the loop's lag), and a thread asks `/healthz` every 10 ms and records how long each
answer takes.

Two cases: schemas new to the server (each checked once, in a worker thread) and nothing
remembered at all (the compiled-schema cache off: each schema checked at parsing, creation
and start, all in worker threads). Before the fix the loop itself checked the schemas at
creation and start on a cache miss: 190-540 ms stalls on this machine.

    python -m bench.loop_stall [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from app.main import create_app
from app.settings import Settings
from app.tools import base
from bench.common import fmt, machine, machine_line, say, summary, table, write_results
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


def create_and_wait(client: httpx.Client, body: dict[str, Any]) -> None:
    response = client.post("/runs", json=body)
    assert response.status_code == 202, response.text
    run_id = response.json()["id"]
    ended = client.get(f"/runs/{run_id}/wait", params={"timeout_s": 60})
    assert ended.json()["status"] == "completed", ended.text


async def one_round(
    client: httpx.Client, probe: HealthProbe, body: dict[str, Any]
) -> tuple[float, float]:
    """The loop's longest lag and the slowest /healthz (ms) during one request and run."""
    loop = asyncio.get_running_loop()
    lags: list[float] = []
    done = asyncio.Event()

    async def monitor() -> None:
        while not done.is_set():
            before = loop.time()
            await asyncio.sleep(0.002)
            lags.append(loop.time() - before - 0.002)

    task = asyncio.create_task(monitor())
    await asyncio.sleep(0.02)
    probe.slowest = 0.0
    # the client in a thread too: only the server's work is on the loop
    await asyncio.to_thread(create_and_wait, client, body)
    done.set()
    await task
    return max(lags) * 1000, probe.slowest * 1000


async def measure(rounds: int, remember: bool) -> dict[str, Any]:
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
            with (
                httpx.Client(base_url=server.url(), timeout=60) as client,
                HealthProbe(server.url("/healthz")) as probe,
            ):
                await one_round(client, probe, heavy_body(-1))  # warm-up
                for index in range(rounds):
                    lag, slowest = await one_round(client, probe, heavy_body(index))
                    lags.append(lag)
                    health.append(slowest)
    finally:
        base.COMPILED_SCHEMAS = kept
        shutil.rmtree(folder, ignore_errors=True)
    return {"rounds": rounds, "loop_lag_ms": summary(lags), "healthz_ms": summary(health)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    args = parser.parse_args()
    rounds = 5 if args.quick else 20
    body = heavy_body(0)
    schema_chars = sum(len(json.dumps(t["parameters"])) for t in body["http_tools"])
    cases = {}
    for name, remember in (("new schemas", True), ("nothing remembered", False)):
        say(f"{name}: {rounds} rounds of {TOOLS} tools, {schema_chars:,} chars of schemas")
        cases[name] = asyncio.run(measure(rounds, remember))
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
