"""The one protocol storage sits behind: run records, an append-only event log per run, and
checkpoints. Implementations: `MemoryRunStore` (memory://), `SqliteRunStore` (sqlite://) and
`RedisRunStore` (redis:// or rediss://, the one several replicas share), opened by URL with
`app.runs.backends.open_store`.

Ordering contract: `append` assigns the next `seq` of the run (1, 2, 3 … no gaps) and returns
only once the event is durable; events are appended, and published to subscribers, in the
order `append` (or `append_soon`) was called for that run. `append_soon` (and
`save_checkpoint_soon`) queue the write and hand back what to await for its outcome, so a
caller can go on while it is made durable (and one commit can carry many writes); no event is
published before it is durable either way. `subscribe` replays everything after
`after`, then follows live, without loss or duplicates, and ends after the terminal event;
`subscribe_batches` does the same, handing over everything it has ready at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import structlog
from pydantic import ValidationError

from app.engine.errors import FinishlineError
from app.engine.events import EventType
from app.engine.state import RunState
from app.runs.errors import RunUnreadableError
from app.runs.records import Event, RunRecord, RunStatus
from app.runs.reports.groups import GroupBy
from app.runs.reports.summaries import RunFilter, RunSummary
from app.runs.schedules.store import ScheduleStore
from app.runs.threads.index import ThreadIndex

log = structlog.get_logger("finishline.runs")

T = TypeVar("T")

FirstEvent = tuple[EventType, int, dict[str, Any]]
"""A new run's first event, stored with it by `RunStore.create`: type, step, data."""


CHECKPOINT_FORMAT = 2
"""The layout a store writes a checkpoint in: 1, the state whole (its messages inline, as
stores wrote it before incremental checkpoints); 2, a head and the messages in chunks
(`app.runs.stores.checkpoints`). Every store still loads format 1."""


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A run's last checkpoint, as loaded: the step it was taken at, the engine's state
    (`RunState.to_checkpoint`'s dict, its messages whole), and the layout it was stored in."""

    step: int
    state: dict[str, Any]
    version: int = CHECKPOINT_FORMAT

    def run_state(self) -> RunState:
        """The engine's state, to resume from."""
        return RunState.from_checkpoint(self.state)


@dataclass(slots=True)
class DayUsage:
    """What one API key used on one UTC day, across its runs (DESIGN §13): runs admitted, LLM
    calls, tokens and USD. `cost_usd` sums the priced calls; `unpriced_calls` counts the ones
    whose model had no price (not in the sum). Also a change to add (`UsageCounters`).
    A value, never changed once made (`+` makes another): not frozen only because a frozen
    dataclass takes four times as long to make, and one is made per LLM call."""

    runs: int = 0
    llm_calls: int = 0
    unpriced_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: DayUsage) -> DayUsage:
        return DayUsage(  # positional: keywords cost more to match
            self.runs + other.runs,
            self.llm_calls + other.llm_calls,
            self.unpriced_calls + other.unpriced_calls,
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.cost_usd + other.cost_usd,
        )


class UsageCounters(Protocol):
    """Per API key (its owner id, a digest of the key: never the key): what it used by UTC
    day, and when its recent runs were admitted (the runs-per-minute window). What quotas
    count (`app.runs.quotas`); kept by the run store, so they survive a restart and, on a
    shared store, every replica counts the same."""

    async def day_usage(self, owner: str | None, day: str) -> DayUsage:
        """The key's figures for `day` (`YYYY-MM-DD`, UTC); zeros for a day it never used."""

    async def add_usage(self, owner: str | None, day: str, usage: DayUsage) -> Awaitable[None]:
        """Add `usage` to the key's `day` (concurrent adds all count), queued behind every
        write asked of the store before, as `RunStore.append_soon`; what to await for it
        stored."""

    async def admitted(self, owner: str | None, ticket: str, at: float) -> Awaitable[None]:
        """Note a run of the key admitted at `at` (epoch seconds) under `ticket`, queued as
        `add_usage`; notes older than a minute may be dropped."""

    async def unadmitted(self, owner: str | None, ticket: str) -> Awaitable[None]:
        """Drop the note `ticket` (its run was not made after all), queued as `add_usage`."""

    async def admissions_since(self, owner: str | None, since: float) -> list[float]:
        """When the key's runs noted after `since` were admitted, oldest first."""

    async def active_runs(self, owner: str | None) -> int:
        """The key's runs queued, running or waiting for a person, as stored."""


class StoreError(FinishlineError):
    """Base of storage errors."""


class DuplicateRunError(StoreError):
    """A run with this id, or this owner's idempotency key, exists already."""


