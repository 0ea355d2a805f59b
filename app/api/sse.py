"""`EventStream`: the SSE response of a run's events and of an AG-UI turn.

It sends the chunks of an async iterator (whole SSE frames, already encoded) as they come,
then ends the response. One watcher task per stream, beside the request's own task:

- reads the client's messages: at `http.disconnect` the stream stops, after
  `on_disconnect` (a run started with `on_disconnect: cancel` is cancelled there);
- sends a keep-alive comment (`: ping`) when nothing was written for `ping_s`;
- ends the stream when one write has waited on the client for `send_timeout_s` (a client
  that stopped reading holds neither a task nor the server's memory): `SlowClientError`,
  which uvicorn answers by closing the connection.

sse-starlette's `EventSourceResponse` did this with a task group of four tasks per stream
and a cancel scope around every write: 6% of a 5-step run's instructions (bench/README.md,
issue #29). Here a write is a plain `await send(...)`; the watcher wakes only at the next
ping or write deadline, and a stream stopped by it is cancelled in its request task, the
cancellation then taken back (`uncancel`), so uvicorn's own cancellations still pass.
On SIGTERM a stream is not cut: it runs to its run's terminal event while uvicorn's
graceful shutdown waits (`--timeout-graceful-shutdown`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping

import structlog
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from app.engine.errors import FinishlineError

log = structlog.get_logger("finishline.api")

PING = b": ping\r\n\r\n"
HEADERS = {"Cache-Control": "no-store", "Connection": "keep-alive", "X-Accel-Buffering": "no"}
"""What every stream answers with (no caching; nginx and similar proxies told not to
buffer), besides `Content-Type: text/event-stream; charset=utf-8`."""


class SlowClientError(FinishlineError):
    """A write to the client waited longer than the stream's send timeout. Raised once the
    answer has begun, so no HTTP status maps it: uvicorn closes the connection."""


class EventStream(Response):
    def __init__(
        self,
        frames: AsyncIterator[bytes],
        *,
        ping_s: float,
        send_timeout_s: float,
        headers: Mapping[str, str] | None = None,
        on_disconnect: Callable[[Message], Awaitable[None]] | None = None,
        status_code: int = 200,
    ) -> None:
        """`status_code`: always 200 (FastAPI reads its default for a route's OpenAPI)."""
        self.status_code = status_code
        # on the instance: as a class attribute FastAPI would document the route's error
        # answers (JSON) under it
        self.media_type = "text/event-stream"
        self.background = None
        self.init_headers({**HEADERS, **(headers or {})})  # no body: no Content-Length
        self.frames = frames
        self.ping_s = ping_s
        self.send_timeout_s = send_timeout_s
        self.on_disconnect = on_disconnect
        self._last_write = 0.0
        self._writing_since: float | None = None
        """When the write in progress began (None: no write in progress)."""
        self._stopped: str | None = None
        """Why the watcher stopped the stream: "disconnect" or "slow"."""
        self._wake: asyncio.Timeout | None = None
        """When the watcher, waiting on the client, wakes next (the next ping, or the
        deadline of the write in progress); None while it is not waiting."""

    def _writing(self, now: float) -> None:
        """A write begins: the watcher must wake by its deadline to check it."""
        self._writing_since = now
        wake, deadline = self._wake, now + self.send_timeout_s
        if wake is not None and (wake.when() or 0.0) > deadline:
            wake.reschedule(deadline)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        loop = asyncio.get_running_loop()
        stream = asyncio.current_task()
        assert stream is not None
        self._last_write = loop.time()
        start = {
            "type": "http.response.start",
            "status": self.status_code,
            "headers": self.raw_headers,
        }
        await send(start)
        watcher = loop.create_task(self._watch(receive, send, stream), name="sse-watch")
        try:
            async for chunk in self.frames:
                self._writing(loop.time())
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
                self._writing_since = None
                self._last_write = loop.time()
            self._writing(loop.time())
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            self._writing_since = None
        except asyncio.CancelledError:
            if self._stopped is None or stream.cancelling() > 1:
                raise  # not (only) the watcher's: the server's, pass it on
            stream.uncancel()
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            aclose = getattr(self.frames, "aclose", None)
            if aclose is not None:  # suspended at a yield when a write failed: clean it up
                await aclose()
        if self._stopped == "slow":
            raise SlowClientError(
                f"the client accepted no write for {self.send_timeout_s:g} s: stream closed"
            )

    async def _watch(self, receive: Receive, send: Send, stream: asyncio.Task[None]) -> None:
        loop = asyncio.get_running_loop()
        while True:
            writing = self._writing_since
            due = self._last_write + self.ping_s
            if writing is not None:
                due = writing + self.send_timeout_s
            try:
                async with asyncio.timeout_at(due) as self._wake:
                    message = await receive()
            except TimeoutError:
                self._wake = None
                now = loop.time()
                writing = self._writing_since
                if writing is not None and now - writing >= self.send_timeout_s:
                    return self._stop(stream, "slow")
                idle = writing is None and now - self._last_write >= self.ping_s
                if idle and not await self._ping(send, loop):
                    return self._stop(stream, "slow")
                continue
            self._wake = None
            if message["type"] == "http.disconnect":
                if self.on_disconnect is not None:
                    try:
                        await self.on_disconnect(message)
                    except Exception:
                        log.exception("sse_disconnect_handler_failed")
                return self._stop(stream, "disconnect")

    async def _ping(self, send: Send, loop: asyncio.AbstractEventLoop) -> bool:
        """Send a keep-alive comment; False when the client took longer than the send
        timeout to accept it."""
        self._last_write = loop.time()
        try:
            async with asyncio.timeout(self.send_timeout_s):
                await send({"type": "http.response.body", "body": PING, "more_body": True})
        except TimeoutError:
            return False
        self._last_write = loop.time()
        return True

    def _stop(self, stream: asyncio.Task[None], why: str) -> None:
        self._stopped = why
        stream.cancel()
