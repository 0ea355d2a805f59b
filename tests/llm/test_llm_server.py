"""The fake OpenAI-compatible server itself: the contract the rest of the suite relies on."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from typing import Any

import anyio
import anyio.lowlevel
import httpx
import pytest

from tests.fakes.llm_server import FakeLLMServer, FakeReply, FakeToolCall
from tests.fakes.serving import LISTEN_BACKLOG, loopback_socket

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


async def _post(client: httpx.AsyncClient, llm: FakeLLMServer, body: Any = CHAT) -> httpx.Response:
    return await client.post(f"{llm.base_url}/chat/completions", json=body)


def _content(response: httpx.Response) -> str:
    return response.json()["choices"][0]["message"]["content"]


async def test_scripted_replies_come_first_then_the_handler_answers() -> None:
    seen: list[dict[str, Any]] = []

    def handler(request: dict[str, Any]) -> FakeReply:
        seen.append(request)
        return FakeReply(content=f"handled {len(seen)}")

    async with (
        FakeLLMServer([FakeReply(content="scripted")], handler=handler) as llm,
        httpx.AsyncClient() as client,
    ):
        answers = [_content(await _post(client, llm)) for _ in range(3)]

    assert answers == ["scripted", "handled 1", "handled 2"]
    assert seen == [CHAT, CHAT]
    assert llm.pending == 0


async def test_an_async_handler_is_awaited() -> None:
    async def handler(request: dict[str, Any]) -> FakeReply:
        await anyio.lowlevel.checkpoint()
        return FakeReply(content=request["messages"][-1]["content"].upper())

    async with FakeLLMServer(handler=handler) as llm, httpx.AsyncClient() as client:
        assert _content(await _post(client, llm)) == "HI"


async def test_without_a_script_the_server_answers_a_clear_400() -> None:
    async with FakeLLMServer() as llm, httpx.AsyncClient() as client:
        response = await _post(client, llm)

    assert response.status_code == 400
    assert "no scripted reply left" in response.json()["error"]["message"]


async def test_finish_helper_calls_task_finished_with_the_answer() -> None:
    async with FakeLLMServer([FakeReply.finish("42")]) as llm, httpx.AsyncClient() as client:
        message = (await _post(client, llm)).json()["choices"][0]["message"]

    (call,) = message["tool_calls"]
    assert call["function"]["name"] == "task_finished"
    assert json.loads(call["function"]["arguments"]) == {"answer": "42"}
    assert call["id"].startswith("call_")


async def test_wait_for_requests_returns_once_they_have_arrived() -> None:
    async with (
        FakeLLMServer(handler=lambda _: FakeReply(hang=True)) as llm,
        httpx.AsyncClient() as client,
        anyio.create_task_group() as tg,
    ):
        for _ in range(2):
            tg.start_soon(_post, client, llm)

        bodies = await llm.wait_for_requests(2)

        assert bodies == [CHAT, CHAT]
        llm.release()


async def test_a_hanging_reply_answers_after_release() -> None:
    responses: list[httpx.Response] = []
    async with (
        FakeLLMServer([FakeReply(content="late", hang=True)]) as llm,
        httpx.AsyncClient() as client,
        anyio.create_task_group() as tg,
    ):

        async def call() -> None:
            responses.append(await _post(client, llm))

        tg.start_soon(call)
        await llm.wait_for_requests(1)
        assert responses == []
        llm.release()

    assert _content(responses[0]) == "late"


async def test_a_hanging_reply_answers_503_when_the_server_stops() -> None:
    async with httpx.AsyncClient() as client, anyio.create_task_group() as tg:
        responses: list[httpx.Response] = []
        async with FakeLLMServer([FakeReply(hang=True)]) as llm:

            async def call() -> None:
                responses.append(await _post(client, llm))

            tg.start_soon(call)
            await llm.wait_for_requests(1)

    assert responses[0].status_code == 503


async def test_latency_delays_every_answer() -> None:
    async with (
        FakeLLMServer(handler=lambda _: FakeReply(content="x"), latency_s=0.05) as llm,
        httpx.AsyncClient() as client,
    ):
        started = time.monotonic()
        for _ in range(2):
            await _post(client, llm)
        elapsed = time.monotonic() - started

    assert elapsed >= 0.1


async def test_stream_sends_deltas_fragments_usage_and_done() -> None:
    reply = FakeReply(
        content="Looking this up now",
        tool_calls=[FakeToolCall("search", {"q": "finishline"}), FakeToolCall("now")],
    )
    body = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
    async with FakeLLMServer([reply]) as llm, httpx.AsyncClient() as client:
        response = await _post(client, llm, body)

    assert response.headers["content-type"].startswith("text/event-stream")
    lines = response.text.split("\n")
    assert lines[0].startswith(":")  # a comment first, as keep-alives are
    data = [line.removeprefix("data: ") for line in lines if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    chunks = [json.loads(item) for item in data[:-1]]
    deltas = [chunk["choices"][0]["delta"] for chunk in chunks if chunk["choices"]]
    assert len([d for d in deltas if d.get("content")]) >= 3
    fragments = [d["tool_calls"][0] for d in deltas if "tool_calls" in d]
    first_search = fragments[0]
    assert (first_search["index"], first_search["function"]["name"]) == (0, "search")
    assert first_search["id"].startswith("call_")
    search_arguments = [f["function"]["arguments"] for f in fragments[1:] if f["index"] == 0]
    assert len(search_arguments) >= 2
    assert json.loads("".join(search_arguments)) == {"q": "finishline"}
    assert {f["index"] for f in fragments} == {0, 1}
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["prompt_tokens"] > 0


async def test_stream_without_include_usage_sends_no_usage_chunk() -> None:
    async with FakeLLMServer([FakeReply(content="hi")]) as llm, httpx.AsyncClient() as client:
        response = await _post(client, llm, {**CHAT, "stream": True})

    assert "usage" not in response.text


async def test_models_are_listed() -> None:
    async with FakeLLMServer(model="fake-1") as llm, httpx.AsyncClient() as client:
        response = await client.get(f"{llm.base_url}/models")

    assert response.json()["data"][0]["id"] == "fake-1"
    assert llm.requests == []


async def test_stopping_leaves_no_task_and_closes_the_port() -> None:
    before = asyncio.all_tasks()
    async with FakeLLMServer([FakeReply(content="x")]) as llm, httpx.AsyncClient() as client:
        await _post(client, llm)

    assert asyncio.all_tasks() == before
    async with httpx.AsyncClient() as client:
        with pytest.raises(httpx.ConnectError):
            await _post(client, llm)


def test_the_listening_socket_sets_tcp_nodelay_and_queues_a_burst_of_clients() -> None:
    """TCP_NODELAY (Linux passes it to accepted connections; without it a "0 ms" answer waits
    ~40 ms on Nagle and delayed ACKs) and a backlog that queues 300 connections nobody has
    accepted yet: with a short one, the kernel drops the extra SYNs and those connects hang
    for a second or more (or reset), which the 5 s bound turns into a failure."""
    assert LISTEN_BACKLOG >= 1024
    with loopback_socket() as server:
        assert server.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
        clients = []
        try:
            for _ in range(300):
                client = socket.create_connection(server.getsockname(), timeout=5)
                clients.append(client)
        finally:
            for client in clients:
                client.close()
        assert len(clients) == 300
