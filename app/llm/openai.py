"""`OpenAIChatModel`: any OpenAI-compatible Chat Completions endpoint over httpx (with the
aiohttp transport of `app.http_transport` on the clients the service makes).

Works with OpenAI, vLLM, Ollama, llama.cpp server, LM Studio and LiteLLM: one POST to
`{base_url}/chat/completions` per call, native tool calls, SSE streaming when the caller
passes `on_delta`. Messages are sent exactly as given (OpenAI format).

Failures are translated at this boundary, most specific first, so the engine sees only
`app.engine.errors`:

    httpx.TimeoutException            -> LLMTimeoutError      (retryable)
    other httpx.TransportError        -> LLMConnectionError   (retryable): refused, reset,
                                         protocol errors, a body cut short
    a stream that ends before [DONE]  -> LLMConnectionError   (the endpoint hung up early)
    HTTP status >= 400                -> LLMStatusError(status, the server's message,
                                         retry_after_s from retry-after-ms / Retry-After)
    2xx that is not a usable reply    -> LLMResponseError     (not JSON, no choices, a broken
                                         stream chunk, an error object in a 200)
    a body over `max_response_bytes`  -> LLMResponseTooLargeError (not read further;
                                         app.llm.bodycap)

The adapter never retries and never enforces a per-call deadline: the engine does both. The
client it creates has a generous timeout only as a backstop against a silent peer.

Forcing a tool (`force_tool`, a planning call's `update_plan`) sends OpenAI's
`tool_choice: {"type": "function", "function": {"name": …}}`, the form OpenAI's API (and
servers that follow it closely, such as vLLM) take. An endpoint that refuses it (a 400 or 422
whose message names tool_choice) is asked again at once without it, within the same call, and
the refusal is remembered for that model (`unforced`, shared by the adapters of one factory),
so later calls do not send it: the engine asks for the tool in the prompt as well.

Asking for an answer as JSON matching a schema (`answer_schema`, a run's `output_schema`)
sends `response_format: {"type": "json_schema", "json_schema": {"name": "output", "schema": …,
"strict": false}}` (OpenAI's Structured Outputs form, which vLLM, llama.cpp server, LM Studio
and LiteLLM take too; not strict, which would demand every property required and no others).
An endpoint that refuses it (a 400 or 422 whose message names response_format or json_schema)
is asked again at once without it, and the refusal is remembered as for `tool_choice`
(`unstructured`; for that schema alone when the message says "invalid schema": OpenAI takes
only some schemas): the engine gives the schema in the prompt too, and validates the answer.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import aclosing, contextmanager
from http import HTTPStatus
from typing import Any, Self

import httpx
import structlog

from app.engine import jsontext
from app.engine.errors import (
    LLMConnectionError,
    LLMResponseError,
    LLMStatusError,
    LLMTimeoutError,
)
from app.engine.ports import DeltaSink, Message, Price, Reply, ToolSpec
from app.llm.bodycap import ERROR_BODY_BYTES, capped_lines, read_capped
from app.llm.chat_completions import (
    StreamAssembler,
    error_message,
    parse_completion,
    retry_after_s,
    snippet,
)
from app.llm.sse import aiter_sse_data
from app.propagation import propagate

log = structlog.get_logger(__name__)

DEFAULT_TIMEOUT = httpx.Timeout(300.0, connect=10.0)
"""Backstop for the client the adapter creates; the engine's own timeout is the real bound."""

_DONE = "[DONE]"
DEFAULT_MAX_RESPONSE_BYTES = 8_388_608
"""Most of a response body read (FINISHLINE_LLM_MAX_RESPONSE_BYTES)."""


