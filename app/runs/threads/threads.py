"""Threads (DESIGN §19): a conversation as a resource, the part of `RunManager` every face
starts a thread's run through (POST /runs' `thread_id`, AG-UI's threadId, A2A's contextId).

A thread's next run continues from its latest (`previous_run_id`). While the latest has not
ended, the next is refused (`multitask: reject`, ThreadBusyError naming it), held until it
ends (`enqueue`: `Placement.hold`), or held and the thread's unended runs cancelled
(`interrupt`). Which run is next is decided by the thread index's compare-and-set, never by a
read then a write: the run is stored, then bound to the thread from the head it was planned
from (`Joining.bind`); one that lost (another request moved the thread meanwhile) is deleted
unseen, and planned again from the new head. So of two concurrent requests on an idle thread
one makes the run and the other is refused or held behind it, on any store and any replica.

The index keeps run ids; a run deleted or expired since is read past: the thread's latest run
is the newest of its runs still stored (none: the next run starts the conversation afresh).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import structlog

from app.runs.admission import Admission, Joining, ThreadMovedError
from app.runs.errors import (
    InvalidRunError,
    RunAlreadyEndedError,
    ThreadBusyError,
    ThreadNotFoundError,
)
from app.runs.live import LiveRuns
from app.runs.records import RunRecord, RunStatus
from app.runs.spec import RunRequest
from app.runs.store import RunStore
from app.runs.threads.index import ThreadCursor, ThreadEntry, ThreadIndex

log = structlog.get_logger("finishline.runs")

ATTEMPTS = 20
"""Times a start plans again after losing the thread to a concurrent one."""
PAGE = 200


class Multitask(StrEnum):
    """What a new run does while its thread's latest run has not ended."""

    REJECT = "reject"
    ENQUEUE = "enqueue"
    INTERRUPT = "interrupt"


class ThreadStatus(StrEnum):
    """Where a thread is: its latest run ended (or it has none), goes on, or waits."""

    IDLE = "idle"
    BUSY = "busy"
    REQUIRES_ACTION = "requires_action"


@dataclass(frozen=True, slots=True)
class Thread:
    entry: ThreadEntry
    latest: RunRecord | None
    """Its newest run still stored (None: it has none left)."""

    @property
    def status(self) -> ThreadStatus:
        latest = self.latest
        if latest is None or latest.status.terminal:
            return ThreadStatus.IDLE
        if latest.status == RunStatus.REQUIRES_ACTION:
            return ThreadStatus.REQUIRES_ACTION
        return ThreadStatus.BUSY


Canceller = Callable[[str], Awaitable[Any]]
"""Cancels a run by id, whoever owns it (`RunManager.cancel`)."""