class RunGoneError(StoreError, KeyError):
    """The run is not stored (a write of a run that does not exist; the stores' contract
    says KeyError). Under its executing replica: Redis came back without its data, so the
    run is no longer anybody's to run."""


class LeaseLostError(StoreError):
    """This process no longer holds the run's lease (another replica took it over): the
    write was refused, and the run is no longer this process's to change."""


class WritesFailedError(StoreError):
    """A run's closing write was not made (`RunStore.append_closing`): a queued write failed
    after the run's pending writes began, perhaps one of them."""


class UnsupportedStoreError(StoreError):
    """The store URL names no known backend."""


def read_record(run_id: str, raw: str | bytes, *, owner: str | None = None) -> RunRecord:
    """A stored record read back, or `RunUnreadableError` naming what is wrong with it (the
    first problem's place in the record and pydantic's message, never the stored value),
    logged as `run_read_failed`. `owner`: what the store keeps beside the record."""
    try:
        return RunRecord.model_validate_json(raw)
    except (ValidationError, TypeError) as exc:
        problem = _problem(exc)
    log.error("run_read_failed", run_id=run_id, problem=problem)
    raise RunUnreadableError(run_id, problem, owner=owner)


def _problem(exc: Exception) -> str:
    if not isinstance(exc, ValidationError):
        return f"not JSON text: {type(exc).__name__}"
    errors = exc.errors(include_url=False, include_input=False, include_context=False)
    first = errors[0]
    place = ".".join(str(part) for part in first["loc"])
    text = f"{place}: {first['msg']}" if place else str(first["msg"])
    return text + (f" (and {len(errors) - 1} more)" if len(errors) > 1 else "")


def settled(outcome: T) -> Awaitable[T]:
    """What `append_soon` (or a queued counter write) returns from a store that wrote at
    once: the outcome, known."""
    future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
    future.set_result(outcome)
    return future


class _Appends(Protocol):
    async def append(
        self,
        run_id: str,
        type: EventType,
        step: int,
        data: dict[str, Any],
        *,
        record: RunRecord | None = None,
    ) -> Event: ...


class WritesAtOnce:
    """`RunStore`'s closing write for a store whose writes are made at once (memory, Redis):
    none is queued, so none can fail behind the caller's back."""

    def write_failures(self) -> int:
        return 0

    async def append_closing(
        self: _Appends,
        run_id: str,
        type: EventType,
        step: int,
        data: dict[str, Any],
        *,
        record: RunRecord,
        failures: int,
    ) -> Awaitable[Event]:
        return settled(await self.append(run_id, type, step, data, record=record))


