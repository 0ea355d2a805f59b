"""`EventStream` (app/api/sse.py: sse-starlette's response as the service uses it), the SSE
response of run events and AG-UI turns: every chunk in order then the end; keep-alive
comments while idle; a client that stops reading is dropped after the send timeout (its
stream's generator cleaned up); a disconnect stops the stream and calls its handler; the
server's own cancellation passes through; the server's exit does not cut a stream short. First
at the ASGI level, where a `send` that never returns is a client that stopped reading, then
over real uvicorn with a socket that stops reading."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import httpx
import pytest
from sse_starlette.sse import AppStatus
from structlog.testing import capture_logs

from app.api.sse import PING, EventStream, SlowClientError
from app.main import create_app
from tests.api.kit import create, scripted, settings, wait_ended
from tests.api.test_redis_outages import until
from tests.fakes.serving import Served

BOUND_S = 10.0
SCOPE = {"type": "http", "method": "GET"}


class Client:
    """The ASGI side of one response: what it was sent; `stalled` makes every body write
    after the first `accepts` hang, as a client that stopped reading does."""

    def __init__(self, *, accepts: int | None = None) -> None:
        self.sent: list[dict[str, Any]] = []
        self.accepts = accepts
        self.disconnected = asyncio.Event()
        self.written = asyncio.Event()
        self.listening = asyncio.Event()
        """Set once the response waits for the client's messages."""

    async def send(self, message: dict[str, Any]) -> None:
        body = message["type"] == "http.response.body"
        if body and self.accepts is not None and len(self.bodies()) >= self.accepts:
            await asyncio.Event().wait()  # never accepted
        self.sent.append(message)
        self.written.set()

    async def receive(self) -> dict[str, Any]:
        self.listening.set()
        await self.disconnected.wait()
        return {"type": "http.disconnect"}

    def bodies(self) -> list[bytes]:
        return [m["body"] for m in self.sent if m["type"] == "http.response.body"]


class Frames:
    """An async iterator of chunks that records whether it was closed (its `finally` ran)."""

    def __init__(self, chunks: list[bytes], *, then_wait: bool = False) -> None:
        self.chunks = chunks
        self.then_wait = then_wait
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            for chunk in self.chunks:
                yield chunk
            if self.then_wait:
                await asyncio.Event().wait()
        finally:
            self.closed = True


def stream(frames: Frames, **kw: Any) -> EventStream:
    return EventStream(
        aiter(frames), ping_s=kw.pop("ping_s", 60), send_timeout_s=kw.pop("send_s", 60), **kw
    )


async def test_every_chunk_is_sent_in_order_then_the_end() -> None:
    client, frames = Client(), Frames([b"id: 1\r\n\r\n", b"id: 2\r\n\r\n"])
    response = stream(frames, headers={"Content-Location": "/runs/r"})
    with anyio.fail_after(BOUND_S):
        await response(SCOPE, client.receive, client.send)
    start = client.sent[0]
    assert (start["type"], start["status"]) == ("http.response.start", 200)
    headers = dict(start["headers"])
    assert headers[b"content-type"] == b"text/event-stream; charset=utf-8"
    assert headers[b"cache-control"] == b"no-store"
    assert headers[b"x-accel-buffering"] == b"no"
    assert headers[b"content-location"] == b"/runs/r"
    assert b"content-length" not in headers
    assert client.bodies() == [b"id: 1\r\n\r\n", b"id: 2\r\n\r\n", b""]
    assert client.sent[-1]["more_body"] is False
    assert frames.closed


async def test_an_idle_stream_sends_keep_alive_comments() -> None:
    client, frames = Client(), Frames([b"a"], then_wait=True)
    response = stream(frames, ping_s=0.05)
    with anyio.fail_after(BOUND_S):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(response, SCOPE, client.receive, client.send)
            while client.bodies().count(PING) < 3:
                client.written.clear()
                await client.written.wait()
            client.disconnected.set()
    assert client.bodies()[:2] == [b"a", PING]
    assert frames.closed


async def test_a_client_that_stops_reading_is_dropped_after_the_send_timeout() -> None:
    client, frames = Client(accepts=1), Frames([b"a", b"b", b"c"], then_wait=True)
    response = stream(frames, send_s=0.2)
    with anyio.fail_after(BOUND_S), pytest.raises(SlowClientError, match=r"0\.2 s"):
        await response(SCOPE, client.receive, client.send)
    assert client.bodies() == [b"a"]
    assert frames.closed  # its generator's cleanup ran (the subscriber gauge, in the routes)


async def test_a_write_that_blocks_while_the_watcher_waits_for_a_ping_is_timed_out() -> None:
    """The watcher sleeps toward the next keep-alive (a minute away); a write that then
    blocks must wake it at the write's own deadline."""
    gate = asyncio.Event()

    async def frames() -> AsyncIterator[bytes]:
        yield b"a"
        await gate.wait()
        yield b"b"

    client = Client(accepts=1)
    response = EventStream(frames(), ping_s=60, send_timeout_s=0.2)
    with anyio.fail_after(BOUND_S):
        async with anyio.create_task_group() as tasks:

            async def answer() -> None:
                with pytest.raises(SlowClientError):
                    await response(SCOPE, client.receive, client.send)

            tasks.start_soon(answer)
            await client.listening.wait()  # the watcher waits, toward the ping
            gate.set()
    assert client.bodies() == [b"a"]


