"""`finishline store copy FROM TO` (DESIGN §18): every run of one store copied into another —
its record, its events, its checkpoint, and its owner's threads and usage — resumable and
verified, never overwriting a different run of the same id.

A run is read through the `RunStore` protocol, whatever the source. Into Postgres it is
written in one transaction (its row, every event with its own timestamp, its checkpoint):
copied whole or not at all. Into another store it goes through the protocol (create, the
events appended in order, the record, the checkpoint); the events' timestamps are then
those of the copy. Either way:
- a run the target has already is compared: the same record and the same events (by hash)
  is a run copied before (skipped: a copy stopped midway goes on where it was); the same run
  with fewer events (a copy through the protocol cut short) is finished; anything else is a
  conflict, reported and left as it is;
- each run copied is read back and checked: its event count and the hash of its events
  (seq, type, step and data) equal the source's.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from app.runs.errors import RunUnreadableError
from app.runs.records import Event, RunRecord
from app.runs.store import RunStore
from app.runs.stores.events import encode

PAGE = 200


@dataclass
class CopyReport:
    total: int = 0
    copied: int = 0
    skipped: int = 0
    """Already in the target, the same run (a copy made before, or resumed)."""
    conflicts: list[str] = field(default_factory=list)
    """Ids the target holds a different run under: left as they are."""
    unreadable: list[str] = field(default_factory=list)
    mismatched: list[str] = field(default_factory=list)
    """Copied, but not read back the same: the copy is not to be trusted."""
    threads: int = 0

    @property
    def ok(self) -> bool:
        return not (self.conflicts or self.mismatched or self.unreadable)


def events_digest(events: list[Event]) -> str:
    """What a copy must keep of a log: every event's seq, type, step and data, in order."""
    digest = hashlib.sha256()
    for event in events:
        digest.update(encode({"s": event.seq, "t": event.type, "p": event.step}).encode())
        digest.update(json.dumps(event.data, sort_keys=True).encode())
    return digest.hexdigest()


async def all_events(store: RunStore, run_id: str) -> list[Event]:
    events: list[Event] = []
    while True:
        page = await store.read(run_id, after=events[-1].seq if events else 0, limit=1000)
        events += page
        if len(page) < 1000:
            return events


async def run_ids(store: RunStore, unreadable: list[str]) -> list[str]:
    """Every run of the store, oldest first."""
    ids: list[str] = []
    cursor: str | None = None
    while True:
        bad: list[RunUnreadableError] = []
        page = await store.list_runs(
            owner=None, any_owner=True, limit=PAGE, before_id=cursor, unreadable=bad
        )
        ids += [run.id for run in page]
        unreadable += [error.run_id for error in bad]
        if len(page) < PAGE:
            return list(reversed(ids))
        cursor = page[-1].id


async def copy_store(
    source: RunStore,
    target: RunStore,
    *,
    progress: Callable[[int, int], None] | None = None,
) -> CopyReport:
    report = CopyReport()
    ids = await run_ids(source, report.unreadable)
    report.total = len(ids)
    owners: set[str | None] = set()
    for done, run_id in enumerate(ids, 1):
        record = await source.get(run_id)
        if record is not None:
            owners.add(record.owner)
            await _copy_run(source, target, record, report)
        if progress is not None:
            progress(done, report.total)
    for owner in owners:
        report.threads += await _copy_threads(source, target, owner)
    return report


async def _copy_run(
    source: RunStore, target: RunStore, record: RunRecord, report: CopyReport
) -> None:
    events = await all_events(source, record.id)
    checkpoint = await source.load_checkpoint(record.id)
    there = await target.get(record.id)
    copied: list[Event] = []
    if there is not None:
        copied = await all_events(target, record.id)
        same_run = (there.created_at, there.owner, there.request) == (
            record.created_at,
            record.owner,
            record.request,
        )
        prefix = events_digest(copied) == events_digest(events[: len(copied)])
        if not same_run or not prefix:
            report.conflicts.append(record.id)
            return
        if there == record and len(copied) == len(events):
            report.skipped += 1
            return
    raw = getattr(target, "import_run", None)
    if there is None and raw is not None:
        await raw(record, events, checkpoint)
    else:
        if there is None:
            await target.create(record)
        for event in events[len(copied) :]:
            await target.append(record.id, event.type, event.step, event.data)
        await target.save(record)
        if checkpoint is not None:
            await target.save_checkpoint(record.id, checkpoint.step, checkpoint.state)
    back = await all_events(target, record.id)
    if events_digest(back) != events_digest(events) or await target.get(record.id) != record:
        report.mismatched.append(record.id)
        return
    report.copied += 1


async def _copy_threads(source: RunStore, target: RunStore, owner: str | None) -> int:
    """The owner's threads the target does not have, made there with their runs in order."""
    count = 0
    before: Any = None
    while True:
        page = await source.threads.threads(owner, limit=PAGE, before=before)
        for entry in page:
            if await target.threads.thread(owner, entry.thread_id) is None:
                runs = await source.threads.thread_runs(owner, entry.thread_id, limit=10_000)
                head: str | None = None
                for run_id in runs:
                    at = entry.created_at if head is None else entry.updated_at
                    await target.threads.advance(
                        owner, entry.thread_id, expected=head, run_id=run_id, at=at
                    )
                    head = run_id
                if entry.metadata:
                    await target.threads.set_metadata(
                        owner, entry.thread_id, entry.metadata, at=entry.updated_at
                    )
                count += 1
        if len(page) < PAGE:
            return count
        before = (page[-1].updated_at, page[-1].thread_id)
