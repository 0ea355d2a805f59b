"""Steering messages of runs in a store several replicas share (DESIGN §10): the port.

In one process a run's undelivered messages are a list on the executing task (`_Active`).
With replicas a message may be posted on any replica while the run is queued, waiting or
running on another; the run's inbox is then in the store (`RedisInbox`): a message is stored
there, then the replica executing the run is told and moves it into the task's list, where
the engine takes it before its next LLM call. All messages of a run go through the store, so
they join the conversation in the order they were accepted, whichever replica took them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol


class SharedInbox(Protocol):
    async def post(self, run_id: str, content: str) -> None:
        """Store a message for the run; `RunAlreadyEndedError` once the run ended or took
        its last message, `TooManyMessagesError` at the cap of undelivered ones."""

    async def pull(self, run_id: str, deliver: Callable[[list[str]], None]) -> None:
        """Move the run's stored messages to `deliver` (this process executes the run),
        oldest first; pulls of this process are one at a time, so order holds."""

    async def close(self, run_id: str) -> list[str]:
        """The run took its last message (it ends): refuse any more; those left, in order."""

    async def listen(self, on_posted: Callable[[str | None], Awaitable[None]]) -> None:
        """Forever: `on_posted(run_id)` when a message for the run was stored, and
        `on_posted(None)` each time the notifications (re)start (any run may have some)."""
