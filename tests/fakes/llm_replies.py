"""What the fake LLM server answers: `FakeReply`, and its rendering as Chat Completions JSON
or as an SSE stream of `chat.completion.chunk`s. Pure; `tests.fakes.llm_server` serves it."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

FINISH_TOOL = "task_finished"
"""finishline's finish tool, as `FakeReply.finish` calls it."""


@dataclass(frozen=True, slots=True)
class FakeToolCall:
    """A tool call to send. `arguments` as a dict is JSON-encoded; a str is sent verbatim
    (so it may be invalid JSON on purpose). Without `id`, the server makes `call_<n>`."""

    name: str
    arguments: Mapping[str, Any] | str = field(default_factory=dict)
    id: str | None = None


@dataclass(frozen=True, slots=True)
class FakeUsage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    """Of prompt_tokens, those served from the prompt cache (OpenAI's
    `usage.prompt_tokens_details.cached_tokens`, sent as OpenAI does, 0 included)."""


@dataclass(frozen=True, slots=True)
class FakeReply:
    """One scripted answer. Every field has a default; set only what the test is about.

    content         the text; a sequence of str gives the exact streamed deltas (joined
                    otherwise); a str is streamed in word-sized deltas
    tool_calls      FakeToolCall(name, arguments, id=None) each
    usage           "estimate" (default: ~4 chars a token, deterministic, none cached),
                    FakeUsage(...) (with cached tokens), or None for a server that
                    reports no usage
    finish_reason   default "tool_calls" when there are tool calls, else "stop"
    status, error   an HTTP error: `status` >= 400 answers `{"error": {"message": error}}`
    headers         extra response headers, e.g. {"Retry-After": "2"}
    body            a raw body sent verbatim instead of anything rendered (malformed JSON,
                    a missing `choices`, a broken SSE stream); `content_type` to go with it
    delay_s         wait before answering (abandoned if the client leaves)
    hang            never answer until the client leaves, `llm.release()` (then answer
                    normally) or the server shuts down (then 503)
    drop            hang up mid-response: a non-streamed body is cut in half under a full
                    Content-Length; a stream stops after `cut_after` events (default: half)
    cut_after       streamed: send only the first N events, no [DONE]; without `drop` the
                    body then ends cleanly, with `drop` the connection is closed
    chunk_delay_s   streamed: pause between events
    unsized         a whole body sent without Content-Length (chunked), in 64 KB pieces
    """

    content: str | Sequence[str] | None = None
    tool_calls: Sequence[FakeToolCall] = ()
    usage: FakeUsage | Literal["estimate"] | None = "estimate"
    finish_reason: str | None = None
    status: int = 200
    error: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    body: str | bytes | None = None
    content_type: str | None = None
    delay_s: float = 0.0
    hang: bool = False
    drop: bool = False
    cut_after: int | None = None
    chunk_delay_s: float = 0.0
    unsized: bool = False

    @classmethod
    def call(
        cls, name: str, arguments: Mapping[str, Any] | str | None = None, **kw: Any
    ) -> FakeReply:
        """A reply with one tool call."""
        return cls(tool_calls=(FakeToolCall(name, {} if arguments is None else arguments),), **kw)

    @classmethod
    def finish(cls, answer: str, **kw: Any) -> FakeReply:
        """A reply calling finishline's `task_finished` with `answer`."""
        return cls.call(FINISH_TOOL, {"answer": answer}, **kw)

    @classmethod
    def http_error(
        cls,
        status: int,
        message: str | None = None,
        *,
        retry_after: str | float | None = None,
        headers: Mapping[str, str] | None = None,
        **kw: Any,
    ) -> FakeReply:
        """An HTTP error reply; `retry_after` becomes the Retry-After header."""
        all_headers = dict(headers or {})
        if retry_after is not None:
            all_headers["Retry-After"] = str(retry_after)
        return cls(status=status, error=message, headers=all_headers, **kw)

    @property
    def text(self) -> str | None:
        if self.content is None or isinstance(self.content, str):
            return self.content
        return "".join(self.content)


@dataclass(frozen=True, slots=True)
class Rendered:
    """A reply made concrete for one request: a whole body, or SSE events to send in turn."""

    status: int
    content_type: str
    body: bytes = b""
    events: list[bytes] | None = None


