"""Incremental checkpoints: each store writes only the messages a run added since its last
checkpoint, not the whole conversation at every step (which grew with the square of a run's
length).

A stored checkpoint is a head (the step, and the state with `messages` replaced by their
count) plus the run's messages in chunks: each chunk one JSON array, the messages one write
added, keyed by the index of its first message. A write (`CheckpointWrite`) replaces the head
and adds one chunk at `start`: the number of messages this process wrote for the run last
time, when they are all still the first ones of the new state (a delta); otherwise `start` is
0 and the write replaces every chunk (a full snapshot). Head and chunk are written as one (one
SQLite transaction, one Redis script, one dict assignment), so a checkpoint reads back whole:
the chunks in order, cut to the head's count.

The engine appends messages and replaces one (eliding a tool result) with a new object, never
changing a message in place once it is in the conversation; so "still the same" is identity
(`is`), a pointer comparison per message rather than an encoding. Anything this process did
not write itself (a run resumed from a loaded checkpoint, a takeover, a failed or cancelled
write, a deleted run) starts again with a full snapshot: the bookkeeping of what was written
is `CheckpointDeltas`, which every store drives the same way (`writing`, `appended`,
`forget`). The layout is versioned (`CHECKPOINT_FORMAT`; `loaded` reads every version).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from app.engine.events import TERMINAL_EVENT_TYPES
from app.runs.store import CHECKPOINT_FORMAT, Checkpoint, StoreError

COUNT = "messages"
"""The state's field that holds the conversation: a list in a whole (older) checkpoint, the
number of messages stored in chunks in an incremental one."""

_encode = json.JSONEncoder(separators=(",", ":")).encode


@dataclass(frozen=True, slots=True)
class CheckpointWrite:
    """What to store of one checkpoint: `state` (JSON of the state with its messages as their
    count) and `chunk` (JSON array of the messages from index `start` on; None when the state
    holds no conversation). `start` 0: drop every stored chunk first. `messages`: the whole
    conversation the delta ends (never changed once planned), for a store that finds, when it
    makes the write, that the chunks before `start` were not stored (`whole`)."""

    state: str
    start: int
    chunk: str | None
    messages: list[Any] | None = None

    def whole(self) -> str | None:
        """The conversation as one chunk from 0: what to store instead of a delta whose
        earlier chunks are missing (a queued write before it failed)."""
        return None if self.messages is None else _encode(self.messages)


class CheckpointDeltas:
    """Per run, the message objects of the last checkpoint this process wrote (loop thread
    only). `plan` assumes its write will succeed; a store calls `forget` when it did not (or
    may not have), and when the run needs no more checkpoints."""

    def __init__(self) -> None:
        self._written: dict[str, list[Any]] = {}

    def plan(self, run_id: str, state: dict[str, Any]) -> CheckpointWrite:
        messages = state.get(COUNT)
        if not isinstance(messages, list):  # not a conversation: stored whole, in the head
            self._written.pop(run_id, None)
            return CheckpointWrite(_encode(state), 0, None)
        last = self._written.get(run_id)
        start = 0
        if (
            last is not None
            and len(last) <= len(messages)
            and all(old is new for old, new in zip(last, messages, strict=False))
        ):
            start = len(last)
        written = self._written[run_id] = list(messages)
        state = {**state, COUNT: len(messages)}
        return CheckpointWrite(_encode(state), start, _encode(messages[start:]), written)

    @contextmanager
    def writing(self, run_id: str, state: dict[str, Any]) -> Iterator[CheckpointWrite]:
        """`plan` a write the caller makes inside the block; a write that failed (or may
        have) is forgotten, so the next one is whole."""
        write = self.plan(run_id, state)
        try:
            yield write
        except BaseException:
            self.forget(run_id)
            raise

    def appended(self, run_id: str, type: str) -> None:
        """An event of the run is appended: after its terminal one, no checkpoint follows."""
        if type in TERMINAL_EVENT_TYPES:
            self._written.pop(run_id, None)

    def forget(self, run_id: str) -> None:
        """The run's next checkpoint is whole (deleted, taken over, given up, failed)."""
        self._written.pop(run_id, None)


def stored_count(state: dict[str, Any]) -> int | None:
    """How many messages a loaded state holds in chunks (None: it holds them itself, or has
    none)."""
    count = state.get(COUNT)
    return count if isinstance(count, int) and not isinstance(count, bool) else None


def assemble(state: dict[str, Any], chunks: Iterable[str]) -> dict[str, Any]:
    """The state as saved: its messages put back from its chunks (in order)."""
    count = stored_count(state)
    if count is not None:
        messages: list[Any] = []
        for chunk in chunks:
            messages += json.loads(chunk)
        state[COUNT] = messages[:count]
    return state


def loaded(
    step: int, state: dict[str, Any], chunks: Iterable[str], version: int | None
) -> Checkpoint:
    """The checkpoint a store read: its head's `state` (decoded) and `chunks`, in the layout
    `version` names; None for a head stored before layouts were versioned, whose layout is
    told by its messages (inline: 1, a count: 2). A newer layout is refused."""
    if version is None:
        version = 2 if stored_count(state) is not None else 1
    if version > CHECKPOINT_FORMAT:
        raise StoreError(
            f"checkpoint format {version} is newer than this server's ({CHECKPOINT_FORMAT})"
        )
    return Checkpoint(step=step, state=assemble(state, chunks), version=version)
