"""Splitting what an MCP server sends into whole messages, none larger than a cap.

An MCP message arrives as one line on a stdio server's stdout, or as one server-sent event
on a Streamable HTTP stream. Read whole, a 50 MB answer is 50 MB in memory (and the SDK's
stdio reader joins a long line in quadratic time). These framers hold back at most `cap`
bytes of the message in progress: past it, the message is dropped as it arrives, never
buffered, and the framer says so. Pure byte logic, fed chunk by chunk; the transports
(`stdio.py`, `exchanges.py`) decide what a dropped message becomes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass

SNIFF_BYTES = 4096
"""How much of a dropped line's start and end is kept, to find the request it answers."""

# A blank line ends an event: a line end (CRLF, LF, or a CR not followed by LF) and another.
_EVENT_END = re.compile(rb"(?:\r\n|\n|\r(?!\n))(?:\r\n|\n|\r)")

_ID = rb'(-?\d+|"(?:[^"\\]|\\.)*")'
_HEAD_ID = re.compile(rb'\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"id"\s*:\s*' + _ID)
"""The id as the first member (or the second, after "jsonrpc"): the Python SDK's order."""
_TAIL_ID = re.compile(rb'[{,]\s*"id"\s*:\s*' + _ID + rb"\s*\}\s*$")
"""The id as the last member of the top-level object: the TypeScript SDK's order."""


@dataclass(frozen=True, slots=True)
class Dropped:
    """A message past the cap: its size, and the start and end kept of it."""

    size: int
    head: bytes
    tail: bytes

    def request_id(self) -> int | str | None:
        """The JSON-RPC id at the top level of the dropped message, when it can be told from
        its start or its end (the middle is gone); None otherwise."""
        match = _HEAD_ID.match(self.head) or _TAIL_ID.search(self.tail)
        if match is None:
            return None
        try:
            value = json.loads(match[1])
        except ValueError:
            return None
        return value if isinstance(value, int | str) and not isinstance(value, bool) else None


class LineFramer:
    """Newline-delimited messages (stdio): whole lines, or `Dropped` for one past `cap`."""

    def __init__(self, cap: int) -> None:
        self._cap = cap
        self._line = bytearray()
        self._dropping = False
        self._size = 0
        self._head = b""
        self._tail = b""

    def feed(self, chunk: bytes) -> Iterator[bytes | Dropped]:
        start = 0
        while (end := chunk.find(b"\n", start)) != -1:
            self._take(chunk[start:end])
            start = end + 1
            if self._dropping:
                yield Dropped(self._size, self._head, self._tail)
                self._dropping = False
            elif self._line.strip():
                yield bytes(self._line)
            self._line.clear()
        self._take(chunk[start:])

    def _take(self, piece: bytes) -> None:
        if not self._dropping and len(self._line) + len(piece) > self._cap:
            self._dropping = True
            kept = bytes(self._line[:SNIFF_BYTES])
            self._head = kept + piece[: SNIFF_BYTES - len(kept)]
            self._size = len(self._line)
            self._tail = b""
            self._line.clear()
        if self._dropping:
            self._size += len(piece)
            self._tail = (self._tail + piece[-SNIFF_BYTES:])[-SNIFF_BYTES:]
        else:
            self._line += piece


class EventFramer:
    """A server-sent event stream: the bytes of whole events, each passed on unchanged once
    its blank line has arrived. An event that passes `cap` bytes yields a `Dropped` at once
    (without head or tail: on a request's stream the exchange knows the request, and ends
    there) and is skipped to its end, held by none."""

    def __init__(self, cap: int) -> None:
        self._cap = cap
        self._pending = bytearray()
        self._dropping = False

    def feed(self, chunk: bytes) -> Iterator[bytes | Dropped]:
        # a line end may be split between chunks: look again from just before the new bytes
        scan = max(0, len(self._pending) - 2)
        self._pending += chunk
        ends = b"\n" in chunk or b"\r" in chunk  # else no event can have ended here
        while ends and (match := _EVENT_END.search(self._pending, scan)) is not None:
            end = match.end()
            if not self._dropping and end > self._cap:
                yield Dropped(end, b"", b"")
            elif not self._dropping:
                yield bytes(self._pending[:end])
            self._dropping = False
            del self._pending[:end]
            scan = 0
        if len(self._pending) > self._cap and not self._dropping:
            self._dropping = True
            yield Dropped(len(self._pending), b"", b"")
        if self._dropping:  # keep the last two bytes: enough to find the event's end
            del self._pending[: max(0, len(self._pending) - 2)]
