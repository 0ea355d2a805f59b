"""Client CPU per outbound HTTP call: the HTTP stacks finishline could use, and its own.

One process, one uvloop event loop, the same fake OpenAI-compatible server in a process of
its own (`bench/fake_llm.py`, no added latency). Every contestant POSTs the same
chat-completions body (a run's third turn: system, task, two assistant turns with their tool
results, two tool specs) and parses the JSON reply:

- **httpx**: `httpx.AsyncClient` configured as finishline's model factory configures its
  shared clients (timeouts, 64 kept-alive connections).
- **httpx + aiohttp transport**: the same, with `httpx_aiohttp.AiohttpTransport`.
- **aiohttp**: `aiohttp.ClientSession`, `await response.json()`.
- **finishline LLM client**: `ModelFactory.create(...).complete(messages, tools)` — the
  service's own outbound stack through its public classes (`app/llm/models.py`,
  `app/llm/openai.py`), reply parsing included, whatever HTTP library they use.
- **finishline HTTP tool**: a request-declared `HttpTool` (`app/tools/http.py`) through the
  builtin registry's guarded fetcher, POSTing `{"expression": ...}` to the fake's tool
  endpoint: the other kind of outbound call a run makes.

With C concurrent callers (1 and 10), each contestant in turn makes a block of calls, in
shuffled order, round after round; CPU is the process's (utime + stime, every thread) over
the block (`time.process_time`), divided by its calls. finishline's own log lines are
filtered at INFO, as the service logs (its LLM client logs each call at DEBUG).

    python -m bench.http_client [--quick] [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import httpx
import structlog
from httpx_aiohttp import AiohttpTransport

from app.engine.loop import task_finished_spec
from app.engine.ports import ToolContext, ToolSpec
from app.engine.prompts import BUILTIN
from app.llm.models import ModelFactory
from app.tools.calculator import CalculatorTool
from app.tools.http import HttpTool
from app.tools.registry import builtin_registry
from bench.common import fmt, machine, machine_line, say, summary, table, write_results
from bench.fake_llm import HTTP_TOOL, TOOL_PATH
from bench.procs import FakeLLM

TARGET_MS = 1.0
LEVELS = (1, 10)
CALCULATOR = CalculatorTool()
SPECS = [
    ToolSpec(CALCULATOR.name, CALCULATOR.description, CALCULATOR.parameters),
    task_finished_spec(BUILTIN["en"]),
]


def conversation() -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {
            "role": "system",
            "content": f"You are a helpful agent.\n\n{BUILTIN['en'].stop_tool_prompt}",
        },
        {"role": "user", "content": "Add one to each number, four times, then finish."},
    ]
    for n in range(2):
        call_id = f"call_{n}"
        arguments = json.dumps({"expression": f"{n}+1"})
        messages.append(
            {
                "role": "assistant",
                "content": f"Step {n + 1}: computing.",
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "calculator", "arguments": arguments},
                    }
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": call_id, "content": str(n + 1)})
    return messages


Call = Callable[[], Awaitable[Any]]


async def contestants(llm: FakeLLM) -> tuple[dict[str, Call], Callable[[], Awaitable[None]]]:
    """name -> one call; and what closes them all."""
    messages = conversation()
    body = {"model": "fake-model", "messages": messages, "tools": [s.to_openai() for s in SPECS]}
    url = f"{llm.base_url}/chat/completions"
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    timeout = httpx.Timeout(300.0, connect=10.0)
    plain = httpx.AsyncClient(timeout=timeout, limits=limits)
    over_aiohttp = httpx.AsyncClient(timeout=timeout, limits=limits, transport=AiohttpTransport())
    session = aiohttp.ClientSession()
    factory = ModelFactory(base_url=llm.base_url, api_key=None, default_model="fake-model")
    model = factory.create("fake-model")
    registry = builtin_registry(http_allow_hosts=["127.0.0.1"])
    assert registry.http is not None
    tool = HttpTool(
        fetcher=registry.http,
        name=HTTP_TOOL,
        description="Evaluate an expression.",
        parameters={"type": "object", "properties": {"expression": {"type": "string"}}},
        url=f"http://127.0.0.1:{llm.port}{TOOL_PATH}",
    )
    ctx = ToolContext(run_id="run_bench")

    async def with_httpx(client: httpx.AsyncClient) -> Any:
        response = await client.post(url, json=body, headers={"Accept": "application/json"})
        response.raise_for_status()
        return response.json()

    async def with_aiohttp() -> Any:
        async with session.post(url, json=body, headers={"Accept": "application/json"}) as r:
            r.raise_for_status()
            return await r.json()

    async def with_model() -> Any:
        return await model.complete(messages, SPECS)

    async def with_tool() -> Any:
        return await tool.call({"expression": "1+1"}, ctx)

    calls: dict[str, Call] = {
        "httpx": lambda: with_httpx(plain),
        "httpx + aiohttp transport": lambda: with_httpx(over_aiohttp),
        "aiohttp": with_aiohttp,
        "finishline LLM client": with_model,
        "finishline HTTP tool": with_tool,
    }

    async def close() -> None:
        await plain.aclose()
        await over_aiohttp.aclose()
        await session.close()
        await factory.aclose()
        close_model = getattr(model, "aclose", None)
        if close_model is not None:
            await close_model()
        await registry.aclose()

    return calls, close


def cpu() -> float:
    """The process's CPU seconds, every thread, ns resolution (os.times counts 10 ms ticks)."""
    return time.process_time()


