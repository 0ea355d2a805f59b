"""Server-Sent Events decoding: from text lines to the `data` of each event.

Follows the WHATWG event-stream rules that matter to LLM endpoints: `data:` lines of one
event are joined with newlines and the event is dispatched on a blank line; lines starting
with `:` are comments (keep-alives); other fields (`event:`, `id:`, `retry:`) are ignored.
An event still pending when the stream ends is dispatched too (lenient: some servers omit
the final blank line).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterable


async def aiter_sse_data(lines: AsyncIterable[str]) -> AsyncGenerator[str, None]:
    """Yield the `data` of each event carried by `lines` (line endings already removed)."""
    data: list[str] = []
    async for line in lines:
        if not line:
            if data:
                yield "\n".join(data)
                data = []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        if field == "data":
            data.append(value.removeprefix(" "))
    if data:
        yield "\n".join(data)
