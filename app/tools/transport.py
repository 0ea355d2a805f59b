"""An httpx transport that connects only to addresses the `NetworkGuard` has checked.

DNS pinning: httpcore asks its network backend to `connect_tcp(host, port)`; our backend
resolves the host through the guard (allow-list, then every resolved address checked) and
opens the socket to one of exactly those addresses. There is no second lookup between the
check and the connect, so a DNS answer that changes in between (rebinding) cannot smuggle
in a private address. TLS still verifies the certificate against the hostname (httpcore
passes the URL's host as `server_hostname`), and the `Host` header is the URL's.

Library errors are translated at the boundary: httpcore's exceptions become httpx's, most
specific first. `BlockedHostError` from the guard passes through untouched.

Proxies are never used (`trust_env=False`): a proxy would make the connect target the
proxy, not the checked address.
"""

from __future__ import annotations

import contextlib
import typing
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator

import httpcore
import httpx

from app.propagation import propagate
from app.tools.netguard import NetworkGuard

_ERRORS: tuple[tuple[type[Exception], type[httpx.TransportError]], ...] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.ProxyError, httpx.ProxyError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.ProtocolError, httpx.ProtocolError),
)
"""httpcore exception -> httpx exception, most specific first."""


@contextlib.contextmanager
def _translated_errors() -> Iterator[None]:
    try:
        yield
    except Exception as exc:
        for source, target in _ERRORS:
            if isinstance(exc, source):
                raise target(str(exc)) from exc
        raise


class GuardedNetworkBackend(httpcore.AsyncNetworkBackend):
    """Resolves through the guard, then connects to a checked address (tried in order)."""

    def __init__(
        self, guard: NetworkGuard, inner: httpcore.AsyncNetworkBackend | None = None
    ) -> None:
        self._guard = guard
        self._inner = inner or httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        addresses = await self._guard.resolve(host)
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
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
        assert failure is not None  # guard.resolve returns at least one address
        raise failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("unix sockets are not reachable through the HTTP tools")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class _ResponseStream(httpx.AsyncByteStream):
    def __init__(self, stream: AsyncIterable[bytes]) -> None:
        self._stream = stream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _translated_errors():
            async for part in self._stream:
                yield part

    async def aclose(self) -> None:
        close = getattr(self._stream, "aclose", None)
        if close is not None:
            with _translated_errors():
                await close()


class GuardedTransport(httpx.AsyncBaseTransport):
    """An HTTP/1.1 connection pool over `GuardedNetworkBackend`."""

    def __init__(
        self,
        guard: NetworkGuard,
        *,
        limits: httpx.Limits | None = None,
        network_backend: httpcore.AsyncNetworkBackend | None = None,
    ) -> None:
        limits = limits or httpx.Limits(max_connections=100, max_keepalive_connections=20)
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=httpx.create_ssl_context(),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=GuardedNetworkBackend(guard, network_backend),
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.AsyncByteStream)
        core_request = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        with _translated_errors():
            response = await self._pool.handle_async_request(core_request)
        assert isinstance(response.stream, typing.AsyncIterable)
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_ResponseStream(response.stream),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        with _translated_errors():
            await self._pool.aclose()


def guarded_client(guard: NetworkGuard, *, timeout_s: float = 20.0) -> httpx.AsyncClient:
    """An `AsyncClient` whose every connection goes through `guard`; no proxies, no redirects."""
    return httpx.AsyncClient(
        transport=GuardedTransport(guard),
        timeout=httpx.Timeout(timeout_s),
        follow_redirects=False,
        trust_env=False,
        headers={"User-Agent": "finishline-tools/0.1", "Accept-Encoding": "identity"},
        event_hooks={"request": [propagate]},  # a traced run's traceparent
    )