class RunStore(Protocol):
    @property
    def counters(self) -> UsageCounters:
        """What each API key used (by UTC day), and its recent admissions: quotas' counts."""

    @property
    def threads(self) -> ThreadIndex:
        """Each owner's threads (DESIGN §19): the thread index, beside the runs."""

    @property
    def schedules(self) -> ScheduleStore:
        """Each owner's schedules and their firings (DESIGN §21), beside the runs."""

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def ping(self) -> None:
        """Raise if the store cannot serve requests."""

    async def create(
        self, record: RunRecord, *, first_event: FirstEvent | None = None
    ) -> Event | None:
        """Insert a new run; DuplicateRunError if its id or (owner, idempotency_key) exists.
        With `first_event` (type, step, data), append it as the run's event 1 in the same
        write (both stored, or neither) and return it."""

    async def save(self, record: RunRecord) -> None:
        """Replace a run's record."""

    async def get(self, run_id: str) -> RunRecord | None:
        """The run, None if there is none; `RunUnreadableError` if its stored record does
        not read back (`read_record`)."""

    async def find_by_idempotency_key(self, owner: str | None, key: str) -> RunRecord | None:
        """As `get`, for the run of this owner's idempotency key."""

    async def list_runs(
        self,
        *,
        owner: str | None,
        statuses: Sequence[RunStatus] = (),
        limit: int = 50,
        before_id: str | None = None,
        any_owner: bool = False,
        previous_run_id: str | None = None,
        unreadable: list[RunUnreadableError] | None = None,
        parent_run_id: str | None = None,
        matching: RunFilter | None = None,
    ) -> list[RunRecord]:
        """Newest first, up to `limit` of them; `before_id` is the cursor (ids sort by
        creation time); `previous_run_id` keeps only the follow-ups of that run,
        `parent_run_id` only the child runs its sub-agent calls started, `matching` only the
        runs it admits (`RunFilter.admits_record`: those `termination_report` sums). A run whose
        record does not read back is left out, never raised (one bad row must not hide every
        other run): its error is added to `unreadable` when given, and the runs past it are
        still listed."""

    async def delete(self, run_id: str) -> None:
        """Remove a run, its events, its checkpoint and its summary."""

    # Run summaries (DESIGN §20; `app.runs.reports.summaries`). Every write that stores a terminal
    # record (`save`, `append(record=...)`, and a store's own writes of one) also stores the
    # run's `RunSummary` in the same transaction: `summarize(record, tally)`, the tally
    # counted from the run's stored events (`tally_key`). A summary is kept, expired and
    # deleted with its run.

    async def termination_report(
        self, *, owner: str | None, any_owner: bool, matching: RunFilter, group_by: GroupBy
    ) -> list[dict[str, Any]]:
        """The report's groups (`ReportBuilder.groups`) over the summaries of the owner's runs
        (every owner's with `any_owner`) that `matching` admits; never a scan of events."""

    async def unsummarized(
        self, limit: int, *, after: str | None = None
    ) -> list[tuple[str, RunRecord | None]]:
        """Up to `limit` ended runs without a summary (stored before summaries were kept), by
        id, after `after`; a run whose record does not read back comes with None. For the
        backfill (`app.runs.reports.service`)."""

    async def save_summary(self, summary: RunSummary) -> None:
        """Keep a summary the backfill made, unless its run is gone (or has one)."""

    async def add_tree_run(self, root_run_id: str, member: str, cap: int) -> bool:
        """Count `member` (a child run's name: its parent, step and call) among the runs of
        the tree rooted at `root_run_id`, unless the tree counts `cap` already: False then.
        A member counted already is counted once (True). Atomic across processes; the count
        is forgotten with the root run."""

    async def append(
        self,
        run_id: str,
        type: EventType,
        step: int,
        data: dict[str, Any],
        *,
        record: RunRecord | None = None,
    ) -> Event:
        """Append the run's next event. With `record` (the run's), save it too, as `save`
        does and in the same write, before the event: both are stored, or neither."""

    async def append_soon(
        self,
        run_id: str,
        type: EventType,
        step: int,
        data: dict[str, Any],
        *,
        record: RunRecord | None = None,
    ) -> Awaitable[Event]:
        """Queue the run's next event, as `append` would store it (with `record`: the record
        saved in the same write, before the event), behind every write asked of this store
        before; return what to await for the stored event (or the error). A store whose
        writes are not queued makes the append before it returns."""

    def write_failures(self) -> int:
        """How many queued writes of this store have failed since it opened (always 0 for a
        store whose writes are not queued): what `append_closing` compares."""

    async def append_closing(
        self,
        run_id: str,
        type: EventType,
        step: int,
        data: dict[str, Any],
        *,
        record: RunRecord,
        failures: int,
    ) -> Awaitable[Event]:
        """Queue the run's terminal write (`record` saved with its terminal event, as
        `append(record=)`) behind every write asked before, unless more than `failures`
        queued writes (`write_failures()` taken before the run queued the writes it has
        pending) have failed by the time it would be made: then nothing is written and the
        awaitable raises `WritesFailedError`. A run thus ends in the commit of its last writes
        and never after one of them failed. A store whose writes are not queued appends
        before it returns."""

    async def read(self, run_id: str, *, after: int = 0, limit: int = 1000) -> list[Event]: ...

    def subscribe(self, run_id: str, *, after: int = 0) -> AsyncIterator[Event]: ...

    def subscribe_batches(self, run_id: str, *, after: int = 0) -> AsyncIterator[list[Event]]:
        """As `subscribe`, in batches: each one every event ready when it was taken (a page of
        the replay, or all the live events published since the previous batch), in order,
        never empty. What an SSE stream writes at once."""

    async def save_checkpoint(self, run_id: str, step: int, state: dict[str, Any]) -> None:
        """Replace the run's checkpoint (in `CHECKPOINT_FORMAT`)."""

    async def save_checkpoint_soon(
        self, run_id: str, step: int, state: dict[str, Any]
    ) -> Awaitable[None]:
        """Queue `save_checkpoint`, as `append_soon` queues an append: behind every write
        asked of this store before, ahead of every one asked after (so it commits with the
        run's next events, never after them); return what to await for it stored (or the
        error). The caller awaits that only where a rule needs the checkpoint durable (before
        a non-idempotent call runs); a run's writes stay in order either way. A store whose
        writes are not queued saves it before it returns (`settled`). Planning an incremental
        write here (`stores.checkpoints`) must hold even if a queued write before it fails:
        the next one must not be a delta on chunks that were never stored."""

    async def load_checkpoint(self, run_id: str) -> Checkpoint | None:
        """The run's last checkpoint, whatever format it was stored in; None for none."""
