"""Remote workers (DESIGN §15, §17): a sub-agent with `a2a_url` calls a remote A2A agent with
the official `a2a-sdk` client: the remote task's answer is the call's observation; its host
must be allow-listed, as an HTTP tool's, and no response of it is read past the HTTP tools'
cap; the run's deadline bounds the call and cancelling the run sends `CancelTask`. The remote
agent here is finishline's own A2A endpoint, served on loopback by uvicorn (another app: the
caller's runs are not the remote's), or a server that answers too much."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import anyio
import httpx
import pytest
from a2a.types import AgentCapabilities, AgentCard, AgentInterface
from google.protobuf.json_format import MessageToDict
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from app.main import create_app
from tests.a2a.kit import a2a_settings
from tests.api.kit import (
    cancel,
    error_of,
    finish,
    run_to_end,
    scripted,
    settings,
    wait_for_status,
)
from tests.api.subagent_kit import call, events, of_type
from tests.fakes.service import api_client
from tests.fakes.serving import Served


def remote(url: str) -> dict[str, Any]:
    return {"description": "The calculator team's agent.", "a2a_url": url}


async def remote_runs(remote_http: httpx.AsyncClient) -> list[dict[str, Any]]:
    return list((await remote_http.get("/runs")).json()["runs"])


async def test_a_remote_agents_answer_is_the_observation() -> None:
    async with AsyncExitStack() as stack:
        served = await stack.enter_async_context(Served(create_app(a2a_settings()), lifespan="on"))
        body = scripted(
            call("calc", "What is 2+3? Use the calculator."),
            finish("5"),
            agents={"calc": remote(served.url("/a2a/calc"))},
        )
        client = await stack.enter_async_context(
            api_client(settings(http_tool_allow_hosts=["127.0.0.1"]))
        )
        parent = await run_to_end(client, body)
        assert parent["status"] == "completed", parent
        found = await events(client, parent["id"])
        (started,) = of_type(found, "agent.started")
        assert (started["agent"], started["child_run_id"]) == ("calc", None)
        (ended,) = of_type(found, "agent.finished")
        assert (ended["status"], ended["reason"]) == ("completed", "finished")
        (seen,) = of_type(found, "observation")
        assert not seen["is_error"]
        assert "5" in seen["content"]
        assert "[demo model]" in seen["content"]  # the remote's own (demo) model answered
        assert "[Sub-agent calc (run remote): completed, finished.]" in seen["content"]


async def test_a_remote_agent_on_a_host_not_allowed_is_refused_at_creation() -> None:
    body = scripted(finish("x"), agents={"calc": remote("http://127.0.0.1:9/a2a/calc")})
    async with api_client(settings()) as client:
        error = error_of(await client.post("/runs", json=body), 422)
        assert error["details"]["field"] == "agents.calc.a2a_url"


async def test_an_unreachable_remote_agent_is_an_error_the_model_sees() -> None:
    body = scripted(
        call("calc", "2+3"),
        finish("could not ask"),
        agents={"calc": remote("http://127.0.0.1:9/a2a/calc")},
    )
    async with api_client(settings(http_tool_allow_hosts=["127.0.0.1"])) as client:
        parent = await run_to_end(client, body)
        assert parent["status"] == "completed"
        (seen,) = of_type(await events(client, parent["id"]), "observation")
        assert seen["is_error"]
        assert "could not be started" in seen["content"]


async def test_the_deadline_bounds_a_remote_call_and_cancels_the_remote_task() -> None:
    slow = a2a_settings(demo_delay_s=600)  # the remote's model never answers
    async with AsyncExitStack() as stack:
        served = await stack.enter_async_context(Served(create_app(slow), lifespan="on"))
        remote_http = await stack.enter_async_context(
            httpx.AsyncClient(base_url=served.url(), timeout=10)
        )
        body = scripted(
            call("calc", "2+3"),
            {"content": "no answer in time"},
            agents={"calc": remote(served.url("/a2a/calc"))},
            settings={"max_time_s": 1, "final_answer_timeout_s": 1},
        )
        client = await stack.enter_async_context(
            api_client(settings(http_tool_allow_hosts=["127.0.0.1"]))
        )
        parent = await run_to_end(client, body)
        assert (parent["status"], parent["result"]["reason"]) == ("incomplete", "timeout")
        (remote_run,) = await remote_runs(remote_http)
        await wait_for_status(remote_http, remote_run["id"], "cancelled")  # CancelTask


async def test_cancelling_the_parent_cancels_the_remote_task() -> None:
    slow = a2a_settings(demo_delay_s=600)
    async with AsyncExitStack() as stack:
        served = await stack.enter_async_context(Served(create_app(slow), lifespan="on"))
        remote_http = await stack.enter_async_context(
            httpx.AsyncClient(base_url=served.url(), timeout=10)
        )
        body = scripted(
            call("calc", "2+3"), finish("never"), agents={"calc": remote(served.url("/a2a/calc"))}
        )
        client = await stack.enter_async_context(
            api_client(settings(http_tool_allow_hosts=["127.0.0.1"]))
        )
        parent = (await client.post("/runs", json=body)).json()
        with anyio.fail_after(10):
            while True:  # the remote run is made when the call is sent
                runs = await remote_runs(remote_http)
                if runs:
                    break
                await anyio.sleep(0.02)
        await wait_for_status(remote_http, runs[0]["id"], "running")
        assert (await cancel(client, parent["id"]))["status"] == "cancelled"
        await wait_for_status(remote_http, runs[0]["id"], "cancelled")


# -- what is read of a remote agent ---------------------------------------------------------

CAP = 50_000
"""FINISHLINE_HTTP_TOOL_MAX_BYTES in these tests: what a call reads of one response at most."""
HUGE = 1024 * 65_536
"""64 MiB, in whole chunks: more than the sockets' buffers on loopback can take unread (the
kernel's receive window grows to 32 MiB at most here), so a server that is not read cannot
send it all."""


class Oversized:
    """A remote "agent" that answers more than anyone should read: a card of 64 MiB streamed
    (`/endless`), one that says its length first (`/declared`), and a good card whose endpoint
    answers a message with 64 MiB (`/chatty`). It counts what it sent."""

    def __init__(self) -> None:
        self.sent = 0
        self.app = Starlette(
            routes=[
                Route("/endless/.well-known/agent-card.json", self._endless),
                Route("/declared/.well-known/agent-card.json", self._declared),
                Route("/chatty/.well-known/agent-card.json", self._card),
                Route("/chatty", self._endless, methods=["POST"]),
            ]
        )

    async def _chunks(self, request: Request) -> AsyncIterator[bytes]:
        """HUGE bytes, until the client goes away (a chunk waits for the client to take the
        last, past what the sockets' buffers hold)."""
        chunk = b" " * 65_536
        while self.sent < HUGE and not await request.is_disconnected():
            self.sent += len(chunk)
            yield chunk

    async def _endless(self, request: Request) -> Response:
        return StreamingResponse(self._chunks(request), media_type="application/json")

    async def _declared(self, request: Request) -> Response:
        headers = {"Content-Length": str(HUGE)}
        return StreamingResponse(
            self._chunks(request), media_type="application/json", headers=headers
        )

    async def _card(self, request: Request) -> Response:
        url = str(request.url).removesuffix("/.well-known/agent-card.json")
        card = AgentCard(
            name="chatty",
            description="Says too much.",
            version="1",
            supported_interfaces=[
                AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0")
            ],
            capabilities=AgentCapabilities(streaming=False),
            default_input_modes=["text/plain"],
            default_output_modes=["text/plain"],
        )
        return JSONResponse(MessageToDict(card))


@pytest.mark.parametrize("path", ["/endless", "/declared", "/chatty"])
async def test_a_remote_agent_answering_past_the_http_tools_cap_fails_the_call_unread(
    path: str,
) -> None:
    oversized = Oversized()
    async with AsyncExitStack() as stack:
        served = await stack.enter_async_context(Served(oversized.app))
        body = scripted(
            call("big", "2+3"), finish("too big"), agents={"big": remote(served.url(path))}
        )
        client = await stack.enter_async_context(
            api_client(settings(http_tool_allow_hosts=["127.0.0.1"], http_tool_max_bytes=CAP))
        )
        with anyio.fail_after(30):
            parent = await run_to_end(client, body)
        assert parent["status"] == "completed", parent
        (seen,) = of_type(await events(client, parent["id"]), "observation")

    assert seen["is_error"]
    assert f"longer than the {CAP:,} bytes read" in seen["content"]
    assert oversized.sent < HUGE  # the client went away: the rest was never asked for
