"""The MCP tool source against real MCP servers built with the SDK: a stdio child process and
a Streamable HTTP server on a loopback socket (tests/fakes/mcp_server.py)."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from app.engine.ports import ToolContext
from app.tools.base import ToolError
from app.tools.mcp.config import McpHttpServer, McpServerConfig, McpStdioServer
from app.tools.mcp.connection import ServerConnection
from app.tools.mcp.source import McpToolSource, UnavailableTool, UnknownServerError
from tests.fakes.mcp_server import ServerState, build_server
from tests.fakes.serving import Served, loopback_socket
from tests.tools.conftest import FakeDNS

ROOT = Path(__file__).resolve().parents[2]
FAST = {"retry_initial_s": 0.05, "retry_max_s": 0.2, "connect_timeout_s": 10.0}


def stdio_config() -> McpStdioServer:
    return McpStdioServer(
        command=[sys.executable, "-m", "tests.fakes.mcp_server"], cwd=str(ROOT), **FAST
    )


def http_config(port: int, host: str = "127.0.0.1") -> McpHttpServer:
    return McpHttpServer(url=f"http://{host}:{port}/mcp", **FAST)


@asynccontextmanager
async def source_of(
    servers: dict[str, McpServerConfig], allow: tuple[str, ...] = ("127.0.0.1",), **kw: Any
) -> AsyncIterator[McpToolSource]:
    source = McpToolSource(servers, allow_hosts=allow, **kw)
    source.start()
    try:
        yield source
    finally:
        await source.aclose()


async def until(connection: ServerConnection, state: str) -> None:
    with anyio.fail_after(20):
        await connection.wait_for(lambda c: c.state == state)


def free_port() -> int:
    with loopback_socket() as sock:
        return int(sock.getsockname()[1])


@pytest.fixture
def ctx() -> ToolContext:
    return ToolContext(run_id="run-mcp")


# -- stdio --------------------------------------------------------------------------------------


async def test_stdio_server_lists_tools_with_schemas_and_hints(ctx: ToolContext) -> None:
    async with source_of({"fake": stdio_config()}) as source:
        await until(source.connections["fake"], "connected")
        tools = source.tools()
        assert set(tools) >= {"fake__add", "fake__echo", "fake__fail", "fake__grow"}
        add = tools["fake__add"]
        assert add.source == "mcp:fake"
        assert add.description == "Add two integers."
        assert add.parameters["required"] == ["a", "b"]
        assert add.idempotent is True  # readOnlyHint
        assert tools["fake__echo"].idempotent is False  # no hint
        assert add.validate({"a": 1, "b": "2"}) == "at 'b': '2' is not of type 'integer'"
        assert await add.call({"a": 2, "b": 3}, ctx) == "5"
        assert await tools["fake__echo"].call({"text": "hi"}, ctx) == "hi"
        assert source.describe_servers() == [
            {
                "name": "fake",
                "transport": "stdio",
                "state": "connected",
                "error": None,
                "tools": len(tools),
            }
        ]


async def test_a_stdio_child_gets_its_env_but_not_the_services_secrets(
    ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FINISHLINE_LLM_API_KEY", "sk-secret")
    config = stdio_config().model_copy(update={"env": {"FAKE_MCP_MODE": "test"}})
    async with source_of({"fake": config}) as source:
        await until(source.connections["fake"], "connected")
        environ = source.tools()["fake__environ"]
        assert await environ.call({"name": "FAKE_MCP_MODE"}, ctx) == "test"
        assert await environ.call({"name": "FINISHLINE_LLM_API_KEY"}, ctx) == "(unset)"
        assert await environ.call({"name": "PATH"}, ctx) != "(unset)"


async def test_results_render_structured_content_images_and_errors(ctx: ToolContext) -> None:
    async with source_of({"fake": stdio_config()}) as source:
        await until(source.connections["fake"], "connected")
        tools = source.tools()
        weather = await tools["fake__weather"].call({"city": "Oslo"}, ctx)
        assert json.loads(weather) == {"city": "Oslo", "temp_c": 21}
        picture = await tools["fake__picture"].call({}, ctx)
        assert picture == "[image (image/png), 70 bytes; not shown]"
        with pytest.raises(ToolError, match=r"^Error executing tool fail: boom$"):
            await tools["fake__fail"].call({"message": "boom"}, ctx)


async def test_list_changed_notification_lists_the_tools_again(ctx: ToolContext) -> None:
    async with source_of({"fake": stdio_config()}) as source:
        connection = source.connections["fake"]
        await until(connection, "connected")
        assert "fake__extra" not in source.tools()
        assert await source.tools()["fake__grow"].call({}, ctx) == "grown"
        with anyio.fail_after(10):
            await connection.wait_for(lambda c: any(t.name == "extra" for t in c.tools))
        assert await source.tools()["fake__extra"].call({}, ctx) == "extra!"


async def test_a_killed_stdio_child_is_an_error_observation_then_restarted(
    ctx: ToolContext,
) -> None:
    async with source_of({"fake": stdio_config()}) as source:
        connection = source.connections["fake"]
        await until(connection, "connected")
        pid = int(await source.tools()["fake__pid"].call({}, ctx))
        process = await anyio.open_process(["kill", "-9", str(pid)])
        await process.wait()
        with pytest.raises(ToolError, match="MCP server 'fake'"):
            await source.tools()["fake__echo"].call({"text": "x"}, ctx)
        with anyio.fail_after(20):  # a new child, its session open
            await connection.wait_for(lambda c: c.connects == 2 and c.state == "connected")
        again = int(await source.tools()["fake__pid"].call({}, ctx))
        assert again != pid


async def test_a_child_that_dies_while_idle_is_found_and_restarted(ctx: ToolContext) -> None:
    config = stdio_config().model_copy(update={"health_interval_s": 0.2})
    async with source_of({"fake": config}) as source:
        connection = source.connections["fake"]
        await until(connection, "connected")
        pid = int(await source.tools()["fake__pid"].call({}, ctx))
        process = await anyio.open_process(["kill", "-9", str(pid)])
        await process.wait()
        with anyio.fail_after(20):  # no call needed: the health listing finds it
            await connection.wait_for(lambda c: c.connects == 2 and c.state == "connected")
        assert int(await source.tools()["fake__pid"].call({}, ctx)) != pid


async def test_closing_stops_the_stdio_child(ctx: ToolContext) -> None:
    async with source_of({"fake": stdio_config()}) as source:
        await until(source.connections["fake"], "connected")
        pid = int(await source.tools()["fake__pid"].call({}, ctx))
    assert source.connections["fake"].state == "closed"
    assert _gone(pid)


def _gone(pid: int) -> bool:
    """The process has exited (a zombie not yet reaped counts as exited)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return True


