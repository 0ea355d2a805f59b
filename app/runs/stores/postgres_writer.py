"""The writes of `PostgresRunStore`: one writer task, many writes per transaction.

Every write is a coroutine function of a connection, queued with an asyncio future, in the
order the store was asked. The writer takes whatever is queued (up to `MAX_BATCH`), borrows
one connection from the pool, runs the batch in one transaction, commits, gives the
connection back, and only then hands the outcomes back in queue order: first the write's
`after_commit` hook, then its future. Nothing is acknowledged before it is committed, and
under load many writes share one commit (group commit, as the SQLite store's writer).

Writes of a batch that name the same `Many` (appends: `postgres_appends`; checkpoints:
`postgres_checkpoints`; usage adds) are made together, in one statement: it tells, for each,
its outcome or why it was refused (`Failed`: that write fails alone, the others commit). The
writes touching one thing (`touches`: the one run whose rows it writes, or rows no run has,
such as a key's usage) are made in the order asked, the writes naming no `Many` too among
themselves; a write that does not say what it touches is made after all that was queued
before it and before all that was queued after it (`_apply`).

A write that raises (a duplicate id, a fenced write) aborts the transaction: the batch is
then made again one write per transaction, so that write fails alone. A batch Postgres
rolled back on a deadlock is made again the same way (`RETRIES` times at most). If the connection
fails instead (Postgres away, the backend terminated, a failover), the outcome of the batch
is not known: every future in it fails with `StoreUnavailableError`, never retried here
(the run's lease and takeover decide what happens next). No connection is held between
batches, so none is left idle in a transaction, and none across an LLM or tool call.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import psycopg
import structlog
from psycopg import errors as pg_errors

from app.runs.store import WritesFailedError
from app.runs.stores.postgres_errors import is_outage, outage

log = structlog.get_logger("finishline.runs")

Apply = Callable[[psycopg.AsyncConnection[Any]], Awaitable[Any]]
AfterCommit = Callable[[Any], None]
Many = Callable[[psycopg.AsyncConnection[Any], list[Any]], Awaitable[list[Any]]]
"""Writes made together: given each one's item, the outcome of each (or `Failed`)."""
MAX_BATCH = 256
RETRIES = 3
"""Tries of a write Postgres rolled back on a deadlock or a serialization failure."""
STOP_TIMEOUT_S = 10.0


@dataclass(slots=True)
class Failed:
    """A write of a `Many` refused without aborting the transaction: its future fails."""

    error: Exception


@dataclass(slots=True)
class _Write:
    apply: Apply
    future: asyncio.Future[Any]
    after_commit: AfterCommit | None
    many: tuple[Many, Any] | None = None
    touches: str | None = None
    one_statement: bool = False
    unless_failures_above: int | None = None


class PostgresWriter:
    def __init__(
        self, connection: Callable[[], Any], *, on_abort: Callable[[], None] | None = None
    ) -> None:
        self._connection = connection  # the pool's `connection()` context manager
        self._on_abort = on_abort  # a transaction failed: forget what its writes derived
        self._queue: deque[_Write] = deque()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.commits = 0
        self.failures = 0  # writes that failed, counted as each one's outcome is known

    @property
    def pending(self) -> int:
        return len(self._queue) + self._in_flight

    _in_flight = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="postgres writer")

    def submit(
        self,
        apply: Apply,
        after_commit: AfterCommit | None = None,
        many: tuple[Many, Any] | None = None,
        touches: str | None = None,
        *,
        one_statement: bool = False,
        unless_failures_above: int | None = None,
    ) -> asyncio.Future[Any]:
        """`many`: (a `Many`, this write's item), to be made with the other writes of the
        batch that name the same `Many`; alone (a batch made again one write at a time), by
        `apply` (in a transaction of its own unless `one_statement`).
        `touches`: the one run whose rows the write touches (or a name for other rows no run
        has); required with `many`. `one_statement`: `apply` writes in one statement (and
        may read after it); a batch of that write alone is made without BEGIN and COMMIT.
        `unless_failures_above`: the write is not made, and its future fails with
        `WritesFailedError`, if by the time it would be made more writes than that have
        failed (`failures`, with the refusals of its own batch made before it)."""
        assert many is None or touches is not None, "a write made with others names its run"
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        # a queued write's failure is its caller's to see if it awaits it; a run given up on
        # an outage leaves the futures of its last queued appends unawaited, which is fine
        future.add_done_callback(_seen)
        write = _Write(apply, future, after_commit, many, touches, one_statement)
        write.unless_failures_above = unless_failures_above
        self._queue.append(write)
        self._wake.set()
        return future

    def _fail(self, write: _Write, exc: BaseException) -> None:
        if not write.future.done():
            write.future.set_exception(exc)
        if not isinstance(exc, WritesFailedError):  # a refusal (`unless_failures_above`) is not
            self.failures += 1  # counted as a failure

    async def stop(self) -> None:
        """Commit what is queued, then end the task."""
        if self._task is None:
            return
        if self._queue or self._in_flight:  # behind what is queued: all of it committed
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.submit(_nothing), STOP_TIMEOUT_S)
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        self._task = None
        for write in self._queue:
            self._fail(write, outage("the Postgres store is closed"))
        self._queue.clear()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._queue:
                batch = [self._queue.popleft() for _ in range(min(MAX_BATCH, len(self._queue)))]
                self._in_flight = len(batch)
                try:
                    await self._commit(batch)
                except Exception as exc:  # our bug: the writer must go on, its batch failed
                    log.exception("store_writer_failed")
                    for write in batch:
                        self._fail(write, exc)
                finally:
                    self._in_flight = 0

    async def _commit(self, batch: list[_Write], tries: int = RETRIES) -> None:
        try:
            results = await self._transaction(batch)
        except pg_errors.TransactionRollback as exc:  # a deadlock: rolled back, again
            log.info("store_write_retried", error=str(exc).splitlines()[0], writes=len(batch))
            if tries > 1:
                for write in batch:
                    await self._commit([write], tries - 1)
                return
            for write in batch:
                self._fail(write, outage(f"Postgres did not take the write: {exc}"))
            return
        except Exception as exc:
            if is_outage(exc):
                log.warning("store_write_failed", error=str(exc), writes=len(batch))
                failure = outage(f"Postgres did not take the write: {exc}")
                for write in batch:
                    self._fail(write, failure)
                return
            if len(batch) == 1:
                self._fail(batch[0], exc)
                return
            for write in batch:  # again one at a time: the write that raised fails alone
                await self._commit([write])
            return
        for write, result in zip(batch, results, strict=True):
            if isinstance(result, Failed):
                self._fail(write, result.error)
                continue
            if write.after_commit is not None:
                try:
                    write.after_commit(result)
                except Exception:  # a hook's bug must not lose the others' outcomes
                    log.exception("store_after_commit_failed")
            if not write.future.done():
                write.future.set_result(result)

    async def _transaction(self, batch: list[_Write]) -> list[Any]:
        try:
            async with self._connection() as conn:
                write = batch[0]
                if len(batch) == 1 and write.one_statement and write.unless_failures_above is None:
                    results = [await write.apply(conn)]  # one statement: its own transaction
                else:
                    async with conn.transaction():
                        results = await _apply(conn, batch, self.failures)
        except BaseException:
            if self._on_abort is not None:
                self._on_abort()
            raise
        self.commits += 1
        return results


