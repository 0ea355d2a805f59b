"""An httpx transport that connects only to addresses the `NetworkGuard` has checked.

DNS pinning: the transport is `app.http_transport.AiohttpTransport` with a resolver that
asks the guard (allow-list, then every resolved address checked) for each new connection,
with aiohttp's DNS cache off; aiohttp opens the socket to one of exactly those addresses.
There is no second lookup between the check and the connect, so a DNS answer that changes
in between (rebinding) cannot smuggle in a private address. aiohttp connects to an IP
literal without asking a resolver, so the transport checks the host of every request
itself first (the pure `check_host`: an IP literal against the address rules). TLS still
verifies the certificate against the hostname (aiohttp passes the URL's host as
`server_hostname`), and the `Host` header is the URL's.

Library errors are translated at the boundary (aiohttp's become httpx's, see
`app.http_transport`). `BlockedHostError` from the guard, and the guard's `ToolError` for a
host that does not resolve, pass through untouched.

Proxies are never used: a proxy would make the connect target the proxy, not the checked
address. Cookies are never kept: the client is shared by every run, so a cookie one run's
endpoint set would go out with every other run's requests to that host.
"""

from __future__ import annotations

import socket
from http.cookiejar import Cookie, CookieJar
from typing import Any

import httpx
from aiohttp.abc import AbstractResolver, ResolveResult

from app.http_transport import AiohttpTransport
from app.propagation import propagate
from app.tools.netguard import BlockedHostError, NetworkGuard, check_host


class GuardedResolver(AbstractResolver):
    """aiohttp's resolver interface over `NetworkGuard.resolve`: only checked addresses."""

    def __init__(self, guard: NetworkGuard) -> None:
        self._guard = guard

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        return [
            ResolveResult(
                hostname=host,
                host=address,
                port=port,
                family=socket.AF_INET6 if ":" in address else socket.AF_INET,
                proto=0,
                flags=socket.AI_NUMERICHOST,
            )
            for address in await self._guard.resolve(host)
        ]

    async def close(self) -> None:
        return None


class GuardedTransport(AiohttpTransport):
    """An HTTP/1.1 connection pool whose every connection goes to a checked address."""

    def __init__(self, guard: NetworkGuard, *, limits: httpx.Limits | None = None) -> None:
        super().__init__(limits=limits, resolver=GuardedResolver(guard), cache_dns=False)
        self._guard = guard

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        refusal = check_host(request.url.raw_host.decode("ascii"), self._guard.allow)
        if refusal is not None:
            raise BlockedHostError(refusal)
        return await super().handle_async_request(request)


class _NoCookies(CookieJar):
    """A cookie jar that keeps nothing (httpx's client would otherwise keep every cookie)."""

    def set_cookie(self, cookie: Cookie) -> None:
        return None

    def extract_cookies(self, response: Any, request: Any) -> None:
        return None


def guarded_client(guard: NetworkGuard, *, timeout_s: float = 20.0) -> httpx.AsyncClient:
    """An `AsyncClient` whose every connection goes through `guard`; no proxies, no redirects."""
    return httpx.AsyncClient(
        transport=GuardedTransport(guard),
        timeout=httpx.Timeout(timeout_s),
        follow_redirects=False,
        trust_env=False,
        cookies=_NoCookies(),
        headers={"User-Agent": "finishline-tools/0.1", "Accept-Encoding": "identity"},
        event_hooks={"request": [propagate]},  # a traced run's traceparent
    )
