"""One MCP server's session: opened in the background, shared by every run, kept alive.

`ServerConnection.run()` is the server's supervisor task. It opens the session (spawning
the stdio child, or connecting over Streamable HTTP through the guard), runs the
`initialize` handshake, lists the tools, then serves calls until the session dies; then it
waits (backoff doubling from `retry_initial_s` to `retry_max_s`) and opens a new one,
listing the tools again. A `notifications/tools/list_changed` from the server lists them
again on the live session. The session is entered and left in this task only (the SDK's
transports hold anyio cancel scopes), so `close()` asks the task to leave rather than
cancelling it; leaving a stdio session stops its child.

Calls come from run tasks: `call()` sends `tools/call` on the current session. Cancelling
the caller (tool timeout, deadline, cancel) makes the SDK send `notifications/cancelled`
for the request. One call's failure is that call's: an answer over `max_message_bytes` is
not read (the transports drop it, `stdio.py`, `exchanges.py`) and fails the call alone; a
call that finds the server down raises `ToolError` (an `is_error` observation). A call
whose answer broke off, or that was cancelled, makes the supervisor check the session
(`tools/list` within `connect_timeout_s`) rather than drop it under the other runs' calls:
a session that answers is kept, one that does not (a dead or hung server) is reopened.
Calls arriving during the check wait for it. A session the server no longer knows (an
HTTP server restarted between calls) is reopened and the call sent once more.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AsyncExitStack
from typing import Any, Literal

import structlog
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, Implementation, Tool, ToolListChangedNotification
from mcp_types import CONNECTION_CLOSED, INVALID_REQUEST
from pydantic import ValidationError

from app import __version__
from app.engine.errors import FinishlineError
from app.tools.base import ToolError
from app.tools.mcp import unread
from app.tools.mcp.config import McpHttpServer, McpServerConfig
from app.tools.mcp.network import NetworkGuard, guarded_mcp_client
from app.tools.mcp.stdio import stdio_transport

log = structlog.get_logger("finishline.mcp")

State = Literal["connecting", "connected", "reconnecting", "closed"]
MAX_PAGES = 100
"""A server whose tools/list pages never end is cut here."""
MAX_MESSAGE_BYTES = 1_000_000
"""Default cap on one message from a server (FINISHLINE_MCP_MAX_RESULT_BYTES)."""


class ServerConnection:
    """The session with one configured server, and what it last listed."""

    def __init__(
        self,
        name: str,
        config: McpServerConfig,
        guard: NetworkGuard,
        *,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
    ) -> None:
        self.name = name
        self.config = config
        self.max_message_bytes = max_message_bytes
        self.state: State = "connecting"
        self.error: str | None = None
        self.tools: list[Tool] = []
        self.listed = False
        """True once a listing succeeded (its tools are kept while the server is down)."""
        self.connects = 0
        """Sessions opened so far (each reconnect adds one)."""
        self.on_change: Callable[[], None] = lambda: None
        self._guard = guard
        self._client: Client | None = None
        self._wake = asyncio.Event()
        self._stale = False
        self._dead = False
        self._checking = False
        """A call's answer broke off or it was cancelled: the supervisor checks the session."""
        self._closing = False
        self._changed = asyncio.Condition()

    @property
    def transport(self) -> Literal["http", "stdio"]:
        return "http" if isinstance(self.config, McpHttpServer) else "stdio"

    @property
    def closing(self) -> bool:
        """close() was called (read through a property: it changes while a loop awaits)."""
        return self._closing

    # -- the supervisor ----------------------------------------------------------------

    async def run(self) -> None:
        delay = self.config.retry_initial_s
        while not self._closing:
            live = False
            try:
                async with AsyncExitStack() as stack:
                    async with asyncio.timeout(self.config.connect_timeout_s):
                        client = await stack.enter_async_context(self._client_for())
                        self._stale = False
                        await self._list(client)
                    self._dead = False
                    self._client = client
                    self.connects += 1
                    await self._set("connected", None)
                    delay = self.config.retry_initial_s
                    await self._serve(client)
                    live = True
            except Exception as exc:  # any failure to connect or to list: retry later
                self._checking = False
                if not self._closing:
                    await self._set("reconnecting", describe_failure(exc))
            finally:
                self._client = None
                self._checking = False
            if self.closing:  # set by close() while we awaited
                break
            if live:  # the session died under a call: reconnect at once
                await self._set("reconnecting", self.error or "the session ended")
                continue
            log.warning("mcp_server_down", server=self.name, error=self.error, retry_s=delay)
            try:
                async with asyncio.timeout(delay):
                    await self._wait_closing()
            except TimeoutError:
                pass
            delay = min(delay * 2, self.config.retry_max_s)
        await self._set("closed", None)

    async def _serve(self, client: Client) -> None:
        """Until the session dies or the source closes; list again when told to, and every
        `health_interval_s` (which also finds a server that died while idle), and when a
        call asks for a check; a listing that fails or times out ends the session."""
        while True:
            try:
                async with asyncio.timeout(self.config.health_interval_s):
                    await self._wake.wait()
            except TimeoutError:
                self._stale = True
            self._wake.clear()
            if self._closing or self._dead:
                return
            if self._stale:
                self._stale = False
                try:
                    async with asyncio.timeout(self.config.connect_timeout_s):
                        await self._list(client)
                except TimeoutError:
                    wait = self.config.connect_timeout_s
                    raise NotAnsweringError(f"no answer to tools/list within {wait} s") from None
                if self._checking:
                    self._checking = False
                    log.info("mcp_session_checked", server=self.name)
                    async with self._changed:
                        self._changed.notify_all()

    async def _wait_closing(self) -> None:
        while not self._closing:
            await self._wake.wait()
            self._wake.clear()

    def _client_for(self) -> Client:
        config = self.config
        info = Implementation(name="finishline", version=__version__)
        if isinstance(config, McpHttpServer):
            http = guarded_mcp_client(
                self._guard,
                config.headers,
                connect_timeout_s=config.connect_timeout_s,
                max_message_bytes=self.max_message_bytes,
                server=self.name,
            )
            server: Any = _OwnedHttp(config.url, http, self.max_message_bytes)
        else:
            server = stdio_transport(self.name, config, max_message_bytes=self.max_message_bytes)
        return Client(
            server,
            mode="legacy",
            cache=None,
            client_info=info,
            message_handler=self._on_message,
        )

    async def _list(self, client: Client) -> None:
        tools: list[Tool] = []
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            page = await client.list_tools(cursor=cursor)
            tools += page.tools
            cursor = page.next_cursor
            if cursor is None:
                break
        if tools != self.tools or not self.listed:
            log.info("mcp_tools_listed", server=self.name, tools=len(tools))
            self.tools = tools
            self.listed = True
            self.on_change()
        async with self._changed:
            self._changed.notify_all()

    async def _on_message(self, message: object) -> None:
        if isinstance(message, ToolListChangedNotification):
            self._stale = True
            self._wake.set()
        elif isinstance(message, Exception):
            log.warning("mcp_transport_error", server=self.name, error=describe_failure(message))

    async def _set(self, state: State, error: str | None) -> None:
        changed = state != self.state
        self.state, self.error = state, error
        if changed:
            log.info("mcp_server_state", server=self.name, state=state, error=error)
        async with self._changed:
            self._changed.notify_all()

    # -- for runs and the source ----------------------------------------------------------

    async def call(self, tool: str, arguments: dict[str, Any]) -> CallToolResult:
        """`tools/call` on the live session; `ToolError` when the server is unreachable.

        A session the server no longer knows (it restarted between calls) is reopened and
        the call sent once more: the server refused it unseen, so it did not run.
        """
        try:
            return await self._call(tool, arguments)
        except _SessionExpiredError:
            try:
                async with asyncio.timeout(self.config.connect_timeout_s):
                    await self.wait_for(lambda c: c._client is not None or c._closing)
            except TimeoutError:
                pass
            try:
                return await self._call(tool, arguments)
            except _SessionExpiredError as exc:
                raise ToolError(f"MCP server {self.name!r} refused the session again") from exc

    async def _call(self, tool: str, arguments: dict[str, Any]) -> CallToolResult:
        if self._checking:  # wait for the check rather than use a session that may be dead
            try:
                async with asyncio.timeout(self.config.connect_timeout_s):
                    await self.wait_for(lambda c: not c._checking or c._closing)
            except TimeoutError:
                pass
        client = self._client
        if client is None:
            reason = f": {self.error}" if self.error else ""
            raise ToolError(
                f"MCP server {self.name!r} is unavailable ({self.state}{reason}); "
                "it is being reconnected, try again later"
            )
        try:
            return await client.call_tool(tool, arguments)
        except asyncio.CancelledError:
            self._check(client)  # a server that hung is found now, not by the next call
            raise
        except MCPError as exc:
            if unread.is_too_large(exc):
                raise ToolError(
                    f"MCP server {self.name!r} sent too much: {exc.message}; ask for less at a time"
                ) from exc
            if exc.code == INVALID_REQUEST and "session" in exc.message.lower():
                self._lost(client, exc)
                raise _SessionExpiredError from exc
            if exc.code != CONNECTION_CLOSED:
                refusal = f"MCP server {self.name!r} refused the call: {exc.message}"
                raise ToolError(refusal) from exc
            self._check(client)
            raise ToolError(
                f"the answer of MCP server {self.name!r} broke off: {exc.message}"
            ) from exc
        except ValidationError as exc:
            raise ToolError(f"MCP server {self.name!r} sent an invalid result") from exc
        except Exception as exc:
            self._check(client)
            raise ToolError(
                f"the connection to MCP server {self.name!r} failed: {describe_failure(exc)}"
            ) from exc

    def _check(self, client: Client) -> None:
        """Have the supervisor check the session (one check at a time); calls wait for it."""
        if self._client is client and not self._checking:
            self._checking = True
            self._stale = True
            self._wake.set()

    def _lost(self, client: Client, exc: BaseException) -> None:
        if self._client is client:
            self._client = None
            self.state, self.error = "reconnecting", describe_failure(exc)
            self._dead = True
            self._wake.set()

    async def wait_for(self, predicate: Callable[[ServerConnection], bool]) -> None:
        """Return once `predicate(self)` holds (tests and start-up waits)."""
        async with self._changed:
            await self._changed.wait_for(lambda: predicate(self))

    def close(self) -> None:
        """Ask the supervisor to leave its session (stopping a stdio child) and end."""
        self._closing = True
        self._wake.set()


class NotAnsweringError(FinishlineError):
    """A live session's server did not list its tools in time (it hangs)."""


class _SessionExpiredError(Exception):
    """The server answered that it does not know the session (HTTP 404 after a restart)."""


class _OwnedHttp:
    """`streamable_http_client` over our guarded `httpx2` client, closing it afterwards."""

    def __init__(self, url: str, http: Any, max_message_bytes: int) -> None:
        self._url = url
        self._http = http
        self._max = max_message_bytes
        self._stack = AsyncExitStack()

    async def __aenter__(self) -> Any:
        await self._stack.enter_async_context(self._http)
        # the SDK's own cap on an event, behind the exchanges' (which count the same bytes
        # and more: they always stop first)
        client = streamable_http_client(
            self._url, http_client=self._http, max_sse_event_size=self._max
        )
        return await self._stack.enter_async_context(client)

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        return await self._stack.__aexit__(*exc_info)


def describe_failure(exc: BaseException) -> str:
    """One line about why a connection failed: the innermost meaningful message."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(describe_failure(inner) for inner in exc.exceptions[:3])
    if isinstance(exc, TimeoutError):
        return "timed out connecting"
    if isinstance(exc, MCPError):
        return exc.message
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
