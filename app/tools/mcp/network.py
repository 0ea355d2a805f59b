"""The network guard of the HTTP tools, applied to Streamable HTTP MCP servers.

The MCP SDK speaks HTTP through `httpx2`, so the guard is wired in at its connection
pool: every connection resolves its host through the `NetworkGuard` (allow-list, then every
address checked) and connects to exactly the checked addresses, as `app.tools.transport`
does for the HTTP tools. No proxies (`trust_env=False`), no redirects off the endpoint's
origin (the SDK follows none). Over it, `McpExchanges` caps each answer and abandons the
exchanges of cancelled calls (exchanges.py). This module is the one place the MCP source
imports the guard from.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import httpcore2
import httpx2

from app.tools.base import ToolError
from app.tools.mcp.exchanges import McpExchanges
from app.tools.netguard import NetworkGuard, Resolver, check_url_allowed

__all__ = ["NetworkGuard", "Resolver", "check_url_allowed", "guarded_mcp_client"]


class _GuardedBackend(httpcore2.AsyncNetworkBackend):
    def __init__(self, guard: NetworkGuard) -> None:
        self._guard = guard
        self._inner = httpcore2.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        try:
            addresses = await self._guard.resolve(host)
        except ToolError as exc:
            raise httpcore2.ConnectError(str(exc)) from exc
        failure: Exception | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(
                    address,
                    port,
                    timeout=timeout,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except (httpcore2.ConnectError, httpcore2.ConnectTimeout) as exc:
                failure = exc
        raise failure or httpcore2.ConnectError(f"no address to connect to for {host!r}")

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        raise httpcore2.ConnectError("unix sockets are not reachable through the guard")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def guarded_mcp_client(
    guard: NetworkGuard,
    headers: Mapping[str, str],
    *,
    connect_timeout_s: float,
    max_message_bytes: int,
    server: str,
) -> httpx2.AsyncClient:
    """An `httpx2.AsyncClient` for one MCP server: guarded connections, its headers, each
    answer capped at `max_message_bytes`, uncompressed.

    Reads may wait long (a server holds its event stream open); one tool call's time is
    bounded by the run's `tool_timeout_s`, not here, and so is a wait for a pooled
    connection: with every connection busy, a call waits its turn (a pool timeout would
    fail the SDK's writer, and with it the session of every run).
    """
    transport = httpx2.AsyncHTTPTransport(trust_env=False)
    transport._pool = httpcore2.AsyncConnectionPool(
        ssl_context=httpx2.create_ssl_context(trust_env=False),
        max_connections=20,
        max_keepalive_connections=5,
        network_backend=_GuardedBackend(guard),
    )
    return httpx2.AsyncClient(
        transport=McpExchanges(transport, cap=max_message_bytes, server=server),
        headers={
            **{name: value for name, value in headers.items() if name.lower() != "accept-encoding"},
            "accept-encoding": "identity",
        },
        timeout=httpx2.Timeout(connect_timeout_s, read=300.0, pool=None),
        follow_redirects=False,
        trust_env=False,
    )


def check_server_url(url: str, allow_hosts: Sequence[str]) -> str | None:
    """Why `url` may not be reached under the allow-list (no DNS), or None."""
    return check_url_allowed(url, allow_hosts)
