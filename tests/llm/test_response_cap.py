"""How much of an LLM response the adapter reads: at most `max_response_bytes`, whatever the
endpoint sends (a 10 MB reply, 10 MB of tool-call arguments, a stream that never ends a line),
against the fake OpenAI-compatible server over real loopback HTTP. Past the cap the call fails
with `LLMResponseTooLargeError`, which the engine does not retry."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from app.engine.errors import LLMResponseTooLargeError, LLMStatusError
from app.llm.bodycap import capped_lines
from app.llm.openai import OpenAIChatModel
from tests.fakes.llm_server import FakeLLMServer, FakeReply, FakeToolCall

MESSAGES = [{"role": "user", "content": "Go."}]
CAP = 1_048_576
TEN_MB = 10_000_000


@pytest.fixture
async def llm() -> AsyncIterator[FakeLLMServer]:
    async with FakeLLMServer() as server:
        yield server


@pytest.fixture
async def model(llm: FakeLLMServer) -> AsyncIterator[OpenAIChatModel]:
    async with OpenAIChatModel(
        base_url=llm.base_url, model="gpt-test", max_response_bytes=CAP
    ) as chat_model:
        yield chat_model


def huge_content(streamed: bool) -> FakeReply:
    # ten 1 MB deltas when streamed (the fake's default cuts words into 12-char deltas)
    return FakeReply(content=["x" * 1_000_000] * 10 if streamed else "x" * TEN_MB)


async def test_a_ten_megabyte_reply_declared_by_content_length_is_refused_unread(
    llm: FakeLLMServer, model: OpenAIChatModel
) -> None:
    llm.enqueue(huge_content(streamed=False))

    with pytest.raises(LLMResponseTooLargeError) as caught:
        await model.complete(MESSAGES, [])

    assert "declares" in str(caught.value)
    assert f"{CAP:,} bytes" in str(caught.value)
    assert caught.value.retryable is False


async def test_a_ten_megabyte_reply_without_a_length_is_read_only_up_to_the_cap(
    llm: FakeLLMServer, model: OpenAIChatModel
) -> None:
    llm.enqueue(FakeReply(content="x" * TEN_MB, unsized=True))

    with pytest.raises(LLMResponseTooLargeError, match="passed the cap"):
        await model.complete(MESSAGES, [])


async def test_ten_megabytes_of_tool_call_arguments_are_refused(
    llm: FakeLLMServer, model: OpenAIChatModel
) -> None:
    arguments = {"text": "y" * TEN_MB}
    llm.enqueue(FakeReply(tool_calls=[FakeToolCall("write", arguments)], unsized=True))

    with pytest.raises(LLMResponseTooLargeError):
        await model.complete(MESSAGES, [])


async def test_a_streamed_ten_megabyte_reply_is_cut_off_at_the_cap(
    llm: FakeLLMServer, model: OpenAIChatModel
) -> None:
    llm.enqueue(huge_content(streamed=True))
    received: list[str] = []

    with pytest.raises(LLMResponseTooLargeError, match="passed the cap"):
        await model.complete(MESSAGES, [], on_delta=received.append)

    assert sum(map(len, received)) <= CAP


async def test_a_stream_whose_line_never_ends_is_cut_off_at_the_cap(
    llm: FakeLLMServer, model: OpenAIChatModel
) -> None:
    endless_line = b'data: {"choices": [{"index": 0, "delta": {"content": "' + b"z" * TEN_MB
    llm.enqueue(FakeReply(body=endless_line, content_type="text/event-stream"))

    with pytest.raises(LLMResponseTooLargeError, match="passed the cap"):
        await model.complete(MESSAGES, [], on_delta=lambda _: None)


async def test_a_huge_error_body_still_gives_the_status_error_with_a_short_message(
    llm: FakeLLMServer, model: OpenAIChatModel
) -> None:
    llm.enqueue(FakeReply.http_error(503, "overloaded " * 1_000_000))

    with pytest.raises(LLMStatusError) as caught:
        await model.complete(MESSAGES, [])

    assert caught.value.status == 503
    assert caught.value.retryable is True
    assert len(str(caught.value)) < 1000


@pytest.mark.parametrize("streamed", [False, True])
async def test_a_reply_within_the_cap_is_read_whole(
    llm: FakeLLMServer, model: OpenAIChatModel, streamed: bool
) -> None:
    text = "word " * 100_000  # 500 KB: under the 1 MB cap, in either form
    llm.enqueue(FakeReply(content=[text] if streamed else text, unsized=not streamed))

    reply = await model.complete(MESSAGES, [], on_delta=(lambda _: None) if streamed else None)

    assert reply.content == text


@pytest.mark.parametrize(
    ("chunks", "lines"),
    [
        ([b"data: a\r", b"\ndata: b\r\r\n", b"data: c"], ["data: a", "data: b", "", "data: c"]),
        ([b"da", b"ta: \xe4\xbd", b"\xa0\n\n"], ["data: 你", ""]),
        ([b"one\rtwo\n", b"\n"], ["one", "two", ""]),
    ],
)
async def test_capped_lines_splits_as_httpx_does(chunks: list[bytes], lines: list[str]) -> None:
    async def body() -> AsyncIterator[bytes]:
        for chunk in chunks:
            yield chunk

    response = httpx.Response(200, content=body())
    assert [line async for line in capped_lines(response, CAP)] == lines
    expected = [line async for line in httpx.Response(200, content=body()).aiter_lines()]
    assert lines == expected
