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

import structlog

from app.runs.records import RunRecord
from app.runs.replicas.placement import _Active
from app.runs.store import RunStore

log = structlog.get_logger("finishline.runs")


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


class SharedInboxRuns:
    """Mixed into `RunManager` (whose attributes these are): its side of a `SharedInbox`."""

    store: RunStore
    messages: SharedInbox | None
    _active: dict[str, _Active]

    async def _post_through_store(self, record: RunRecord, content: str) -> RunRecord:
        """Store the message for the run wherever it is; here, move it to the run at once."""
        assert self.messages is not None
        await self.messages.post(record.id, content)
        log.info("user_message_queued", run_id=record.id, chars=len(content))
        active = self._active.get(record.id)
        if active is None:  # queued, waiting, or running on another replica
            return await self.store.get(record.id) or record
        await self._pull_messages(active)
        return active.record

    async def _pull_messages(self, active: _Active) -> None:
        """With replicas: move the run's messages from the store to its task's inbox."""
        if self.messages is not None and not active.inbox_closed:
            await self.messages.pull(active.record.id, lambda taken: active.inbox.extend(taken))

    async def _messages_posted(self, run_id: str | None) -> None:
        """Told that a run (None: any run) was sent messages: those executing here take them."""
        found = self._active.get(run_id) if run_id is not None else None
        for active in list(self._active.values()) if run_id is None else [found]:
            if active is not None:
                await self._pull_messages(active)
