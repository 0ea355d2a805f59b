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

A client may bound what it reads (`max_response_bytes`: the A2A sub-agents, whose SDK reads a
card and each answer whole): a body past it raises `ResponseTooLargeError`, an httpx
transport error, after at most that many bytes (none when the Content-Length says so first).
The HTTP tools' fetcher streams and cuts bodies itself.

Library errors are translated at the boundary (aiohttp's become httpx's, see
`app.http_transport`). `BlockedHostError` from the guard, and the guard's `ToolError` for a
host that does not resolve, pass through untouched.

Proxies are never used: a proxy would make the connect target the proxy, not the checked
address. Cookies are never kept: the client is shared by every run, so a cookie one run's
endpoint set would go out with every other run's requests to that host.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from http.cookiejar import Cookie, CookieJar
from typing import Any

import httpx
from aiohttp.abc import AbstractResolver, ResolveResult

from app.engine.errors import FinishlineError
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


class ResponseTooLargeError(httpx.TransportError, FinishlineError):
    """A response body longer than the client reads (`guarded_client(max_response_bytes=)`):
    an httpx transport error to the code that calls the client, and one of ours."""


class _CappedStream(httpx.AsyncByteStream):
    """A response body that raises `ResponseTooLargeError` past `max_bytes`: at most that much
    (and one chunk) is ever read into memory."""

    def __init__(self, stream: httpx.AsyncByteStream, max_bytes: int, host: str) -> None:
        self._stream = stream
        self._max_bytes = max_bytes
        self._host = host

    async def __aiter__(self) -> AsyncIterator[bytes]:
        read = 0
        async for chunk in self._stream:
            read += len(chunk)
            if read > self._max_bytes:
                raise ResponseTooLargeError(_too_large(self._host, self._max_bytes))
            yield chunk

    async def aclose(self) -> None:
        await self._stream.aclose()


class GuardedTransport(AiohttpTransport):
    """An HTTP/1.1 connection pool whose every connection goes to a checked address; with
    `max_response_bytes`, no response body is read past it (`ResponseTooLargeError`, before
    any of it is read when its Content-Length says so)."""

    def __init__(
        self,
        guard: NetworkGuard,
        *,
        limits: httpx.Limits | None = None,
        max_response_bytes: int | None = None,
    ) -> None:
        super().__init__(limits=limits, resolver=GuardedResolver(guard), cache_dns=False)
        self._guard = guard
        self._max_bytes = max_response_bytes

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        host = request.url.raw_host.decode("ascii")
        refusal = check_host(host, self._guard.allow)
        if refusal is not None:
            raise BlockedHostError(refusal)
        response = await super().handle_async_request(request)
        if self._max_bytes is None:
            return response
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self._max_bytes:
            await response.aclose()
            raise ResponseTooLargeError(_too_large(host, self._max_bytes))
        assert isinstance(response.stream, httpx.AsyncByteStream)
        response.stream = _CappedStream(response.stream, self._max_bytes, host)
        return response


def _too_large(host: str, max_bytes: int) -> str:
    return f"the response from {host} is longer than the {max_bytes:,} bytes read"


class _NoCookies(CookieJar):
    """A cookie jar that keeps nothing (httpx's client would otherwise keep every cookie)."""

    def set_cookie(self, cookie: Cookie) -> None:
        return None

    def extract_cookies(self, response: Any, request: Any) -> None:
        return None


def guarded_client(
    guard: NetworkGuard, *, timeout_s: float = 20.0, max_response_bytes: int | None = None
) -> httpx.AsyncClient:
    """An `AsyncClient` whose every connection goes through `guard`; no proxies, no redirects;
    with `max_response_bytes`, no body read past it (`ResponseTooLargeError`)."""
    return httpx.AsyncClient(
        transport=GuardedTransport(guard, max_response_bytes=max_response_bytes),
        timeout=httpx.Timeout(timeout_s),
        follow_redirects=False,
        trust_env=False,
        cookies=_NoCookies(),
        headers={"User-Agent": "finishline-tools/0.1", "Accept-Encoding": "identity"},
        event_hooks={"request": [propagate]},  # a traced run's traceparent
    )
