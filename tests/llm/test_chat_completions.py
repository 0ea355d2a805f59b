"""The wire-format pieces alone: SSE decoding, stream assembly, error bodies, Retry-After."""

from __future__ import annotations

from collections.abc import AsyncIterator
from email.utils import formatdate
from typing import Any

import httpx
import pytest

from app.engine.errors import LLMResponseError
from app.engine.ports import TokenUsage, ToolCall
from app.llm.chat_completions import (
    StreamAssembler,
    error_message,
    parse_usage,
    retry_after_s,
)
from app.llm.sse import aiter_sse_data


async def _lines(*lines: str) -> AsyncIterator[str]:
    for line in lines:
        yield line


async def test_sse_yields_data_and_skips_comments_blank_lines_and_other_fields() -> None:
    lines = _lines(
        ": keep-alive",
        "",
        "event: message",
        "id: 7",
        "data: first",
        "",
        "data:no-space",
        "",
        "data: line one",
        "data: line two",
        "retry: 1000",
        "",
        "data: [DONE]",  # no blank line before the end: still dispatched
    )

    events = [data async for data in aiter_sse_data(lines)]

    assert events == ["first", "no-space", "line one\nline two", "[DONE]"]


def test_tool_calls_sent_whole_without_index_stay_separate() -> None:
    assembler = StreamAssembler()
    for call_id, name in (("a", "search"), ("b", "fetch")):
        call = {"id": call_id, "function": {"name": name, "arguments": {"x": 1}}}
        assembler.feed({"choices": [{"delta": {"tool_calls": [call]}}]})
    assembler.feed({"choices": [{"delta": {}, "finish_reason": "tool_calls"}]})

    reply = assembler.reply()

    assert reply.tool_calls == (
        ToolCall(id="a", name="search", arguments='{"x": 1}'),
        ToolCall(id="b", name="fetch", arguments='{"x": 1}'),
    )
    assert reply.finish_reason == "tool_calls"


def test_streamed_tool_call_without_a_name_is_a_response_error() -> None:
    assembler = StreamAssembler()
    fragment = {"index": 0, "id": "a", "function": {"arguments": "{}"}}
    assembler.feed({"choices": [{"delta": {"tool_calls": [fragment]}}]})

    with pytest.raises(LLMResponseError, match="function name"):
        assembler.reply()


@pytest.mark.parametrize(
    "chunk",
    [
        {"error": {"message": "overloaded"}},
        ["not", "an", "object"],
        {"choices": "nope"},
        {"choices": [{"delta": "nope"}]},
    ],
)
def test_unusable_stream_chunks_are_response_errors(chunk: Any) -> None:
    with pytest.raises(LLMResponseError):
        StreamAssembler().feed(chunk)


def test_text_parts_in_a_delta_are_forwarded() -> None:
    delta = {"content": [{"type": "text", "text": "a"}, {"type": "image_url"}, "b"]}

    assert StreamAssembler().feed({"choices": [{"delta": delta}]}) == "ab"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"prompt_tokens": 3, "completion_tokens": 4}, TokenUsage(3, 4)),
        ({"prompt_tokens": 3, "total_tokens": 10}, TokenUsage(3, 7)),
        (  # OpenAI's cached prompt tokens, part of prompt_tokens
            {
                "prompt_tokens": 30,
                "completion_tokens": 4,
                "prompt_tokens_details": {"cached_tokens": 16},
            },
            TokenUsage(30, 4, cached_tokens=16),
        ),
        (  # more cached than the prompt: at most the prompt
            {
                "prompt_tokens": 3,
                "completion_tokens": 4,
                "prompt_tokens_details": {"cached_tokens": 9},
            },
            TokenUsage(3, 4, cached_tokens=3),
        ),
        (
            {"prompt_tokens": 3, "completion_tokens": 4, "prompt_tokens_details": None},
            TokenUsage(3, 4),
        ),
        (
            {
                "prompt_tokens": 3,
                "completion_tokens": 4,
                "prompt_tokens_details": {"cached_tokens": -1},
            },
            TokenUsage(3, 4),
        ),
        ({"prompt_tokens": True, "completion_tokens": None}, None),
        ({}, None),
        ("12", None),
        (None, None),
    ],
)
def test_usage_is_read_leniently(raw: Any, expected: TokenUsage | None) -> None:
    assert parse_usage(raw) == expected


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ('{"error": {"message": "bad key", "type": "auth"}}', "bad key"),
        ('{"error": "model not found"}', "model not found"),
        ('{"detail": "Not Found"}', "Not Found"),
        ('{"object": "error", "message": "context too long"}', "context too long"),
        ("upstream\n  timed out", "upstream timed out"),
        ("", "Too Many Requests"),
    ],
)
def test_error_message_is_found_in_the_shapes_servers_use(body: str, expected: str) -> None:
    assert error_message(body, fallback="Too Many Requests") == expected


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({}, None),
        ({"Retry-After": "soon"}, None),
        ({"Retry-After": "-5"}, 0.0),
        ({"Retry-After": "2.5"}, 2.5),
        ({"Retry-After": formatdate(0, usegmt=True)}, 0.0),  # a date in the past
        ({"retry-after-ms": "oops", "Retry-After": "3"}, 3.0),
    ],
)
def test_retry_after_is_parsed_or_ignored(headers: dict[str, str], expected: float | None) -> None:
    assert retry_after_s(httpx.Headers(headers)) == expected
