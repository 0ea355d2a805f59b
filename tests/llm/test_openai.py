"""OpenAIChatModel against the fake OpenAI-compatible server, over real loopback HTTP."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from email.utils import formatdate
from typing import Any

import httpx
import pytest

from app.engine.errors import (
    LLMConnectionError,
    LLMResponseError,
    LLMStatusError,
    LLMTimeoutError,
)
from app.engine.ports import ChatModel, TokenUsage, ToolCall, ToolSpec
from app.http_transport import AiohttpTransport
from app.llm.openai import OpenAIChatModel
from tests.fakes.llm_server import FakeLLMServer, FakeReply, FakeToolCall, FakeUsage

MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What is 2+2?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_a",
                "type": "function",
                "function": {"name": "calc", "arguments": '{"expr": "2+2"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_a", "content": "4"},
]
SEARCH = ToolSpec(
    name="search",
    description="Search the web.",
    parameters={"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
)


@pytest.fixture
async def llm() -> AsyncIterator[FakeLLMServer]:
    async with FakeLLMServer() as server:
        yield server


@pytest.fixture
async def model(llm: FakeLLMServer) -> AsyncIterator[OpenAIChatModel]:
    async with OpenAIChatModel(base_url=llm.base_url, model="gpt-test") as chat_model:
        yield chat_model


class Deltas(list[str]):
    """A DeltaSink that keeps what it was given."""

    def __call__(self, text: str) -> None:
        self.append(text)


# -- replies ---------------------------------------------------------------------------------


async def test_plain_answer_returns_content_finish_reason_and_usage(
    llm: FakeLLMServer, model: OpenAIChatModel
) -> None:
    llm.enqueue(FakeReply(content="4", usage=FakeUsage(prompt_tokens=31, completion_tokens=2)))

    reply = await model.complete(MESSAGES, [SEARCH])

    assert reply.content == "4"
    assert reply.tool_calls == ()
    assert reply.finish_reason == "stop"
    assert reply.usage == TokenUsage(prompt_tokens=31, completion_tokens=2)


async def test_parallel_tool_calls_keep_ids_names_and_raw_arguments(
    llm: FakeLLMServer, model: OpenAIChatModel
) -> None:
    llm.enqueue(
        FakeReply(
            content="Let me look.",
            tool_calls=[
                FakeToolCall("search", {"q": "finishline"}, id="call_1"),
                FakeToolCall("search", {"q": "ReAct"}, id="call_2"),
                FakeToolCall("fetch", '{"url": "http://x", ', id="call_3"),  # invalid JSON
            ],
        )
    )

    reply = await model.complete(MESSAGES, [SEARCH])

    assert reply.content == "Let me look."
    assert reply.tool_calls == (
        ToolCall(id="call_1", name="search", arguments='{"q": "finishline"}'),
        ToolCall(id="call_2", name="search", arguments='{"q": "ReAct"}'),
        ToolCall(id="call_3", name="fetch", arguments='{"url": "http://x", '),
    )
    assert reply.finish_reason == "tool_calls"


async def test_missing_usage_gives_none(llm: FakeLLMServer, model: OpenAIChatModel) -> None:
    llm.enqueue(FakeReply(content="4", usage=None))

    reply = await model.complete(MESSAGES, [])

    assert reply.usage is None


async def test_content_given_as_text_parts_is_joined_and_empty_content_is_none(
    llm: FakeLLMServer, model: OpenAIChatModel
) -> None:
    parts = [{"type": "text", "text": "Two plus two "}, {"type": "text", "text": "is four."}]
    llm.enqueue(FakeReply(body=_completion({"role": "assistant", "content": parts})))
    llm.enqueue(FakeReply(body=_completion({"role": "assistant", "content": ""})))

    assert (await model.complete(MESSAGES, [])).content == "Two plus two is four."
    assert (await model.complete(MESSAGES, [])).content is None


async def test_sloppy_tool_calls_get_an_id_and_json_text_arguments(
    llm: FakeLLMServer, model: OpenAIChatModel
) -> None:
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"type": "function", "function": {"name": "search", "arguments": {"q": "x"}}},
            {"id": "", "function": {"name": "now"}},
        ],
    }
    llm.enqueue(FakeReply(body=_completion(message)))

    reply = await model.complete(MESSAGES, [SEARCH])

    first, second = reply.tool_calls
    assert (first.name, json.loads(first.arguments)) == ("search", {"q": "x"})
    assert (second.name, second.arguments) == ("now", "{}")
    assert first.id.startswith("call_")
    assert second.id.startswith("call_")
    assert first.id != second.id


# -- streaming -------------------------------------------------------------------------------


async def test_streamed_content_reaches_on_delta_in_order_and_whole_reply_is_returned(
    llm: FakeLLMServer, model: OpenAIChatModel
) -> None:
    pieces = ["Two ", "plus ", "two ", "is ", "four."]
    llm.enqueue(FakeReply(content=pieces, usage=FakeUsage(prompt_tokens=12, completion_tokens=5)))
    deltas = Deltas()

    reply = await model.complete(MESSAGES, [], on_delta=deltas)

    assert deltas == pieces
    assert reply.content == "Two plus two is four."
    assert reply.finish_reason == "stop"
    assert reply.usage == TokenUsage(prompt_tokens=12, completion_tokens=5)


async def test_streamed_tool_call_fragments_are_assembled(
    llm: FakeLLMServer, model: OpenAIChatModel
) -> None:
    llm.enqueue(
        FakeReply(
            tool_calls=[
                FakeToolCall("search", {"q": "a fairly long query to split"}, id="call_x"),
                FakeToolCall("search", {"q": "another one"}, id="call_y"),
            ]
        )
    )
    deltas = Deltas()

    reply = await model.complete(MESSAGES, [SEARCH], on_delta=deltas)

    assert reply.tool_calls == (
        ToolCall(id="call_x", name="search", arguments='{"q": "a fairly long query to split"}'),
        ToolCall(id="call_y", name="search", arguments='{"q": "another one"}'),
    )
    assert reply.content is None
    assert reply.finish_reason == "tool_calls"
    assert deltas == []


@pytest.mark.parametrize(
    ("usage", "expected"),
    [(FakeUsage(prompt_tokens=40, completion_tokens=9), TokenUsage(40, 9)), (None, None)],
)
async def test_streamed_usage_comes_from_the_usage_chunk(
    llm: FakeLLMServer,
    model: OpenAIChatModel,
    usage: FakeUsage | None,
    expected: TokenUsage | None,
) -> None:
    llm.enqueue(FakeReply(content="ok", usage=usage))

    reply = await model.complete(MESSAGES, [], on_delta=Deltas())

    assert reply.usage == expected


async def test_server_ignoring_stream_still_gives_the_reply_and_one_delta(
    llm: FakeLLMServer, model: OpenAIChatModel
) -> None:
    body = _completion({"role": "assistant", "content": "whole answer"})
    llm.enqueue(FakeReply(body=body, content_type="application/json"))
    deltas = Deltas()

    reply = await model.complete(MESSAGES, [], on_delta=deltas)

    assert reply.content == "whole answer"
    assert deltas == ["whole answer"]


# -- the request -----------------------------------------------------------------------------


async def test_request_carries_model_messages_and_tools(
    llm: FakeLLMServer, model: OpenAIChatModel
) -> None:
    llm.enqueue(FakeReply(content="4"))

    await model.complete(MESSAGES, [SEARCH])

    (sent,) = llm.requests
    assert llm.received[0].path == "/v1/chat/completions"
    assert sent == {"model": "gpt-test", "messages": MESSAGES, "tools": [SEARCH.to_openai()]}


async def test_request_omits_tools_when_empty_and_stream_fields_when_not_streaming(
    llm: FakeLLMServer, model: OpenAIChatModel
) -> None:
    llm.enqueue(FakeReply(content="4"))

    await model.complete(MESSAGES, [])

    assert set(llm.requests[0]) == {"model", "messages"}


async def test_streaming_request_asks_for_usage(llm: FakeLLMServer, model: OpenAIChatModel) -> None:
    llm.enqueue(FakeReply(content="4"))

    await model.complete(MESSAGES, [SEARCH], on_delta=Deltas())

    sent = llm.requests[0]
    assert sent["stream"] is True
    assert sent["stream_options"] == {"include_usage": True}
    assert sent["tools"] == [SEARCH.to_openai()]
    assert llm.received[0].headers["accept"] == "text/event-stream"


async def test_api_key_and_extra_headers_are_sent(llm: FakeLLMServer) -> None:
    llm.enqueue(FakeReply(content="a"), FakeReply(content="b"))
    async with (
        OpenAIChatModel(
            base_url=llm.base_url + "/",  # a trailing slash is tolerated
            model="m",
            api_key="sk-test",
            extra_headers={"X-Title": "finishline"},
        ) as with_key,
        OpenAIChatModel(base_url=llm.base_url, model="m") as without_key,
    ):
        await with_key.complete(MESSAGES, [])
        await without_key.complete(MESSAGES, [])

    keyed, anonymous = (request.headers for request in llm.received)
    assert keyed["authorization"] == "Bearer sk-test"
    assert keyed["x-title"] == "finishline"
    assert "authorization" not in anonymous
    assert [request.path for request in llm.received] == ["/v1/chat/completions"] * 2


# -- HTTP errors -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "expected_delay"),
    [({"Retry-After": "7"}, 7.0), ({"retry-after-ms": "1500", "Retry-After": "2"}, 1.5)],
)
async def test_429_is_retryable_and_carries_the_requested_delay(
    llm: FakeLLMServer,
    model: OpenAIChatModel,
    headers: dict[str, str],
    expected_delay: float,
) -> None:
    llm.enqueue(FakeReply.http_error(429, "Rate limit reached for gpt-test", headers=headers))

    with pytest.raises(LLMStatusError) as caught:
        await model.complete(MESSAGES, [])

    assert caught.value.status == 429
    assert caught.value.retryable
    assert caught.value.retry_after_s == expected_delay
    assert "Rate limit reached for gpt-test" in caught.value.message


async def test_429_retry_after_as_http_date_becomes_seconds(
    llm: FakeLLMServer, model: OpenAIChatModel
) -> None:
    llm.enqueue(FakeReply.http_error(429, retry_after=formatdate(time.time() + 30, usegmt=True)))

    with pytest.raises(LLMStatusError) as caught:
        await model.complete(MESSAGES, [])

    assert caught.value.retry_after_s is not None
    assert 27 <= caught.value.retry_after_s <= 30


@pytest.mark.parametrize("status", [500, 503])
async def test_server_errors_are_retryable(
    llm: FakeLLMServer, model: OpenAIChatModel, status: int
) -> None:
    llm.enqueue(FakeReply.http_error(status, "upstream overloaded"))

    with pytest.raises(LLMStatusError) as caught:
        await model.complete(MESSAGES, [])

    assert (caught.value.status, caught.value.retryable) == (status, True)
    assert caught.value.retry_after_s is None


@pytest.mark.parametrize(
    ("status", "message"),
    [(400, "'messages' must contain at least one message"), (401, "Incorrect API key provided")],
)
async def test_client_errors_are_not_retryable_and_carry_the_server_message(
    llm: FakeLLMServer, model: OpenAIChatModel, status: int, message: str
) -> None:
    llm.enqueue(FakeReply.http_error(status, message))

    with pytest.raises(LLMStatusError) as caught:
        await model.complete(MESSAGES, [])

    assert not caught.value.retryable
    assert caught.value.status == status
    assert str(caught.value) == f"HTTP {status}: {message}"


async def test_error_body_that_is_not_json_gives_its_text(
    llm: FakeLLMServer, model: OpenAIChatModel
) -> None:
    llm.enqueue(
        FakeReply(status=502, body="Bad gateway:\n upstream reset", content_type="text/plain")
    )

    with pytest.raises(LLMStatusError) as caught:
        await model.complete(MESSAGES, [])

    assert caught.value.message == "HTTP 502: Bad gateway: upstream reset"


async def test_error_status_while_streaming_is_a_status_error(
    llm: FakeLLMServer, model: OpenAIChatModel
) -> None:
    llm.enqueue(FakeReply.http_error(429, "slow down", retry_after=3))

    with pytest.raises(LLMStatusError) as caught:
        await model.complete(MESSAGES, [], on_delta=Deltas())

    assert (caught.value.status, caught.value.retry_after_s) == (429, 3.0)
    assert "slow down" in caught.value.message


# -- unusable answers ------------------------------------------------------------------------


async def test_malformed_json_body_is_a_response_error(
    llm: FakeLLMServer, model: OpenAIChatModel
) -> None:
    llm.enqueue(FakeReply(body='{"choices": [{"message": '))

    with pytest.raises(LLMResponseError) as caught:
        await model.complete(MESSAGES, [])

    assert not caught.value.retryable
    assert "not JSON" in caught.value.message


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"id": "chatcmpl-1", "object": "chat.completion"}, "no choices"),
        ({"choices": []}, "no choices"),
        ({"error": {"message": "model overloaded", "code": 503}}, "model overloaded"),
    ],
)
async def test_json_without_choices_is_a_response_error(
    llm: FakeLLMServer, model: OpenAIChatModel, body: dict[str, Any], expected: str
) -> None:
    llm.enqueue(FakeReply(body=json.dumps(body)))

    with pytest.raises(LLMResponseError, match=expected):
        await model.complete(MESSAGES, [])


async def test_broken_stream_chunk_is_a_response_error(
    llm: FakeLLMServer, model: OpenAIChatModel
) -> None:
    llm.enqueue(
        FakeReply(body='data: {"choices": [{"delta": {"content": "Hi"}}]}\n\ndata: {oops\n\n')
    )
    deltas = Deltas()

    with pytest.raises(LLMResponseError, match="stream chunk is not JSON"):
        await model.complete(MESSAGES, [], on_delta=deltas)

    assert deltas == ["Hi"]


async def test_stream_with_no_events_is_a_response_error(
    llm: FakeLLMServer, model: OpenAIChatModel
) -> None:
    llm.enqueue(FakeReply(body="<html>hello</html>", content_type="text/html"))

    with pytest.raises(LLMResponseError, match="no events"):
        await model.complete(MESSAGES, [], on_delta=Deltas())


# -- transport failures ----------------------------------------------------------------------


@pytest.mark.parametrize("transport", ["aiohttp", "httpcore"])
@pytest.mark.parametrize("streaming", [False, True])
async def test_unanswered_call_is_a_timeout_error(
    llm: FakeLLMServer, streaming: bool, transport: str
) -> None:
    """Streaming: the first chunks arrive, then the server goes silent past the read timeout.
    With the service's transport (aiohttp) and with httpx's own, on a client passed in."""
    if streaming:
        llm.enqueue(FakeReply(content=["a", "b", "c"], chunk_delay_s=30))
    else:
        llm.enqueue(FakeReply(hang=True))
    chosen = AiohttpTransport() if transport == "aiohttp" else None
    async with httpx.AsyncClient(transport=chosen, timeout=0.2) as client:
        model = OpenAIChatModel(base_url=llm.base_url, model="m", client=client)
        with pytest.raises(LLMTimeoutError) as caught:
            await model.complete(MESSAGES, [], on_delta=Deltas() if streaming else None)

    assert caught.value.retryable
    assert isinstance(caught.value.__cause__, httpx.TimeoutException)


async def test_connection_refused_is_a_connection_error() -> None:
    async with FakeLLMServer() as gone:
        base_url = gone.base_url  # nothing listens there once the server has stopped

    async with OpenAIChatModel(base_url=base_url, model="m") as model:
        with pytest.raises(LLMConnectionError) as caught:
            await model.complete(MESSAGES, [])

    assert caught.value.retryable
    assert isinstance(caught.value.__cause__, httpx.ConnectError)


@pytest.mark.parametrize("streaming", [False, True])
async def test_dropped_connection_is_a_connection_error(
    llm: FakeLLMServer, model: OpenAIChatModel, streaming: bool
) -> None:
    """A body cut short, streamed or not, is the endpoint hanging up: retryable."""
    llm.enqueue(FakeReply(content=["one ", "two ", "three ", "four"], drop=True, cut_after=3))

    with pytest.raises(LLMConnectionError) as caught:
        await model.complete(MESSAGES, [], on_delta=Deltas() if streaming else None)

    assert isinstance(caught.value.__cause__, httpx.RemoteProtocolError)


async def test_stream_that_ends_before_done_is_a_connection_error(
    llm: FakeLLMServer, model: OpenAIChatModel
) -> None:
    llm.enqueue(FakeReply(content=["one ", "two ", "three"], cut_after=2))
    deltas = Deltas()

    with pytest.raises(LLMConnectionError, match=r"before \[DONE\]"):
        await model.complete(MESSAGES, [], on_delta=deltas)

    assert deltas == ["one "]


async def test_stream_with_a_finish_reason_but_no_done_is_accepted(
    llm: FakeLLMServer, model: OpenAIChatModel
) -> None:
    chunk = {"choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": "stop"}]}
    llm.enqueue(FakeReply(body=f"data: {json.dumps(chunk)}\n\n"))

    reply = await model.complete(MESSAGES, [], on_delta=Deltas())

    assert (reply.content, reply.finish_reason) == ("ok", "stop")


# -- lifecycle -------------------------------------------------------------------------------


async def test_model_is_a_chat_model_named_after_its_model(model: OpenAIChatModel) -> None:
    assert isinstance(model, ChatModel)
    assert model.name == "gpt-test"


async def test_aclose_leaves_an_injected_client_open(llm: FakeLLMServer) -> None:
    llm.enqueue(FakeReply(content="after"))
    async with httpx.AsyncClient() as client:
        model = OpenAIChatModel(base_url=llm.base_url, model="m", client=client)
        await model.aclose()

        assert not client.is_closed
        assert (await model.complete(MESSAGES, [])).content == "after"


def _completion(message: dict[str, Any], **extra: Any) -> str:
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    return json.dumps(
        {"id": "chatcmpl-raw", "object": "chat.completion", "choices": [choice], **extra}
    )
