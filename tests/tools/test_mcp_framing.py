"""Splitting what an MCP server sends into whole messages under a cap (app/tools/mcp/framing.py),
and the HTTP exchanges built on it (exchanges.py) over httpx2's MockTransport: an answer of
any shape and chunking is passed on unchanged, one past the cap is never held."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import anyio
import httpx2
import pytest

from app.tools.mcp import unread
from app.tools.mcp.exchanges import McpExchanges
from app.tools.mcp.framing import Dropped, EventFramer, LineFramer

CALL = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "t"}}


def framed(framer: LineFramer | EventFramer, data: bytes, size: int) -> list[bytes | Dropped]:
    out: list[bytes | Dropped] = []
    for start in range(0, len(data), size):
        out += framer.feed(data[start : start + size])
    return out


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, 10_000])
def test_lines_pass_whole_and_a_long_one_is_dropped_with_its_id(size: int) -> None:
    long = b'{"jsonrpc":"2.0","id":5,"result":{"text":"' + b"x" * 500 + b'"}}'
    data = b'{"a":1}\n\n' + long + b'\n{"b":2}\r\n'
    out = framed(LineFramer(100), data, size)
    assert out[0] == b'{"a":1}'
    assert isinstance(out[1], Dropped)
    assert (out[1].size, out[1].request_id()) == (len(long), 5)
    assert out[2:] == [b'{"b":2}\r']


def test_a_dropped_line_names_its_request_from_its_start_or_its_end_only() -> None:
    def dropped(line: bytes) -> Dropped:
        [item] = LineFramer(10).feed(line + b"\n")
        assert isinstance(item, Dropped)
        return item

    filler = b"y" * 20_000
    assert dropped(b'{"id":"a-1","result":"' + filler + b'"}').request_id() == "a-1"
    assert dropped(b'{"result":"' + filler + b'","jsonrpc":"2.0","id":12}').request_id() == 12
    # an "id" that is not the top level's: a notification, or one inside the result
    assert dropped(b'{"method":"n","params":{"id":3,"t":"' + filler + b'"}}').request_id() is None
    assert dropped(b'{"result":{"t":"' + filler + b'","id":4}}').request_id() is None
    assert dropped(b'{"result":"' + filler + b'\\",\\"id\\":9"}').request_id() is None
    assert dropped(b'{"id":true,"result":"' + filler + b'"}').request_id() is None


@pytest.mark.parametrize("size", [1, 2, 3, 5, 64, 10_000])
def test_events_pass_unchanged_and_a_long_one_is_skipped_to_its_end(size: int) -> None:
    first = b"event: message\r\ndata: 1\r\n\r\n"
    second = b"data: 2\r\r"
    data = first + b"data: " + b"y" * 500 + b"\n\n" + second + b": comment\n\n"
    out = framed(EventFramer(100), data, size)
    dropped = [item for item in out if isinstance(item, Dropped)]
    assert len(dropped) == 1
    passed = b"".join(item for item in out if isinstance(item, bytes))
    # the line ends of a split CRLF may fall on either side: what a parser reads is the same
    assert passed.replace(b"\r\n", b"\n").replace(b"\r", b"\n") == (
        b"event: message\ndata: 1\n\n" + b"data: 2\n\n: comment\n\n"
    )


def test_an_event_past_the_cap_is_reported_before_its_end_arrives() -> None:
    framer = EventFramer(100)
    assert list(framer.feed(b"data: " + b"y" * 60)) == []
    [item] = framer.feed(b"y" * 60)
    assert isinstance(item, Dropped)
    assert list(framer.feed(b"y" * 10_000)) == []  # skipped, not held
    assert list(framer.feed(b"\n\ndata: ok\n\n")) == [b"data: ok\n\n"]


# -- the exchanges ------------------------------------------------------------------------------


async def exchange(handler: object, message: dict[str, object], cap: int = 1000) -> httpx2.Response:
    transport = McpExchanges(httpx2.MockTransport(handler), cap=cap, server="s")  # type: ignore[arg-type]
    async with httpx2.AsyncClient(transport=transport) as client:
        response = await client.post("http://mcp.test/mcp", json=message)
        await response.aread()
        return response


def error_of(body: bytes) -> dict[str, object]:
    message = json.loads(body)
    assert message["id"] == 7
    return message["error"]  # type: ignore[no-any-return]


async def chunked(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


@pytest.mark.parametrize("declared", [True, False])
async def test_a_json_answer_past_the_cap_becomes_its_requests_error(declared: bool) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": 7, "result": {"t": "x" * 2000}}).encode()

    def handler(request: httpx2.Request) -> httpx2.Response:
        headers = {"content-type": "application/json"}
        if declared:
            return httpx2.Response(200, headers=headers, content=body)
        return httpx2.Response(200, headers=headers, content=chunked(body[:600], body[600:]))

    response = await exchange(handler, CALL)
    error = error_of(response.content)
    assert error["code"] == unread.ANSWER_TOO_LARGE
    assert error["data"] == {"cap_bytes": 1000}


async def test_a_json_answer_within_the_cap_is_passed_as_it_came() -> None:
    body = b'{"jsonrpc":"2.0","id":7,"result":{}}'

    def handler(request: httpx2.Request) -> httpx2.Response:
        headers = {"content-type": "application/json", "x-seen": "yes"}
        return httpx2.Response(202, headers=headers, content=chunked(body[:5], body[5:]))

    response = await exchange(handler, CALL)
    assert (response.status_code, response.content) == (202, body)
    assert response.headers["x-seen"] == "yes"


async def test_an_event_past_the_cap_on_a_requests_stream_ends_it_with_the_error() -> None:
    progress = b'event: message\ndata: {"jsonrpc":"2.0","method":"p"}\n\n'

    def handler(request: httpx2.Request) -> httpx2.Response:
        big = b"event: message\ndata: " + b"x" * 5000 + b"\n\n"
        stream = chunked(progress, big[:600], big[600:])
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=stream)

    response = await exchange(handler, CALL)
    first, second = response.content.split(b"\n\n", 1)
    assert first + b"\n\n" == progress
    assert second.startswith(b"event: message\ndata: ")
    assert error_of(second.removeprefix(b"event: message\ndata: "))["code"] == (
        unread.ANSWER_TOO_LARGE
    )


async def test_a_long_event_on_the_servers_own_stream_is_skipped() -> None:
    def handler(request: httpx2.Request) -> httpx2.Response:
        big = b"data: " + b"x" * 5000 + b"\n\n"
        stream = chunked(b"data: a\n\n", big, b"data: b\n\n")
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=stream)

    transport = McpExchanges(httpx2.MockTransport(handler), cap=1000, server="s")
    async with httpx2.AsyncClient(transport=transport) as client:
        response = await client.get("http://mcp.test/mcp")
    assert response.content == b"data: a\n\ndata: b\n\n"


async def test_a_compressed_answer_is_refused_not_inflated() -> None:
    def handler(request: httpx2.Request) -> httpx2.Response:
        headers = {"content-type": "application/json", "content-encoding": "gzip"}
        return httpx2.Response(200, headers=headers, content=chunked(b"\x1f\x8b..."))

    response = await exchange(handler, CALL)
    error = error_of(response.content)
    assert error["code"] == unread.NOT_READ
    assert "compressed (gzip)" in str(error["message"])


async def test_a_cancelled_call_abandons_its_exchange_wherever_it_waits() -> None:
    arrived = anyio.Event()

    async def handler(request: httpx2.Request) -> httpx2.Response:
        if json.loads(request.content).get("id") == 7:
            arrived.set()
            await anyio.sleep_forever()  # a server that never answers
        return httpx2.Response(202)

    transport = McpExchanges(httpx2.MockTransport(handler), cap=1000, server="s")
    async with httpx2.AsyncClient(transport=transport) as client, anyio.create_task_group() as tg:
        answers: list[httpx2.Response] = []

        async def call() -> None:
            answers.append(await client.post("http://mcp.test/mcp", json=CALL))

        tg.start_soon(call)
        with anyio.fail_after(10):
            await arrived.wait()
            cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled"}
            await client.post("http://mcp.test/mcp", json={**cancel, "params": {"requestId": 7}})
    [answer] = answers
    assert error_of(answer.content)["code"] == unread.NOT_READ
