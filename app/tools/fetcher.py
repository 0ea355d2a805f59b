"""One guarded HTTP exchange: allow-list per hop, manual redirects, a deadline, a size cap.

`HttpFetcher` is shared by every HTTP tool of a registry (one `httpx.AsyncClient`, one
connection pool) and holds no per-run state. For each request it:

1. checks the URL against the allow-list (`NetworkGuard.check_url`), on every redirect hop;
2. lets the guarded transport resolve the host, check every address and connect to a
   checked one (see `app.tools.transport`). With a client supplied by the caller, whose
   transport is unknown, it resolves and checks each hop itself before sending instead; the
   client then resolves again to connect, so a DNS answer that changes in between
   (rebinding) is a residual risk of that mode only;
3. follows at most `max_redirects` redirects by hand (httpx builds each next request: the
   method change of 301/302/303, `Authorization` dropped across origins); the headers the
   caller passed are dropped too when a redirect leaves the first origin;
4. streams the body and stops after `max_bytes` bytes, saying so (`truncated`);
5. bounds the whole exchange, redirects and body included, by `timeout_s`.

Every failure a model can act on is raised as `ToolError` (`BlockedHostError` for the guard).

The fetcher makes its client on its first request: the guarded transport is aiohttp's, whose
imports take ~130 ms, so a server whose runs never call out over HTTP never loads it, and one
that does loads it once, in a thread, while the event loop keeps serving (`guarded_clients`).
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import importlib
import sys
from collections.abc import AsyncGenerator, Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

import anyio
import httpx

from app.tools.base import ToolError
from app.tools.bounds import ConnectionBounds
from app.tools.netguard import BlockedHostError, NetworkGuard

TRANSPORT = "app.tools.transport"


async def guarded_clients() -> Callable[..., httpx.AsyncClient]:
    """`app.tools.transport.guarded_client`, its module (and aiohttp) imported in a worker
    thread the first time it is asked for, so the event loop is not held by the imports."""
    if TRANSPORT not in sys.modules:
        await asyncio.to_thread(importlib.import_module, TRANSPORT)
    from app.tools.transport import guarded_client

    return guarded_client


_BINARY_MEDIA = (
    "image/",
    "audio/",
    "video/",
    "font/",
    "application/octet-stream",
    "application/pdf",
    "application/zip",
    "application/gzip",
)


@dataclass(frozen=True, slots=True)
class FetchedResponse:
    """The final response of an exchange, its body cut at the fetcher's cap."""

    url: str
    status_code: int
    reason: str
    content_type: str
    charset: str | None
    body: bytes
    truncated: bool
    redirects: int

    @property
    def ok(self) -> bool:
        return 200 <= self.status_code < 300

    @property
    def status_line(self) -> str:
        return f"HTTP {self.status_code} {self.reason}".rstrip()

    @property
    def is_binary(self) -> bool:
        """A body that is not text: a binary media type, or NUL bytes without a charset."""
        if self.charset is not None:
            return False
        return self.content_type.lower().startswith(_BINARY_MEDIA) or b"\x00" in self.body[:1024]

    def text(self) -> str:
        """The body decoded per its charset (else UTF-8), undecodable bytes replaced.

        A multi-byte character split by the size cap is dropped, not shown as garbage.
        """
        try:
            decoder = codecs.getincrementaldecoder(self.charset or "utf-8")(errors="replace")
        except LookupError:
            decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        return decoder.decode(self.body, final=not self.truncated)


