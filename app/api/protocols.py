"""uvicorn's HTTP protocols with a deadline on each request's header block.

uvicorn times a connection only while it idles between requests (`--timeout-keep-alive`),
and every byte received resets that: a client trickling a header line one byte every two
seconds holds its connection, and a file descriptor, for as long as it likes; ASGI code
cannot help, since the app is called only once the headers are complete. These protocols
give a request's line and headers `FINISHLINE_HEADER_TIMEOUT_S` to arrive, counted from
the connection's start, then from the first byte of each next request on a kept-alive
connection (the idle time between requests stays uvicorn's keep-alive timeout). Past it,
a request begun is answered 408 `request_timeout` and the connection is closed; a
connection that never sent a byte is closed without an answer. The body has its own
deadline, in `app.api.bodylimit`.

Served with `uvicorn --http app.api.protocols:HeaderTimeoutProtocol` (`UVICORN_ARGS`): the
httptools protocol, as uvicorn's `auto` chooses; `H11HeaderTimeout` is the h11 one.
"""

from __future__ import annotations

import asyncio
import functools
import json
from typing import Any, ClassVar

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app.settings import Settings

PROTOCOL = "app.api.protocols:HeaderTimeoutProtocol"
UVICORN_ARGS = ("--http", PROTOCOL)
"""What every command line that serves the app passes uvicorn (make run, the image)."""


@functools.cache
def configured_timeout_s() -> float:
    """FINISHLINE_HEADER_TIMEOUT_S, read once per process at the first connection."""
    return Settings().header_timeout_s


def timeout_answer(timeout_s: float) -> bytes:
    """A whole HTTP/1.1 408 answer with the service's error body."""
    message = f"the request's line and headers did not arrive within {timeout_s:g} s"
    error = {"type": "request_timeout", "message": message, "details": {"cap": timeout_s}}
    body = json.dumps({"error": error}).encode()
    head = (
        "HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body


class HeaderClock:
    """The deadline of one connection's header block: `start()` when a request may begin,
    `stop()` once its headers are complete; on expiry the connection is closed (answered
    408 when some of the request had come)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, timeout_s: float) -> None:
        self._loop = loop
        self.timeout_s = timeout_s
        self._timer: asyncio.TimerHandle | None = None
        self._transport: asyncio.Transport | None = None
        self.begun = False
        """Some bytes of the request have arrived."""

    def start(self, transport: asyncio.Transport, *, begun: bool) -> None:
        self._transport = transport
        self.begun = self.begun or begun
        if self._timer is None:
            self._timer = self._loop.call_later(self.timeout_s, self._expired)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.begun = False

    def _expired(self) -> None:
        self._timer = None
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        if self.begun:
            transport.write(timeout_answer(self.timeout_s))
        transport.close()


class H11HeaderTimeout(H11Protocol):
    """uvicorn's h11 protocol with a `HeaderClock`."""

    header_timeout_s: ClassVar[float | None] = None
    """None: FINISHLINE_HEADER_TIMEOUT_S."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.clock = HeaderClock(self.loop, self.header_timeout_s or configured_timeout_s())

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.clock.start(transport, begun=False)

    def data_received(self, data: bytes) -> None:
        waiting = self.conn.their_state is h11.IDLE  # no request line and headers yet
        if waiting:
            self.clock.start(self.transport, begun=bool(data))
        super().data_received(data)
        if waiting and self.conn.their_state is not h11.IDLE:
            self.clock.stop()

    def connection_lost(self, exc: Exception | None) -> None:
        self.clock.stop()
        super().connection_lost(exc)


class HttpToolsHeaderTimeout(HttpToolsProtocol):
    """uvicorn's httptools protocol with a `HeaderClock`."""

    header_timeout_s: ClassVar[float | None] = None
    """None: FINISHLINE_HEADER_TIMEOUT_S."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.clock = HeaderClock(self.loop, self.header_timeout_s or configured_timeout_s())

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.clock.start(transport, begun=False)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.clock.start(self.transport, begun=True)

    def on_headers_complete(self) -> None:
        self.clock.stop()
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self.clock.stop()
        super().connection_lost(exc)


HeaderTimeoutProtocol = HttpToolsHeaderTimeout
"""What `--http` names: httptools (uvicorn[standard] brings it), as uvicorn's `auto` picks."""


def with_header_timeout(
    protocol: type[asyncio.Protocol], timeout_s: float
) -> type[asyncio.Protocol]:
    """`protocol` (one of this module's) with a timeout of its own, for a server made in
    code (tests: `Served`)."""
    return type(protocol.__name__, (protocol,), {"header_timeout_s": timeout_s})
