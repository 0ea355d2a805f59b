"""The Chat Completions wire format: replies, stream chunks and error bodies, parsed.

Pure functions and one small accumulator, no I/O, so that what OpenAI-compatible servers
actually send (and the ways sloppy ones deviate) is handled in one place:

- `content` may be a string, null, or a list of parts (`[{"type": "text", "text": ...}]`),
  which are joined; an empty text counts as no text (None). A `refusal` stands in for
  missing content.
- a tool call without an `id` gets a fresh `call_<hex>` one; `arguments` given as a JSON
  object instead of a string are serialised; missing or empty arguments become "{}".
- `usage` is optional; absent or unreadable usage is None, never an estimate (the engine
  estimates). Cached prompt tokens come from `usage.prompt_tokens_details.cached_tokens`
  (OpenAI's; vLLM and LiteLLM send the same), counted within `prompt_tokens`.

Anything that is not a usable reply raises `LLMResponseError`.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, TypeGuard

from app.engine import jsontext
from app.engine.errors import LLMResponseError
from app.engine.ports import Reply, TokenUsage, ToolCall

_SNIPPET_CHARS = 200
_ERROR_MESSAGE_CHARS = 500


def new_call_id() -> str:
    """An id for a tool call the server left without one, unique across runs and processes."""
    return f"call_{secrets.token_hex(12)}"


def snippet(text: str, limit: int = _SNIPPET_CHARS) -> str:
    """`text` on one line, cut to `limit` characters, for error messages."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def parse_completion(payload: Any) -> Reply:
    """A non-streamed `chat.completion` object as a `Reply`."""
    choice = _first_choice(payload)
    message = choice.get("message")
    if not isinstance(message, dict):
        raise LLMResponseError("the response's first choice has no message object")
    raw_calls = message.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        raise LLMResponseError("message.tool_calls is not a list")
    calls = tuple(_tool_call(raw) for raw in raw_calls if _is_function_call(raw))
    return Reply(
        content=_text(message.get("content")) or _text(message.get("refusal")),
        tool_calls=calls,
        usage=parse_usage(payload.get("usage")),
        finish_reason=_finish_reason(choice),
    )


def parse_usage(raw: Any) -> TokenUsage | None:
    """`usage` as TokenUsage; None when absent or carrying no token counts."""
    if not isinstance(raw, dict):
        return None
    prompt, completion, total = (
        raw.get(key) for key in ("prompt_tokens", "completion_tokens", "total_tokens")
    )
    if not _is_count(prompt) and not _is_count(completion):
        return None
    prompt = prompt if _is_count(prompt) else 0
    if not _is_count(completion):
        completion = max(total - prompt, 0) if _is_count(total) else 0
    details = raw.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    cached = min(cached, prompt) if _is_count(cached) else 0
    return TokenUsage(prompt_tokens=prompt, completion_tokens=completion, cached_tokens=cached)


def error_message(body: str, fallback: str) -> str:
    """The short message of an error response: OpenAI's `{"error": {"message"}}`, the
    `{"error": "..."}`, `{"detail": ...}` or `{"message": ...}` shapes of other servers, else
    the body text itself; `fallback` (the status phrase) when the body is empty."""
    try:
        payload = jsontext.loads(body)
    except ValueError:
        payload = None
    if isinstance(payload, dict):
        error = payload.get("error")
        candidates = [
            error.get("message") if isinstance(error, dict) else error,
            payload.get("message"),
            payload.get("detail"),
        ]
        for candidate in candidates:
            if isinstance(candidate, str) and candidate.strip():
                return snippet(candidate, _ERROR_MESSAGE_CHARS)
    return snippet(body, _ERROR_MESSAGE_CHARS) if body.strip() else fallback


