"""The whole-body cap and deadline: a request body past `max_bytes` is answered 413 without
being read, one still arriving `read_timeout_s` after it was first asked for 408.

A declared Content-Length over the cap is refused before any of the body is read; a body
streamed without one (chunked) is counted as it arrives and refused at the first chunk past
the cap, so a 10 MB body costs at most the cap in memory. The deadline covers the whole
body, not each read: a client trickling a byte every two seconds is answered 408 all the
same. Once the body is complete, reads pass through untimed (a stream's handler waits on
them for the client's disconnect).

An answer that starts while the request's body has not all arrived (413, 408, or a route
that never reads its body) says `Connection: close`, so the rest of a body nobody reads
cannot keep the connection, trickled or not. Before the answer's last part goes out, the
rest of the body is read and dropped (within the same deadline): a client still sending
it (a 10 MB upload refused at 1 MB) finishes and reads the answer, rather than meeting a
connection closed under its upload.
"""

from __future__ import annotations

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.errors import BodyTimeoutError, BodyTooLargeError, body_too_large


class BodyLimit:
    """ASGI middleware; see the module docstring."""

    def __init__(self, app: ASGIApp, max_bytes: int, read_timeout_s: float = 15.0) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.read_timeout_s = read_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        body = _Body(receive, self.read_timeout_s, complete=declared == 0 or _bodiless(scope))

        async def counted() -> Message:
            message = await body.receive()
            if body.received > self.max_bytes:
                raise BodyTooLargeError(self.max_bytes)
            return message

        async def answered(message: Message) -> None:
            if not body.complete and message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k != b"connection"]
                message = {**message, "headers": [*headers, (b"connection", b"close")]}
            elif not body.complete and not message.get("more_body", False):
                await body.drain()  # the answer's last part: let the sender finish first
            await send(message)

        if declared is not None and declared > self.max_bytes:
            await body_too_large(self.max_bytes)(scope, receive, answered)
            return
        await self.app(scope, counted, answered)


class _Body:
    """One request's body as it is received, under one deadline from the first read."""

    def __init__(self, receive: Receive, timeout_s: float, *, complete: bool) -> None:
        self._receive = receive
        self._timeout_s = timeout_s
        self._deadline: float | None = None
        self.complete = complete
        self.received = 0

    async def receive(self) -> Message:
        if self.complete:
            return await self._receive()
        if self._deadline is None:
            self._deadline = anyio.current_time() + self._timeout_s
        with anyio.move_on_after(self._deadline - anyio.current_time()) as waited:
            message = await self._receive()
        if waited.cancelled_caught:
            raise BodyTimeoutError(self._timeout_s)
        if message["type"] == "http.request":
            self.received += len(message.get("body", b""))
            self.complete = not message.get("more_body", False)
        elif message["type"] == "http.disconnect":
            self.complete = True
        return message

    async def drain(self) -> None:
        """Read the rest of the body and drop it, until it ends or the deadline passes."""
        try:
            while not self.complete:
                await self.receive()
        except BodyTimeoutError:
            pass


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            text = value.decode("latin-1").strip()
            return int(text) if text.isdigit() and len(text) <= 18 else None
    return None


def _bodiless(scope: Scope) -> bool:
    """No Content-Length and not chunked: an HTTP/1.1 request without a body."""
    names = {name for name, _ in scope.get("headers", ())}
    return b"content-length" not in names and b"transfer-encoding" not in names
