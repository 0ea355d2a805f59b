"""`AiohttpTransport`: httpx's client API over aiohttp's connection pool.

Every outbound call of the service (LLM endpoints, HTTP tools, webhooks) is an
`httpx.AsyncClient` whose transport is this one. Callers keep everything they rely on from
httpx: requests and responses, event hooks (`app.propagation`), a timeout per request,
redirects built by `response.next_request`, and httpx's exception tree. The bytes go through
one `aiohttp.ClientSession` instead of httpcore, which costs about half the client CPU per
call alone and stays flat under load, where httpcore's pool grows with the requests
waiting on it (bench/outbound.py; bench/README.md, "Outbound HTTP").

What the transport keeps from httpx's own: proxies from the environment (`HTTPS_PROXY`,
`NO_PROXY`, ...) only with `trust_env=True`, as httpx's default transport honours them for
the LLM clients (the guarded transport of the HTTP tools never); no cookies of its own (the
client's cookie handling is httpx's); the body is not decompressed here (httpx decodes
`Content-Encoding`); HTTP/1.1 only. Timeouts map onto aiohttp's: `connect` -> sock_connect,
`read` -> sock_read, `pool` -> connect (aiohttp's wait for a pool slot plus the connect).

aiohttp's errors become httpx's at this boundary, most specific first (`AIOHTTP_ERRORS`: a
test checks that every aiohttp client error has its own entry). Errors that are not
aiohttp's (a resolver's refusal, `app.tools.netguard.BlockedHostError`) pass through.

The session is made on the first request (aiohttp binds it to the running loop) and closed
by `aclose()`.
"""

from __future__ import annotations

import contextlib
import ssl
import urllib.request
from collections.abc import AsyncIterator, Iterator

import aiohttp
import httpx
from aiohttp.abc import AbstractResolver
from yarl import URL

AIOHTTP_ERRORS: tuple[tuple[type[Exception], type[httpx.TransportError]], ...] = (
    (aiohttp.ConnectionTimeoutError, httpx.ConnectTimeout),
    (aiohttp.SocketTimeoutError, httpx.ReadTimeout),
    (aiohttp.ServerTimeoutError, httpx.TimeoutException),
    (aiohttp.ClientConnectorError, httpx.ConnectError),  # refused, DNS, TLS handshake
    (aiohttp.ServerFingerprintMismatch, httpx.ConnectError),
    (aiohttp.ServerDisconnectedError, httpx.RemoteProtocolError),  # closed before a response
    (aiohttp.ClientConnectionResetError, httpx.ReadError),
    (aiohttp.ClientOSError, httpx.NetworkError),
    (aiohttp.ClientConnectionError, httpx.NetworkError),
    (aiohttp.ClientPayloadError, httpx.RemoteProtocolError),  # a body cut short or malformed
    (aiohttp.ClientResponseError, httpx.RemoteProtocolError),  # an unparsable response
    (aiohttp.NonHttpUrlClientError, httpx.UnsupportedProtocol),
    (aiohttp.InvalidURL, httpx.LocalProtocolError),
    (aiohttp.RedirectClientError, httpx.LocalProtocolError),  # never: redirects are httpx's
    (aiohttp.UploadAbortedError, httpx.WriteError),
    (aiohttp.ClientError, httpx.TransportError),
)
"""aiohttp exception -> httpx exception, most specific first."""

_SKIP_AUTO_HEADERS = frozenset({"Accept", "Accept-Encoding", "User-Agent", "Content-Type"})
"""Headers aiohttp would add when missing: the httpx request says which it sends."""
_MAX_HEADER_BYTES = 16 * 1024
_MAX_HEADERS = 512


@contextlib.contextmanager
def translated_errors() -> Iterator[None]:
    """aiohttp's exceptions as httpx's (see `AIOHTTP_ERRORS`); any other passes through."""
    try:
        yield
    except aiohttp.ClientError as exc:
        for source, target in AIOHTTP_ERRORS:
            if isinstance(exc, source):
                raise target(str(exc) or type(exc).__name__) from exc
        raise  # unreachable: aiohttp.ClientError is the last entry


class _ResponseStream(httpx.AsyncByteStream):
    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with translated_errors():
            async for chunk in self._response.content.iter_any():
                yield chunk

    async def aclose(self) -> None:
        # back to the pool when read to the end, else the connection is closed
        self._response.release()


