"""The runs this process holds live: queued here for a slot (one process) or executing here.

`LiveRuns` is the one registry the manager's parts share (the placement adds queued runs, the
execution adds and drops the runs it executes, the inbox hands steering messages to them, the
façade reads their live records): each part owns what it does with a run, none owns the
registry. `ActiveRun` is one such run: its live record, its cancel and done events, its task
and the steering messages it has not taken yet.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from app.runs.records import RunRecord
from app.runs.store import Checkpoint

CANCEL_SETTLE_S = 5.0  # how long a cancel waits for the run's end before answering


@dataclass(frozen=True, slots=True)
class Takeover:
    """A run this process took over from a replica that stopped (its lease expired)."""

    attempt: int
    """Takeovers of the run so far, this one included."""
    checkpoint: Checkpoint | None
    """Its last checkpoint, where it resumes (None: from the start)."""
    replica: str
    """This replica's name, for the `run.recovered` event."""


@dataclass(eq=False)
class ActiveRun:
    record: RunRecord
    cancel: asyncio.Event = field(default_factory=asyncio.Event)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    takeover: Takeover | None = None
    """Set when the run resumes here after its replica stopped."""
    inbox: list[str] = field(default_factory=list)
    """Steering messages not yet in the conversation, oldest first."""
    inbox_closed: bool = False
    """Set once the run's last LLM call is behind it: no message can join any more."""
    step: int = 0
    """The step the run is in (0 before its first)."""

    def take_messages(self) -> list[str]:
        taken, self.inbox = self.inbox, []
        return taken


class LiveRuns:
    """The runs of this process, and its slots: at most `slots` execute at once."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self.draining = False
        """Set once the process stops taking runs (shutdown): it starts none any more."""
        self._runs: dict[str, ActiveRun] = {}
        self._executing: set[str] = set()
        self._lent: set[str] = set()
        """Runs executing here that wait on their sub-agents' children alone: they hold no
        slot (DESIGN §15), so a tree cannot deadlock on FINISHLINE_MAX_CONCURRENT_RUNS."""

    def get(self, run_id: str) -> ActiveRun | None:
        return self._runs.get(run_id)

    def __contains__(self, run_id: str) -> bool:
        return run_id in self._runs

    def all(self) -> list[ActiveRun]:
        return list(self._runs.values())

    def hold(self, active: ActiveRun) -> None:
        """A run held here (queued for a slot, or about to execute)."""
        self._runs[active.record.id] = active

    def executing(self, active: ActiveRun) -> None:
        """The run takes one of the slots."""
        self._runs[active.record.id] = active
        self._executing.add(active.record.id)

    def drop(self, active: ActiveRun) -> None:
        """The run is not this process's any more (it ends, or was given up): its slot is
        free; a child run hands it back to its parent, when that waits here on it.
        (Whoever waits on it is told by its `done`, set once its end is stored.)"""
        run_id = active.record.id
        self._runs.pop(run_id, None)
        self._lent.discard(run_id)
        if run_id in self._executing:
            self._executing.discard(run_id)
            parent = active.record.parent_run_id
            if parent is not None and parent in self._lent:
                self.reclaim(parent)

    def lend(self, run_id: str) -> None:
        """The run waits on its children alone: its slot is free for another run."""
        if run_id in self._executing:
            self._executing.discard(run_id)
            self._lent.add(run_id)

    def reclaim(self, run_id: str) -> None:
        """The run goes on: it takes a slot again, at once. (A child's end hands its slot
        back to a parent waiting on it here, `drop`; a parent whose children ran elsewhere
        may be one over the cap for a moment: no queued run starts until it is below.)"""
        if run_id in self._lent:
            self._lent.discard(run_id)
            self._executing.add(run_id)

    @property
    def running(self) -> int:
        """Runs executing here."""
        return len(self._executing)

    def executing_ids(self) -> list[str]:
        """The runs whose tasks execute here, those lending their slot included."""
        return [*self._executing, *self._lent]

    def free_slots(self) -> int:
        """Slots free for another run; -1 once draining."""
        return -1 if self.draining else self.slots - len(self._executing)

    async def wait_for(self, run_ids: Iterable[str], timeout_s: float) -> None:
        """Until each of the runs ended here, or `timeout_s` passed."""
        events: Sequence[asyncio.Event] = [self._runs[r].done for r in run_ids if r in self._runs]
        if events:
            waits = [asyncio.ensure_future(e.wait()) for e in events]
            _, pending = await asyncio.wait(waits, timeout=timeout_s)
            for waiter in pending:
                waiter.cancel()
