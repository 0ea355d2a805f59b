"""Interrupting a run's in-flight work when it is cancelled or its deadline passes.

Every await in the loop that can take long (an LLM call, tool calls, a retry back-off) runs
inside `Guard.scope(deadline)`. The scope works like `asyncio.timeout`: on its deadline or the
run's cancel request it cancels the current task, and on exit it turns that cancellation into
`DeadlineError` or `CancelRequestedError`. Any other cancellation of the task (a server
shutdown) passes through untouched. No task is created for the awaited work, and one timer
per run serves every scope (re-armed only when a scope's deadline comes sooner), so guarding
an await costs two set operations and a comparison.

Tool calls still run in tasks of their own (they run concurrently, and a tool that ignores
cancellation must not hold the run): the scope then guards `asyncio.wait` on them, and
`abandon` cancels what is left without waiting for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any, TypeVar

from app.engine.errors import FinishlineError
from app.engine.ports import Clock

T = TypeVar("T")
FutureT = TypeVar("FutureT", bound="asyncio.Future[Any]")
_TIMER_SLACK_S = 0.001
"""A timer may run a hair before its deadline by the clock; that counts as reached."""


class CancelRequestedError(FinishlineError):
    """The run was asked to stop."""


class DeadlineError(FinishlineError):
    """A deadline passed before the awaited work finished."""


def _discard_outcome(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


def abandon(task: asyncio.Future[Any]) -> None:
    """Cancel work we no longer wait for, without blocking on a tool that ignores cancellation."""
    if not task.done():
        task.cancel()
    task.add_done_callback(_discard_outcome)


class _Scope:
    __slots__ = ("_cancelling", "_fired", "_guard", "_task", "deadline")

    _task: asyncio.Task[object]
    _cancelling: int

    def __init__(self, guard: Guard, deadline: float) -> None:
        self._guard = guard
        self.deadline = deadline
        self._fired: type[Exception] | None = None
        # _task and _cancelling are set on entering: only entered scopes are watched (fire)

    async def __aenter__(self) -> _Scope:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)

    def __enter__(self) -> _Scope:
        guard = self._guard
        if guard._cancel.is_set():
            raise CancelRequestedError
        deadline = self.deadline
        if deadline <= guard.clock():
            raise DeadlineError
        task = asyncio.current_task()
        assert task is not None
        self._task = task
        self._cancelling = task.cancelling()
        # Guard.watch, inlined: this runs twice a step
        guard._scopes.add(self)
        if guard._waiter is None:
            guard.start_waiter()
        if guard._timer is None or guard._armed_for > deadline:
            guard._arm(deadline)
        return self

    def fire(self, error: type[Exception]) -> None:
        if self._fired is None:
            self._fired = error
            self._task.cancel()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._guard._scopes.discard(self)
        if self._fired is not None:
            uncancelled = self._task.uncancel()
            if uncancelled <= self._cancelling and exc_type is asyncio.CancelledError:
                raise self._fired from exc


class Guard:
    def __init__(self, cancel: asyncio.Event | None, clock: Clock) -> None:
        self._cancel = cancel if cancel is not None else asyncio.Event()
        self.clock = clock
        self._scopes: set[_Scope] = set()
        self._waiter: asyncio.Task[bool] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._armed_for = 0.0
        """The deadline (by `clock`) the timer was armed for, while there is a timer."""

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def scope(self, deadline: float) -> _Scope:
        """`with guard.scope(deadline):` (or `async with`), inside the task to interrupt:
        raises CancelRequestedError or DeadlineError. Entering and leaving never await, so
        the plain `with` saves two coroutines per guarded await."""
        return _Scope(self, deadline)

    def start_waiter(self) -> None:
        """Watch the cancel event, from the first scope on (a scope enters `_scopes`)."""
        waiter: asyncio.Task[bool] = asyncio.ensure_future(self._cancel.wait())
        waiter.add_done_callback(self._on_cancel)
        self._waiter = waiter

    def _arm(self, deadline: float) -> None:
        """Make sure the one timer fires no later than `deadline`. It is re-armed only when a
        scope needs it sooner: most scopes reuse it, and a timer that fires early re-arms
        itself for the scopes still waiting (`_on_timer`)."""
        timer = self._timer
        if timer is not None and self._armed_for <= deadline:
            return
        loop = asyncio.get_running_loop()
        if timer is not None:
            timer.cancel()
        self._timer = loop.call_at(loop.time() + (deadline - self.clock()), self._on_timer)
        self._armed_for = deadline

    def _on_timer(self) -> None:
        self._timer = None
        now = self.clock()
        sooner: float | None = None
        for scope in list(self._scopes):
            if scope.deadline <= now + _TIMER_SLACK_S:
                scope.fire(DeadlineError)
            elif sooner is None or scope.deadline < sooner:
                sooner = scope.deadline
        if sooner is not None:
            self._arm(sooner)

    def _on_cancel(self, waiter: asyncio.Future[bool]) -> None:
        if waiter.cancelled():
            return
        for scope in list(self._scopes):
            scope.fire(CancelRequestedError)

    async def wait_any(self, tasks: set[FutureT], deadline: float) -> set[FutureT]:
        """Wait until one of `tasks` is done; raise if cancelled or past `deadline` first."""
        with self.scope(deadline):
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        return done

    async def stream(
        self, task: asyncio.Future[T], deltas: asyncio.Queue[str], deadline: float
    ) -> AsyncIterator[str]:
        """Yield what `task` puts into `deltas` while it runs; then `task.result()` is ready.
        No scope is held across a yield: the consumer's own awaits are never interrupted."""
        getter: asyncio.Task[str] | None = None
        try:
            while not task.done():
                if getter is None:
                    getter = asyncio.ensure_future(deltas.get())
                waiting: set[asyncio.Future[Any]] = {task, getter}
                done = await self.wait_any(waiting, deadline)
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
        if self.clock() + seconds > deadline:
            raise DeadlineError
        with self.scope(deadline):
            await asyncio.sleep(seconds)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._waiter is not None:
            abandon(self._waiter)
            self._waiter = None
