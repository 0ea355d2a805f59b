"""The tools a server offers, by name, and the factory of the built-in set.

A `ToolRegistry` is built once per process and shared by every run, so tools hold no per-run
state. Besides its own tools it offers those of an attached MCP source (`use_mcp`), whose
set changes as servers connect and list them. It owns the `HttpFetcher` (and so the HTTP
client) of its HTTP tools, and the MCP source's sessions: close them with `aclose()` (or
`async with`) on shutdown. Request-declared `HttpTool`s should use the same
`registry.http` fetcher, so they share its guard, connection pool and limits.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

import httpx

from app.engine.errors import FinishlineError
from app.engine.ports import Tool
from app.engine.prompts import TASK_FINISHED
from app.tools.bounds import ConnectionBounds
from app.tools.calculator import CalculatorTool
from app.tools.current_time import CurrentTimeTool
from app.tools.fetcher import HttpFetcher
from app.tools.http import HttpGetTool
from app.tools.netguard import NetworkGuard, Resolver
from app.tools.plan import UpdatePlanTool

if TYPE_CHECKING:
    from app.tools.mcp.source import McpToolSource

RESERVED_NAMES = frozenset({TASK_FINISHED})
"""Names the engine gives its own tools; no registered tool may take them."""


class UnknownToolError(FinishlineError, LookupError):
    """Names were asked for that no registered tool has."""

    def __init__(self, unknown: Sequence[str], available: Sequence[str]) -> None:
        self.unknown = list(unknown)
        self.available = list(available)
        names = ", ".join(repr(name) for name in self.unknown)
        offered = ", ".join(self.available) or "none"
        noun = "tool" if len(self.unknown) == 1 else "tools"
        super().__init__(f"unknown {noun} {names}; available tools: {offered}")


class DuplicateToolError(FinishlineError, ValueError):
    """A tool was registered under a name that is already taken or reserved."""


class ToolRegistry:
    """Tools by name. Iterating yields them sorted by name."""

    def __init__(self, tools: Iterable[Tool] = (), *, http: HttpFetcher | None = None) -> None:
        self._tools: dict[str, Tool] = {}
        self._http = http
        self._mcp: McpToolSource | None = None
        for tool in tools:
            self.register(tool)

    @property
    def http(self) -> HttpFetcher | None:
        """The fetcher HTTP tools of this registry share, if it has one."""
        return self._http

    @property
    def mcp(self) -> McpToolSource | None:
        """The MCP tool source whose tools this registry offers too, if any."""
        return self._mcp

    def use_mcp(self, source: McpToolSource) -> None:
        """Offer `source`'s tools beside the registered ones (which win a name clash)."""
        self._mcp = source

    def _all(self) -> dict[str, Tool]:
        if self._mcp is None:
            return self._tools
        return {**self._mcp.tools(), **self._tools}

    def register(self, tool: Tool) -> None:
        if tool.name in RESERVED_NAMES:
            raise DuplicateToolError(f"the tool name {tool.name!r} is reserved by the engine")
        if tool.name in self._tools:
            raise DuplicateToolError(f"a tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool

    def get(self, name: str) -> Tool:
        """The tool called `name`; `UnknownToolError` when there is none."""
        try:
            return self._all()[name]
        except KeyError:
            raise UnknownToolError([name], self.names()) from None

    def names(self) -> list[str]:
        return sorted(self._all())

    def describe(self) -> list[dict[str, Any]]:
        """What `GET /tools` shows: name, description, parameters, idempotent, source."""
        return [
            {
                "name": tool.name,
                "description": tool.description,
                "parameters": dict(tool.parameters),
                "idempotent": tool.idempotent,
                "source": getattr(tool, "source", "builtin"),
            }
            for tool in self
        ]

    def resolve(self, names: Iterable[str], *, stand_ins: bool = False) -> list[Tool]:
        """The tools for `names`, in that order, each once; every unknown name in one error.

        `stand_ins` (for a run that starts): an MCP tool its server does not offer right now
        resolves to a stand-in whose calls are `is_error` observations.
        """
        wanted = list(dict.fromkeys(names))
        tools = self._all()
        unknown = [name for name in wanted if name not in tools]
        if unknown and stand_ins and self._mcp is not None:
            found = {name: self._mcp.stand_in(name) for name in unknown}
            tools = {**tools, **{name: tool for name, tool in found.items() if tool is not None}}
            unknown = [name for name in unknown if name not in tools]
        if unknown:
            raise UnknownToolError(unknown, sorted(tools))
        return [tools[name] for name in wanted]

    def __contains__(self, name: object) -> bool:
        return name in self._all()

    def __iter__(self) -> Iterator[Tool]:
        tools = self._all()
        return iter(tools[name] for name in sorted(tools))

    def __len__(self) -> int:
        return len(self._all())

    async def aclose(self) -> None:
        """Release what the tools hold open: MCP sessions, the HTTP client if it made it."""
        if self._mcp is not None:
            await self._mcp.aclose()
        if self._http is not None:
            await self._http.aclose()

    async def __aenter__(self) -> ToolRegistry:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()


def builtin_registry(
    *,
    http_allow_hosts: Sequence[str] = (),
    http_max_bytes: int = 1_000_000,
    http_timeout_s: float = 20.0,
    client: httpx.AsyncClient | None = None,
    resolver: Resolver | None = None,
    bounds: ConnectionBounds | None = None,
) -> ToolRegistry:
    """calculator, current_time, http_get and update_plan, over one guarded HTTP client.

    Without `client`, the registry makes (and closes) a client whose connections are pinned
    to checked addresses. A `client` passed in stays the caller's to close, and is guarded
    by resolving each hop before sending (see `app.tools.fetcher` for the residual risk).
    """
    fetcher = HttpFetcher(
        NetworkGuard(http_allow_hosts, resolver),
        client=client,
        max_bytes=http_max_bytes,
        timeout_s=http_timeout_s,
        bounds=bounds,
    )
    tools: list[Tool] = [
        CalculatorTool(),
        CurrentTimeTool(),
        HttpGetTool(fetcher),
        UpdatePlanTool(),
    ]
    return ToolRegistry(tools, http=fetcher)