async def block(call: Call, concurrency: int, per_caller: int) -> tuple[float, float]:
    """(CPU s, wall s) for concurrency × per_caller calls."""

    async def caller() -> None:
        for _ in range(per_caller):
            await call()

    started, wall = cpu(), time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(concurrency)))
    return cpu() - started, time.perf_counter() - wall


async def measure(llm: FakeLLM, rounds: int, calls_per_block: int) -> dict[str, Any]:
    calls, close = await contestants(llm)
    try:
        for call in calls.values():  # warm-up: connections, imports, caches
            await block(call, 10, 5)
        samples: dict[int, dict[str, list[float]]] = {c: {n: [] for n in calls} for c in LEVELS}
        walls: dict[int, dict[str, float]] = {c: dict.fromkeys(calls, 0.0) for c in LEVELS}
        for number in range(rounds):
            for concurrency in LEVELS:
                order = list(calls)
                random.shuffle(order)
                per_caller = max(1, calls_per_block // concurrency)
                for name in order:
                    used, wall = await block(calls[name], concurrency, per_caller)
                    samples[concurrency][name].append(used * 1000 / (per_caller * concurrency))
                    walls[concurrency][name] += wall
            say(f"  http client bench: round {number + 1}/{rounds}")
    finally:
        await close()
    return {
        str(c): {
            name: {**summary(values), "wall_s": walls[c][name]} for name, values in by_name.items()
        }
        for c, by_name in samples.items()
    }


def report(stats: dict[str, Any], info: dict[str, Any], calls_per_block: int) -> str:
    rows = []
    for concurrency, by_name in stats.items():
        base = by_name["httpx"]["median"]
        for name, s in by_name.items():
            rows.append(
                [
                    concurrency,
                    name,
                    s["n"],
                    fmt(s["median"], 3),
                    f"{fmt(s['min'], 3)}–{fmt(s['max'], 3)}",
                    f"{s['median'] / base:.2f}×",
                ]
            )
    worst = max(
        by_name[name]["median"]
        for by_name in stats.values()
        for name in ("finishline LLM client", "finishline HTTP tool")
    )
    return "\n".join(
        [
            "# Client CPU per outbound HTTP call",
            "",
            machine_line(info),
            "",
            f"CPU ms per call (the process's CPU time over blocks of {calls_per_block} calls, "
            "median of the blocks), one uvloop event loop, the fake LLM server (no added "
            "latency) in another process; contestants interleaved in shuffled order. "
            "*finishline LLM client* is `ModelFactory.create(...).complete(...)`, reply "
            "parsing included; *finishline HTTP tool* a request-declared `HttpTool` through "
            "the guarded fetcher.",
            "",
            table(
                ["callers", "client", "blocks", "CPU ms/call (median)", "min–max", "× httpx"],
                rows,
            ),
            "",
            f"Target: ≤ {TARGET_MS:g} ms of client CPU per outbound call (finishline's LLM "
            f"client and HTTP tool) — {'met' if worst <= TARGET_MS else 'MISSED'}: worst "
            f"{fmt(worst, 3)} ms.",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=None)
    args = parser.parse_args()
    rounds = args.rounds or (4 if args.quick else 12)
    calls_per_block = 100 if args.quick else 200
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.INFO))
    info = machine()
    llm = FakeLLM(0.0, 5)
    try:
        import uvloop

        stats = uvloop.run(measure(llm, rounds, calls_per_block))
    finally:
        llm.stop()
    markdown = report(stats, info, calls_per_block)
    write_results(
        "http_client-quick" if args.quick else "http_client",
        markdown,
        {"machine": info, "rounds": rounds, "calls_per_block": calls_per_block, "stats": stats},
    )
    print(markdown)


if __name__ == "__main__":
    main()