def retry_after_s(headers: Mapping[str, str]) -> float | None:
    """The delay a server asks for: `retry-after-ms`, else `Retry-After` as delta-seconds or
    an HTTP-date. `headers` must be case-insensitive (httpx.Headers is)."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms is not None:
        try:
            return max(float(raw_ms) / 1000.0, 0.0)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        return max(float(raw), 0.0)
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max((when - datetime.now(UTC)).total_seconds(), 0.0)


@dataclass(slots=True)
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass(slots=True)
class StreamAssembler:
    """Builds a `Reply` from `chat.completion.chunk` objects, fed in order.

    Tool calls arrive as fragments keyed by `index`: the id and name in the first, the
    arguments in pieces to concatenate. A fragment without `index` (some servers send each
    call whole) starts a new call when it brings a new id, else continues the last one.
    """

    chunks: int = 0
    content: list[str] = field(default_factory=list)
    calls: dict[int, _PartialCall] = field(default_factory=dict)
    usage: TokenUsage | None = None
    finish_reason: str | None = None

    def feed(self, chunk: Any) -> str | None:
        """Take one chunk; return the text it adds, if any, for the caller's delta sink."""
        if not isinstance(chunk, dict):
            raise LLMResponseError(f"stream chunk is not a JSON object: {snippet(str(chunk))}")
        self.chunks += 1
        if "error" in chunk:
            raise LLMResponseError(f"the stream reported an error: {_describe_error(chunk)}")
        usage = parse_usage(chunk.get("usage"))
        if usage is not None:
            self.usage = usage
        choices = chunk.get("choices") or []
        if not isinstance(choices, list):
            raise LLMResponseError("stream chunk's choices is not a list")
        added: list[str] = []
        for choice in choices:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            self.finish_reason = _finish_reason(choice) or self.finish_reason
            delta = choice.get("delta") or {}
            if not isinstance(delta, dict):
                raise LLMResponseError("stream chunk's delta is not an object")
            text = _text(delta.get("content"))
            if text:
                added.append(text)
            for fragment in delta.get("tool_calls") or []:
                self._add_fragment(fragment)
        self.content.extend(added)
        return "".join(added) or None

    def reply(self) -> Reply:
        calls = []
        for _, partial in sorted(self.calls.items()):
            if not partial.name:
                raise LLMResponseError("a streamed tool call never received its function name")
            calls.append(
                ToolCall(
                    id=partial.id or new_call_id(),
                    name=partial.name,
                    arguments="".join(partial.arguments) or "{}",
                )
            )
        return Reply(
            content="".join(self.content) or None,
            tool_calls=tuple(calls),
            usage=self.usage,
            finish_reason=self.finish_reason,
        )

    def _add_fragment(self, fragment: Any) -> None:
        if not isinstance(fragment, dict):
            raise LLMResponseError("a streamed tool call fragment is not an object")
        index = fragment.get("index")
        fragment_id = fragment.get("id")
        if not isinstance(index, int):
            last = max(self.calls, default=-1)
            is_new = last < 0 or bool(fragment_id and fragment_id != self.calls[last].id)
            index = last + 1 if is_new else last
        partial = self.calls.setdefault(index, _PartialCall())
        if isinstance(fragment_id, str) and fragment_id and not partial.id:
            partial.id = fragment_id
        function = fragment.get("function") or {}
        if not isinstance(function, dict):
            raise LLMResponseError("a streamed tool call's function is not an object")
        name = function.get("name")
        if isinstance(name, str) and name and not partial.name:
            partial.name = name
        arguments = function.get("arguments")
        if arguments is not None:
            partial.arguments.append(_arguments_text(arguments))


def _first_choice(payload: Any) -> dict[str, Any]:
    if not isinstance(payload, dict):
        raise LLMResponseError(f"the response is not a JSON object: {snippet(str(payload))}")
    choices = payload.get("choices")
    if not isinstance(choices, list) or not choices:
        if "error" in payload:
            raise LLMResponseError(f"the response carries an error: {_describe_error(payload)}")
        raise LLMResponseError("the response has no choices")
    choice = choices[0]
    if not isinstance(choice, dict):
        raise LLMResponseError("the response's first choice is not an object")
    return choice


def _is_function_call(raw: Any) -> bool:
    if not isinstance(raw, dict):
        raise LLMResponseError("a tool call is not an object")
    return bool(raw.get("type", "function") == "function")


def _tool_call(raw: dict[str, Any]) -> ToolCall:
    function = raw.get("function")
    if not isinstance(function, dict):
        raise LLMResponseError("a tool call has no function object")
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise LLMResponseError("a tool call has no function name")
    call_id = raw.get("id")
    return ToolCall(
        id=call_id if isinstance(call_id, str) and call_id else new_call_id(),
        name=name,
        arguments=_arguments_text(function.get("arguments")) or "{}",
    )


def _arguments_text(arguments: Any) -> str:
    if arguments is None:
        return ""
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, ensure_ascii=False)


def _text(content: Any) -> str | None:
    """A string as is, a list of parts joined (text parts only), anything else None."""
    if isinstance(content, str):
        return content or None
    if not isinstance(content, list):
        return None
    texts: list[str] = []
    for part in content:
        if isinstance(part, dict) and part.get("type", "text") == "text":
            part = part.get("text")
        if isinstance(part, str):
            texts.append(part)
    return "".join(texts) or None


def _finish_reason(choice: dict[str, Any]) -> str | None:
    reason = choice.get("finish_reason")
    return reason if isinstance(reason, str) and reason else None


def _describe_error(payload: dict[str, Any]) -> str:
    return error_message(json.dumps(payload), fallback="unknown error")


def _is_count(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