class Threads:
    def __init__(
        self,
        *,
        index: ThreadIndex,
        store: RunStore,
        live: LiveRuns,
        admission: Admission,
        cancel: Canceller,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.index = index
        self.store = store
        self.live = live
        self.admission = admission
        self.cancel = cancel
        self.clock = clock

    # -- a thread's next run ------------------------------------------------------------------

    async def start(
        self,
        request: RunRequest,
        *,
        owner: str | None,
        thread_id: str,
        multitask: Multitask = Multitask.REJECT,
        idempotency_key: str | None = None,
        traceparent: str | None = None,
        origin: RunRecord | None = None,
        schedule_id: str | None = None,
    ) -> tuple[RunRecord, bool]:
        """The thread's new run and True (made first, with the thread, for a thread the owner
        has not), or the run an idempotent replay names and False. ThreadBusyError while the
        thread's latest run has not ended, with `multitask: reject`. `origin`: what a thread
        with no run continues from (A2A: a run POST /runs made is a context of its own)."""
        if idempotency_key is not None:  # a replay: the run the key made, wherever it is
            made = await self.store.find_by_idempotency_key(owner, idempotency_key)
            if made is not None:
                return await self.admission.create(
                    request, owner=owner, idempotency_key=idempotency_key
                )
        for _ in range(ATTEMPTS):
            entry = await self.index.thread(owner, thread_id)
            latest = await self._latest(owner, entry) or origin
            behind = None
            if latest is not None and not latest.status.terminal:
                if multitask == Multitask.REJECT:
                    raise _busy(thread_id, latest)
                behind = latest.id
            head = entry.head if entry is not None else None
            joining = Joining(thread_id, latest, behind, self._binder(owner, thread_id, head))
            try:
                record, created = await self.admission.create(
                    request,
                    owner=owner,
                    idempotency_key=idempotency_key,
                    traceparent=traceparent,
                    joining=joining,
                    schedule_id=schedule_id,
                )
            except ThreadMovedError:
                continue  # another run joined it meanwhile: plan again from its new head
            if created:
                log.info("thread_advanced", thread_id=thread_id, run_id=record.id, behind=behind)
                if multitask == Multitask.INTERRUPT and behind is not None:
                    await self._interrupt(owner, thread_id, record.id)
            return record, created
        raise ThreadBusyError(
            f"thread {thread_id!r} kept moving on: try again", thread_id=thread_id
        )

    def _binder(
        self, owner: str | None, thread_id: str, head: str | None
    ) -> Callable[[RunRecord], Awaitable[bool]]:
        async def bind(record: RunRecord) -> bool:
            return await self.index.advance(
                owner, thread_id, expected=head, run_id=record.id, at=self.clock()
            )

        return bind

    async def _interrupt(self, owner: str | None, thread_id: str, run_id: str) -> None:
        """Cancel the runs of the thread before `run_id` that have not ended, oldest first
        (each one's end lets the next held behind it go, to be cancelled in turn)."""
        unended: list[str] = []
        async for record in self._newest_first(owner, thread_id):
            if record.id == run_id:
                continue
            if record.status.terminal:
                break
            unended.append(record.id)
        for earlier in reversed(unended):
            with contextlib.suppress(RunAlreadyEndedError):
                await self.cancel(earlier)
            log.info("run_interrupted", run_id=earlier, thread_id=thread_id, by=run_id)

    # -- reading ------------------------------------------------------------------------------

    async def latest(self, owner: str | None, thread_id: str) -> RunRecord | None:
        """The thread's newest run still stored; None for a thread with none (or none)."""
        return await self._latest(owner, await self.index.thread(owner, thread_id))

    async def get(self, owner: str | None, thread_id: str) -> Thread:
        entry = await self.index.thread(owner, thread_id)
        if entry is None:
            raise _missing(thread_id)
        return Thread(entry, await self._latest(owner, entry))

    async def list_threads(
        self, owner: str | None, *, limit: int, cursor: str | None = None
    ) -> tuple[list[Thread], str | None]:
        """A page of the owner's threads, most recently changed first, and the next page's
        cursor (None on the last)."""
        entries = await self.index.threads(owner, limit=limit + 1, before=_cursor(cursor))
        page = [Thread(e, await self._latest(owner, e)) for e in entries[:limit]]
        last = entries[limit - 1] if len(entries) > limit else None
        return page, (_encoded((last.updated_at, last.thread_id)) if last else None)

    async def runs(
        self, owner: str | None, thread_id: str, *, limit: int, cursor: str | None = None
    ) -> tuple[list[RunRecord], str | None]:
        """A page of the thread's runs still stored, oldest first, and the next page's cursor
        (the position after it; None on the last)."""
        entry = await self.index.thread(owner, thread_id)
        if entry is None:
            raise _missing(thread_id)
        start = _position(cursor)
        ids = await self.index.thread_runs(owner, thread_id, start=start, limit=limit)
        records = [r for r in [await self._record(owner, i) for i in ids] if r is not None]
        after = start + len(ids)
        return records, (str(after) if len(ids) == limit and after < entry.runs else None)

    # -- changing -----------------------------------------------------------------------------

    async def update(self, owner: str | None, thread_id: str, metadata: dict[str, Any]) -> Thread:
        entry = await self.index.set_metadata(owner, thread_id, metadata, at=self.clock())
        if entry is None:
            raise _missing(thread_id)
        return Thread(entry, await self._latest(owner, entry))

    async def delete(self, owner: str | None, thread_id: str) -> None:
        """Forget the thread and delete its runs (all ended: ThreadBusyError otherwise)."""
        thread = await self.get(owner, thread_id)
        if thread.latest is not None and not thread.latest.status.terminal:
            raise _busy(thread_id, thread.latest, "cancel it first")
        ids: list[str] = []
        while len(ids) < thread.entry.runs:
            page = await self.index.thread_runs(owner, thread_id, start=len(ids), limit=PAGE)
            if not page:
                break
            ids += page
        if not await self.index.remove(owner, thread_id, expected=thread.entry.head):
            raise ThreadBusyError(
                f"thread {thread_id!r} moved on while it was deleted: look again",
                thread_id=thread_id,
            )
        for run_id in ids:
            record = await self._record(owner, run_id)
            if record is not None and record.status.terminal and run_id not in self.live:
                await self.store.delete(run_id)
        log.info("thread_deleted", thread_id=thread_id, runs=len(ids))

    # -- the thread's runs --------------------------------------------------------------------

    async def _record(self, owner: str | None, run_id: str) -> RunRecord | None:
        """The run as it is (its live record, if this process holds it), if it is the
        owner's and still stored."""
        active = self.live.get(run_id)
        record = active.record if active is not None else await self.store.get(run_id)
        return record if record is not None and record.owner == owner else None

    async def _latest(self, owner: str | None, entry: ThreadEntry | None) -> RunRecord | None:
        if entry is None:
            return None
        if entry.head is not None:
            head = await self._record(owner, entry.head)
            if head is not None:
                return head
        async for record in self._newest_first(owner, entry.thread_id, entry.runs):
            return record  # the head is gone (deleted, expired): the newest still stored
        return None

    async def _newest_first(
        self, owner: str | None, thread_id: str, count: int | None = None
    ) -> AsyncIterator[RunRecord]:
        """The thread's runs still stored, newest first."""
        if count is None:
            entry = await self.index.thread(owner, thread_id)
            count = entry.runs if entry is not None else 0
        end = count
        while end > 0:
            start = max(0, end - PAGE)
            ids = await self.index.thread_runs(owner, thread_id, start=start, limit=end - start)
            for run_id in reversed(ids):
                record = await self._record(owner, run_id)
                if record is not None:
                    yield record
            end = start


def _busy(thread_id: str, latest: RunRecord, advice: str = "") -> ThreadBusyError:
    status = latest.status.value
    advice = advice or "wait for its end, or send multitask enqueue or interrupt"
    return ThreadBusyError(
        f"thread {thread_id!r} is at run {latest.id}, which is {status}: {advice}",
        run_id=latest.id,
        thread_id=thread_id,
        status=status,
    )


def _missing(thread_id: str) -> ThreadNotFoundError:
    return ThreadNotFoundError(f"no thread {thread_id!r}", thread_id=thread_id)


def _encoded(cursor: ThreadCursor) -> str:
    text = json.dumps(list(cursor), separators=(",", ":"))
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def _cursor(cursor: str | None) -> ThreadCursor | None:
    if cursor is None:
        return None
    try:
        at, thread_id = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        if isinstance(at, int | float) and isinstance(thread_id, str):
            return float(at), thread_id
    except (ValueError, TypeError, binascii.Error):
        pass
    raise InvalidRunError("cursor", "is not a next_cursor of GET /threads")


def _position(cursor: str | None) -> int:
    if cursor is None:
        return 0
    if not cursor.isdigit() or len(cursor) > 12:
        raise InvalidRunError("cursor", "is not a next_cursor of GET /threads/{id}/runs")
    return int(cursor)
