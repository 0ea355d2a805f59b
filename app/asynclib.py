"""The event loop's thread names its async library once, for everything that asks.

anyio (under Starlette, sse-starlette's per-send timeout and lock, `anyio.to_thread`) and
httpcore ask sniffio which library runs on every call they make: several times per event
sent and per request. sniffio answers at once from its thread-local name; without it, after
a context-variable lookup, an import statement and `asyncio.current_task()` (~0.4 µs a call,
~2% of the event loop's CPU in a run: issue #42). The service's loop thread runs asyncio and
nothing else while it serves, so it says so for that time.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import sniffio


@contextmanager
def asyncio_thread() -> Iterator[None]:
    """While open, sniffio answers "asyncio" in this thread (the event loop's) at once."""
    previous = sniffio.thread_local.name
    sniffio.thread_local.name = "asyncio"
    try:
        yield
    finally:
        sniffio.thread_local.name = previous
