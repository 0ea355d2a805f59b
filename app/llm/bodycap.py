"""How much of an LLM endpoint's response the adapter reads: at most a cap of bytes.

A model (or a broken proxy) can answer with megabytes: a 10 MB reply, or 10 MB of tool-call
arguments. Read whole, that is memory the server cannot bound, and events and a conversation
it cannot afford. These readers count the body as it arrives (after any content decoding,
so a compressed body cannot hide its size) and stop at `cap` bytes with
`LLMResponseTooLargeError`: a clear, non-retryable LLM error the engine reports like any
other unusable reply. `FINISHLINE_LLM_MAX_RESPONSE_BYTES` sets the cap (docs/limits.md).
"""

from __future__ import annotations

import codecs
from collections.abc import AsyncGenerator

import httpx

from app.engine.errors import LLMResponseTooLargeError

ERROR_BODY_BYTES = 65_536
"""What is read of an error response: its message is all that is shown, cut short anyway."""


def _too_large(cap: int, what: str) -> LLMResponseTooLargeError:
    return LLMResponseTooLargeError(
        f"the endpoint's response {what} the cap of {cap:,} bytes "
        "(FINISHLINE_LLM_MAX_RESPONSE_BYTES); not read further"
    )


def _declared_length(response: httpx.Response) -> int | None:
    try:
        return int(response.headers["content-length"])
    except (KeyError, ValueError):
        return None


async def read_capped(response: httpx.Response, cap: int, *, cut: bool = False) -> bytes:
    """The body of a streamed `response`, up to `cap` bytes: past it, the error (or, with
    `cut`, the first `cap` bytes, for an error body whose message is all that is wanted)."""
    declared = _declared_length(response)
    if (
        declared is not None
        and declared > cap
        and not cut
        and not response.headers.get("content-encoding")
    ):
        raise _too_large(cap, f"declares {declared:,} bytes, over")
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > cap:
            if cut:
                chunks.append(chunk[: len(chunk) - (size - cap)])
                break
            raise _too_large(cap, "passed")
        chunks.append(chunk)
    return b"".join(chunks)


async def capped_lines(response: httpx.Response, cap: int) -> AsyncGenerator[str, None]:
    """The body's text lines (without their `\\n`, `\\r\\n` or `\\r`), reading at most `cap`
    bytes in all: a stream whose line never ends cannot grow past the cap either."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    pending: list[str] = []
    size = 0
    after_cr = False
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > cap:
            raise _too_large(cap, "passed")
        text = decoder.decode(chunk)
        if after_cr and text.startswith("\n"):
            text = text[1:]  # the "\n" of a "\r\n" split between two chunks
        if not text:
            continue
        after_cr = text.endswith("\r")
        *complete, rest = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        if complete:
            complete[0] = "".join(pending) + complete[0]
            pending = []
            for line in complete:
                yield line
        pending.append(rest)
    last = "".join(pending) + decoder.decode(b"", final=True)
    if last:
        yield last
