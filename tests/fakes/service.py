"""The service under test: settings, the app in-process or on loopback, and an SSE reader.

    async with api_client(service_settings()) as client:          # ASGITransport, lifespan run
        ...
    async with served_app(service_settings()) as (server, client): # uvicorn on 127.0.0.1:0
        async for event in sse_events(client, f"/runs/{run_id}/events"):
            ...

httpx's ASGITransport buffers a response until it ends, so live-stream, disconnect and
reconnect tests use `served_app`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
from asgi_lifespan import LifespanManager

from app.main import create_app
from app.settings import Settings
from tests.fakes.serving import Served


def service_settings(**overrides: Any) -> Settings:
    """Explicit settings: memory store, instant demo model, short retry delays, no .env."""
    values: dict[str, Any] = {
        "store_url": "memory://",
        "demo_delay_s": 0,
        "llm_retry_delay_s": 0.01,
        "log_format": "json",
        "log_level": "WARNING",
    }
    values.update(overrides)
    if str(values["store_url"]).startswith(("redis", "postgres")) and "token_secret" not in values:
        values["token_secret"] = "test-token-secret"  # required with a shared store
    return Settings(_env_file=None, **values)


@asynccontextmanager
async def api_client(settings: Settings, **client_kwargs: Any) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(settings)
    async with (
        LifespanManager(app) as manager,
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=manager.app), base_url="http://test", **client_kwargs
        ) as client,
    ):
        yield client


@asynccontextmanager
async def served_app(
    settings: Settings, **client_kwargs: Any
) -> AsyncIterator[tuple[Served, httpx.AsyncClient]]:
    async with (
        Served(create_app(settings), lifespan="on") as server,
        httpx.AsyncClient(base_url=server.url(), timeout=10, **client_kwargs) as client,
    ):
        yield server, client


@dataclass(frozen=True)
class SSE:
    id: str | None
    event: str | None
    data: dict[str, Any]


async def read_sse(response: httpx.Response) -> AsyncIterator[SSE]:
    """The events of an open SSE response, as they arrive; comments (keep-alives) skipped."""
    event_id = event_type = None
    data: list[str] = []
    async for line in response.aiter_lines():
        if not line:
            if data:
                yield SSE(event_id, event_type, json.loads("\n".join(data)))
            event_id = event_type = None
            data = []
        elif line.startswith(":"):
            continue
        else:
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "id":
                event_id = value
            elif name == "event":
                event_type = value
            elif name == "data":
                data.append(value)


async def sse_events(
    client: httpx.AsyncClient, url: str, *, headers: dict[str, str] | None = None
) -> AsyncIterator[SSE]:
    async with client.stream("GET", url, headers=headers) as response:
        response.raise_for_status()
        async for event in read_sse(response):
            yield event
