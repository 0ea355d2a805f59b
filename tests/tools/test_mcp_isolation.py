"""One call's bad answer is that call's alone: an answer over the cap, a call cancelled on a
server that ignores it, a server that hangs. Real MCP servers built with the SDK
(tests/fakes/mcp_server.py): a stdio child, and Streamable HTTP in a child process (so the
memory measured here is the client's alone) or in process."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import tracemalloc
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from app.engine.ports import ToolContext
from app.tools.base import ToolError
from app.tools.mcp.config import McpHttpServer, McpServerConfig, McpStdioServer
from app.tools.mcp.source import McpToolSource
from tests.fakes.mcp_server import ServerState, build_server, http_server_process
from tests.fakes.serving import Served

ROOT = Path(__file__).resolve().parents[2]
FAST = {"retry_initial_s": 0.05, "retry_max_s": 0.2, "connect_timeout_s": 10.0}
FIFTY_MB = 50_000_000
CAP = 1_000_000
HELD_BYTES = 10_000_000
"""What the client may have held at its peak while a 50 MB answer came in: a few copies of
one capped message, not the answer."""


def stdio_config(**overrides: object) -> McpStdioServer:
    config = {**FAST, **overrides}
    return McpStdioServer(
        command=[sys.executable, "-m", "tests.fakes.mcp_server"],
        cwd=str(ROOT),
        **config,
    )


@asynccontextmanager
async def server_config(transport: str) -> AsyncIterator[McpServerConfig]:
    if transport == "stdio":
        yield stdio_config()
        return
    async with http_server_process(json_response=transport == "http-json") as url:
        yield McpHttpServer(url=url, **FAST)


@asynccontextmanager
async def connected(config: McpServerConfig) -> AsyncIterator[McpToolSource]:
    source = McpToolSource({"fake": config}, allow_hosts=["127.0.0.1"], max_message_bytes=CAP)
    source.start()
    try:
        with anyio.fail_after(30):
            await source.connections["fake"].wait_for(lambda c: c.state == "connected")
        yield source
    finally:
        await source.aclose()


@pytest.fixture
def ctx() -> ToolContext:
    return ToolContext(run_id="run-isolation")


@pytest.mark.parametrize("transport", ["stdio", "http-sse", "http-json"])
async def test_an_answer_over_the_cap_fails_that_call_alone_and_is_never_held_whole(
    transport: str, ctx: ToolContext
) -> None:
    async with server_config(transport) as config, connected(config) as source:
        tools = source.tools()
        connection = source.connections["fake"]
        others = [asyncio.create_task(tools["fake__hold"].call({}, ctx)) for _ in range(3)]
        tracemalloc.start()
        try:
            with anyio.fail_after(60), pytest.raises(ToolError) as failure:
                await tools["fake__big"].call({"size": FIFTY_MB}, ctx)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert str(failure.value) == (
            "MCP server 'fake' sent too much: its answer passed the cap of 1,000,000 bytes "
            "(FINISHLINE_MCP_MAX_RESULT_BYTES) and was not read; ask for less at a time"
        )
        assert peak < HELD_BYTES, f"{peak:,} bytes held at the peak"
        # the other calls were in flight all along (held until now) and still answer
        with anyio.fail_after(20):
            assert await tools["fake__release"].call({"holders": 3}, ctx) == "3"
            assert await asyncio.gather(*others) == ["held"] * 3
        assert await tools["fake__echo"].call({"text": "after"}, ctx) == "after"
        assert (connection.connects, connection.state) == (1, "connected")


async def test_calls_cancelled_on_a_server_that_ignores_it_keep_no_connection(
    ctx: ToolContext,
) -> None:
    """More cancelled calls than the pool has connections (20), on a server that never
    ends their answers: each exchange is abandoned, and the session serves on."""
    state = ServerState()
    build_server(state)
    async with Served(state.app(), lifespan="on") as served:
        async with connected(McpHttpServer(url=served.url("/mcp"), **FAST)) as source:
            stubborn = source.tools()["fake__stubborn"]
            for _ in range(25):
                state.started.clear()
                call = asyncio.create_task(stubborn.call({}, ctx))
                with anyio.fail_after(10):
                    await state.started.wait()
                call.cancel()
                await asyncio.wait([call])
                assert call.cancelled()
            with anyio.fail_after(10):
                assert await source.tools()["fake__echo"].call({"text": "on"}, ctx) == "on"
            assert source.connections["fake"].connects == 1
        state.unstick.set()


async def test_a_stdio_call_cancelled_leaves_the_session_serving(ctx: ToolContext) -> None:
    async with connected(stdio_config()) as source:
        tools = source.tools()
        pid = await tools["fake__pid"].call({}, ctx)
        with anyio.move_on_after(0.5) as scope:
            await tools["fake__slow"].call({"seconds": 60}, ctx)
        assert scope.cancelled_caught
        with anyio.fail_after(10):
            assert await tools["fake__echo"].call({"text": "next"}, ctx) == "next"
        assert await tools["fake__pid"].call({}, ctx) == pid
        assert source.connections["fake"].connects == 1


async def test_a_hung_stdio_server_is_found_by_the_timed_out_call_and_restarted(
    ctx: ToolContext,
) -> None:
    async with connected(stdio_config(connect_timeout_s=5.0)) as source:
        tools = source.tools()
        connection = source.connections["fake"]
        pid = int(await tools["fake__pid"].call({}, ctx))
        os.kill(pid, signal.SIGSTOP)
        try:
            with anyio.move_on_after(0.5) as scope:
                await tools["fake__echo"].call({"text": "lost"}, ctx)
            assert scope.cancelled_caught
            # the check after the cancelled call gets no answer: a new child is started
            with anyio.fail_after(30):
                await connection.wait_for(_reconnected)
            with anyio.fail_after(10):
                assert await tools["fake__echo"].call({"text": "next"}, ctx) == "next"
            assert int(await tools["fake__pid"].call({}, ctx)) != pid
        finally:
            if not _gone(pid):
                os.kill(pid, signal.SIGKILL)


_reconnected: Callable[..., bool] = lambda c: c.connects == 2 and c.state == "connected"  # noqa: E731


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return True


async def test_more_calls_than_pooled_connections_wait_their_turn(ctx: ToolContext) -> None:
    """24 calls in flight on a pool of 20 connections (one of them the server's own
    stream), held longer than the pool's old timeout (connect_timeout_s): the calls waiting
    for a connection get one in turn, and the session of the running ones lives on."""
    state = ServerState()
    build_server(state)
    async with Served(state.app(), lifespan="on") as served:
        options = {**FAST, "connect_timeout_s": 2.0}
        config = McpHttpServer(url=served.url("/mcp"), **options)
        async with connected(config) as source:
            hold = source.tools()["fake__hold"]
            calls = [asyncio.create_task(hold.call({}, ctx)) for _ in range(24)]
            with anyio.fail_after(20):
                async with state.gate:
                    await state.gate.wait_for(lambda: state.holding >= 16)
            # the stimulus: the waiting calls wait past connect_timeout_s for a connection
            await anyio.sleep(2 * config.connect_timeout_s)
            state.released.set()
            with anyio.fail_after(20):
                assert await asyncio.gather(*calls) == ["held"] * 24
            assert source.connections["fake"].connects == 1


def cutting_answers_to(tool: str, app: Any) -> Any:
    """`app`, but a call of `tool` is answered by an event stream that ends at once (as a
    proxy cutting one stream would): that request gets no answer, the session is fine."""
    marker = f'"name":"{tool}"'.encode()

    async def cut(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await app(scope, receive, send)
            return
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        if marker in body:
            headers = [(b"content-type", b"text/event-stream")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": b""})
            return
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await app(scope, replay, send)

    return cut


async def test_an_answer_that_breaks_off_fails_its_call_and_the_session_is_kept(
    ctx: ToolContext,
) -> None:
    state = ServerState()
    build_server(state)
    app = cutting_answers_to("vanish", state.app())
    async with (
        Served(app, lifespan="on") as served,
        connected(McpHttpServer(url=served.url("/mcp"), **FAST)) as source,
    ):
        tools = source.tools()
        connection = source.connections["fake"]
        others = [asyncio.create_task(tools["fake__hold"].call({}, ctx)) for _ in range(3)]
        with anyio.fail_after(20), pytest.raises(ToolError, match="broke off"):
            await connection.call("vanish", {})
        with anyio.fail_after(20):
            assert await tools["fake__release"].call({"holders": 3}, ctx) == "3"
            assert await asyncio.gather(*others) == ["held"] * 3
        assert (connection.connects, connection.state) == (1, "connected")
