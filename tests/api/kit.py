"""What the API tests share: settings, request bodies, waits on a run, and checks on answers.

    async with api_client(settings()) as client:
        run = await run_to_end(client, finishing("42"))
        assert run["result"]["answer"] == "42"

Waits are on the thing itself: `GET /runs/{id}/wait` until a run ends, a status read under
`anyio.fail_after` until a run is running. No sleep stands in for either.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, MutableMapping
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
from asgi_lifespan import LifespanManager

from app.main import create_app
from app.settings import Settings
from tests.fakes.service import SSE, read_sse, service_settings

TERMINAL_STATUSES = frozenset({"completed", "incomplete", "failed", "cancelled"})
TERMINAL_EVENTS = frozenset({"run.completed", "run.incomplete", "run.failed", "run.cancelled"})


def settings(**overrides: Any) -> Settings:
    """`service_settings` with no shutdown grace, so runs a test leaves hanging are cancelled
    at once when its app stops."""
    return service_settings(**{"shutdown_grace_s": 0, **overrides})


# -- request bodies ---------------------------------------------------------------------------


def finish(answer: str = "done") -> dict[str, Any]:
    """A scripted reply that calls task_finished."""
    return {"tool_calls": [{"name": "task_finished", "arguments": {"answer": answer}}]}


def scripted(*replies: dict[str, Any], task: str = "a scripted task", **fields: Any) -> dict:
    return {"task": task, "model": "scripted", "model_script": list(replies), **fields}


def finishing(answer: str = "done", **fields: Any) -> dict[str, Any]:
    """A run that finishes at its first step."""
    return scripted(finish(answer), **fields)


def hanging(**fields: Any) -> dict[str, Any]:
    """A run whose first LLM call takes ten minutes: running until cancelled (or its deadline)."""
    return scripted({"content": "thinking it over", "delay_s": 600}, **fields)


# -- requests and waits -----------------------------------------------------------------------


async def create(
    client: httpx.AsyncClient, body: dict[str, Any], headers: dict[str, str] | None = None
) -> dict[str, Any]:
    response = await client.post("/runs", json=body, headers=headers)
    assert response.status_code == 202, response.text
    return response.json()


async def wait_ended(
    client: httpx.AsyncClient, run_id: str, headers: dict[str, str] | None = None
) -> dict[str, Any]:
    response = await client.get(f"/runs/{run_id}/wait", params={"timeout_s": 10}, headers=headers)
    assert response.status_code == 200, response.text
    run = response.json()
    assert run["status"] in TERMINAL_STATUSES, run
    return run


async def run_to_end(
    client: httpx.AsyncClient, body: dict[str, Any], headers: dict[str, str] | None = None
) -> dict[str, Any]:
    run = await create(client, body, headers)
    return await wait_ended(client, run["id"], headers)


async def wait_for_status(
    client: httpx.AsyncClient, run_id: str, status: str, headers: dict[str, str] | None = None
) -> dict[str, Any]:
    """Read the run until it has `status` (a run starts as soon as the loop gets a turn)."""
    with anyio.fail_after(5):
        while True:
            response = await client.get(f"/runs/{run_id}", headers=headers)
            assert response.status_code == 200, response.text
            if response.json()["status"] == status:
                return response.json()
            await anyio.sleep(0.005)


async def cancel(
    client: httpx.AsyncClient, run_id: str, headers: dict[str, str] | None = None
) -> dict[str, Any]:
    response = await client.post(f"/runs/{run_id}/cancel", headers=headers)
    assert response.status_code == 202, response.text
    return response.json()


async def sse(
    client: httpx.AsyncClient, method: str, url: str, **kwargs: Any
) -> tuple[httpx.Response, list[SSE]]:
    """A whole SSE response (ASGITransport buffers it until the stream ends) and its events."""
    async with client.stream(method, url, **kwargs) as response:
        if not response.is_success:
            await response.aread()
            return response, []
        return response, [event async for event in read_sse(response)]


async def json_events(client: httpx.AsyncClient, run_id: str, **params: Any) -> dict[str, Any]:
    response = await client.get(
        f"/runs/{run_id}/events", params=params, headers={"Accept": "application/json"}
    )
    assert response.status_code == 200, response.text
    return response.json()


# -- checks -----------------------------------------------------------------------------------


def error_of(response: httpx.Response, status: int, type_: str | None = None) -> dict[str, Any]:
    """The `error` object of a JSON error answer, checked for DESIGN §5's shape."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json"), response.headers
    body = response.json()
    assert list(body) == ["error"], body
    error = body["error"]
    assert set(error) == {"type", "message", "details"}, error
    assert isinstance(error["type"], str)
    assert error["type"]
    assert isinstance(error["message"], str)
    assert error["message"]
    assert isinstance(error["details"], dict)
    if type_ is not None:
        assert error["type"] == type_, error
    return error


def assert_sequential(events: list[SSE]) -> None:
    """ids 1..N with no gaps, each frame's id and type matching its data, one terminal event
    and it is the last."""
    assert [e.id for e in events] == [str(n) for n in range(1, len(events) + 1)]
    for event in events:
        assert event.data["seq"] == int(event.id or "0")
        assert event.data["type"] == event.event
    assert [e.event for e in events if e.event in TERMINAL_EVENTS] == [events[-1].event]


# -- the app with its lifespan state ----------------------------------------------------------


class _StateTap:
    """An ASGI wrapper that keeps the lifespan state (manager, tokens, …) for the test."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.state: MutableMapping[str, Any] = {}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            self.state = scope["state"]
        await self.app(scope, receive, send)


@asynccontextmanager
async def app_with_state(
    app_settings: Settings,
) -> AsyncIterator[tuple[httpx.AsyncClient, MutableMapping[str, Any]]]:
    """Like `api_client`, and the lifespan state too, for what no endpoint reaches (the
    manager's drain, tokens issued at a given time)."""
    tap = _StateTap(create_app(app_settings))
    async with (
        LifespanManager(tap) as manager,
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=manager.app), base_url="http://test"
        ) as client,
    ):
        yield client, tap.state
