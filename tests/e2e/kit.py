"""What the end-to-end tests share: settings for a served app behind the fake LLM, starting
and following runs over real HTTP, and `LocalEndpoints`, a loopback server standing in for a
run's HTTP tools and its webhook receiver.

Every wait is on something that happens (an SSE event, a request arriving, a run's state),
under `anyio.fail_after` as a failure bound; none is a sleep standing in for one.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Self

import anyio
import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from app.settings import Settings
from tests.fakes.llm_server import FakeLLMServer
from tests.fakes.service import SSE, service_settings, sse_events
from tests.fakes.serving import Served

TERMINAL = frozenset({"run.completed", "run.incomplete", "run.failed", "run.cancelled"})


def e2e_settings(llm: FakeLLMServer | None = None, **overrides: Any) -> Settings:
    """`service_settings` pointed at the fake LLM, with a short shutdown grace so that a test
    that fails with a run still going does not hold the server's exit for 30 s."""
    values: dict[str, Any] = {"shutdown_grace_s": 1}
    if llm is not None:
        values["llm_base_url"] = llm.base_url
    values.update(overrides)
    return service_settings(**values)


def sqlite_url(directory: Path) -> str:
    """A SQLite store in `directory` (absolute, hence the four slashes: sqlite:////tmp/...)."""
    return f"sqlite:///{directory / 'runs.db'}"


async def start_run(
    client: httpx.AsyncClient, body: dict[str, Any], *, headers: dict[str, str] | None = None
) -> str:
    """POST /runs; the new run's id (the answer must be 202)."""
    response = await client.post("/runs", json=body, headers=headers)
    assert response.status_code == 202, response.text
    run_id: str = response.json()["id"]
    return run_id


async def follow(
    client: httpx.AsyncClient,
    run_id: str,
    *,
    headers: dict[str, str] | None = None,
    query: str = "",
    timeout_s: float = 10,
) -> list[SSE]:
    """The run's whole SSE stream (`query`: e.g. "?token=..."), read until the server
    closes it."""
    url = f"/runs/{run_id}/events{query}"
    with anyio.fail_after(timeout_s):
        return [e async for e in sse_events(client, url, headers=headers)]


async def stored_events(
    client: httpx.AsyncClient, run_id: str, *, headers: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """The run's event log as the JSON page gives it."""
    response = await client.get(
        f"/runs/{run_id}/events",
        headers={"Accept": "application/json", **(headers or {})},
        params={"limit": 1000},
    )
    assert response.status_code == 200, response.text
    events: list[dict[str, Any]] = response.json()["events"]
    return events


async def wait_for_run(
    client: httpx.AsyncClient,
    run_id: str,
    until: Callable[[dict[str, Any]], bool],
    *,
    headers: dict[str, str] | None = None,
    timeout_s: float = 5,
) -> dict[str, Any]:
    """GET the run until `until(run)` holds (for state no event announces: webhook delivery)."""
    with anyio.fail_after(timeout_s):
        while True:
            response = await client.get(f"/runs/{run_id}", headers=headers)
            assert response.status_code == 200, response.text
            run: dict[str, Any] = response.json()
            if until(run):
                return run
            await anyio.sleep(0.02)


def seqs(events: Iterable[SSE]) -> list[int]:
    return [int(e.id or 0) for e in events]


def assert_one_terminal_at_the_end(events: Sequence[SSE], expected: str) -> None:
    types = [e.event for e in events]
    assert types[-1] == expected, types
    assert sum(t in TERMINAL for t in types) == 1, types


def http_tool(name: str, url: str, **extra: Any) -> dict[str, Any]:
    """An `http_tools` entry taking one string argument, `key`."""
    return {
        "name": name,
        "description": f"{name}: look a key up",
        "parameters": {
            "type": "object",
            "properties": {"key": {"type": "string"}},
            "required": ["key"],
        },
        "url": url,
        **extra,
    }


class LocalEndpoints:
    """A loopback HTTP server for a run's HTTP tools and webhooks; an async context manager.

    POST /hang        never answers; `hang_arrived` is set when a call comes in and
                      `hang_left` when its client goes away (the call was torn down)
    POST /barrier     answers `value of <key>` only once `parties` calls are in at once, so
                      a run whose calls are not concurrent never gets an answer
    POST /hook/{name} records the JSON body (and `Webhook-Id`, in `hook_ids`) under `name`;
                      answers the next status of `hook_statuses[name]` (default 200);
                      `hook_arrived` wakes waiters
    POST /count/{name} counts its calls in `counts[name]`; answers `call N of <key>`
    """

    def __init__(self, *, parties: int = 3) -> None:
        self.parties = parties
        self.hang_arrived = anyio.Event()
        self.hang_left = anyio.Event()
        self.barrier_calls: list[str] = []
        self._all_in = anyio.Event()
        self.hooks: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.hook_statuses: dict[str, list[int]] = {}
        self.hook_ids: dict[str, list[str | None]] = defaultdict(list)
        self._hook_arrived = anyio.Event()
        self.counts: dict[str, int] = defaultdict(int)
        self._served = Served(
            Starlette(
                routes=[
                    Route("/hang", self._hang, methods=["POST"]),
                    Route("/barrier", self._barrier, methods=["POST"]),
                    Route("/hook/{name}", self._hook, methods=["POST"]),
                    Route("/count/{name}", self._count, methods=["POST"]),
                ]
            ),
            timeout_graceful_shutdown=1,
        )

    def url(self, path: str) -> str:
        return self._served.url(path)

    async def __aenter__(self) -> Self:
        await self._served.__aenter__()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._all_in.set()
        await self._served.stop()

    async def wait_for_hooks(self, name: str, count: int, timeout_s: float = 5) -> None:
        with anyio.fail_after(timeout_s):
            while len(self.hooks[name]) < count:
                arrived = self._hook_arrived
                await arrived.wait()

    async def _hang(self, request: Request) -> Response:
        await request.body()
        self.hang_arrived.set()
        while (await request.receive())["type"] != "http.disconnect":
            pass
        self.hang_left.set()
        return PlainTextResponse("too late")

    async def _barrier(self, request: Request) -> Response:
        key = (await request.json())["key"]
        self.barrier_calls.append(key)
        if len(self.barrier_calls) >= self.parties:
            self._all_in.set()
        await self._all_in.wait()
        return PlainTextResponse(f"value of {key}")

    async def _count(self, request: Request) -> Response:
        key = (await request.json())["key"]
        name = request.path_params["name"]
        self.counts[name] += 1
        return PlainTextResponse(f"call {self.counts[name]} of {key}")

    async def _hook(self, request: Request) -> Response:
        name = request.path_params["name"]
        self.hooks[name].append(json.loads(await request.body()))
        self.hook_ids[name].append(request.headers.get("Webhook-Id"))
        arrived, self._hook_arrived = self._hook_arrived, anyio.Event()
        arrived.set()
        statuses = self.hook_statuses.get(name)
        status = statuses.pop(0) if statuses else 200
        return JSONResponse({"received": True}, status_code=status)
