"""Runs using tools of MCP servers, through the API: a real stdio MCP server (a child process
built with the SDK), an HTTP one killed mid-run, one down from the start, and one answering
one run with 50 MB while another run calls it."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.api.kit import (
    cancel,
    create,
    error_of,
    finish,
    hanging,
    json_events,
    run_to_end,
    scripted,
    settings,
    wait_ended,
    wait_for_status,
)
from tests.fakes.mcp_server import ServerState, build_server, http_server_process
from tests.fakes.service import api_client
from tests.fakes.serving import Served, loopback_socket

ROOT = Path(__file__).resolve().parents[2]
FAKE = {
    "command": [sys.executable, "-m", "tests.fakes.mcp_server"],
    "cwd": str(ROOT),
    "retry_initial_s": 0.05,
    "retry_max_s": 0.2,
}


async def servers_until(client: httpx.AsyncClient, name: str, state: str) -> dict[str, Any]:
    """Read GET /tools/mcp-servers until `name` is in `state`."""
    with anyio.fail_after(20):
        while True:
            response = await client.get("/tools/mcp-servers")
            assert response.status_code == 200, response.text
            server = next(s for s in response.json() if s["name"] == name)
            if server["state"] == state:
                return server
            await anyio.sleep(0.02)


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with api_client(settings(mcp_servers={"fake": FAKE})) as client:
        await servers_until(client, "fake", "connected")
        yield client


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


async def observations(client: httpx.AsyncClient, run_id: str) -> list[dict[str, Any]]:
    events = (await json_events(client, run_id))["events"]
    return [e for e in events if e["type"] == "observation"]


async def test_get_tools_shows_builtin_and_mcp_sources(client: httpx.AsyncClient) -> None:
    tools = {t["name"]: t for t in (await client.get("/tools")).json()}
    assert tools["calculator"]["source"] == "builtin"
    add = tools["fake__add"]
    assert add["source"] == "mcp:fake"
    assert add["description"] == "Add two integers."
    assert add["idempotent"] is True
    assert add["parameters"]["properties"]["a"]["type"] == "integer"
    servers = (await client.get("/tools/mcp-servers")).json()
    assert servers == [
        {
            "name": "fake",
            "transport": "stdio",
            "state": "connected",
            "error": None,
            "tools": sum(1 for t in tools.values() if t["source"] == "mcp:fake"),
        }
    ]


async def test_a_run_calls_an_mcp_tool_named_in_tools(client: httpx.AsyncClient) -> None:
    body = scripted(call("fake__add", a=2, b=3), finish("5"), tools=["fake__add"])
    run = await run_to_end(client, body)
    assert run["result"]["answer"] == "5"
    [observation] = await observations(client, run["id"])
    assert observation["tool"] == "fake__add"
    assert observation["content"] == "5"
    assert observation["is_error"] is False


async def test_mcp_servers_enables_every_tool_of_a_server(client: httpx.AsyncClient) -> None:
    body = scripted(
        call("fake__echo", text="hello"),
        call("fake__fail", message="boom"),
        call("fake__echo", text=3),
        finish(),
        mcp_servers=["fake"],
    )
    run = await run_to_end(client, body)
    assert run["mcp_servers"] == ["fake"]
    events = (await json_events(client, run["id"]))["events"]
    queued = next(e for e in events if e["type"] == "run.queued")
    assert {"fake__echo", "fake__add", "fake__grow"} <= set(queued["tools"])
    echo, fail, invalid = [e for e in events if e["type"] == "observation"]
    assert (echo["content"], echo["is_error"]) == ("hello", False)
    assert fail["content"] == "The tool fake__fail failed: Error executing tool fail: boom"
    assert fail["is_error"] is True
    assert invalid["is_error"] is True
    assert "3 is not of type 'string'" in invalid["content"]


async def test_a_call_past_tool_timeout_is_cancelled_and_the_session_lives_on(
    client: httpx.AsyncClient,
) -> None:
    body = scripted(
        call("fake__slow", seconds=60),
        call("fake__echo", text="after"),
        finish(),
        tools=["fake__slow", "fake__echo"],
        settings={"tool_timeout_s": 0.5},
    )
    run = await run_to_end(client, body)
    assert run["status"] == "completed"
    slow, echo = await observations(client, run["id"])
    assert slow["is_error"] is True
    assert slow["timed_out"] is True
    assert (echo["content"], echo["is_error"]) == ("after", False)


async def test_unknown_tools_and_servers_are_refused(client: httpx.AsyncClient) -> None:
    response = await client.post("/runs", json=scripted(finish(), tools=["fake__nope"]))
    error = error_of(response, 422)
    assert "fake__nope" in error["message"]
    response = await client.post("/runs", json=scripted(finish(), mcp_servers=["nope"]))
    error = error_of(response, 422)
    assert error["message"].startswith("mcp_servers: unknown MCP server 'nope'")
    assert error["details"]["available"] == ["fake"]


async def test_a_server_that_is_down_is_shown_and_its_tools_refused() -> None:
    with loopback_socket() as sock:
        port = sock.getsockname()[1]
    down = {"url": f"http://127.0.0.1:{port}/mcp", "retry_initial_s": 0.05, "retry_max_s": 0.2}
    config = settings(mcp_servers={"web": down}, http_tool_allow_hosts=["127.0.0.1"])
    async with api_client(config) as client:
        server = await servers_until(client, "web", "reconnecting")
        assert "ConnectError" in server["error"]
        assert server["tools"] == 0
        response = await client.post("/runs", json=scripted(finish(), tools=["web__add"]))
        assert error_of(response, 422)
        response = await client.post("/runs", json=scripted(finish(), mcp_servers=["web"]))
        assert "has not connected yet" in error_of(response, 422)["message"]


async def test_no_servers_configured() -> None:
    async with api_client(settings()) as client:
        assert (await client.get("/tools/mcp-servers")).json() == []
        response = await client.post("/runs", json=scripted(finish(), mcp_servers=["fake"]))
        assert "no MCP servers configured" in error_of(response, 422)["message"]


async def test_a_server_killed_mid_run_is_an_error_observation_not_a_failed_run() -> None:
    state = ServerState()
    build_server(state)
    served = Served(state.app(), lifespan="on", timeout_graceful_shutdown=0)
    async with served:
        web = {"url": served.url("/mcp"), "retry_initial_s": 0.05, "retry_max_s": 0.2}
        config = settings(mcp_servers={"web": web}, http_tool_allow_hosts=["127.0.0.1"])
        async with api_client(config) as client:
            await servers_until(client, "web", "connected")
            body = scripted(call("web__slow", seconds=60), finish("went on"), mcp_servers=["web"])
            run = await create(client, body)
            with anyio.fail_after(10):
                await state.started.wait()
            await served.stop()
            run = await wait_ended(client, run["id"])
            assert run["status"] == "completed"
            assert run["result"]["answer"] == "went on"
            [slow] = await observations(client, run["id"])
            assert slow["is_error"] is True
            assert "MCP server 'web'" in slow["content"]
            server = await servers_until(client, "web", "reconnecting")
            assert server["error"]


async def test_a_queued_run_whose_tool_is_gone_at_start_gets_an_error_observation() -> None:
    state = ServerState()
    build_server(state)
    async with Served(state.app(), lifespan="on") as served:
        web = {"url": served.url("/mcp"), "health_interval_s": 0.05}
        config = settings(
            mcp_servers={"web": web}, http_tool_allow_hosts=["127.0.0.1"], max_concurrent_runs=1
        )
        async with api_client(config) as client:
            await servers_until(client, "web", "connected")
            blocker = await create(client, hanging())
            await wait_for_status(client, blocker["id"], "running")
            queued = await create(
                client, scripted(call("web__echo", text="x"), finish(), tools=["web__echo"])
            )
            state.server.remove_tool("echo")  # seen by the next health listing
            with anyio.fail_after(10):
                while True:
                    tools = {t["name"] for t in (await client.get("/tools")).json()}
                    if "web__echo" not in tools:
                        break
                    await anyio.sleep(0.02)
            await cancel(client, blocker["id"])
            run = await wait_ended(client, queued["id"])
            assert run["status"] == "completed"
            [echo] = await observations(client, run["id"])
            assert echo["is_error"] is True
            assert "does not offer web__echo right now" in echo["content"]


async def test_long_results_are_truncated_like_any_tool(client: httpx.AsyncClient) -> None:
    body = scripted(
        call("fake__echo", text="x" * 500),
        finish(),
        tools=["fake__echo"],
        settings={"max_tool_result_chars": 100},
    )
    run = await run_to_end(client, body)
    [echo] = await observations(client, run["id"])
    assert echo["truncated"] is True
    assert echo["original_chars"] == 500
    assert echo["content"] == "x" * 500


async def test_the_deadline_cancels_the_mcp_request() -> None:
    state = ServerState()
    build_server(state)
    async with Served(state.app(), lifespan="on") as served:
        web = {"url": served.url("/mcp")}
        config = settings(mcp_servers={"web": web}, http_tool_allow_hosts=["127.0.0.1"])
        async with api_client(config) as client:
            await servers_until(client, "web", "connected")
            body = scripted(
                call("web__slow", seconds=60),
                tools=["web__slow"],
                settings={"max_time_s": 1, "final_answer_on_limit": False},
            )
            run = await run_to_end(client, body)
            assert run["status"] == "incomplete"
            assert run["result"]["reason"] == "timeout"
            with anyio.fail_after(10):
                await state.cancelled.wait()


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_50_mb_answer_fails_that_call_alone_and_other_runs_go_on(transport: str) -> None:
    """Run A's call gets 50 MB back while run B's call is in flight on the same server: A
    sees an is_error observation naming the cap, B's call answers, both runs complete."""
    async with contextlib.AsyncExitStack() as stack:
        if transport == "stdio":
            server: dict[str, Any] = dict(FAKE)
        else:
            url = await stack.enter_async_context(http_server_process())
            server = {"url": url, "retry_initial_s": 0.05, "retry_max_s": 0.2}
        config = settings(mcp_servers={"fake": server}, http_tool_allow_hosts=["127.0.0.1"])
        client = await stack.enter_async_context(api_client(config))
        await servers_until(client, "fake", "connected")
        held_run = scripted(call("fake__hold"), finish("B"), mcp_servers=["fake"])
        other = await create(client, held_run)
        big = await create(
            client,
            scripted(
                call("fake__big", size=50_000_000),
                call("fake__release", holders=1),
                finish("A"),
                mcp_servers=["fake"],
            ),
        )
        a, b = await wait_ended(client, big["id"]), await wait_ended(client, other["id"])
        assert (a["status"], b["status"]) == ("completed", "completed")
        too_big, released = await observations(client, big["id"])
        assert too_big["is_error"] is True
        assert (
            "passed the cap of 1,000,000 bytes (FINISHLINE_MCP_MAX_RESULT_BYTES)"
            in (too_big["content"])
        )
        assert (released["content"], released["is_error"]) == ("1", False)
        [held] = await observations(client, other["id"])
        assert (held["content"], held["is_error"]) == ("held", False)
        servers = (await client.get("/tools/mcp-servers")).json()
        assert [s["state"] for s in servers] == ["connected"]
