"""Bounds on outbound HTTP tool requests, per run and per API key, so that no run and no key
can take the whole shared connection pool (a noisy neighbour) while others wait.

The fetcher does not know which run calls it: the run's task says so once, with
`http_scope(run_id, owner)`, and every tool call the run makes (in that task or its child
tasks) inherits it through a context variable. Requests outside any scope are not bounded
here (the pool's own limit still holds). A run without an owner (auth off) has no per-key
bound, only its per-run one.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from contextvars import ContextVar

_SCOPE: ContextVar[tuple[str, str | None] | None] = ContextVar("finishline_http", default=None)


@contextlib.contextmanager
def http_scope(run_id: str, owner: str | None) -> Iterator[None]:
    """HTTP tool requests made within are the run's (and its owner's)."""
    token = _SCOPE.set((run_id, owner))
    try:
        yield
    finally:
        _SCOPE.reset(token)


def bind_http_scope(run_id: str, owner: str | None) -> None:
    """Like `http_scope`, for the rest of the current task (a run's own task)."""
    _SCOPE.set((run_id, owner))


class _Keyed:
    """One semaphore per key, dropped when nobody holds or waits on it."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._slots: dict[str, tuple[asyncio.Semaphore, int]] = {}

    @contextlib.asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        semaphore, users = self._slots.get(key, (None, 0))
        if semaphore is None:
            semaphore = asyncio.Semaphore(self.limit)
        self._slots[key] = (semaphore, users + 1)
        try:
            async with semaphore:
                yield
        finally:
            semaphore, users = self._slots[key]
            if users == 1:
                del self._slots[key]
            else:
                self._slots[key] = (semaphore, users - 1)

    def users(self, key: str) -> int:
        return self._slots.get(key, (None, 0))[1]


class ConnectionBounds:
    """At most `per_run` requests in flight per run and `per_key` per API key; more wait."""

    def __init__(self, *, per_run: int, per_key: int) -> None:
        if per_run < 1 or per_key < 1:
            raise ValueError("per_run and per_key must be at least 1")
        self._runs = _Keyed(per_run)
        self._keys = _Keyed(per_key)

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Wait for room under the current scope's bounds (the run's first, then its key's:
        one order everywhere, so no two requests can each hold what the other waits for)."""
        scope = _SCOPE.get()
        if scope is None:
            yield
            return
        run_id, owner = scope
        async with contextlib.AsyncExitStack() as stack:
            await stack.enter_async_context(self._runs.hold(run_id))
            if owner is not None:
                await stack.enter_async_context(self._keys.hold(owner))
            yield

    def waiting(self, owner: str) -> int:
        """Requests of `owner` in flight or waiting (for tests and metrics)."""
        return self._keys.users(owner)