# -- Streamable HTTP ----------------------------------------------------------------------------


async def test_http_server_lists_and_calls(ctx: ToolContext) -> None:
    state = ServerState()
    build_server(state)
    async with Served(state.app(), lifespan="on") as served:
        config = http_config(served.port).model_copy(update={"headers": {"X-Key": "s3cret"}})
        async with source_of({"web": config}) as source:
            await until(source.connections["web"], "connected")
            assert source.describe_servers()[0]["transport"] == "http"
            assert await source.tools()["web__header"].call({"name": "X-Key"}, ctx) == "s3cret"
            add = source.tools()["web__add"]
            assert await add.call({"a": 20, "b": 22}, ctx) == "42"
            assert state.calls == ["add"]


async def test_a_cancelled_call_cancels_the_mcp_request(ctx: ToolContext) -> None:
    state = ServerState()
    build_server(state)
    async with (
        Served(state.app(), lifespan="on") as served,
        source_of({"web": http_config(served.port)}) as source,
    ):
        await until(source.connections["web"], "connected")
        slow = source.tools()["web__slow"]
        call = asyncio.create_task(slow.call({"seconds": 60}, ctx))
        with anyio.fail_after(10):
            await state.started.wait()
        call.cancel()
        with anyio.fail_after(10):
            await state.cancelled.wait()  # the server was told, not left running
        assert call.cancelled()
        assert source.connections["web"].state == "connected"
        assert await source.tools()["web__echo"].call({"text": "still"}, ctx) == "still"