class AiohttpTransport(httpx.AsyncBaseTransport):
    """An HTTP/1.1 connection pool (aiohttp's `TCPConnector`) behind httpx.

    `limits.max_connections` bounds the pool (None: unbounded); `keepalive_expiry` is how
    long an idle connection is kept (`max_keepalive_connections` has no aiohttp equivalent:
    idle connections are kept up to the pool's bound). `resolver` replaces the system's DNS
    (aiohttp connects to exactly the addresses it returns, and asks it for every new
    connection when `cache_dns` is off); `ssl_context` verifies TLS (httpx's default
    context, certifi's roots, when None); `trust_env` uses the proxies the environment names.
    """

    def __init__(
        self,
        *,
        limits: httpx.Limits | None = None,
        ssl_context: ssl.SSLContext | None = None,
        resolver: AbstractResolver | None = None,
        cache_dns: bool = True,
        trust_env: bool = False,
    ) -> None:
        limits = limits or httpx.Limits(max_connections=100, max_keepalive_connections=20)
        self._limit = limits.max_connections or 0
        self._keepalive_s = limits.keepalive_expiry
        self._ssl = ssl_context
        self._resolver = resolver
        self._cache_dns = cache_dns
        # aiohttp reads the environment on every request when trusting it: only when needed
        self._trust_env = trust_env and bool(set(urllib.request.getproxies()) - {"no"})
        self._session: aiohttp.ClientSession | None = None
        self._timeouts: dict[tuple[float | None, ...], aiohttp.ClientTimeout] = {}
        self._closed = False

    def _open(self) -> aiohttp.ClientSession:
        if self._closed:
            raise RuntimeError("the transport is closed")
        connector = aiohttp.TCPConnector(
            limit=self._limit,
            limit_per_host=0,
            keepalive_timeout=self._keepalive_s if self._keepalive_s is not None else 15.0,
            ssl=self._ssl if self._ssl is not None else httpx.create_ssl_context(),
            resolver=self._resolver,
            use_dns_cache=self._cache_dns,
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            cookie_jar=aiohttp.DummyCookieJar(),
            trust_env=self._trust_env,
            auto_decompress=False,
            skip_auto_headers=_SKIP_AUTO_HEADERS,
            timeout=aiohttp.ClientTimeout(total=None),
            # httpcore (h11) took a header block of up to 16 KiB, in lines of any length
            max_line_size=_MAX_HEADER_BYTES,
            max_field_size=_MAX_HEADER_BYTES,
            max_headers=_MAX_HEADERS,
        )
        return self._session

    def _timeout(self, request: httpx.Request) -> aiohttp.ClientTimeout:
        given = request.extensions.get("timeout") or {}
        key = (given.get("connect"), given.get("read"), given.get("pool"))
        timeout = self._timeouts.get(key)
        if timeout is None:
            if len(self._timeouts) > 64:  # timeouts come from a few settings: never many
                self._timeouts.clear()
            connect, read, pool = key
            timeout = self._timeouts[key] = aiohttp.ClientTimeout(
                total=None, connect=pool, sock_connect=connect, sock_read=read
            )
        return timeout

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        session = self._session or self._open()
        headers = request.headers.multi_items()
        data: bytes | AsyncIterator[bytes] | None
        try:
            data = request.content or None
        except httpx.RequestNotRead:  # a streamed body: aiohttp frames it itself
            data = _chunks(request.stream)
            headers = [(k, v) for k, v in headers if k.lower() != "transfer-encoding"]
        with translated_errors():
            response = await session.request(
                request.method,
                URL(str(request.url), encoded=True),
                headers=headers,
                data=data,
                allow_redirects=False,
                timeout=self._timeout(request),
            )
        return httpx.Response(
            status_code=response.status,
            headers=response.raw_headers,
            stream=_ResponseStream(response),
            extensions={
                "http_version": b"HTTP/1.1",
                "reason_phrase": (response.reason or "").encode("ascii", "replace"),
            },
        )

    async def aclose(self) -> None:
        self._closed = True
        session, self._session = self._session, None
        if session is not None:
            await session.close()


async def _chunks(stream: httpx.SyncByteStream | httpx.AsyncByteStream) -> AsyncIterator[bytes]:
    assert isinstance(stream, httpx.AsyncByteStream)
    async for chunk in stream:
        yield chunk
