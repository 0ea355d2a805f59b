"""The thread index: the port every store implements beside its runs (`RunStore.threads`),
a small one, so a new store implements it and runs its contract suite
(`tests/runs/test_thread_index_contract.py`) before anything else.

A thread is keyed by its owner (an API key's digest; None when auth is off) and its id:
another owner's thread of the same id is a thread of its own. It holds its head (the newest
run it advanced to), its runs in order, when it was made and last changed, and its metadata.
`advance` and `remove` are compare-and-set on the head, atomic across processes (a
transaction, a Lua script), so of two requests that saw the same head one advances the thread
and the other is told it moved: never read-then-write. The index does not follow the runs:
a run deleted or expired stays named in it (the `Threads` part reads past it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

ThreadCursor = tuple[float, str]
"""Where a listing goes on from: the `updated_at` and id of the last thread listed."""


@dataclass(frozen=True, slots=True)
class ThreadEntry:
    thread_id: str
    owner: str | None
    head: str | None
    """The newest run the thread advanced to (it may have been deleted since)."""
    created_at: float
    """When its first run advanced it (epoch seconds)."""
    updated_at: float
    """When it last changed: a run, or its metadata (epoch seconds)."""
    metadata: dict[str, Any] = field(default_factory=dict)
    runs: int = 0
    """How many runs it has had."""


class ThreadIndex(Protocol):
    async def thread(self, owner: str | None, thread_id: str) -> ThreadEntry | None:
        """The thread, None for one this owner has not (or no longer has)."""

    async def advance(
        self, owner: str | None, thread_id: str, *, expected: str | None, run_id: str, at: float
    ) -> bool:
        """Make `run_id` the thread's head and its newest run, if its head is `expected` now
        (None: the thread does not exist; it is made, `at` its creation); False, changing
        nothing, otherwise. Atomic: of concurrent calls expecting one head, one is True."""

    async def threads(
        self, owner: str | None, *, limit: int, before: ThreadCursor | None = None
    ) -> list[ThreadEntry]:
        """The owner's threads, most recently changed first (by `updated_at`, then id, both
        descending), up to `limit`, from past `before` (the last one of the previous page)."""

    async def thread_runs(
        self, owner: str | None, thread_id: str, *, start: int = 0, limit: int = 100
    ) -> list[str]:
        """The ids of the thread's runs, oldest first, from position `start` (0: its first),
        up to `limit`; empty for a thread there is none of."""

    async def set_metadata(
        self, owner: str | None, thread_id: str, metadata: dict[str, Any], *, at: float
    ) -> ThreadEntry | None:
        """Replace the thread's metadata (`at`: its `updated_at`); the thread, None if there
        is none."""

    async def remove(self, owner: str | None, thread_id: str, *, expected: str | None) -> bool:
        """Forget the thread (its runs stay stored: the caller deletes them), if its head is
        `expected` now; False otherwise (gone, or moved on meanwhile)."""
