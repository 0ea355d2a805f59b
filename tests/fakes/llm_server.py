"""A fake OpenAI-compatible Chat Completions server, served over real HTTP for the test suite.

    async with FakeLLMServer([FakeReply(content="Hello")]) as llm:
        model = OpenAIChatModel(base_url=llm.base_url, model="fake")   # http://127.0.0.1:PORT/v1
        reply = await model.complete(messages, tools)
        assert llm.requests[0]["messages"] == messages

It answers `POST /v1/chat/completions` (and `GET /v1/models`). Each request takes the next
scripted `FakeReply` from the queue (`FakeLLMServer(replies=[...])`, `llm.enqueue(...)`); when
the queue is empty, `handler(request_json) -> FakeReply` (sync or async) answers, e.g. for a
benchmark that always finishes: `FakeLLMServer(handler=lambda _: FakeReply.finish("done"))`.
With neither, the request gets a 400 (not retryable, so a run fails at once) whose message
says the script ran out. A handler that raises answers 400 with the exception's text.

What a reply can do (see `FakeReply`): content, tool calls, usage (estimated by default, or
exact, or absent), finish_reason, an HTTP error with headers (429 + Retry-After), a raw body
(malformed JSON, a missing `choices`, a broken SSE chunk), a body without Content-Length, a
delay, hanging until the client goes away (or `llm.release()`, or shutdown, which answers
503), dropping the connection mid-response, and, for `"stream": true` requests, an SSE
stream: a `: ping` comment, a role chunk, the content in several deltas, each tool call as
an id+name fragment then its arguments in at least two pieces, a finish chunk, a usage chunk
when `stream_options.include_usage` is asked (and the reply has usage), then
`data: [DONE]`.

It records every chat request (`llm.received`, bodies in `llm.requests`); a test waits for
them with `await llm.wait_for_requests(n)`. `latency_s` adds a fixed delay to every answer.

Serving: uvicorn (h11, lifespan off, no signal handlers, no logging config) inside the
current event loop, on a socket bound to 127.0.0.1:0 that listens before `serve()`; entering
waits for start-up on an event, exiting releases hung requests and waits for a clean stop.
A dropped connection makes uvicorn log one ERROR line ("ASGI callable returned without
completing response"): that is the drop, not a failure.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import json
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Self

import anyio

from tests.fakes.llm_replies import FakeReply, FakeToolCall, FakeUsage, Rendered, render
from tests.fakes.serving import Served

__all__ = [
    "FakeLLMServer",
    "FakeReply",
    "FakeToolCall",
    "FakeUsage",
    "Handler",
    "ReceivedRequest",
]

Handler = Callable[[dict[str, Any]], FakeReply | Awaitable[FakeReply]]
"""Answers a request (its JSON body) when the scripted queue is empty."""

_Scope = dict[str, Any]
_Receive = Callable[[], Awaitable[dict[str, Any]]]
_Send = Callable[[dict[str, Any]], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class ReceivedRequest:
    """One chat request as the server saw it; header names are lower-case."""

    path: str
    headers: dict[str, str]
    body: Any


class FakeLLMServer:
    """The fake server; an async context manager. See the module docstring."""

    def __init__(
        self,
        replies: Iterable[FakeReply] = (),
        *,
        handler: Handler | None = None,
        latency_s: float = 0.0,
        model: str = "fake-model",
    ) -> None:
        self.handler = handler
        self.latency_s = latency_s
        self.model = model
        self.received: list[ReceivedRequest] = []
        self.port = 0
        self._queue: deque[FakeReply] = deque(replies)
        self._ids = itertools.count(1)
        self._served: Served | None = None
        self._arrived = asyncio.Event()  # replaced by a fresh one at each arrival
        self._released = asyncio.Event()  # replaced by a fresh one at each release()
        self._closing = asyncio.Event()

    # -- what tests use -------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """The API root to give a client: http://127.0.0.1:PORT/v1."""
        return f"{self.url}/v1"

    @property
    def requests(self) -> list[Any]:
        """The bodies of the chat requests received so far, in arrival order (parsed JSON; the
        raw text for a body that is not JSON)."""
        return [request.body for request in self.received]

    @property
    def pending(self) -> int:
        """Scripted replies not yet used."""
        return len(self._queue)

    def enqueue(self, *replies: FakeReply) -> None:
        self._queue.extend(replies)

    def reset(self) -> None:
        """Forget the scripted replies and the recorded requests (for a server shared by
        several tests); the handler and latency stay."""
        self._queue.clear()
        self.received.clear()

    async def wait_for_requests(self, count: int, *, timeout_s: float = 5.0) -> list[Any]:
        """Wait until `count` chat requests have arrived; return their bodies."""
        with anyio.fail_after(timeout_s):
            while len(self.received) < count:
                await self._arrived.wait()
        return self.requests[:count]

    def release(self) -> None:
        """Let every hanging request that has arrived (`FakeReply(hang=True)`) answer normally."""
        released, self._released = self._released, asyncio.Event()
        released.set()

    # -- lifecycle ------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        self._served = Served(self._app)
        await self._served.__aenter__()
        self.port = self._served.port
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._stop()

    async def _stop(self) -> None:
        if self._served is None:
            return
        self._closing.set()  # hung and delayed requests give up (503 if nothing was sent)
        await self._served.stop()
        self._served = None

    async def _app(self, scope: _Scope, receive: _Receive, send: _Send) -> None:
        if scope["type"] != "http":
            return
        raw = await _read_body(receive)
        method, path = scope["method"], scope["path"]
        if method == "GET" and path == "/v1/models":
            models = {"object": "list", "data": [{"id": self.model, "object": "model"}]}
            await _send_json(send, 200, models)
            return
        if method != "POST" or path != "/v1/chat/completions":
            await _send_json(send, 404, _error_body(f"no route for {method} {path}", "not_found"))
            return
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = raw.decode("utf-8", "replace")
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        self.received.append(ReceivedRequest(path=path, headers=headers, body=body))
        arrived, self._arrived = self._arrived, asyncio.Event()
        arrived.set()
        if not isinstance(body, dict):
            await _send_json(send, 400, _error_body("request body is not a JSON object"))
            return
        reply = await self._next_reply(body)
        await self._answer(reply, body, receive, send)

    async def _next_reply(self, body: dict[str, Any]) -> FakeReply:
        if self._queue:
            return self._queue.popleft()
        if self.handler is None:
            message = f"fake LLM server: no scripted reply left for request {len(self.received)}"
            return FakeReply.http_error(400, message)
        try:
            reply = self.handler(body)
            if inspect.isawaitable(reply):
                reply = await reply
        except Exception as exc:
            return FakeReply.http_error(400, f"fake LLM handler raised {exc!r}")
        return reply

    async def _answer(
        self, reply: FakeReply, body: dict[str, Any], receive: _Receive, send: _Send
    ) -> None:
        """Answer `reply`, abandoning it when the client leaves or the server closes."""
        released = self._released
        rendered = render(reply, body, model=self.model, ids=self._ids)
        sent = _TrackingSend(send)
        outcome: list[str] = []
        async with anyio.create_task_group() as tg:

            async def stop_when(reason: str, wait: Callable[[], Awaitable[Any]]) -> None:
                await wait()
                outcome.append(reason)
                tg.cancel_scope.cancel()

            tg.start_soon(stop_when, "disconnected", lambda: _wait_disconnect(receive))
            tg.start_soon(stop_when, "closing", self._closing.wait)
            await anyio.sleep(self.latency_s + reply.delay_s)
            if reply.hang:
                await released.wait()
            await self._send_rendered(rendered, reply, sent)
            tg.cancel_scope.cancel()
        if outcome[:1] == ["closing"] and not sent.started:
            await _send_json(send, 503, _error_body("fake LLM server shutting down", "unavailable"))

    async def _send_rendered(self, rendered: Rendered, reply: FakeReply, send: _Send) -> None:
        """Send `rendered`; with `reply.drop`, return mid-body: uvicorn then hangs up."""
        headers = [(b"content-type", rendered.content_type.encode())]
        headers += [(k.lower().encode(), v.encode()) for k, v in reply.headers.items()]
        if rendered.events is None and reply.unsized:
            body = rendered.body
            parts = [body[i : i + 65536] for i in range(0, len(body), 65536)]
        elif rendered.events is None:
            headers.append((b"content-length", str(len(rendered.body)).encode()))
            half = len(rendered.body) // 2
            parts = [rendered.body[:half] if reply.drop else rendered.body]
        else:
            headers.append((b"cache-control", b"no-cache"))
            cut = reply.cut_after
            if cut is None and reply.drop:
                cut = max(1, len(rendered.events) // 2)
            parts = [b": ping\n\n", *rendered.events[:cut]]
        await send({"type": "http.response.start", "status": rendered.status, "headers": headers})
        for number, part in enumerate(parts):
            if number > 1 and reply.chunk_delay_s:  # between events, not before the first
                await anyio.sleep(reply.chunk_delay_s)
            await send({"type": "http.response.body", "body": part, "more_body": True})
        if not reply.drop:
            await send({"type": "http.response.body", "body": b""})


class _TrackingSend:
    def __init__(self, send: _Send) -> None:
        self._send = send
        self.started = False

    async def __call__(self, message: dict[str, Any]) -> None:
        self.started = True
        await self._send(message)


async def _read_body(receive: _Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


async def _wait_disconnect(receive: _Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _send_json(send: _Send, status: int, payload: Any) -> None:
    body = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _error_body(message: str, kind: str = "invalid_request_error") -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}
