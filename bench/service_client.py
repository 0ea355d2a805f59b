"""One client process of the service benchmark: `--workers` concurrent workers, each
starting `--runs` runs one after the other through the HTTP API and following each with its
own SSE stream (httpx), recording when every event arrives.

    python -m bench.service_client URL --mode scripted|llm|langgraph --workers N --runs M \
        --start-at UNIX_TIME --out results.json [--extra-body JSON]

A run is POST /runs (202), then GET /runs/{id}/events as SSE until the terminal event (the
floor server of `bench/floor_server.py` answers the same API). What it writes, per run: when
the POST was sent, when the stream was asked for, and for each event its seq, type, `ts`
(the server's append time, ms resolution) and when it arrived. `--extra-body` adds fields to
the POST's JSON body (the floor's event count, a run's `http_tools`).

Mode `langgraph` follows LangGraph's server instead: one `POST /runs/stream` (a stateless run
of the graph `agent`, stream mode `updates`) read to its end; its events carry no `ts`, so
their arrival stands in for it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import ssl
import time
from datetime import datetime
from typing import Any

import httpx

TERMINAL = {"run.completed", "run.incomplete", "run.failed", "run.cancelled"}
TASK = "Add one to each number, four times, then finish."


def scripted_body(steps: int) -> dict[str, Any]:
    script: list[dict[str, Any]] = [
        {
            "content": f"Step {n + 1}: computing.",
            "tool_calls": [{"name": "calculator", "arguments": {"expression": f"{n}+1"}}],
        }
        for n in range(steps - 1)
    ]
    script.append({"tool_calls": [{"name": "task_finished", "arguments": {"answer": "done"}}]})
    return {"task": TASK, "model": "scripted", "tools": ["calculator"], "model_script": script}


def llm_body() -> dict[str, Any]:
    return {"task": TASK, "tools": ["calculator"]}


def langgraph_body() -> dict[str, Any]:
    return {
        "assistant_id": "agent",
        "input": {"messages": [{"role": "user", "content": TASK}]},
        "stream_mode": ["updates"],
        "config": {"recursion_limit": 50},
    }


async def one_langgraph_run(client: httpx.AsyncClient, body: bytes) -> dict[str, Any]:
    posted = time.time()
    events: list[tuple[int, str, float, float]] = []
    async with client.stream(
        "POST", "/runs/stream", content=body, headers={"Content-Type": "application/json"}
    ) as stream:
        if stream.status_code != 200:
            await stream.aread()
            return {"error": f"POST /runs/stream: {stream.status_code} {stream.text[:200]}"}
        kind = ""
        async for line in stream.aiter_lines():
            if line.startswith("event:"):
                kind = line[6:].strip()
            elif not line and kind:
                arrived = time.time()
                events.append((len(events) + 1, kind, arrived, arrived))
                if kind == "error":
                    return {"error": "LangGraph run failed"}
                kind = ""
    return {"id": "", "posted": posted, "created": posted, "events": events}


def _ts(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


async def one_run(client: httpx.AsyncClient, body: bytes) -> dict[str, Any]:
    posted = time.time()
    response = await client.post(
        "/runs", content=body, headers={"Content-Type": "application/json"}
    )
    if response.status_code != 202:
        return {"error": f"POST /runs: {response.status_code} {response.text[:200]}"}
    run_id = response.json()["id"]
    created = time.time()
    events: list[tuple[int, str, float, float]] = []
    async with client.stream(
        "GET", f"/runs/{run_id}/events", headers={"Accept": "text/event-stream"}
    ) as stream:
        data: list[str] = []
        async for line in stream.aiter_lines():
            if line.startswith("data:"):
                data.append(line[5:].lstrip())
            elif not line and data:
                arrived = time.time()
                event = json.loads("\n".join(data))
                data = []
                events.append((event["seq"], event["type"], _ts(event["ts"]), arrived))
                if event["type"] in TERMINAL:
                    break
    return {"id": run_id, "posted": posted, "created": created, "events": events}


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    bodies = {
        "scripted": scripted_body(args.steps),
        "llm": llm_body(),
        "langgraph": langgraph_body(),
    }
    body = json.dumps({**bodies[args.mode], **json.loads(args.extra_body)})
    follow = one_langgraph_run if args.mode == "langgraph" else one_run
    # One client (one keep-alive connection) per worker: httpcore's pool checks every
    # connection it holds on each request, so one pool of a thousand connections would
    # make the clients, not the server, the bottleneck. One SSL context serves them all.
    limits = httpx.Limits(max_connections=2, max_keepalive_connections=2)
    timeout = httpx.Timeout(300.0, connect=60.0, pool=None)
    ssl_context = ssl.create_default_context()
    results: list[dict[str, Any]] = []

    async def worker() -> None:
        async with httpx.AsyncClient(
            base_url=args.url, limits=limits, timeout=timeout, verify=ssl_context
        ) as client:
            for _ in range(args.runs):
                try:
                    results.append(await follow(client, body.encode()))
                except httpx.HTTPError as exc:
                    results.append({"error": f"{type(exc).__name__}: {exc}"})

    delay = args.start_at - time.time()
    if delay > 0:
        await asyncio.sleep(delay)
    started = time.time()
    cpu = os.times()
    await asyncio.gather(*(worker() for _ in range(args.workers)))
    cpu_after = os.times()
    return {
        "started": started,
        "ended": time.time(),
        "cpu_s": (cpu_after.user + cpu_after.system) - (cpu.user + cpu.system),
        "runs": results,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--mode", choices=["scripted", "llm", "langgraph"], required=True)
    parser.add_argument("--extra-body", default="{}", help="JSON fields added to the body")
    parser.add_argument("--workers", type=int, required=True)
    parser.add_argument("--runs", type=int, required=True)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--start-at", type=float, default=0.0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    try:
        import uvloop

        output = uvloop.run(main_async(args))
    except ImportError:
        output = asyncio.run(main_async(args))
    with open(args.out, "w", encoding="utf-8") as handle:
        json.dump(output, handle)


if __name__ == "__main__":
    main()
