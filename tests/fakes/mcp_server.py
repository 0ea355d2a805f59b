"""A real MCP server built with the official SDK, for the MCP tool-source tests.

In process (Streamable HTTP, served by `Served`): `build_server(state)` and
`state.app()`; the tests read `state` to see what the server saw (a cancelled call sets
`state.cancelled`). As a child process: `python -m tests.fakes.mcp_server` (stdio), or
`http_server_process()` (Streamable HTTP on a loopback socket the child inherits, so the
test's process holds none of what the server makes).

Tools: `add` (read-only), `echo`, `fail` (an isError result), `weather` (structured
content), `picture` (an image), `slow` (sleeps; marks a cancel), `stubborn` (waits for
`state.unstick`, ignoring cancellation), `big` (a text of any size), `hold` and `release`
(calls held until released together), `header` (an HTTP request header), `environ` (an
environment variable), `pid` (the process id), `grow` (adds the tool `extra` and sends
tools/list_changed).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from subprocess import DEVNULL
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.types import Image
from mcp.types import ToolAnnotations

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)


@dataclass
class ServerState:
    """What an in-process server saw; `started` is set when `slow` begins."""

    server: MCPServer[Any] = field(init=False)
    started: asyncio.Event = field(default_factory=asyncio.Event)
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    unstick: asyncio.Event = field(default_factory=asyncio.Event)
    calls: list[str] = field(default_factory=list)
    holding: int = 0
    released: asyncio.Event = field(default_factory=asyncio.Event)
    gate: asyncio.Condition = field(default_factory=asyncio.Condition)

    def app(self) -> Any:
        return self.server.streamable_http_app()


def build_server(state: ServerState | None = None) -> MCPServer[Any]:
    state = state or ServerState()
    server: MCPServer[Any] = MCPServer("fake")
    state.server = server

    @server.tool(annotations=ToolAnnotations(readOnlyHint=True))
    def add(a: int, b: int) -> int:
        """Add two integers."""
        state.calls.append("add")
        return a + b

    @server.tool()
    def echo(text: str) -> str:
        """Echo the text back."""
        state.calls.append("echo")
        return text

    @server.tool()
    def fail(message: str) -> str:
        """Always fails with the message."""
        raise ToolError(message)

    @server.tool(structured_output=True)
    def weather(city: str) -> dict[str, Any]:
        """The weather of a city, as structured content."""
        return {"city": city, "temp_c": 21}

    @server.tool()
    def picture() -> Image:
        """A one-pixel PNG."""
        return Image(data=PNG, format="png")

    @server.tool()
    async def slow(seconds: float) -> str:
        """Sleep for a while."""
        state.started.set()
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            state.cancelled.set()
            raise
        return "slept"

    @server.tool()
    async def stubborn() -> str:
        """Wait until the test lets go, whatever the client says (cancels included)."""
        state.started.set()
        with anyio.CancelScope(shield=True):
            await state.unstick.wait()
        return "unstuck"

    @server.tool()
    def big(size: int) -> str:
        """A text of `size` characters."""
        return "x" * size

    @server.tool()
    async def hold() -> str:
        """Wait until `release` lets the held calls go."""
        async with state.gate:
            state.holding += 1
            state.gate.notify_all()
        await state.released.wait()
        return "held"

    @server.tool()
    async def release(holders: int) -> int:
        """Wait until `holders` calls of `hold` wait, let them go; how many were held."""
        async with state.gate:
            await state.gate.wait_for(lambda: state.holding >= holders)
        state.released.set()
        return state.holding

    @server.tool()
    def header(name: str, ctx: Context) -> str:
        """The value of an HTTP request header, or (absent)."""
        return (ctx.headers or {}).get(name.lower(), "(absent)")

    @server.tool()
    def environ(name: str) -> str:
        """The value of an environment variable of the server process, or (unset)."""
        return os.environ.get(name, "(unset)")

    @server.tool()
    def pid() -> int:
        """The server's process id."""
        return os.getpid()

    @server.tool()
    async def grow(ctx: Context) -> str:
        """Add the tool `extra` and tell the client its tool list changed."""

        def extra() -> str:
            """A tool added at run time."""
            return "extra!"

        server.add_tool(extra)
        await ctx.session.send_tool_list_changed()
        return "grown"

    return server


ROOT = Path(__file__).resolve().parents[2]


@asynccontextmanager
async def http_server_process(*, json_response: bool = False) -> AsyncIterator[str]:
    """The fake served over Streamable HTTP by a child process; yields its `/mcp` URL.

    The child inherits a socket already listening on 127.0.0.1 (a client connecting before
    it serves waits in the backlog: no start-up race), and is killed on leaving."""
    from tests.fakes.serving import loopback_socket

    with loopback_socket() as sock:
        fd = sock.fileno()
        args = [sys.executable, "-m", "tests.fakes.mcp_server", "--http-fd", str(fd)]
        process = await anyio.open_process(
            [*args, *(["--json"] if json_response else [])],
            cwd=ROOT,
            pass_fds=(fd,),
            stdin=DEVNULL,
            stdout=None,
            stderr=None,
        )
        try:
            yield f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
        finally:
            process.kill()
            with anyio.CancelScope(shield=True):
                await process.wait()


def _serve_http(fd: int, *, json_response: bool) -> None:
    import uvicorn

    app = build_server().streamable_http_app(json_response=json_response)
    config = uvicorn.Config(app, lifespan="on", log_level="warning", ws="none")
    with socket.socket(fileno=fd) as sock:
        asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--http-fd", type=int, help="serve Streamable HTTP on this socket")
    parser.add_argument("--json", action="store_true", help="answer JSON, not event streams")
    options = parser.parse_args()
    if options.http_fd is None:
        asyncio.run(build_server().run_stdio_async())
    else:
        _serve_http(options.http_fd, json_response=options.json)
