"""A2A streams are served as every stream of the service (app/api/sse.py): a client that stops
reading is dropped after FINISHLINE_SSE_SEND_TIMEOUT_S (the SDK sets no send timeout of its
own), keep-alive comments come every FINISHLINE_SSE_PING_S, and an open stream counts in
`finishline_sse_subscribers`.

The socket that stops reading sends the SDK's own request (`SendMessageRequest`, as
`tests/a2a/kit.py` builds it) in the JSON-RPC envelope by hand: no client reads this slowly."""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

import anyio
import httpx
from a2a.utils.constants import PROTOCOL_VERSION_1_0, VERSION_HEADER
from google.protobuf.json_format import MessageToDict

from app.main import create_app
from tests.a2a.kit import a2a_settings, request, scripted, text
from tests.api.kit import wait_ended
from tests.api.test_redis_outages import until
from tests.fakes.serving import Served

BOUND_S = 10.0


def streaming_call(finishline: dict[str, Any]) -> bytes:
    """An HTTP/1.1 POST of SendStreamingMessage to agent `calc`."""
    params = MessageToDict(request(text("work on it"), finishline=finishline))
    body = json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": params}
    ).encode()
    head = (
        "POST /a2a/calc HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        f"{VERSION_HEADER}: {PROTOCOL_VERSION_1_0}\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def subscribers(client: httpx.AsyncClient) -> int:
    for line in (await client.get("/metrics")).text.splitlines():
        if line.startswith("finishline_sse_subscribers "):
            return int(float(line.split()[1]))
    raise AssertionError("no finishline_sse_subscribers in /metrics")


async def test_an_a2a_stream_nobody_reads_is_closed_after_the_send_timeout() -> None:
    """A task whose 29 thoughts of 20 KB each are status updates, followed by a client that
    reads none of them: once the socket buffers are full the server's writes block, and after
    FINISHLINE_SSE_SEND_TIMEOUT_S the stream is given up and its connection closed before the
    task's last update, though its run completes."""
    thought = {
        "content": "x" * 20_000,
        "delay_s": 0.05,
        "tool_calls": [{"name": "calculator", "arguments": {"expression": "1+1"}}],
    }
    ending = {"tool_calls": [{"name": "task_finished", "arguments": {"answer": "done"}}]}
    finishline = scripted(*[thought] * 29, ending, settings={"max_steps": 30})
    app = create_app(a2a_settings(sse_send_timeout_s=0.5))
    async with (
        Served(app, lifespan="on", send_buffer=4096) as server,
        httpx.AsyncClient(base_url=server.url(), timeout=BOUND_S) as client,
    ):
        reader = socket.socket()
        reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        reader.settimeout(BOUND_S)
        with reader:
            await asyncio.to_thread(reader.connect, ("127.0.0.1", server.port))
            await asyncio.to_thread(reader.sendall, streaming_call(finishline))
            await until(lambda: _followed(client), BOUND_S, "the stream opened")
            runs = (await client.get("/runs")).json()["runs"]
            assert (await wait_ended(client, runs[0]["id"]))["status"] == "completed"
            await until(lambda: _followed(client, 0), BOUND_S, "the stream given up")
            received = b""
            while chunk := await asyncio.to_thread(reader.recv, 65536):
                received += chunk
        assert received.startswith(b"HTTP/1.1 200")
        assert b"TASK_STATE_WORKING" in received
        assert b"TASK_STATE_COMPLETED" not in received


async def _followed(client: httpx.AsyncClient, count: int = 1) -> bool:
    return await subscribers(client) == count


async def test_an_idle_a2a_stream_sends_keep_alive_comments() -> None:
    hanging = {"content": "thinking it over", "delay_s": 600}
    app = create_app(a2a_settings(sse_ping_s=0.05))
    async with Served(app, lifespan="on") as server:
        reader = socket.socket()
        reader.settimeout(BOUND_S)
        with reader:
            await asyncio.to_thread(reader.connect, ("127.0.0.1", server.port))
            await asyncio.to_thread(reader.sendall, streaming_call(scripted(hanging)))
            received = b""
            with anyio.fail_after(BOUND_S):
                while received.count(b": ping\r\n\r\n") < 2:
                    received += await asyncio.to_thread(reader.recv, 65536)
        assert received.startswith(b"HTTP/1.1 200")
