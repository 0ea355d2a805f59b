"""The HTTP exchanges with a Streamable HTTP MCP server: capped message by message, and
abandoned when their call is cancelled.

`McpExchanges` is the `httpx2` transport under the SDK's client, around the guarded one
(`network.py`). The SDK reads a JSON answer whole and treats a failed event stream as a
lost connection; here each exchange is finished by the transport instead, so one bad
answer fails its own call and nothing else:

- an answer to a request (a JSON body, or a server-sent event on the request's stream)
  past `cap` bytes is not read further: the request gets the `unread.too_large` error and
  the connection is closed. No more than `cap` bytes of it are ever held (the SDK read a
  JSON answer whole). The client asks for uncompressed answers, so what is counted is what
  is held; a compressed one is refused (`unread.not_read`) rather than inflated.
- a request whose call was cancelled (`notifications/cancelled` goes out) is abandoned
  wherever it waits (for a pooled connection, for the head of the answer, for its next
  bytes): a server that ignores the cancellation keeps no connection of the pool, and the
  SDK's writer, which sends every message in turn, never waits behind it.
- an event past the cap on the server's own stream (GET) is skipped, and logged.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from typing import Any, TypeVar

import anyio
import httpx2
import structlog
from mcp_types import JSONRPCError, RequestId

from app.tools.mcp import unread
from app.tools.mcp.framing import EventFramer

log = structlog.get_logger("finishline.mcp")

T = TypeVar("T")
_END = object()
_OVER = object()
_REMEMBERED_CANCELS = 256
"""Cancelled request ids kept for a request whose exchange has not begun yet."""


class _Exchange:
    """One request's exchange; `abandon()` ends whatever it waits for."""

    def __init__(self, request_id: RequestId) -> None:
        self.request_id = request_id
        self.abandoned = False
        self._scope: anyio.CancelScope | None = None

    def abandon(self) -> None:
        self.abandoned = True
        if self._scope is not None:
            self._scope.cancel()

    async def run(self, step: Callable[..., Awaitable[T]], *args: Any) -> T | None:
        """`await step(*args)`, or None once the exchange is abandoned."""
        if self.abandoned:
            return None
        with anyio.CancelScope() as scope:
            self._scope = scope
            try:
                return await step(*args)
            finally:
                self._scope = None
        return None


class McpExchanges(httpx2.AsyncBaseTransport):
    """See the module docstring; `server` names the server in logs."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, *, cap: int, server: str) -> None:
        self._inner = inner
        self._cap = cap
        self._server = server
        self._open: dict[RequestId, _Exchange] = {}
        self._cancelled: OrderedDict[RequestId, None] = OrderedDict()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        message = _message(request)
        method = message.get("method")
        if method == "notifications/cancelled":
            params = message.get("params")
            self._cancel(params.get("requestId") if isinstance(params, dict) else None)
        request_id = message.get("id")
        if not isinstance(method, str) or not isinstance(request_id, int | str):
            response = await self._inner.handle_async_request(request)
            return self._not_a_request(response)
        exchange = _Exchange(request_id)
        self._open[request_id] = exchange
        if self._cancelled.pop(request_id, _END) is not _END:
            exchange.abandon()
        streaming = False
        try:
            response = await self._answer(request, exchange)
            streaming = isinstance(response.stream, _CappedEvents)  # open until it closes
            return response
        finally:
            if not streaming:
                self._close(exchange)

    async def aclose(self) -> None:
        await self._inner.aclose()

    def _cancel(self, request_id: object) -> None:
        if not isinstance(request_id, int | str):
            return
        exchange = self._open.get(request_id)
        if exchange is not None:
            exchange.abandon()
            return
        self._cancelled[request_id] = None  # its exchange may not have begun
        while len(self._cancelled) > _REMEMBERED_CANCELS:
            self._cancelled.popitem(last=False)

    def _close(self, exchange: _Exchange) -> None:
        if self._open.get(exchange.request_id) is exchange:
            del self._open[exchange.request_id]

    async def _answer(self, request: httpx2.Request, exchange: _Exchange) -> httpx2.Response:
        request_id = exchange.request_id
        response = await exchange.run(self._inner.handle_async_request, request)
        if response is None:
            return _json(unread.not_read(request_id, "the call was cancelled"))
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            await response.aclose()
            why = f"it came compressed ({encoding}), which this client does not accept"
            return _json(unread.not_read(request_id, why))
        if _is_event_stream(response):
            stream = _CappedEvents(response, self._cap, self._server, exchange, self._close)
            return _replaced(response, stream)
        body = await exchange.run(_read_at_most, response, self._cap)
        await response.aclose()
        if body is None:
            return _json(unread.not_read(request_id, "the call was cancelled"))
        if body is _OVER:
            return _json(unread.too_large(request_id, self._cap))
        assert isinstance(body, bytes)
        return _replaced(response, httpx2.ByteStream(body))

    def _not_a_request(self, response: httpx2.Response) -> httpx2.Response:
        """The server's own stream (GET), a notification's or a DELETE's answer."""
        if _is_event_stream(response):
            return _replaced(response, _CappedEvents(response, self._cap, self._server))
        return _replaced(response, _CappedBytes(response, self._cap))