class HttpFetcher:
    """Guarded HTTP requests over one shared client; close it with `aclose`."""

    def __init__(
        self,
        guard: NetworkGuard,
        *,
        client: httpx.AsyncClient | None = None,
        max_bytes: int = 1_000_000,
        timeout_s: float = 20.0,
        max_redirects: int = 5,
        bounds: ConnectionBounds | None = None,
    ) -> None:
        if max_bytes <= 0 or timeout_s <= 0 or max_redirects < 0:
            raise ValueError("max_bytes and timeout_s must be positive, max_redirects >= 0")
        self.guard = guard
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s
        self.max_redirects = max_redirects
        self.bounds = bounds
        self._pinned = client is None
        self._client = client
        """None until the first request when the fetcher makes its own (`client`)."""
        self._closed = False

    async def client(self) -> httpx.AsyncClient:
        """The client this fetcher sends with: the caller's, or its own made at the first
        request (`guarded_clients`); refused once the fetcher is closed."""
        if self._client is None:
            guarded_client = await guarded_clients()
            if self._closed:
                raise ToolError("the HTTP client is closed: the server is shutting down")
            if self._client is None:  # another request may have made it meanwhile
                self._client = guarded_client(self.guard, timeout_s=self.timeout_s)
        return self._client

    async def aclose(self) -> None:
        """Close the client if this fetcher made it; a client passed in is the caller's."""
        self._closed = True
        if self._pinned and self._client is not None:
            await self._client.aclose()

    async def fetch(
        self,
        method: str,
        url: str,
        *,
        params: Mapping[str, str] | None = None,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
        max_bytes: int | None = None,
    ) -> FetchedResponse:
        """Send one request and read the final response.

        `params` are added to the URL's own query; `json`, when not None, is the body.
        """
        timeout = timeout_s or self.timeout_s
        client = await self.client()
        try:
            target = httpx.URL(url)
            if params:
                target = target.copy_merge_params(params)
            request = client.build_request(
                method,
                target,
                json=json,
                headers=headers,
                timeout=httpx.Timeout(timeout),
            )
        except httpx.InvalidURL as exc:
            raise ToolError(f"invalid URL {url[:200]!r}: {exc}") from None
        try:
            with anyio.fail_after(timeout):  # waiting for a slot counts against it too
                async with self.bounds.slot() if self.bounds else contextlib.nullcontext():
                    return await self._exchange(
                        client, request, headers or {}, max_bytes or self.max_bytes
                    )
        except TimeoutError:
            host = request.url.host
            raise ToolError(f"the request to {host} timed out after {timeout:g} s") from None

    async def _exchange(
        self,
        client: httpx.AsyncClient,
        request: httpx.Request,
        sent_headers: Mapping[str, str],
        max_bytes: int,
    ) -> FetchedResponse:
        first_origin = _origin(request.url)
        for redirects in range(self.max_redirects + 1):
            await self._check(request.url)
            response = await self._send(client, request)
            try:
                next_request = response.next_request
                if next_request is None:
                    body, truncated = await _read_capped(response, max_bytes, request.url)
                    return FetchedResponse(
                        url=str(request.url),
                        status_code=response.status_code,
                        reason=response.reason_phrase,
                        content_type=response.headers.get("content-type", ""),
                        charset=response.charset_encoding,
                        body=body,
                        truncated=truncated,
                        redirects=redirects,
                    )
            finally:
                await response.aclose()
            if _origin(next_request.url) != first_origin:
                for name in sent_headers:
                    next_request.headers.pop(name, None)
            request = next_request
        raise ToolError(
            f"stopped after {self.max_redirects} redirects; the last one pointed to "
            f"{str(request.url)[:200]}"
        )

    async def _check(self, url: httpx.URL) -> None:
        refusal = self.guard.check_url(url)
        if refusal is not None:
            raise BlockedHostError(refusal)
        if not self._pinned:
            await self.guard.resolve(url.raw_host.decode("ascii"))

    async def _send(self, client: httpx.AsyncClient, request: httpx.Request) -> httpx.Response:
        try:
            return await client.send(request, stream=True, follow_redirects=False)
        except httpx.HTTPError as exc:
            raise _tool_error(exc, request.url) from None


async def _read_capped(
    response: httpx.Response, max_bytes: int, url: httpx.URL
) -> tuple[bytes, bool]:
    """At most `max_bytes` of the body, and whether there was more."""
    buffer = bytearray()
    try:
        # httpx's iterators are async generators, typed as AsyncIterator
        chunks_of = cast(AsyncGenerator[bytes, None], response.aiter_bytes())
        async with contextlib.aclosing(chunks_of) as chunks:
            async for chunk in chunks:
                buffer += chunk
                if len(buffer) > max_bytes:
                    return bytes(buffer[:max_bytes]), True
    except httpx.HTTPError as exc:
        raise _tool_error(exc, url) from None
    return bytes(buffer), False


def _tool_error(exc: httpx.HTTPError, url: httpx.URL) -> ToolError:
    """A model-readable message for an httpx failure, most specific first."""
    host = url.host
    detail = str(exc) or type(exc).__name__
    if isinstance(exc, httpx.TimeoutException):
        return ToolError(f"the request to {host} timed out ({detail})")
    if isinstance(exc, httpx.ConnectError):
        return ToolError(f"could not connect to {host}: {detail}")
    if isinstance(exc, httpx.RemoteProtocolError):
        return ToolError(f"{host} sent an invalid HTTP response: {detail}")
    return ToolError(f"the request to {host} failed: {detail}")


def _origin(url: httpx.URL) -> tuple[bytes, bytes, int | None]:
    return url.raw_scheme, url.raw_host, url.port
