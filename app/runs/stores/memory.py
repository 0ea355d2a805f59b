"""`memory://`: everything in this process, gone at exit. For tests and throwaway servers.

A run is kept as the other stores keep it: its record's JSON, beside the fields a lookup
filters on (a row). So what a run's record cannot be written as, or read back from, fails
here as it would in SQLite or Redis, and a copy handed out is never the stored one."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Awaitable, Sequence
from dataclasses import dataclass
from typing import Any

from app.engine.events import EventType
from app.runs.errors import RunUnreadableError
from app.runs.records import Event, RunRecord, RunStatus
from app.runs.reports.groups import GroupBy, ReportBuilder
from app.runs.reports.summaries import RunFilter, RunSummary, summarize, tally_of
from app.runs.store import (
    CHECKPOINT_FORMAT,
    Checkpoint,
    DayUsage,
    DuplicateRunError,
    FirstEvent,
    StoreError,
    WritesAtOnce,
    read_record,
    settled,
)
from app.runs.stores.checkpoints import CheckpointDeltas, loaded
from app.runs.stores.events import encode, stored
from app.runs.stores.fanout import Fanout
from app.runs.stores.memory_schedules import MemorySchedules
from app.runs.stores.memory_thread_index import MemoryThreadIndex


@dataclass(frozen=True, slots=True)
class _Row:
    """A stored run: what lookups filter on, and its record as JSON."""

    owner: str | None
    status: RunStatus
    idempotency_key: str | None
    previous_run_id: str | None
    parent_run_id: str | None
    record: str

    @classmethod
    def of(cls, record: RunRecord) -> _Row:
        return cls(
            record.owner,
            record.status,
            record.idempotency_key,
            record.previous_run_id,
            record.parent_run_id,
            record.model_dump_json(),
        )

    def read(self, run_id: str) -> RunRecord:
        return read_record(run_id, self.record, owner=self.owner)


WAITING_OR_ACTIVE = frozenset({RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.REQUIRES_ACTION})


class MemoryCounters:
    """`UsageCounters` in this process: a dict per day, a list of admissions per key."""

    def __init__(self, runs: dict[str, _Row]) -> None:
        self._runs = runs
        self._days: dict[tuple[str | None, str], DayUsage] = {}
        self._admissions: dict[str | None, dict[str, float]] = {}

    async def day_usage(self, owner: str | None, day: str) -> DayUsage:
        return self._days.get((owner, day), DayUsage())

    async def add_usage(self, owner: str | None, day: str, usage: DayUsage) -> Awaitable[None]:
        self._days[(owner, day)] = self._days.get((owner, day), DayUsage()) + usage
        return settled(None)

    async def admitted(self, owner: str | None, ticket: str, at: float) -> Awaitable[None]:
        notes = self._admissions.setdefault(owner, {})
        for old in [t for t, when in notes.items() if when <= at - 60]:
            del notes[old]
        notes[ticket] = at
        return settled(None)

    async def unadmitted(self, owner: str | None, ticket: str) -> Awaitable[None]:
        self._admissions.get(owner, {}).pop(ticket, None)
        return settled(None)

    async def admissions_since(self, owner: str | None, since: float) -> list[float]:
        return sorted(at for at in self._admissions.get(owner, {}).values() if at > since)

    async def active_runs(self, owner: str | None) -> int:
        runs = self._runs.values()
        return sum(1 for r in runs if r.owner == owner and r.status in WAITING_OR_ACTIVE)


class MemoryRunStore(WritesAtOnce):
    def __init__(self) -> None:
        self._runs: dict[str, _Row] = {}
        self.counters = MemoryCounters(self._runs)
        self._events: dict[str, list[Event]] = {}
        self._checkpoints: dict[str, tuple[int, str, list[str]]] = {}  # step, state, chunks
        self.threads = MemoryThreadIndex()
        self.schedules = MemorySchedules()
        self._trees: dict[str, set[str]] = {}
        self._summaries: dict[str, RunSummary] = {}
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
        row = _Row.of(record)
        if record.id in self._runs:
            raise DuplicateRunError(record.id)
        if record.idempotency_key is not None and self._keyed(record.owner, record.idempotency_key):
            raise DuplicateRunError(record.idempotency_key)
        self._runs[record.id] = row
        self._events[record.id] = []
        self._summarize(record)
        return await self.append(record.id, *first_event) if first_event is not None else None

    async def save(self, record: RunRecord) -> None:
        self._runs[record.id] = _Row.of(record)
        self._summarize(record)

    def _summarize(self, record: RunRecord) -> None:
        """A terminal record's summary, with it (its events are all here: tallied now)."""
        if record.status.terminal:
            events = ((e.type, e.data) for e in self._events.get(record.id, ()))
            self._summaries[record.id] = summarize(record, tally_of(events))

    async def get(self, run_id: str) -> RunRecord | None:
        row = self._runs.get(run_id)
        return row.read(run_id) if row is not None else None

    async def find_by_idempotency_key(self, owner: str | None, key: str) -> RunRecord | None:
        run_id = self._keyed(owner, key)
        return self._runs[run_id].read(run_id) if run_id is not None else None

    def _keyed(self, owner: str | None, key: str) -> str | None:
        for run_id, row in self._runs.items():
            if row.owner == owner and row.idempotency_key == key:
                return run_id
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
        unreadable: list[RunUnreadableError] | None = None,
        parent_run_id: str | None = None,
        matching: RunFilter | None = None,
    ) -> list[RunRecord]:
        chosen = sorted(
            (
                run_id
                for run_id, r in self._runs.items()
                if (any_owner or r.owner == owner)
                and (not statuses or r.status in statuses)
                and (before_id is None or run_id < before_id)
                and (previous_run_id is None or r.previous_run_id == previous_run_id)
                and (parent_run_id is None or r.parent_run_id == parent_run_id)
            ),
            reverse=True,
        )
        found: list[RunRecord] = []
        for run_id in chosen:
            if len(found) == limit:
                break
            try:
                record = self._runs[run_id].read(run_id)
            except RunUnreadableError as exc:
                if unreadable is not None:
                    unreadable.append(exc)
                continue
            if matching is None or matching.admits_record(record):
                found.append(record)
        return found

    async def termination_report(
        self, *, owner: str | None, any_owner: bool, matching: RunFilter, group_by: GroupBy
    ) -> list[dict[str, Any]]:
        report = ReportBuilder(group_by)
        for s in self._summaries.values():
            if (any_owner or s.owner == owner) and matching.admits(s.created_at, s.model, s.agent):
                report.add_summary(s)
        return report.groups()

    async def unsummarized(
        self, limit: int, *, after: str | None = None
    ) -> list[tuple[str, RunRecord | None]]:
        ended = sorted(
            i
            for i, r in self._runs.items()
            if r.status.terminal and i not in self._summaries and i > (after or "")
        )
        return [(i, self._runs[i].read(i)) for i in ended[:limit]]

    async def save_summary(self, summary: RunSummary) -> None:
        if summary.run_id in self._runs:
            self._summaries[summary.run_id] = summary

    def forget_summary(self, run_id: str) -> None:
        """For tests of the backfill: the run as stored before summaries were kept."""
        self._summaries.pop(run_id, None)

    async def delete(self, run_id: str) -> None:
        self._runs.pop(run_id, None)
        self._events.pop(run_id, None)
        self._checkpoints.pop(run_id, None)
        self._trees.pop(run_id, None)
        self._summaries.pop(run_id, None)
        self._deltas.forget(run_id)

    async def add_tree_run(self, root_run_id: str, member: str, cap: int) -> bool:
        members = self._trees.setdefault(root_run_id, set())
        if member not in members and len(members) >= cap:
            return False
        members.add(member)
        return True

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
        # a JSON snapshot, as the other stores keep it (`stores.events`)
        event = stored(run_id, len(log) + 1, type, time.time(), step, encode(data))
        log.append(event)
        self._deltas.appended(run_id, type)
        self.fanout.publish(event)
        return event

    async def append_soon(
        self,
        run_id: str,
        type: EventType,
        step: int,
        data: dict[str, Any],
        *,
        record: RunRecord | None = None,
    ) -> Awaitable[Event]:
        return settled(await self.append(run_id, type, step, data, record=record))

    async def read(self, run_id: str, *, after: int = 0, limit: int = 1000) -> list[Event]:
        return self._events.get(run_id, [])[after : after + limit]

    def subscribe(self, run_id: str, *, after: int = 0) -> AsyncIterator[Event]:
        return self.fanout.follow(run_id, after, self.read)

    def subscribe_batches(self, run_id: str, *, after: int = 0) -> AsyncIterator[list[Event]]:
        return self.fanout.follow_batches(run_id, after, self.read)

    async def save_checkpoint(self, run_id: str, step: int, state: dict[str, Any]) -> None:
        # incremental, as the other stores (`stores.checkpoints`): JSON kept per message
        with self._deltas.writing(run_id, state) as write:
            _, _, chunks = self._checkpoints.get(run_id, (0, "", []))
            if not write.start:
                chunks = []
            if write.chunk is not None:
                chunks.append(write.chunk)
            self._checkpoints[run_id] = (step, write.state, chunks)

    async def save_checkpoint_soon(
        self, run_id: str, step: int, state: dict[str, Any]
    ) -> Awaitable[None]:
        await self.save_checkpoint(run_id, step, state)  # made at once, not queued
        return settled(None)

    async def load_checkpoint(self, run_id: str) -> Checkpoint | None:
        found = self._checkpoints.get(run_id)
        if found is None:
            return None
        step, saved, chunks = found
        return loaded(step, json.loads(saved), chunks, CHECKPOINT_FORMAT)
