"""A run's closing write on Postgres (`RunStore.append_closing`): made once every write asked
before it has its outcome, so unlike SQLite's it waits for the run's last queued writes to
commit first (one commit more a run). SQLite's writer checks its failures in the transaction
that makes the closing write; Postgres's makes writes of a batch together, so its count is
only known after the batch."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

from app.engine.events import EventType
from app.runs.records import Event, RunRecord
from app.runs.store import WritesFailedError
from app.runs.stores.postgres_writer import PostgresWriter


class QueuedClosing:
    _writer: PostgresWriter

    def _queue_append(
        self, run_id: str, type: EventType, step: int, data: Any, record: RunRecord | None
    ) -> asyncio.Future[Event]:
        raise NotImplementedError  # the store's

    def write_failures(self) -> int:
        return self._writer.failures

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
        await self._writer.drained()
        if self._writer.failures > failures:
            refused: asyncio.Future[Event] = asyncio.get_running_loop().create_future()
            refused.set_exception(WritesFailedError("a queued write failed before it"))
            return refused
        return self._queue_append(run_id, type, step, data, record)
