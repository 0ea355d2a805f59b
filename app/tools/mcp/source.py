"""The MCP tool source: every configured server's tools, as engine tools named `NAME__TOOL`.

`McpToolSource` owns one `ServerConnection` per server (one session per server per
process, shared by every run). `start()` launches their supervisors without waiting: a
server that is down at start-up is retried in the background, and its tools appear once it
has listed them. `aclose()` closes the sessions and stops stdio children.

An `McpTool` goes through the engine's normal tool path: its arguments are checked against
the server's input schema, the run's `tool_timeout_s`, deadline and cancel apply (a
cancelled call sends `notifications/cancelled`), and the MCP `readOnlyHint` and
`idempotentHint` annotations make it idempotent for the repetition rules.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import structlog
from mcp.types import Tool as McpToolInfo

from app.engine.ports import ToolContext
from app.tools.base import SchemaTool, ToolError
from app.tools.mcp.config import McpHttpServer, McpServerConfig
from app.tools.mcp.connection import MAX_MESSAGE_BYTES, ServerConnection
from app.tools.mcp.content import render_result
from app.tools.mcp.errors import UnknownServerError
from app.tools.mcp.naming import exposed_name
from app.tools.mcp.network import NetworkGuard, Resolver, check_url_allowed

log = structlog.get_logger("finishline.mcp")

CLOSE_GRACE_S = 10.0
"""How long closing waits for sessions to end (stdio children to exit) before cancelling."""


class McpTool(SchemaTool):
    """A tool of an MCP server, called on that server's shared session."""

    def __init__(self, name: str, info: McpToolInfo, connection: ServerConnection) -> None:
        hints = info.annotations
        idempotent = bool(hints and (hints.read_only_hint or hints.idempotent_hint))
        description = info.description or info.title or info.name
        super().__init__(
            name=name,
            description=description,
            parameters=info.input_schema,
            idempotent=idempotent,
        )
        self.source = f"mcp:{connection.name}"
        self.remote_name = info.name
        self._connection = connection

    async def call(self, arguments: dict[str, Any], ctx: ToolContext) -> str:
        result = await self._connection.call(self.remote_name, arguments)
        return render_result(self.name, result)


class UnavailableTool(SchemaTool):
    """Stands in for an MCP tool a starting run was given but its server does not offer now
    (down since a restart, or no longer listing it): every call is an `is_error` observation."""

    def __init__(self, name: str, server: str) -> None:
        super().__init__(
            name=name,
            description=f"A tool of the MCP server {server!r}, unavailable right now.",
            parameters={"type": "object"},
            idempotent=False,
        )
        self.source = f"mcp:{server}"
        self._server = server

    async def call(self, arguments: dict[str, Any], ctx: ToolContext) -> str:
        raise ToolError(
            f"MCP server {self._server!r} does not offer {self.name} right now "
            "(it is down, or no longer lists the tool)"
        )


class McpToolSource:
    """The configured MCP servers and their current tools."""

    def __init__(
        self,
        servers: Mapping[str, McpServerConfig],
        *,
        allow_hosts: Sequence[str] = (),
        resolver: Resolver | None = None,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
    ) -> None:
        problems = [
            f"server {name!r}: {problem}"
            for name, config in servers.items()
            if isinstance(config, McpHttpServer)
            and (problem := check_url_allowed(config.url, allow_hosts)) is not None
        ]
        if problems:
            raise ValueError(
                "FINISHLINE_MCP_SERVERS: "
                + "; ".join(problems)
                + " (MCP servers obey FINISHLINE_HTTP_TOOL_ALLOW_HOSTS)"
            )
        guard = NetworkGuard(allow_hosts, resolver)
        self.connections = {
            name: ServerConnection(name, config, guard, max_message_bytes=max_message_bytes)
            for name, config in servers.items()
        }
        self._tools: dict[str, McpTool] = {}
        self._by_server: dict[str, list[McpTool]] = {name: [] for name in servers}
        self._tasks: list[asyncio.Task[None]] = []
        for connection in self.connections.values():
            connection.on_change = self._rebuild

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Launch every server's supervisor; returns at once."""
        for name, connection in self.connections.items():
            self._tasks.append(asyncio.create_task(connection.run(), name=f"mcp:{name}"))

    async def aclose(self) -> None:
        """Close every session and stop stdio children; cancel what does not end in time."""
        for connection in self.connections.values():
            connection.close()
        if not self._tasks:
            return
        _, pending = await asyncio.wait(self._tasks, timeout=CLOSE_GRACE_S)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)
        self._tasks.clear()

    # -- tools --------------------------------------------------------------------------------

    def tools(self) -> Mapping[str, McpTool]:
        """Every listed MCP tool, by exposed name."""
        return self._tools

    def server_names(self) -> list[str]:
        return sorted(self.connections)

    def stand_in(self, name: str) -> SchemaTool | None:
        """The tool `name`, or an `UnavailableTool` when it names a configured server
        (`SERVER__…`) that does not offer it now; None when it is no MCP tool at all."""
        tool = self._tools.get(name)
        if tool is not None:
            return tool
        server = name.partition("__")[0]
        return UnavailableTool(name, server) if server in self.connections else None

    def server_tools(self, names: Iterable[str], *, lenient: bool = False) -> list[McpTool]:
        """All the tools of the servers `names`, each server once, in order.

        `UnknownServerError` names every server that is not configured, or that has not
        listed its tools since start-up; `lenient` skips them instead (a run starting).
        """
        wanted = list(dict.fromkeys(names))
        if lenient:
            wanted = [n for n in wanted if n in self.connections and self.connections[n].listed]
        unknown = [name for name in wanted if name not in self.connections]
        if unknown:
            listed = ", ".join(repr(name) for name in unknown)
            offered = ", ".join(self.server_names()) or "none"
            raise UnknownServerError(
                f"unknown MCP server {listed}; configured servers: {offered}",
                unknown,
                self.server_names(),
            )
        waiting = [name for name in wanted if not self.connections[name].listed]
        if waiting:
            listed = ", ".join(repr(name) for name in waiting)
            raise UnknownServerError(
                f"MCP server {listed} has not connected yet; its tools are not known",
                waiting,
                self.server_names(),
            )
        return [tool for name in wanted for tool in self._by_server[name]]

    def describe_servers(self) -> list[dict[str, Any]]:
        """Each server's name, transport, state, last error and number of tools."""
        return [
            {
                "name": name,
                "transport": connection.transport,
                "state": connection.state,
                "error": connection.error,
                "tools": len(self._by_server[name]),
            }
            for name, connection in sorted(self.connections.items())
        ]

    def _rebuild(self) -> None:
        tools: dict[str, McpTool] = {}
        for name, connection in self.connections.items():
            mine: list[McpTool] = []
            for info in connection.tools:
                exposed = exposed_name(name, info.name)
                try:
                    tool = McpTool(exposed, info, connection)
                except ValueError as exc:
                    log.warning("mcp_tool_skipped", server=name, tool=info.name, error=str(exc))
                    continue
                if exposed in tools:
                    log.warning("mcp_tool_skipped", server=name, tool=info.name, error="dup")
                    continue
                tools[exposed] = tool
                mine.append(tool)
            self._by_server[name] = mine
        self._tools = tools
