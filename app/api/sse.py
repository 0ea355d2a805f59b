"""`EventStream`: the SSE response of a run's events and of an AG-UI turn, sse-starlette's
`EventSourceResponse` as every finishline stream uses it.

It sends the chunks of an async iterator (whole SSE frames, already encoded: one chunk per
batch of events, one write each) as they come, then ends the response. The library owns the
protocol's edges: a keep-alive comment (`: ping`) every `ping_s`; a write the client has not
accepted within `send_timeout_s` gives the stream up (a client that stopped reading holds
neither a task nor the server's memory; here `SlowClientError`, which uvicorn answers by
closing the connection); `http.disconnect` stops the stream after `on_disconnect` (a run
started with `on_disconnect: cancel` is cancelled there).

On shutdown a stream is not cut: sse-starlette, when it sees the server exit, lets it go on
for `grace_s` (the runs' drain, FINISHLINE_SHUTDOWN_GRACE_S, plus a margin) so it ends on its
run's terminal event, while uvicorn's graceful shutdown waits (`--timeout-graceful-shutdown`).
What the library costs a run, and what is proposed upstream: docs/decisions.md, "SSE".
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import anyio
import structlog
from sse_starlette import EventSourceResponse, ServerSentEvent
from sse_starlette.sse import SendTimeoutError
from starlette.types import Message, Receive, Scope, Send

from app.engine.errors import FinishlineError

log = structlog.get_logger("finishline.api")

PING = b": ping\r\n\r\n"
"""The keep-alive comment, as sent."""
GRACE_MARGIN_S = 10.0
"""How long a stream may go on past the runs' drain on shutdown (its run ends by then)."""


class SlowClientError(FinishlineError):
    """A write to the client waited longer than the stream's send timeout. Raised once the
    answer has begun, so no HTTP status maps it: uvicorn closes the connection."""


def _ping() -> ServerSentEvent:
    return ServerSentEvent(comment="ping")


def _guarded(
    on_disconnect: Callable[[Message], Awaitable[None]],
) -> Callable[[Message], Awaitable[None]]:
    """`on_disconnect`, its failure logged: the client is gone, nobody would hear of it."""

    async def handler(message: Message) -> None:
        try:
            await on_disconnect(message)
        except Exception:
            log.exception("sse_disconnect_handler_failed")

    return handler


class EventStream(EventSourceResponse):
    def __init__(
        self,
        frames: AsyncIterator[Any],
        *,
        ping_s: float,
        send_timeout_s: float,
        grace_s: float = 0.0,
        headers: Mapping[str, str] | None = None,
        on_disconnect: Callable[[Message], Awaitable[None]] | None = None,
        status_code: int = 200,
    ) -> None:
        """`frames`: whole SSE frames, encoded (ours), or what sse-starlette encodes (the A2A
        SDK's updates). `grace_s`: FINISHLINE_SHUTDOWN_GRACE_S (the margin is added here).
        `status_code`: always 200 (FastAPI reads its default for a route's OpenAPI)."""
        super().__init__(
            frames,
            status_code=status_code,
            headers=headers,
            ping=ping_s,
            ping_message_factory=_ping,
            send_timeout=send_timeout_s,
            client_close_handler_callable=_guarded(on_disconnect) if on_disconnect else None,
            shutdown_event=anyio.Event(),  # nobody waits on it: the grace is what counts
            shutdown_grace_period=grace_s + GRACE_MARGIN_S,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        except SendTimeoutError:
            raise SlowClientError(
                f"the client accepted no write for {self.send_timeout:g} s: stream closed"
            ) from None
