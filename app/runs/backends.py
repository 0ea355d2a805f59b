"""Which store a URL names: the one place that knows every backend."""

from __future__ import annotations

from app.runs.memory import MemoryRunStore
from app.runs.sqlite import SqliteRunStore
from app.runs.store import RunStore, UnsupportedStoreError


def open_store(url: str, *, retention_s: float | None = None) -> RunStore:
    """A store for `sqlite:///path/to/file.db`, `memory://` or `redis://HOST:PORT/DB`
    (`rediss://` for TLS). `retention_s`: how long Redis keeps a terminal run (default 7 days)."""
    if url.startswith("memory://"):
        return MemoryRunStore()
    if url.startswith("sqlite://"):
        path = url.removeprefix("sqlite://")
        return SqliteRunStore(path[1:] if path.startswith("/") else path)
    if url.startswith(("redis://", "rediss://")):
        from app.runs.redis_store import DEFAULT_RETENTION_S, RedisRunStore

        return RedisRunStore(url, retention_s=retention_s or DEFAULT_RETENTION_S)
    raise UnsupportedStoreError(
        f"unsupported store URL {url!r}: use sqlite:///path, redis://host:port/db or memory://"
    )