class OpenAIChatModel:
    """A `ChatModel` speaking OpenAI Chat Completions.

    `base_url` is the API root, e.g. "http://localhost:8000/v1" (a trailing slash is fine).
    An injected `client` is used as is (its timeouts, transport, proxies) and left open by
    `aclose()`; otherwise the adapter creates one and closes it. `extra_headers` are sent with
    every request (e.g. OpenRouter's `HTTP-Referer`, an `OpenAI-Organization`). `price` is
    what its calls cost (`app.llm.pricing`); None: unknown.
    """

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        client: httpx.AsyncClient | None = None,
        extra_headers: Mapping[str, str] | None = None,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        price: Price | None = None,
        unforced: set[str] | None = None,
        unstructured: set[str] | None = None,
    ) -> None:
        self.name = model
        self.price = price
        self.unforced = unforced if unforced is not None else set()
        """Models whose endpoint refused `tool_choice`: not sent to them again."""
        self.unstructured = unstructured if unstructured is not None else set()
        """Models whose endpoint refused `response_format: json_schema`: not sent again."""
        self.max_response_bytes = max_response_bytes
        self.url = f"{base_url.rstrip('/')}/chat/completions"
        self._owns_client = client is None
        if client is None:
            from app.http_transport import AiohttpTransport  # (aiohttp: only when used)

            client = httpx.AsyncClient(
                transport=AiohttpTransport(trust_env=True),
                timeout=DEFAULT_TIMEOUT,
                event_hooks={"request": [propagate]},
            )
        self._client = client
        self._headers: dict[str, str] = dict(extra_headers or {})
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"

    async def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        *,
        on_delta: DeltaSink | None = None,
        force_tool: str | None = None,
        answer_schema: Mapping[str, Any] | None = None,
    ) -> Reply:
        body: dict[str, Any] = {"model": self.name, "messages": list(messages)}
        if tools:
            body["tools"] = [tool.to_openai() for tool in tools]
            if force_tool is not None and self.name not in self.unforced:
                body["tool_choice"] = {"type": "function", "function": {"name": force_tool}}
        if answer_schema is not None and self._structured(answer_schema):
            body["response_format"] = response_format(answer_schema)
        if on_delta is not None:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        started = time.monotonic()
        with _translated_errors(self.url):
            while True:  # at most three tries: each refused parameter is dropped once
                try:
                    reply = await self._send(body, on_delta)
                    break
                except LLMStatusError as exc:
                    refused = _refused_parameter(exc, body)
                    if refused is None:
                        raise
                    if refused == "tool_choice":
                        self.unforced.add(self.name)
                        log.warning("tool_choice_refused", model=self.name, error=str(exc))
                    else:
                        schema_alone = "invalid schema" in exc.message.lower()
                        if answer_schema is not None and schema_alone:
                            self.unstructured.add(_schema_key(self.name, answer_schema))
                        else:
                            self.unstructured.add(self.name)
                        log.warning("response_format_refused", model=self.name, error=str(exc))
                    del body[refused]
        log.debug(
            "llm_call_completed",
            model=self.name,
            streamed=on_delta is not None,
            duration_ms=round((time.monotonic() - started) * 1000),
            finish_reason=reply.finish_reason,
            tool_calls=len(reply.tool_calls),
        )
        return reply

    def _structured(self, schema: Mapping[str, Any]) -> bool:
        """Whether to ask this model for `schema` as `response_format`: not when its endpoint
        refused response_format, or refused this schema as one it cannot take."""
        refused = self.unstructured
        return not refused or (
            self.name not in refused and _schema_key(self.name, schema) not in refused
        )

    async def aclose(self) -> None:
        """Close the HTTP client if this adapter created it."""
        if self._owns_client:
            await self._client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def _send(self, body: dict[str, Any], on_delta: DeltaSink | None) -> Reply:
        return await (self._post(body) if on_delta is None else self._stream(body, on_delta))

    async def _post(self, body: dict[str, Any]) -> Reply:
        headers = {"Accept": "application/json", **self._headers}
        async with self._client.stream("POST", self.url, json=body, headers=headers) as response:
            if response.status_code >= 400:
                raise await _status_error(response)
            content = await read_capped(response, self.max_response_bytes)
        return parse_completion(_json_body(response, content))

    async def _stream(self, body: dict[str, Any], on_delta: DeltaSink) -> Reply:
        headers = {"Accept": "text/event-stream", **self._headers}
        async with self._client.stream("POST", self.url, json=body, headers=headers) as response:
            if response.status_code >= 400:
                raise await _status_error(response)
            if _media_type(response) == "application/json":
                # The server ignored "stream": take the whole reply and pass its text on at once.
                content = await read_capped(response, self.max_response_bytes)
                reply = parse_completion(_json_body(response, content))
                if reply.content:
                    on_delta(reply.content)
                return reply
            assembler = StreamAssembler()
            done = False
            async with (
                aclosing(capped_lines(response, self.max_response_bytes)) as lines,
                aclosing(aiter_sse_data(lines)) as events,
            ):
                async for data in events:
                    if data.strip() == _DONE:
                        done = True
                        break
                    text = assembler.feed(_json_chunk(data))
                    if text:
                        on_delta(text)
        if assembler.chunks == 0:
            raise LLMResponseError(
                f"the stream carried no events (content-type {_media_type(response) or 'none'})"
            )
        if not done and assembler.finish_reason is None:
            raise LLMConnectionError("the stream ended before [DONE]: the endpoint hung up early")
        return assembler.reply()


