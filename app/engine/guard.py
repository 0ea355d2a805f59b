"""Racing a run's in-flight work against its cancel request and a deadline.

Every await in the loop that can take long (an LLM call, tool calls, a retry back-off) goes
through `Guard`, so a deadline or a cancel interrupts it at once instead of waiting for the
top of the next step. The interrupted work is cancelled; the run is not: the loop catches
`DeadlineError` / `CancelRequestedError` and ends the run with the right reason.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TypeVar

from app.engine.ports import Clock

T = TypeVar("T")


class CancelRequestedError(Exception):
    """The run was asked to stop."""


class DeadlineError(Exception):
    """A deadline passed before the awaited work finished."""


def _discard_outcome(task: asyncio.Future[object]) -> None:
    if not task.cancelled():
        task.exception()


def abandon(task: asyncio.Future[object]) -> None:
    """Cancel work we no longer wait for, without blocking on a tool that ignores cancellation."""
    if not task.done():
        task.cancel()
    task.add_done_callback(_discard_outcome)


class Guard:
    def __init__(self, cancel: asyncio.Event | None, clock: Clock) -> None:
        self._cancel = cancel if cancel is not None else asyncio.Event()
        self._clock = clock
        self._cancel_waiter: asyncio.Task[bool] | None = None

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def _waiter(self) -> asyncio.Task[bool]:
        if self._cancel_waiter is None:
            self._cancel_waiter = asyncio.ensure_future(self._cancel.wait())
        return self._cancel_waiter

    async def wait_any(
        self, tasks: set[asyncio.Future[T]], deadline: float
    ) -> set[asyncio.Future[T]]:
        """Wait until one of `tasks` is done; raise if cancelled or past `deadline` first."""
        if self._cancel.is_set():
            raise CancelRequestedError
        timeout = deadline - self._clock()
        if timeout <= 0:
            raise DeadlineError
        waiter = self._waiter()
        done, _ = await asyncio.wait(
            (*tasks, waiter), timeout=timeout, return_when=asyncio.FIRST_COMPLETED
        )
        done.discard(waiter)  # type: ignore[arg-type]
        if done:
            return done  # type: ignore[return-value]
        if self._cancel.is_set():
            raise CancelRequestedError
        raise DeadlineError

    async def wait(self, task: asyncio.Future[T], deadline: float) -> T:
        """The result of `task`; on cancel or deadline the task is abandoned and we raise."""
        try:
            await self.wait_any({task}, deadline)
        except BaseException:
            abandon(task)
            raise
        return task.result()

    async def stream(
        self, task: asyncio.Future[T], deltas: asyncio.Queue[str], deadline: float
    ) -> AsyncIterator[str]:
        """Yield what `task` puts into `deltas` while it runs; then `task.result()` is ready."""
        getter: asyncio.Task[str] | None = None
        try:
            while not task.done():
                if getter is None:
                    getter = asyncio.ensure_future(deltas.get())
                done = await self.wait_any({task, getter}, deadline)  # type: ignore[arg-type]
                if getter in done:
                    yield getter.result()
                    getter = None
        except BaseException:
            abandon(task)
            raise
        finally:
            if getter is not None:
                abandon(getter)  # an item it was woken for stays in the queue
        while not deltas.empty():
            yield deltas.get_nowait()

    async def sleep(self, seconds: float, deadline: float) -> None:
        """Sleep, interruptibly; a sleep that would pass `deadline` raises DeadlineError."""
        if self._clock() + seconds > deadline:
            raise DeadlineError
        await self.wait(asyncio.ensure_future(asyncio.sleep(seconds)), deadline)

    def close(self) -> None:
        if self._cancel_waiter is not None:
            abandon(self._cancel_waiter)
            self._cancel_waiter = None