async def test_a_keep_alive_the_client_does_not_take_drops_it_too() -> None:
    client, frames = Client(accepts=0), Frames([], then_wait=True)
    response = stream(frames, ping_s=0.05, send_s=0.2)
    with anyio.fail_after(BOUND_S), pytest.raises(SlowClientError):
        await response(SCOPE, client.receive, client.send)
    assert frames.closed


async def test_a_disconnect_stops_the_stream_and_calls_its_handler() -> None:
    client, frames = Client(), Frames([b"a"], then_wait=True)
    told: list[dict[str, Any]] = []

    async def on_disconnect(message: Any) -> None:
        told.append(message)

    response = stream(frames, on_disconnect=on_disconnect)
    with anyio.fail_after(BOUND_S):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(response, SCOPE, client.receive, client.send)
            await client.written.wait()
            client.disconnected.set()
    assert told == [{"type": "http.disconnect"}]
    assert frames.closed
    assert client.bodies() == [b"a"]  # no end: nobody is listening


async def test_a_failing_disconnect_handler_is_logged_and_the_stream_still_stops() -> None:
    client, frames = Client(), Frames([b"a"], then_wait=True)

    async def on_disconnect(message: Any) -> None:
        raise RuntimeError("the store is down")

    response = stream(frames, on_disconnect=on_disconnect)
    with capture_logs() as logs, anyio.fail_after(BOUND_S):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(response, SCOPE, client.receive, client.send)
            await client.written.wait()
            client.disconnected.set()
    assert [e["event"] for e in logs] == ["sse_disconnect_handler_failed"]
    assert frames.closed


async def test_the_servers_cancellation_is_not_taken_for_the_watchers() -> None:
    client, frames = Client(), Frames([b"a"], then_wait=True)
    task = asyncio.create_task(stream(frames)(SCOPE, client.receive, client.send))
    with anyio.fail_after(BOUND_S):
        await client.written.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert frames.closed


@pytest.fixture
def server_exiting() -> Iterator[None]:
    """What sse-starlette records when it sees the server exit (a signal it caught, process
    wide); put back after the test."""
    AppStatus.should_exit = True
    try:
        yield
    finally:
        AppStatus.should_exit = False


@pytest.mark.usefixtures("server_exiting")
async def test_a_stream_runs_on_to_its_end_when_the_server_exits() -> None:
    """sse-starlette cancels every stream as soon as it sees the server exit, unless given a
    grace: ours get the runs' drain and a margin, so a follower still gets the terminal event
    its run is cancelled with at the end of the drain."""
    gate = asyncio.Event()

    async def frames() -> AsyncIterator[bytes]:
        yield b"a"
        await gate.wait()  # the run's drain
        yield b"b"

    client = Client()
    response = EventStream(frames(), ping_s=60, send_timeout_s=60, grace_s=0)
    with anyio.fail_after(BOUND_S):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(response, SCOPE, client.receive, client.send)
            await client.listening.wait()  # every task of the response has started
            gate.set()
    assert client.bodies() == [b"a", b"b", b""]


@pytest.mark.parametrize("httptools", [False, True], ids=["h11", "httptools"])
async def test_a_socket_that_stops_reading_is_closed_after_the_send_timeout(
    httptools: bool,
) -> None:
    """A live run writing 20 KB thoughts, followed by a client that reads none of them: the
    server's writes block once the socket buffers are full (a few tens of KB); after
    FINISHLINE_SSE_SEND_TIMEOUT_S the stream is given up (its subscriber gone from /metrics)
    and the connection closed before the run's terminal event, though the run completes."""
    thought = {
        "content": "x" * 20_000,
        "delay_s": 0.05,
        "tool_calls": [{"name": "calculator", "arguments": {"expression": "1+1"}}],
    }
    ending = {"tool_calls": [{"name": "task_finished", "arguments": {"answer": "done"}}]}
    body = scripted(*[thought] * 29, ending, tools=["calculator"], settings={"max_steps": 30})
    app = create_app(settings(sse_send_timeout_s=0.5))
    async with (
        Served(app, lifespan="on", httptools=httptools, send_buffer=4096) as server,
        httpx.AsyncClient(base_url=server.url(), timeout=BOUND_S) as client,
    ):
        run = await create(client, body)
        reader = socket.socket()
        reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        reader.settimeout(BOUND_S)
        with reader:
            await asyncio.to_thread(reader.connect, ("127.0.0.1", server.port))
            asking = f"GET /runs/{run['id']}/events HTTP/1.1\r\nHost: t\r\n\r\n"
            await asyncio.to_thread(reader.sendall, asking.encode())
            assert (await wait_ended(client, run["id"]))["status"] == "completed"
            await until(lambda: _following(client, 0), BOUND_S, "the stream given up")
            received = b""
            while chunk := await asyncio.to_thread(reader.recv, 65536):
                received += chunk
        assert received.startswith(b"HTTP/1.1 200")
        assert b"event: run.started" in received
        assert b"event: run.completed" not in received


async def _following(client: httpx.AsyncClient, count: int) -> bool:
    for line in (await client.get("/metrics")).text.splitlines():
        if line.startswith("finishline_sse_subscribers "):
            return int(float(line.split()[1])) == count
    raise AssertionError("no finishline_sse_subscribers in /metrics")
