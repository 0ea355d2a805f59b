"""Redis's errors at the store's boundary (app/runs/stores/redis_errors.py): which mean the
store is away for now, and a cancellation that Python 3.11's `wait_for` turned into a Redis
error is raised as the cancellation it stands for (else a retrying loop never ends)."""

from __future__ import annotations

import asyncio

import pytest
from redis.exceptions import (
    BusyLoadingError,
    OutOfMemoryError,
    ReadOnlyError,
    ResponseError,
    WatchError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from app.runs.errors import StoreUnavailableError
from app.runs.stores.redis_errors import translated, unavailable, waited_out


@pytest.mark.parametrize(
    ("error", "says"),
    [
        (RedisConnectionError("Error 111 connecting"), "Redis does not answer"),
        (RedisTimeoutError("Timeout reading from socket"), "Redis does not answer"),
        (BusyLoadingError("Redis is loading the dataset in memory"), "Redis does not answer"),
        (OutOfMemoryError("command not allowed when used memory > 'maxmemory'."), "out of memory"),
        (ResponseError("OOM command not allowed when used memory > 'maxmemory'."), "out of memory"),
        (  # a script's write refused: the reply names the script, then the refusal
            ResponseError("Error in script: OOM command not allowed when used memory"),
            "out of memory",
        ),
        (ResponseError("MISCONF Redis is configured to save RDB snapshots"), "background save"),
        (ReadOnlyError("You can't write against a read only replica."), "read-only"),
        (ResponseError("BUSY Redis is busy running a script."), "busy"),
    ],
)
def test_a_redis_away_or_refusing_writes_is_the_store_unavailable(
    error: Exception, says: str
) -> None:
    outage = unavailable(error)
    assert isinstance(outage, StoreUnavailableError)
    assert says in outage.message
    assert outage.retry_after_s > 0


@pytest.mark.parametrize(
    "error",
    [
        ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"),
        ResponseError("ERR Error running script: attempt to compare nil with number"),
        WatchError("Watched variable changed."),
        ValueError("not Redis at all"),
    ],
)
def test_any_other_error_is_not_an_outage(error: Exception) -> None:
    assert unavailable(error) is None


@translated
class _Client:
    """Stands for redis-py under Python 3.11: a call cancelled as it failed raises the
    failure, and the cancellation is lost."""

    def __init__(self) -> None:
        self.waiting = asyncio.Event()

    async def call(self) -> None:
        self.waiting.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise RedisConnectionError("Connection lost") from None

    async def fail(self) -> None:
        raise RedisConnectionError("Error 111 connecting")


async def test_a_redis_error_in_a_task_being_cancelled_is_its_cancellation() -> None:
    client = _Client()

    async def loop() -> None:  # waits outages out, as every background loop does
        while True:
            try:
                await client.call()
            except StoreUnavailableError:
                continue

    task = asyncio.create_task(loop())
    await client.waiting.wait()
    task.cancel()
    await asyncio.wait({task}, timeout=10)  # never ends if the loop took it for an outage
    assert task.cancelled()


async def test_a_public_call_raises_the_store_unavailable_with_its_cause() -> None:
    with pytest.raises(StoreUnavailableError) as raised:
        await _Client().fail()
    assert isinstance(raised.value.__cause__, RedisConnectionError)


async def test_a_loop_waiting_an_outage_out_is_still_cancelled() -> None:
    started = asyncio.Event()

    async def loop() -> None:
        while True:
            started.set()
            try:
                raise RedisConnectionError("Error 111 connecting")
            except RedisConnectionError as exc:
                await waited_out(exc, "test_loop_failed")

    task = asyncio.create_task(loop())
    await started.wait()
    task.cancel()
    await asyncio.wait({task}, timeout=10)
    assert task.cancelled()
