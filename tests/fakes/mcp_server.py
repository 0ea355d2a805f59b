"""A real MCP server built with the official SDK, for the MCP tool-source tests.

In process (Streamable HTTP, served by `Served`): `build_server(state)` and
`state.app()`; the tests read `state` to see what the server saw (a cancelled call sets
`state.cancelled`). As a child process (stdio): `python -m tests.fakes.mcp_server`.

Tools: `add` (read-only), `echo`, `fail` (an isError result), `weather` (structured
content), `picture` (an image), `slow` (sleeps; marks a cancel), `header` (an HTTP request
header), `environ` (an environment variable), `pid` (the process id), `grow` (adds the tool
`extra` and sends tools/list_changed).
"""

from __future__ import annotations

import asyncio
import base64
import os
from dataclasses import dataclass, field
from typing import Any

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
    calls: list[str] = field(default_factory=list)

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


if __name__ == "__main__":
    asyncio.run(build_server().run_stdio_async())
