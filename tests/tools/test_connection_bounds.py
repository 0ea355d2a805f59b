"""Noisy neighbours: one run, or the runs of one API key, cannot take every outbound
connection. HTTP tool requests past the per-run or per-key bound wait their turn while
other keys' requests go straight through; webhooks have a client (and a pool) of their own."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from app.posting import FetcherPoster
from app.tools.bounds import ConnectionBounds, http_scope
from app.tools.fetcher import HttpFetcher
from app.tools.netguard import NetworkGuard
from tests.api.kit import app_with_state, scripted, settings, wait_ended
from tests.fakes.serving import Served


class SlowServer:
    """`/slow` answers when released and counts requests in flight; `/fast` at once."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.most = 0
        self.release = anyio.Event()
        self._changed = anyio.Event()
        self.app = Starlette(routes=[Route("/slow", self._slow), Route("/fast", self._fast)])

    async def _slow(self, request: Request) -> Response:
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        self._changed.set()
        try:
            await self.release.wait()
        finally:
            self.in_flight -= 1
        return PlainTextResponse("slow")

    async def _fast(self, request: Request) -> Response:
        return PlainTextResponse("fast")

    async def until_in_flight(self, count: int) -> None:
        with anyio.fail_after(10):
            while self.in_flight < count:
                self._changed = anyio.Event()
                await self._changed.wait()


@asynccontextmanager
async def slow_server() -> AsyncIterator[tuple[SlowServer, str]]:
    server = SlowServer()
    async with Served(server.app) as served:
        try:
            yield server, f"http://127.0.0.1:{served.port}"
        finally:
            server.release.set()


async def test_requests_past_the_run_and_key_bounds_wait_while_other_keys_go_through() -> None:
    bounds = ConnectionBounds(per_run=2, per_key=3)
    fetcher = HttpFetcher(NetworkGuard(["127.0.0.1"]), bounds=bounds, timeout_s=30)
    async with slow_server() as (server, base), anyio.create_task_group() as tasks:

        async def fetch(run_id: str, key: str | None, path: str) -> None:
            with http_scope(run_id, key):
                await fetcher.fetch("GET", f"{base}{path}")

        for _ in range(6):
            tasks.start_soon(fetch, "run-a1", "key-a", "/slow")
        await server.until_in_flight(2)
        for _ in range(6):
            tasks.start_soon(fetch, "run-a2", "key-a", "/slow")
        await server.until_in_flight(3)

        with anyio.fail_after(5):  # another key is not held up by key-a's requests
            await fetch("run-b", "key-b", "/fast")
            await fetch("run-c", None, "/fast")
        assert server.in_flight == 3
        assert bounds.waiting("key-a") == 4  # past their run bound: 3 in flight, 1 waits

        server.release.set()
    assert server.most == 3
    assert bounds.waiting("key-a") == 0
    await fetcher.aclose()


async def test_a_keys_runs_share_its_bound_through_the_api() -> None:
    keyed = settings(
        api_keys=["noisy", "quiet"],
        http_tool_allow_hosts=["127.0.0.1"],
        http_tool_connections_per_key=2,
        max_concurrent_runs=10,
    )

    def fetching(url: str) -> dict[str, Any]:
        call = {"name": "http_get", "arguments": {"url": url}}
        done = {"name": "task_finished", "arguments": {"answer": "ok"}}
        return scripted({"tool_calls": [call]}, {"tool_calls": [done]}, tools=["http_get"])

    noisy = {"Authorization": "Bearer noisy"}
    quiet = {"Authorization": "Bearer quiet"}
    async with slow_server() as (server, base), app_with_state(keyed) as (client, _):
        held = []
        for _ in range(5):
            response = await client.post("/runs", json=fetching(f"{base}/slow"), headers=noisy)
            assert response.status_code == 202, response.text
            held.append(response.json()["id"])
        await server.until_in_flight(2)

        response = await client.post("/runs", json=fetching(f"{base}/fast"), headers=quiet)
        run = await wait_ended(client, response.json()["id"], quiet)

        assert run["status"] == "completed", run
        assert server.in_flight == 2
        server.release.set()
        for run_id in held:
            assert (await wait_ended(client, run_id, noisy))["status"] == "completed"
        assert server.most == 2


async def test_webhooks_have_a_client_of_their_own() -> None:
    async with app_with_state(settings(http_tool_allow_hosts=["127.0.0.1"])) as (_, state):
        tools_fetcher = state["registry"].http
        poster = state["manager"].webhooks.poster
        assert isinstance(poster, FetcherPoster)
        webhooks_fetcher = poster.fetcher

        assert webhooks_fetcher is not None
        assert webhooks_fetcher is not tools_fetcher
        assert await webhooks_fetcher.client() is not await tools_fetcher.client()
        assert isinstance(await webhooks_fetcher.client(), httpx.AsyncClient)