class _CappedEvents(httpx2.AsyncByteStream):
    """An event stream passed on event by event, each at most `cap` bytes. On a request's
    stream an event past the cap (or the call's cancellation) ends the stream with the
    request's error; on the server's own stream the event is skipped."""

    def __init__(
        self,
        response: httpx2.Response,
        cap: int,
        server: str,
        exchange: _Exchange | None = None,
        on_close: Callable[[_Exchange], None] | None = None,
    ) -> None:
        self._response = response
        self._cap = cap
        self._server = server
        self._exchange = exchange
        self._on_close = on_close

    async def __aiter__(self) -> AsyncIterator[bytes]:
        framer = EventFramer(self._cap)
        exchange = self._exchange
        async with aclosing(_raw(self._response)) as chunks:
            while True:
                if exchange is None:
                    chunk = await anext(chunks, _END)
                elif (chunk := await exchange.run(anext, chunks, _END)) is None:
                    yield _event(unread.not_read(exchange.request_id, "the call was cancelled"))
                    return
                if chunk is _END:
                    return
                assert isinstance(chunk, bytes)
                for piece in framer.feed(chunk):
                    if isinstance(piece, bytes):
                        yield piece
                    elif exchange is not None:
                        yield _event(unread.too_large(exchange.request_id, self._cap))
                        return
                    else:
                        log.warning("mcp_message_dropped", server=self._server, cap=self._cap)

    async def aclose(self) -> None:
        if self._exchange is not None and self._on_close is not None:
            self._on_close(self._exchange)
        await self._response.aclose()


class _CappedBytes(httpx2.AsyncByteStream):
    """Any other body: read through, failing past `cap` bytes (the SDK reads none of
    these but a DELETE's, and fails that quietly)."""

    def __init__(self, response: httpx2.Response, cap: int) -> None:
        self._response = response
        self._cap = cap

    async def __aiter__(self) -> AsyncIterator[bytes]:
        size = 0
        async with aclosing(_raw(self._response)) as chunks:
            async for chunk in chunks:
                size += len(chunk)
                if size > self._cap:
                    raise httpx2.ReadError(f"the answer passed the cap of {self._cap:,} bytes")
                yield chunk

    async def aclose(self) -> None:
        await self._response.aclose()


async def _read_at_most(response: httpx2.Response, cap: int) -> bytes | object:
    """The whole body, or `_OVER` once it passes `cap` bytes (declared or counted)."""
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > cap:
        return _OVER
    chunks: list[bytes] = []
    size = 0
    async with aclosing(_raw(response)) as raw:
        async for chunk in raw:
            size += len(chunk)
            if size > cap:
                return _OVER
            chunks.append(chunk)
    return b"".join(chunks)


async def _raw(response: httpx2.Response) -> AsyncGenerator[bytes, None]:
    """The body as the inner transport gives it (a response made in process, as a test's
    transport makes them, counts as read already: its stream is read again)."""
    stream = response.stream
    assert isinstance(stream, httpx2.AsyncByteStream)
    async for chunk in stream:
        yield chunk


def _message(request: httpx2.Request) -> dict[str, Any]:
    """The JSON-RPC message a POST carries ({} for any other request)."""
    if request.method != "POST":
        return {}
    try:
        message = json.loads(request.content)
    except (httpx2.RequestNotRead, ValueError):
        return {}
    return message if isinstance(message, dict) else {}


def _is_event_stream(response: httpx2.Response) -> bool:
    kind = response.headers.get("content-type", "").partition(";")[0]
    return kind.strip().lower() == "text/event-stream"


def _replaced(response: httpx2.Response, stream: httpx2.AsyncByteStream) -> httpx2.Response:
    return httpx2.Response(
        status_code=response.status_code,
        headers=response.headers,
        stream=stream,
        extensions=response.extensions,
    )


def _json(error: JSONRPCError) -> httpx2.Response:
    body = unread.encoded(error)
    headers = {"content-type": "application/json", "content-length": str(len(body))}
    return httpx2.Response(200, headers=headers, stream=httpx2.ByteStream(body))


def _event(error: JSONRPCError) -> bytes:
    return b"event: message\ndata: " + unread.encoded(error) + b"\n\n"