def render(
    reply: FakeReply, request: Mapping[str, Any], *, model: str, ids: Iterator[int]
) -> Rendered:
    streaming = request.get("stream") is True
    if reply.body is not None:
        raw = reply.body.encode() if isinstance(reply.body, str) else reply.body
        default_type = (
            "text/event-stream" if streaming and reply.status < 400 else "application/json"
        )
        return Rendered(reply.status, reply.content_type or default_type, body=raw)
    if reply.status >= 400:
        message = reply.error or f"fake error {reply.status}"
        payload = {"error": {"message": message, "type": _error_type(reply.status), "code": None}}
        return Rendered(reply.status, "application/json", body=json.dumps(payload).encode())
    calls = [
        {
            "id": call.id or f"call_{next(ids)}",
            "type": "function",
            "function": {
                "name": call.name,
                "arguments": call.arguments
                if isinstance(call.arguments, str)
                else json.dumps(call.arguments),
            },
        }
        for call in reply.tool_calls
    ]
    finish = reply.finish_reason or ("tool_calls" if calls else "stop")
    usage = _usage(reply, request, calls)
    head = {"id": f"chatcmpl-fake-{next(ids)}", "created": 0, "model": request.get("model", model)}
    if not streaming:
        message: dict[str, Any] = {"role": "assistant", "content": reply.text}
        if calls:
            message["tool_calls"] = calls
        completion = {
            **head,
            "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        }
        if usage is not None:
            completion["usage"] = usage
        return Rendered(200, "application/json", body=json.dumps(completion).encode())
    options = request.get("stream_options")
    include_usage = isinstance(options, dict) and options.get("include_usage") is True
    chunks = _stream_chunks(reply, calls, finish, usage if include_usage else None)
    events = [_sse({**head, "object": "chat.completion.chunk", **chunk}) for chunk in chunks]
    events.append(b"data: [DONE]\n\n")
    return Rendered(200, "text/event-stream; charset=utf-8", events=events)


def _stream_chunks(
    reply: FakeReply, calls: list[dict[str, Any]], finish: str, usage: dict[str, Any] | None
) -> list[dict[str, Any]]:
    def choice(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}

    chunks = [choice({"role": "assistant", "content": ""})]
    for piece in _content_pieces(reply.content):
        chunks.append(choice({"content": piece}))
    for index, call in enumerate(calls):
        function = call["function"]
        first = {"index": index, "id": call["id"], "type": "function"}
        chunks.append(
            choice(
                {"tool_calls": [{**first, "function": {"name": function["name"], "arguments": ""}}]}
            )
        )
        for piece in _argument_pieces(function["arguments"]):
            chunks.append(
                choice({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
            )
    chunks.append(choice({}, finish))
    if usage is not None:
        chunks.append({"choices": [], "usage": usage})
    return chunks


def _content_pieces(content: str | Sequence[str] | None) -> list[str]:
    if content is None:
        return []
    if isinstance(content, str):
        return re.findall(r"\s+|\S{1,12}\s*", content)
    return [piece for piece in content if piece]


def _argument_pieces(arguments: str, size: int = 12) -> list[str]:
    """At least two pieces when there are two characters to split."""
    if len(arguments) < 2:
        return [arguments] if arguments else []
    size = min(size, (len(arguments) + 1) // 2)
    return [arguments[i : i + size] for i in range(0, len(arguments), size)]


def _usage(
    reply: FakeReply, request: Mapping[str, Any], calls: list[dict[str, Any]]
) -> dict[str, Any] | None:
    if reply.usage is None:
        return None
    cached = 0
    if isinstance(reply.usage, FakeUsage):
        prompt, completion = reply.usage.prompt_tokens, reply.usage.completion_tokens
        cached = reply.usage.cached_tokens
    else:
        prompt_chars = len(json.dumps(request.get("messages", []))) + len(
            json.dumps(request.get("tools", []))
        )
        completion_chars = len(reply.text or "") + sum(
            len(call["function"]["name"]) + len(call["function"]["arguments"]) for call in calls
        )
        prompt, completion = max(1, prompt_chars // 4), max(1, completion_chars // 4)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
    }


def _sse(payload: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(payload)}\n\n".encode()


def _error_type(status: int) -> str:
    if status == 429:
        return "rate_limit_error"
    if status in (401, 403):
        return "authentication_error"
    return "server_error" if status >= 500 else "invalid_request_error"