@contextmanager
def _translated_errors(url: str) -> Iterator[None]:
    """httpx's errors as ours; our own `LLMError`s pass through untouched."""
    try:
        yield
    except httpx.TimeoutException as exc:
        raise LLMTimeoutError(f"{_describe(exc)} calling {url}") from exc
    except httpx.TransportError as exc:
        raise LLMConnectionError(f"{_describe(exc)} calling {url}") from exc
    except httpx.DecodingError as exc:
        raise LLMResponseError(f"undecodable response body: {_describe(exc)}") from exc
    except httpx.HTTPError as exc:
        raise LLMConnectionError(f"{_describe(exc)} calling {url}") from exc


def response_format(schema: Mapping[str, Any]) -> dict[str, Any]:
    """OpenAI's Structured Outputs request for a reply that is JSON matching `schema`."""
    return {
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": dict(schema), "strict": False},
    }


def _schema_key(model: str, schema: Mapping[str, Any]) -> str:
    return model + "\x00" + json.dumps(schema, sort_keys=True)


_REFUSALS = {
    "tool_choice": ("tool_choice", "tool choice"),
    "response_format": ("response_format", "response format", "json_schema", "json schema"),
}
"""Optional parameters an endpoint may refuse, and how its error message names them."""


def _refused_parameter(error: LLMStatusError, body: dict[str, Any]) -> str | None:
    """The optional parameter of `body` an endpoint answered it does not take (a 400 or 422
    naming it), or None: the error is another."""
    if error.status not in (400, 422):
        return None
    text = error.message.lower()
    for name, spellings in _REFUSALS.items():
        if name in body and any(spelling in text for spelling in spellings):
            return name
    return None


async def _status_error(response: httpx.Response) -> LLMStatusError:
    """The error of a streamed response with an error status (its body read, up to a cap)."""
    content = await read_capped(response, ERROR_BODY_BYTES, cut=True)
    status = response.status_code
    try:
        fallback = HTTPStatus(status).phrase
    except ValueError:
        fallback = "error"
    return LLMStatusError(
        status,
        error_message(_text(response, content), fallback=fallback),
        retry_after_s=retry_after_s(response.headers),
    )


def _json_body(response: httpx.Response, content: bytes) -> Any:
    try:
        return jsontext.loads(content)
    except ValueError as exc:
        text = _text(response, content)
        raise LLMResponseError(
            f"HTTP {response.status_code} body is not JSON: {snippet(text) or 'empty'}"
        ) from exc


def _text(response: httpx.Response, content: bytes) -> str:
    try:
        return content.decode(response.charset_encoding or "utf-8", errors="replace")
    except LookupError:  # a charset Python does not know
        return content.decode("utf-8", errors="replace")


def _json_chunk(data: str) -> Any:
    try:
        return jsontext.loads(data)
    except ValueError as exc:
        raise LLMResponseError(f"stream chunk is not JSON: {snippet(data)}") from exc


def _media_type(response: httpx.Response) -> str:
    content_type: str = response.headers.get("content-type", "")
    return content_type.partition(";")[0].strip().lower()


def _describe(exc: Exception) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
