"""Redis's errors, translated at the store's boundary (docs/operations/outages.md).

A Redis that is away (stopped, restarting, paused past the socket timeout, loading its data)
or that refuses writes for now (at its `maxmemory`, a read-only replica, a failed background
save) is weather, not a bug:
- a request that needs it is refused with `StoreUnavailableError` (503 `store_unavailable`,
  `Retry-After`);
- a run executing here is given up to the takeover: this replica stops renewing its lease,
  and once Redis is back a replica resumes it from its checkpoint (`Execution`);
- the background loops wait it out (`waited_out`) and carry on when it is back.
Any other Redis error is our bug and stays what it is.

`translated` applies this to every public coroutine method of a class (the store, the
coordinator, the inbox, the waiting runs); their private methods, called by their own loops,
raise redis-py's errors, which those loops catch.

Python 3.11's `asyncio.wait_for`, which redis-py uses for its socket timeouts, may turn a
cancellation into the error of the call it cancelled (the call failed at the same moment,
as every call does while Redis is away). A loop that took that error for an outage would
retry forever and never let its task end. So a Redis error raised in a task that is being
cancelled is raised as the cancellation it stands for.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec, TypeVar

import structlog
from redis.asyncio import Redis
from redis.exceptions import (
    ClusterDownError,
    MasterDownError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from app.runs.errors import StoreUnavailableError

log = structlog.get_logger("finishline.runs")

SOCKET_TIMEOUT_S = 5.0
"""A command unanswered this long fails (a paused or overloaded Redis): the request that
needed it is refused 503 `store_unavailable` instead of hanging past its client's timeout.
Blocking reads block for at most half of it. A `socket_timeout` in the URL overrides it."""
CONNECT_TIMEOUT_S = 5.0
"""Likewise for a new connection (`socket_connect_timeout` in the URL). Not shorter: a
loaded 2-core machine opening tens of connections at once takes seconds to (seen at 2 s)."""
RETRY_S = 0.5
"""How long a background loop waits after Redis failed it, before it tries again."""
RETRY_AFTER_S = 2
"""The `Retry-After` of a request refused while Redis is away."""

OUT_OF_MEMORY = (
    "Redis is out of memory (at its maxmemory, with a policy that evicts nothing): it refuses "
    "writes until memory is freed or the limit is raised"
)
REFUSING: dict[type[ResponseError], str] = {
    OutOfMemoryError: OUT_OF_MEMORY,
    ReadOnlyError: "Redis is a read-only replica: it takes no writes",
    TryAgainError: "Redis asks to try again",
    MasterDownError: "Redis's primary is down",
    ClusterDownError: "the Redis cluster is down",
}
REFUSING_REPLIES = {  # the start of a reply redis-py has no class for (or one a script passed on)
    "OOM ": OUT_OF_MEMORY,
    "MISCONF ": "Redis refuses writes: its last background save failed",
    "BUSY ": "Redis is busy running a script",
    "NOREPLICAS ": "Redis has too few replicas to take writes",
}


def redis_client(url: str) -> Redis:
    """The client of the Redis at `url`, with the timeouts above, and no retries (redis-py's
    default from a URL): a command that failed is answered. An explicit retry policy left
    sockets unclosed when a connect was cut short (ResourceWarnings in the store contract
    tests, 3 runs in 6; none without it)."""
    return Redis.from_url(
        url,
        decode_responses=True,
        socket_timeout=SOCKET_TIMEOUT_S,
        socket_connect_timeout=CONNECT_TIMEOUT_S,
    )


def unavailable(exc: BaseException) -> StoreUnavailableError | None:
    """`exc` as the store being unavailable for now, or None when it is something else."""
    if isinstance(exc, StoreUnavailableError):
        return exc
    if isinstance(exc, RedisConnectionError | RedisTimeoutError):  # BusyLoadingError too
        return StoreUnavailableError(
            f"the store is unavailable: Redis does not answer ({exc}); try again shortly",
            RETRY_AFTER_S,
        )
    if isinstance(exc, ResponseError):
        why = REFUSING.get(type(exc))
        text = str(exc)
        for start, reason in REFUSING_REPLIES.items():
            if why is None and (text.startswith(start) or f" {start}" in text):
                why = reason
        if why is not None:
            return StoreUnavailableError(
                f"the store is unavailable: {why}; try again shortly", RETRY_AFTER_S
            )
    return None


def cancelling() -> bool:
    """Whether the current task is being cancelled (see the module's docstring)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def translated_error(exc: RedisError) -> BaseException:
    """What a Redis error raised at the store's boundary is raised as."""
    if cancelling():
        return asyncio.CancelledError()
    return unavailable(exc) or exc


P = ParamSpec("P")
R = TypeVar("R")
C = TypeVar("C", bound=type)


def _translating(method: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    @functools.wraps(method)
    async def call(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await method(*args, **kwargs)
        except RedisError as exc:
            raise translated_error(exc) from exc

    return call


def translated(cls: C) -> C:
    """`cls` with each public coroutine method raising `StoreUnavailableError` for a Redis
    that is away, and any cancellation as one (see the module's docstring)."""
    for name, member in list(vars(cls).items()):
        if not name.startswith("_") and inspect.iscoroutinefunction(member):
            setattr(cls, name, _translating(member))
    return cls


async def waited_out(exc: Exception, event: str, redis: Redis | None = None, **facts: Any) -> None:
    """After a background loop's call failed: raise the cancellation it may stand for (see
    the module's docstring); else log it (a warning for an outage, with the traceback for
    anything else: one bad record must not stop a loop every run relies on), drop the pool's
    idle connections if Redis went away (each would fail its next command once Redis is
    back), and wait `RETRY_S`."""
    if cancelling():
        raise asyncio.CancelledError
    outage = unavailable(exc)
    if outage is not None:
        log.warning(event, error=str(exc), **facts)
    else:
        log.error(event, error=repr(exc), exc_info=exc, **facts)
    if redis is not None and isinstance(exc, RedisConnectionError):
        await redis.connection_pool.disconnect(inuse_connections=False)
    await asyncio.sleep(RETRY_S)
