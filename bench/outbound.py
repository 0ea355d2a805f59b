"""Client CPU per outbound HTTP call (issue #10): the LLM adapter, the request-declared HTTP
tool and bare client stacks, each against a fake HTTP server in another process.

The server (`--serve`) is a raw asyncio protocol under uvloop: HTTP/1.1 keep-alive,
TCP_NODELAY, a fixed JSON answer (a Chat Completions reply with one tool call, ~600 bytes)
to any request, so that it costs the client process nothing but the exchange. The client
runs every contestant in one uvloop event loop, interleaved round by round in shuffled
order, and charges each `time.process_time()` over `--calls` sequential calls (after one
warm-up call on a fresh client, so connections are open and kept alive).

    python -m bench.outbound                      # table to stdout
    python -m bench.outbound --rounds 9 --calls 300 --only llm-app,tool-app
    python -m bench.outbound --profile tool-app   # cProfile of one contestant, top 30

Contestants: `llm-app` = `OpenAIChatModel.complete` as `ModelFactory` builds it; `tool-app`
= one request-declared HTTP tool call as a run makes it (the tool built once from the
request, as at a run's start; per call: arguments validated, `HttpTool.call` through the
registry's guarded fetcher under the run's per-run and per-key bounds); `tool-fetch` =
`HttpFetcher.fetch` alone; `httpx`, `httpx-aiohttp`,
`aiohttp` = a bare JSON POST with each stack.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import itertools
import json
import os
import pstats
import random
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

REPLY = json.dumps(
    {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "fake",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": "Step 1: computing.",
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "lookup", "arguments": '{"q": "1+1"}'},
                        }
                    ],
                },
            }
        ],
        "usage": {"prompt_tokens": 120, "completion_tokens": 20, "total_tokens": 140},
    }
).encode()
RESPONSE = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
    + str(len(REPLY)).encode()
    + b"\r\n\r\n"
    + REPLY
)

# -- the fake server (its own process) ---------------------------------------------------------


class _Answer(asyncio.Protocol):
    def __init__(self) -> None:
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no subclass
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buffer[:end].lower()
            length = 0
            for line in head.split(b"\r\n"):
                if line.startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            if len(self.buffer) < end + 4 + length:
                return
            self.buffer = self.buffer[end + 4 + length :]
            assert self.transport is not None
            self.transport.write(RESPONSE)


async def _serve() -> None:
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(256)
    server = await loop.create_server(_Answer, sock=sock)
    print(f"port {sock.getsockname()[1]}", flush=True)
    stop = asyncio.Event()
    loop.add_reader(sys.stdin.fileno(), stop.set)  # the parent closes stdin to stop us
    async with server:
        await stop.wait()


def start_server() -> tuple[subprocess.Popen[str], int]:
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.outbound", "--serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    return process, int(line.split()[1])


# -- contestants ----------------------------------------------------------------------------------

Call = Callable[[], Awaitable[Any]]
Contestant = Callable[[str], Awaitable[tuple[Call, Callable[[], Awaitable[None]]]]]
MESSAGES = [
    {"role": "system", "content": "You are a careful agent. " * 20},
    {"role": "user", "content": "What is 1+1? Use the tool."},
]
TOOL_PARAMETERS = {
    "type": "object",
    "properties": {"q": {"type": "string", "minLength": 1}, "n": {"type": "integer"}},
    "required": ["q"],
    "additionalProperties": False,
}


async def llm_app(base: str) -> tuple[Call, Callable[[], Awaitable[None]]]:
    from app.engine.ports import ToolSpec
    from app.llm.models import ModelFactory

    factory = ModelFactory(base_url=f"{base}/v1", api_key="sk-bench", default_model="fake")
    model = factory.create("fake")
    tools = [ToolSpec(name="lookup", description="Look up.", parameters=TOOL_PARAMETERS)]

    async def call() -> Any:
        return await model.complete(MESSAGES, tools)

    return call, factory.aclose


async def _tool_setup(base: str) -> tuple[Any, Any, Any]:
    from app.assembly import RunAssembly, load_prompts
    from app.llm.models import ModelFactory
    from app.runs.spec import HttpToolIn
    from app.settings import Settings
    from app.tools.bounds import ConnectionBounds
    from app.tools.registry import builtin_registry

    settings = Settings(_env_file=None, http_tool_allow_hosts=["127.0.0.1"])
    registry = builtin_registry(
        http_allow_hosts=["127.0.0.1"],
        bounds=ConnectionBounds(per_run=4, per_key=1000),
    )
    assembly = RunAssembly(
        settings=settings,
        registry=registry,
        models=ModelFactory(base_url=None, api_key=None, default_model="demo"),
        prompts=load_prompts(None),
    )
    declared = HttpToolIn(
        name="lookup",
        description="Look a thing up.",
        url=f"{base}/lookup",
        method="POST",
        parameters=TOOL_PARAMETERS,
    )
    return assembly, declared, registry


async def tool_app(base: str) -> tuple[Call, Callable[[], Awaitable[None]]]:
    """What a run does per HTTP tool call: the tool is built once per run (assembly.inputs),
    each call validates the model's arguments, then calls the tool under the run's scope."""
    from app.engine.ports import ToolContext
    from app.tools.bounds import http_scope

    assembly, declared, registry = await _tool_setup(base)
    tool = assembly._http_tool(declared)
    ctx = ToolContext(run_id="run-bench")
    calls = itertools.count()

    async def call() -> Any:
        # 25 runs of one key take turns: with 100 calls in flight, each run is at its bound
        with http_scope(f"run-{next(calls) % 25}", "key-bench"):
            arguments = json.loads('{"q": "1+1", "n": 3}')
            problem = tool.validate(arguments)
            assert problem is None, problem
            return await tool.call(arguments, ctx)

    return call, registry.aclose


async def tool_fetch(base: str) -> tuple[Call, Callable[[], Awaitable[None]]]:
    _, _, registry = await _tool_setup(base)
    fetcher = registry.http
    url = f"{base}/lookup"

    async def call() -> Any:
        return await fetcher.fetch("POST", url, json={"q": "1+1", "n": 3})

    return call, registry.aclose


async def bare_httpx(base: str) -> tuple[Call, Callable[[], Awaitable[None]]]:
    import httpx

    client = httpx.AsyncClient(limits=httpx.Limits(max_connections=64))
    url = f"{base}/v1/chat/completions"

    async def call() -> Any:
        response = await client.post(url, json={"model": "fake", "messages": MESSAGES})
        return json.loads(response.content)

    return call, client.aclose


async def bare_httpx_aiohttp(base: str) -> tuple[Call, Callable[[], Awaitable[None]]]:
    import httpx
    from httpx_aiohttp import AiohttpTransport

    client = httpx.AsyncClient(transport=AiohttpTransport())
    url = f"{base}/v1/chat/completions"

    async def call() -> Any:
        response = await client.post(url, json={"model": "fake", "messages": MESSAGES})
        return json.loads(response.content)

    return call, client.aclose


async def bare_aiohttp(base: str) -> tuple[Call, Callable[[], Awaitable[None]]]:
    import aiohttp

    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64))
    url = f"{base}/v1/chat/completions"

    async def call() -> Any:
        async with session.post(url, json={"model": "fake", "messages": MESSAGES}) as response:
            return json.loads(await response.read())

    return call, session.close


CONTESTANTS: dict[str, Contestant] = {
    "llm-app": llm_app,
    "tool-app": tool_app,
    "tool-fetch": tool_fetch,
    "httpx": bare_httpx,
    "httpx-aiohttp": bare_httpx_aiohttp,
    "aiohttp": bare_aiohttp,
}


# -- the measurement ----------------------------------------------------------------------------


async def _calls(call: Call, calls: int, concurrency: int) -> None:
    async def worker(count: int) -> None:
        for _ in range(count):
            await call()

    if concurrency == 1:
        await worker(calls)
        return
    share, extra = divmod(calls, concurrency)
    async with asyncio.TaskGroup() as group:
        for index in range(concurrency):
            group.create_task(worker(share + (index < extra)))


async def measure(
    names: list[str], base: str, rounds: int, calls: int, concurrency: int
) -> dict[str, list[float]]:
    ready: dict[str, tuple[Call, Callable[[], Awaitable[None]]]] = {}
    for name in names:
        ready[name] = await CONTESTANTS[name](base)
        # warm-up: connections open, caches filled
        await _calls(ready[name][0], max(20, concurrency), concurrency)
    samples: dict[str, list[float]] = {name: [] for name in names}
    order = list(names)
    for _ in range(rounds):
        random.shuffle(order)
        for name in order:
            started = time.process_time()
            await _calls(ready[name][0], calls, concurrency)
            samples[name].append((time.process_time() - started) / calls * 1000)
    for _, close in ready.values():
        await close()
    return samples


async def profile(name: str, base: str, calls: int) -> None:
    call, close = await CONTESTANTS[name](base)
    for _ in range(20):
        await call()
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        await call()
    profiler.disable()
    await close()
    stats = pstats.Stats(profiler)
    stats.sort_stats("cumulative").print_stats(45)
    stats.sort_stats("tottime").print_stats(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=200, help="calls per round and contestant")
    parser.add_argument("--concurrency", type=int, default=1, help="calls in flight at once")
    parser.add_argument("--only", default="", help="comma-separated contestants")
    parser.add_argument(
        "--without-sniffio",
        action="store_true",
        help="hide the sniffio package, as in an install from requirements/main.txt before it",
    )
    parser.add_argument("--profile", default="", help="cProfile this contestant instead")
    args = parser.parse_args()
    import uvloop

    if args.serve:
        uvloop.run(_serve())
        return
    if args.without_sniffio:
        _hide_sniffio()
    os.environ.setdefault("NO_PROXY", "*")
    from app.logs import configure_logging

    configure_logging("json", "INFO")  # the service's level: the adapter's debug lines drop
    names = [n for n in args.only.split(",") if n] or [n for n in CONTESTANTS if _available(n)]
    server, port = start_server()
    base = f"http://127.0.0.1:{port}"
    try:
        if args.profile:
            uvloop.run(profile(args.profile, base, args.calls))
            return
        samples = uvloop.run(measure(names, base, args.rounds, args.calls, args.concurrency))
    finally:
        assert server.stdin is not None
        server.stdin.close()
        server.wait(timeout=10)
    print(
        f"client CPU (process_time) per call, ms; {args.rounds} rounds x {args.calls} calls, "
        f"{args.concurrency} in flight{', sniffio hidden' if args.without_sniffio else ''}"
    )
    print("| contestant | median ms | min | max |")
    print("|---|---|---|---|")
    for name in names:
        values = samples[name]
        print(
            f"| {name} | {statistics.median(values):.3f} | {min(values):.3f} | {max(values):.3f} |"
        )


def _hide_sniffio() -> None:
    """Make `import sniffio` fail the way it does where the package is not installed: a
    full search of sys.path each time (a finder that answers None, before the others)."""
    import importlib.machinery

    sys.modules.pop("sniffio", None)
    paths = [entry for entry in sys.path if entry]

    class _Missing:
        @staticmethod
        def find_spec(name: str, path: Any = None, target: Any = None) -> Any:
            if name != "sniffio":
                return None
            # what the real search costs: ask every path entry's finder, as PathFinder does
            for entry in paths:
                finder = importlib.machinery.PathFinder._path_importer_cache(entry)  # type: ignore[attr-defined]
                if finder is not None:
                    finder.find_spec(name)
            raise ModuleNotFoundError("No module named 'sniffio'", name=name)

    sys.meta_path.insert(0, _Missing)  # type: ignore[arg-type]


def _available(name: str) -> bool:
    module = {"httpx-aiohttp": "httpx_aiohttp", "aiohttp": "aiohttp"}.get(name)
    if module is None:
        return True
    try:
        __import__(module)
    except ImportError:
        return False
    return True


if __name__ == "__main__":
    main()
