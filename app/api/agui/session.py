"""One POST /ag-ui (DESIGN §16): which finishline run the turn is, and its stream of frames.

`AguiThreads.open` decides what the turn is, before anything is streamed (every refusal a 4xx):
- a re-POST of a turn (same key, threadId and runId) re-attaches to the run it made;
- a turn answering the interrupts of the thread's waiting run (`resume`, and a frontend tool's
  result as a `tool` message) decides its calls (`RunManager.decide`) and streams the same run
  on, whether its runId is new or the interrupted turn's own (CopilotKit's `useInterrupt`
  resumes with that one); a re-POST of such a turn re-attaches where it began;
- otherwise it is a new run of the thread (`Threads.start`, DESIGN §19; the thread
  `ag-ui:THREAD`): its first (its earlier messages as the history), or the next, continuing
  from the thread's latest run (`previous_run_id`), checked like POST /runs; refused while
  that one has not ended.
Threads are per key (the caller's owner), the runs layer's (every store, every replica). A
turn's run is found again by its idempotency key, made of threadId and runId, so concurrent
identical POSTs make one run (the store's own guarantee).

`AguiThreads.stream` follows the run (`RunManager.follow`) to its terminal event, or to its
next wait for a person or the client (`run.waiting`), which ends it with the interrupt. Uses
only the manager's public methods.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from functools import partial
from typing import Protocol

from app.api.agui.decisions import decisions_for, no_interrupts
from app.api.agui.mapping import FrameMapper, frame
from app.api.agui.turns import Turn, where
from app.api.auth import Caller
from app.api.errors import ApiError
from app.api.runbody import relocated
from app.engine.events import EventType
from app.runs.errors import (
    IdempotencyConflictError,
    InvalidRunError,
    RunNotWaitingError,
    ThreadBusyError,
)
from app.runs.follow.follower import Until
from app.runs.manager import RunManager
from app.runs.records import PendingApproval, RunRecord, RunStatus
from app.runs.spec import RunRequest


def thread_of(turn: Turn) -> str:
    """The AG-UI thread among the key's threads (A2A's contexts are `a2a:…`)."""
    return "ag-ui:" + turn.thread_id


@dataclass(frozen=True, slots=True)
class Opened:
    """The finishline run a turn streams, and the seq its stream starts after."""

    run_id: str
    after: int
    cancel_on_disconnect: bool = False


def turn_key(thread_id: str, run_id: str) -> str:
    """The idempotency key of the run a turn makes (per owner, as every key)."""
    digest = hashlib.sha256(f"{thread_id}\x00{run_id}".encode()).hexdigest()[:40]
    return f"ag-ui:{digest}"


class NewRun(Protocol):
    """Reads the run a turn makes of `task` (`app.api.agui.body`): the run, and whether a
    dropped stream cancels it."""

    async def __call__(self, turn: Turn, task: str) -> tuple[RunRequest, bool]: ...


def _pending(head: RunRecord) -> list[PendingApproval]:
    """The calls the thread's run waits on (none unless it waits on an approval)."""
    if head.status != RunStatus.REQUIRES_ACTION or head.approval is None:
        return []
    return head.approval.undecided()


def _answers(turn: Turn, head: RunRecord) -> bool:
    """Whether the turn answers interrupts (`resume`, or a frontend tool's result for a call the
    run waits on): so is one that CopilotKit sends with the interrupted turn's own runId."""
    return bool(turn.resume) or any(p.call_id in turn.results for p in _pending(head))


def _busy(turn: Turn, run_id: str | None, status: str | None) -> ApiError:
    return ApiError(
        409,
        "run_not_ended",
        f"thread {turn.thread_id!r} is at run {run_id}, which is {status}: wait for its end, "
        "or re-attach to it with its runId",
        run_id=run_id,
    )


