"""Which store a URL names: the one place that knows every backend."""

from __future__ import annotations

from app.runs.memory import MemoryRunStore
from app.runs.sqlite import SqliteRunStore
from app.runs.store import RunStore, UnsupportedStoreError


def open_store(url: str) -> RunStore:
    """A store for `sqlite:///path/to/file.db` or `memory://`."""
    if url.startswith("memory://"):
        return MemoryRunStore()
    if url.startswith("sqlite://"):
        path = url.removeprefix("sqlite://")
        return SqliteRunStore(path[1:] if path.startswith("/") else path)
    raise UnsupportedStoreError(f"unsupported store URL {url!r}: use sqlite:///path or memory://")