async def test_a_server_down_at_start_up_is_retried_and_its_tools_appear(
    ctx: ToolContext,
) -> None:
    port = free_port()
    async with source_of({"web": http_config(port)}) as source:
        connection = source.connections["web"]
        with anyio.fail_after(10):
            await connection.wait_for(lambda c: c.error is not None)
        assert connection.state == "reconnecting"
        assert "web__add" not in source.tools()
        with pytest.raises(UnknownServerError, match="has not connected yet"):
            source.server_tools(["web"])
        assert source.server_tools(["web"], lenient=True) == []
        stand_in = source.stand_in("web__add")  # for a run created before a restart
        assert isinstance(stand_in, UnavailableTool)
        with pytest.raises(ToolError, match="MCP server 'web' does not offer web__add right now"):
            await stand_in.call({}, ctx)
        assert source.stand_in("calculator") is None
        state = ServerState()
        build_server(state)
        async with Served(state.app(), lifespan="on", port=port):
            await until(connection, "connected")
            assert [t.name for t in source.server_tools(["web"])][:2] == ["web__add", "web__echo"]
            assert await source.tools()["web__echo"].call({"text": "up"}, ctx) == "up"


async def test_a_server_killed_mid_call_then_restarted(ctx: ToolContext) -> None:
    state = ServerState()
    build_server(state)
    served = Served(state.app(), lifespan="on", timeout_graceful_shutdown=0)
    async with served, source_of({"web": http_config(served.port)}) as source:
        connection = source.connections["web"]
        await until(connection, "connected")
        call = asyncio.create_task(source.tools()["web__slow"].call({"seconds": 60}, ctx))
        with anyio.fail_after(10):
            await state.started.wait()
        await served.stop()
        with anyio.fail_after(10), pytest.raises(ToolError, match="MCP server 'web'"):
            await call
        with pytest.raises(ToolError, match=r"MCP server 'web' is unavailable \(reconnecting"):
            await source.tools()["web__echo"].call({"text": "x"}, ctx)
        restarted = ServerState()
        build_server(restarted)
        async with Served(restarted.app(), lifespan="on", port=served.port):
            await until(connection, "connected")
            assert await source.tools()["web__echo"].call({"text": "back"}, ctx) == "back"
            assert restarted.calls == ["echo"]


async def test_a_server_restarted_between_calls_gets_a_new_session(ctx: ToolContext) -> None:
    first = ServerState()
    build_server(first)
    served = Served(first.app(), lifespan="on", timeout_graceful_shutdown=0)
    async with served, source_of({"web": http_config(served.port)}) as source:
        connection = source.connections["web"]
        await until(connection, "connected")
        await served.stop()
        second = ServerState()
        build_server(second)
        async with Served(second.app(), lifespan="on", port=served.port):
            # the old session is unknown to the new process: reopened, and the call sent again
            assert await source.tools()["web__echo"].call({"text": "again"}, ctx) == "again"
            assert second.calls == ["echo"]
            assert connection.connects == 2


# -- the network guard --------------------------------------------------------------------------


async def test_a_server_outside_the_allow_list_stops_start_up() -> None:
    with pytest.raises(ValueError, match=r"server 'web'.*not in the HTTP allow-list"):
        McpToolSource({"web": http_config(8080, "mcp.example.com")}, allow_hosts=["other.org"])


async def test_a_wildcard_never_opens_a_private_address() -> None:
    dns = FakeDNS({"mcp.example.com": ["127.0.0.1"]})
    config = {"web": http_config(free_port(), "mcp.example.com")}
    async with source_of(config, allow=("*.example.com",), resolver=dns) as source:
        connection = source.connections["web"]
        with anyio.fail_after(10):
            await connection.wait_for(lambda c: c.error is not None)
        assert "loopback address" in (connection.error or "")
        assert dns.lookups == ["mcp.example.com"] * len(dns.lookups)
        assert connection.state == "reconnecting"