@dataclass(slots=True)
class _Made:
    """A batch being made: each write's outcome so far, and the failures known."""

    results: list[Any]
    failed: int


async def _apply(
    conn: psycopg.AsyncConnection[Any], batch: list[_Write], failures: int
) -> list[Any]:
    """Each write's outcome, in the batch's order. A write that does not say what it touches
    is made after every write before it and before every write after it; between two such,
    the writes touching one thing (a run, a key's day) are made in the order asked, and the
    writes alone (naming no `Many`) in the order asked among themselves. Within those rules
    the writes naming one `Many` are gathered: each time, of the `Many` most writes are
    ready for (each thing's next writes, up to one of another kind), every ready one is made
    in one statement. A batch of runs each writing events, a checkpoint, events again is
    then a statement per kind and turn, not one per run and turn. `failures`: the writer's
    before the batch, which its refusals add to (`unless_failures_above`)."""
    made = _Made([None] * len(batch), failures)
    start = 0
    for i, write in enumerate(batch):
        if write.touches is None:
            await _made(conn, batch, range(start, i), made)
            made.results[i] = await _alone(conn, write, made)
            start = i + 1
    await _made(conn, batch, range(start, len(batch)), made)
    return made.results


async def _alone(conn: psycopg.AsyncConnection[Any], write: _Write, made: _Made) -> Any:
    """A write naming no `Many` made, or refused (`unless_failures_above`)."""
    refusal = _refusal(write, made)
    return refusal if refusal is not None else await write.apply(conn)


def _refusal(write: _Write, made: _Made) -> Failed | None:
    limit = write.unless_failures_above
    if limit is None or made.failed <= limit:
        return None
    return Failed(WritesFailedError(f"{made.failed - limit} queued writes failed before it"))


async def _made(
    conn: psycopg.AsyncConnection[Any], batch: list[_Write], span: range, made: _Made
) -> None:
    """The writes of `span` (each naming what it touches) made, their outcomes in `made`."""
    chains: dict[str | None, deque[int]] = {}
    for i in span:
        chains.setdefault(batch[i].touches, deque()).append(i)
    alone = deque(i for i in span if batch[i].many is None)
    while chains:
        if alone and chains[batch[alone[0]].touches][0] == alone[0]:
            i = alone.popleft()
            made.results[i] = await _alone(conn, batch[i], made)
            _advance(chains, batch[i].touches)
            continue
        ready = Counter(
            batch[chain[0]].many[0]  # type: ignore[index]
            for chain in chains.values()
            if batch[chain[0]].many is not None
        )
        many = max(ready, key=ready.__getitem__)
        members: list[int] = []
        for touches, chain in list(chains.items()):
            while chain and (head := batch[chain[0]].many) is not None and head[0] is many:
                members.append(chain.popleft())
            if not chain:
                del chains[touches]
        members.sort()
        for i in list(members):  # (its limit checked now: before the group is made)
            if (refusal := _refusal(batch[i], made)) is not None:
                made.results[i] = refusal
                members.remove(i)
        if not members:
            continue
        if len(members) == 1:
            outcomes = [await batch[members[0]].apply(conn)]
        else:
            outcomes = await many(conn, [batch[i].many[1] for i in members])  # type: ignore[index]
        for i, outcome in zip(members, outcomes, strict=True):
            made.results[i] = outcome
            made.failed += isinstance(outcome, Failed)


def _advance(chains: dict[str | None, deque[int]], touches: str | None) -> None:
    chain = chains[touches]
    chain.popleft()
    if not chain:
        del chains[touches]


async def _nothing(conn: psycopg.AsyncConnection[Any]) -> None:
    return None


def _seen(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()
