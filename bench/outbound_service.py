"""Server CPU per request-declared HTTP tool call, all included (issue #10), through the API.

The service runs as in `bench.service` (uvicorn in its own process, SQLite store, INFO logs
to a file); the tool's endpoint is `bench.outbound`'s fake server in a third process. Runs
use the scripted model (no LLM traffic) and are of three kinds, interleaved round by round:
`http` (K calls of a declared HTTP tool, then task_finished), `calculator` (K calculator
calls, then task_finished) and `none` (task_finished only). W workers each start their next
run when the previous one ended, following it over SSE. Server CPU (utime + stime from
/proc, all threads) per round and kind gives:

- per HTTP tool call, all included = (CPU of an `http` run - CPU of a `none` run) / K: the
  step (model turn, validation, the call, the observation, its events, logs, SSE);
- the same for a calculator call, which costs no HTTP, for comparison.

    python -m bench.outbound_service [--rounds 5] [--runs 20] [--workers 10] [--calls 10]
    python -m bench.outbound_service --py-spy profile.txt   # py-spy on the server (bench extra)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

from bench.outbound import start_server
from bench.procs import Server, cpu_seconds
from bench.service_client import one_run

KINDS = ("http", "calculator", "none")


def run_body(kind: str, calls: int, endpoint: str) -> dict[str, Any]:
    tool = "lookup" if kind == "http" else "calculator"
    script: list[dict[str, Any]] = []
    if kind != "none":
        for n in range(calls):
            arguments = {"q": f"{n}+1"} if kind == "http" else {"expression": f"{n}+1"}
            script.append({"tool_calls": [{"name": tool, "arguments": arguments}]})
    script.append({"tool_calls": [{"name": "task_finished", "arguments": {"answer": "done"}}]})
    body: dict[str, Any] = {
        "task": "Look things up.",
        "model": "scripted",
        "model_script": script,
        "settings": {"max_steps": calls + 5},
    }
    if kind == "http":
        body["http_tools"] = [
            {
                "name": "lookup",
                "description": "Look a thing up.",
                "url": endpoint,
                "method": "POST",
                "parameters": {
                    "type": "object",
                    "properties": {"q": {"type": "string"}},
                    "required": ["q"],
                },
            }
        ]
    else:
        body["tools"] = ["calculator"]
    return body


async def batch(url: str, body: bytes, runs: int, workers: int) -> int:
    """`runs` runs by `workers` workers; returns how many ended in error."""
    errors = 0
    per_worker, extra = divmod(runs, workers)

    async def worker(count: int) -> None:
        nonlocal errors
        async with httpx.AsyncClient(base_url=url, timeout=120.0) as client:
            for _ in range(count):
                result = await one_run(client, body)
                if "error" in result or result["events"][-1][1] != "run.completed":
                    errors += 1
                    if errors == 1:
                        print("first failed run:", result.get("error"), result.get("events"))

    await asyncio.gather(*(worker(per_worker + (i < extra)) for i in range(workers)))
    return errors


async def measure(args: argparse.Namespace, server: Server, endpoint: str) -> dict[str, Any]:
    bodies = {k: json.dumps(run_body(k, args.calls, endpoint)).encode() for k in KINDS}
    for kind in KINDS:  # warm-up: connections open, schemas checked, caches filled
        await batch(server.url, bodies[kind], args.workers, args.workers)
    per_run: dict[str, list[float]] = {kind: [] for kind in KINDS}
    errors = 0
    for _ in range(args.rounds):
        for kind in KINDS:
            before = cpu_seconds(server.pid)
            errors += await batch(server.url, bodies[kind], args.runs, args.workers)
            per_run[kind].append((cpu_seconds(server.pid) - before) / args.runs * 1000)
    return {"per_run_ms": per_run, "errors": errors}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=20, help="runs per round and kind")
    parser.add_argument("--workers", type=int, default=10, help="runs in flight at once")
    parser.add_argument("--calls", type=int, default=10, help="tool calls per run (K)")
    parser.add_argument("--py-spy", default="", help="record the server into this file")
    args = parser.parse_args()
    fake, port = start_server()
    with tempfile.TemporaryDirectory() as workdir:
        server = Server(
            Path(workdir),
            {
                "FINISHLINE_HTTP_TOOL_ALLOW_HOSTS": "127.0.0.1",
                "FINISHLINE_STORE_URL": f"sqlite:///{workdir}/runs.db",
                "FINISHLINE_LOG_LEVEL": "INFO",
            },
        )
        server.start()
        spy = None
        if args.py_spy:
            spy = subprocess.Popen(
                [
                    *(str(Path(sys.executable).parent / "py-spy"), "record", "-p", str(server.pid)),
                    *("-o", args.py_spy, "-f", "raw", "-r", "250", "--nonblocking"),
                ]
            )
        try:
            result = asyncio.run(measure(args, server, f"http://127.0.0.1:{port}/lookup"))
        finally:
            if spy is not None:
                spy.send_signal(signal.SIGINT)
                spy.wait(timeout=60)
            server.stop()
            assert fake.stdin is not None
            fake.stdin.close()
            fake.wait(timeout=10)
    per_run = {kind: statistics.median(v) for kind, v in result["per_run_ms"].items()}
    print(
        f"server CPU, ms (median of {args.rounds} rounds x {args.runs} runs, {args.workers} "
        f"in flight, K = {args.calls}); runs in error: {result['errors']}"
    )
    print("| kind | per run | per tool call, all included |")
    print("|---|---|---|")
    for kind in KINDS:
        step = (per_run[kind] - per_run["none"]) / args.calls if kind != "none" else 0.0
        print(f"| {kind} | {per_run[kind]:.2f} | {step:.2f} |")


if __name__ == "__main__":
    main()
