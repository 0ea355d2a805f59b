"""`ThreadIndex` in this process (`MemoryRunStore.threads`): a dict of threads, each with its
list of runs. Every method runs without an await inside, so each is atomic on the loop."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from app.runs.threads.index import ThreadCursor, ThreadEntry

Key = tuple[str | None, str]


class MemoryThreadIndex:
    def __init__(self) -> None:
        self._threads: dict[Key, ThreadEntry] = {}
        self._runs: dict[Key, list[str]] = {}

    async def thread(self, owner: str | None, thread_id: str) -> ThreadEntry | None:
        found = self._threads.get((owner, thread_id))
        return copy.deepcopy(found) if found is not None else None

    async def advance(
        self, owner: str | None, thread_id: str, *, expected: str | None, run_id: str, at: float
    ) -> bool:
        key = (owner, thread_id)
        found = self._threads.get(key)
        if found is None:
            if expected is not None:
                return False
            self._threads[key] = ThreadEntry(thread_id, owner, run_id, at, at, {}, 1)
            self._runs[key] = [run_id]
            return True
        if expected is None or found.head != expected:
            return False
        self._threads[key] = dataclasses.replace(
            found, head=run_id, updated_at=at, runs=found.runs + 1
        )
        self._runs[key].append(run_id)
        return True

    async def threads(
        self, owner: str | None, *, limit: int, before: ThreadCursor | None = None
    ) -> list[ThreadEntry]:
        mine = [t for (o, _), t in self._threads.items() if o == owner]
        mine.sort(key=lambda t: (t.updated_at, t.thread_id), reverse=True)
        if before is not None:
            mine = [t for t in mine if (t.updated_at, t.thread_id) < before]
        return copy.deepcopy(mine[:limit])

    async def thread_runs(
        self, owner: str | None, thread_id: str, *, start: int = 0, limit: int = 100
    ) -> list[str]:
        return list(self._runs.get((owner, thread_id), [])[start : start + limit])

    async def set_metadata(
        self, owner: str | None, thread_id: str, metadata: dict[str, Any], *, at: float
    ) -> ThreadEntry | None:
        key = (owner, thread_id)
        found = self._threads.get(key)
        if found is None:
            return None
        changed = dataclasses.replace(found, metadata=copy.deepcopy(metadata), updated_at=at)
        self._threads[key] = changed
        return copy.deepcopy(changed)

    async def remove(self, owner: str | None, thread_id: str, *, expected: str | None) -> bool:
        key = (owner, thread_id)
        found = self._threads.get(key)
        if found is None or found.head != expected:
            return False
        del self._threads[key]
        self._runs.pop(key, None)
        return True
