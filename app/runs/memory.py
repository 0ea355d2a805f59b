"""`memory://`: everything in this process, gone at exit. For tests and throwaway servers."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Awaitable, Sequence
from typing import Any

from app.engine.events import TERMINAL_EVENT_TYPES, EventType
from app.runs.checkpoints import CheckpointDeltas, assemble
from app.runs.fanout import Fanout
from app.runs.records import Event, RunRecord, RunStatus
from app.runs.store import DuplicateRunError, FirstEvent, StoreError, settled


class MemoryRunStore:
    def __init__(self) -> None:
        self._runs: dict[str, RunRecord] = {}
        self._events: dict[str, list[Event]] = {}
        self._checkpoints: dict[str, tuple[int, str, list[str]]] = {}  # step, state, chunks
        self._threads: dict[tuple[str | None, str], str] = {}
        self._deltas = CheckpointDeltas()
        self.fanout = Fanout()
        self._closed = False

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        self._closed = True

    async def ping(self) -> None:
        if self._closed:
            raise StoreError("the memory store is closed")

    async def create(
        self, record: RunRecord, *, first_event: FirstEvent | None = None
    ) -> Event | None:
        if record.id in self._runs:
            raise DuplicateRunError(record.id)
        if record.idempotency_key is not None and await self.find_by_idempotency_key(
            record.owner, record.idempotency_key
        ):
            raise DuplicateRunError(record.idempotency_key)
        self._runs[record.id] = record.model_copy(deep=True)
        self._events[record.id] = []
        return await self.append(record.id, *first_event) if first_event is not None else None

    async def save(self, record: RunRecord) -> None:
        self._runs[record.id] = record.model_copy(deep=True)

    async def get(self, run_id: str) -> RunRecord | None:
        record = self._runs.get(run_id)
        return record.model_copy(deep=True) if record is not None else None

    async def find_by_idempotency_key(self, owner: str | None, key: str) -> RunRecord | None:
        for record in self._runs.values():
            if record.owner == owner and record.idempotency_key == key:
                return record.model_copy(deep=True)
        return None

    async def list_runs(
        self,
        *,
        owner: str | None,
        statuses: Sequence[RunStatus] = (),
        limit: int = 50,
        before_id: str | None = None,
        any_owner: bool = False,
        previous_run_id: str | None = None,
    ) -> list[RunRecord]:
        found = [
            r
            for r in self._runs.values()
            if (any_owner or r.owner == owner)
            and (not statuses or r.status in statuses)
            and (before_id is None or r.id < before_id)
            and (previous_run_id is None or r.previous_run_id == previous_run_id)
        ]
        found.sort(key=lambda r: r.id, reverse=True)
        return [r.model_copy(deep=True) for r in found[:limit]]

    async def delete(self, run_id: str) -> None:
        self._runs.pop(run_id, None)
        self._events.pop(run_id, None)
        self._checkpoints.pop(run_id, None)
        self._deltas.forget(run_id)

    async def append(
        self,
        run_id: str,
        type: EventType,
        step: int,
        data: dict[str, Any],
        *,
        record: RunRecord | None = None,
    ) -> Event:
        log = self._events[run_id]
        if record is not None:
            await self.save(record)
        # a JSON snapshot, as SQLite keeps it: the caller may change `data` later, and a live
        # event must equal its replay (enums as strings, tuples as lists)
        snapshot = json.loads(json.dumps(data))
        event = Event(run_id, len(log) + 1, type, time.time(), step, snapshot)
        log.append(event)
        if type in TERMINAL_EVENT_TYPES:
            self._deltas.forget(run_id)
        self.fanout.publish(event)
        return event

    async def append_soon(
        self, run_id: str, type: EventType, step: int, data: dict[str, Any]
    ) -> Awaitable[Event]:
        return settled(await self.append(run_id, type, step, data))

    async def read(self, run_id: str, *, after: int = 0, limit: int = 1000) -> list[Event]:
        return self._events.get(run_id, [])[after : after + limit]

    def subscribe(self, run_id: str, *, after: int = 0) -> AsyncIterator[Event]:
        return self.fanout.follow(run_id, after, self.read)

    def subscribe_batches(self, run_id: str, *, after: int = 0) -> AsyncIterator[list[Event]]:
        return self.fanout.follow_batches(run_id, after, self.read)

    async def save_checkpoint(self, run_id: str, step: int, state: dict[str, Any]) -> None:
        # incremental, as the other stores (`app.runs.checkpoints`): JSON kept per message
        write = self._deltas.plan(run_id, state)
        _, _, chunks = self._checkpoints.get(run_id, (0, "", []))
        if not write.start:
            chunks = []
        if write.chunk is not None:
            chunks.append(write.chunk)
        self._checkpoints[run_id] = (step, write.state, chunks)

    async def load_checkpoint(self, run_id: str) -> dict[str, Any] | None:
        stored = self._checkpoints.get(run_id)
        if stored is None:
            return None
        step, saved, chunks = stored
        return {"step": step, "state": assemble(json.loads(saved), chunks)}

    async def thread_head(self, owner: str | None, thread_id: str) -> str | None:
        run_id = self._threads.get((owner, thread_id))
        return run_id if run_id in self._runs else None  # forgotten with its run

    async def set_thread_head(self, owner: str | None, thread_id: str, run_id: str) -> None:
        self._threads[(owner, thread_id)] = run_id