class AguiThreads:
    def __init__(self, manager: RunManager, new_run: NewRun) -> None:
        self.manager = manager
        self.new_run = new_run

    # -- what the turn is ---------------------------------------------------------------------

    async def open(self, turn: Turn, caller: Caller, last_event_id: int | None) -> Opened:
        owner = caller.owner
        head = await self.manager.threads.latest(owner, thread_of(turn))
        key = turn_key(turn.thread_id, turn.run_id)
        cancel = turn.cancel_on_disconnect
        if head is not None and head.idempotency_key == key and not _answers(turn, head):
            return Opened(head.id, last_event_id or 0, cancel)  # this turn made it: re-attach
        answering = await self._answer(head, turn, caller)
        if answering is not None:
            return Opened(answering.run_id, last_event_id or answering.after, cancel)
        if turn.task is None:
            raise InvalidRunError(
                "messages", "must end with the user's new message (the task of the run)"
            )
        if head is not None and not head.status.terminal:
            raise _busy(turn, head.id, head.status.value)
        task = turn.task if head is not None else turn.first_task
        assert task is not None
        request, cancel = await self.new_run(turn, task)
        try:
            record, _ = await self.manager.threads.start(
                request, owner=owner, thread_id=thread_of(turn), idempotency_key=key
            )
        except ThreadBusyError as exc:  # another turn made the thread's next run meanwhile
            raise _busy(turn, exc.details.get("run_id"), exc.details.get("status")) from None
        except InvalidRunError as exc:  # a server-side check (a cap, a tool or model name)
            raise relocated(exc, partial(where, turn=turn)) from None
        except IdempotencyConflictError as exc:
            raise IdempotencyConflictError(
                f"runId {turn.run_id!r} of thread {turn.thread_id!r} ran with another input: "
                "send a new runId for a new run",
                run_id=exc.details.get("run_id"),
            ) from None
        return Opened(record.id, last_event_id or 0, cancel)

    async def _answer(self, head: RunRecord | None, turn: Turn, caller: Caller) -> Opened | None:
        """A turn that answers the thread's waiting run: its calls decided, or (a re-POST of
        that turn) where it began; None for a turn that answers nothing."""
        named = [entry.interrupt_id for entry in turn.resume]
        if head is None:
            if named:
                raise no_interrupts(turn, named)
            return None
        pending = _pending(head)
        pending_ids = {p.call_id for p in pending}
        if pending and (set(named) & pending_ids or set(turn.results) & pending_ids):
            after, _ = await self._interrupt_point(head.id, pending_ids)
            decisions = decisions_for(turn, head, pending)
            with contextlib.suppress(RunNotWaitingError):  # decided by a concurrent POST
                await self.manager.decide(
                    head.id, caller.owner, decisions, any_owner=caller.any_owner
                )
            return Opened(head.id, after)
        if named:  # the calls were decided: a re-POST of the turn that decided them
            after, known = await self._interrupt_point(head.id, set(named))
            unknown = [n for n in named if n not in known]
            if unknown:
                raise no_interrupts(turn, unknown)
            return Opened(head.id, after)
        if pending:
            raise ApiError(
                409,
                "interrupts_pending",
                f"thread {turn.thread_id!r} waits on {len(pending)} interrupt(s): answer each "
                "in resume (a frontend tool's result may come as a tool message)",
                run_id=head.id,
                interrupts=sorted(pending_ids),
            )
        return None

    async def _interrupt_point(self, run_id: str, call_ids: set[str]) -> tuple[int, set[str]]:
        """The seq where the run's wait on `call_ids` began (its `run.waiting`), and which of
        them it waited on."""
        return await self.manager.follower.wait_began(run_id, call_ids)

    # -- the stream ---------------------------------------------------------------------------

    async def stream(self, opened: Opened, turn: Turn, caller: Caller) -> AsyncIterator[bytes]:
        """The frames: RUN_STARTED, the run's events from `opened.after` on, and the end: the
        frames of its terminal event, or the interrupt of its next wait (`run.waiting`).
        RUN_STARTED goes out with the first batch when the store hands that over at once (one
        write, as the native stream's first), else alone at once."""
        mapper = FrameMapper(
            thread_id=turn.thread_id, run_id=turn.run_id, finishline_run_id=opened.run_id
        )
        head = frame(opened.after, mapper.started())
        batches = self.manager.follow(
            opened.run_id, caller.owner, opened.after, any_owner=caller.any_owner, until=Until.WAIT
        )
        async with contextlib.aclosing(batches):
            first = asyncio.ensure_future(anext(batches, None))
            try:
                await asyncio.sleep(0)  # the follower's first turn
                if not first.done():
                    yield head
                    head = b""
                batch = await first
            finally:
                first.cancel()
            while batch is not None:
                last = batch[-1]
                if last.type == EventType.RUN_WAITING:
                    record = await self.manager.get(opened.run_id, caller.owner, any_owner=True)
                    chunk = mapper.frames(batch[:-1])  # (first: the interrupt closes its step)
                    chunk += frame(last.seq, mapper.interrupted(record, last))
                else:
                    chunk = mapper.frames(batch)
                yield head + chunk
                head = b""
                batch = await anext(batches, None)
        if head:
            yield head
