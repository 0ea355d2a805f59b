"""Which store a URL names: the one place that knows every backend (and, for the one
replicas share, its parts for waiting runs and steering messages)."""

from __future__ import annotations

from app.runs.cluster import redis_store_of
from app.runs.inbox import SharedInbox
from app.runs.memory import MemoryRunStore
from app.runs.sqlite import SqliteRunStore
from app.runs.store import RunStore, UnsupportedStoreError
from app.runs.waiting import WaitingRuns


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


def shared_parts(
    store: RunStore, *, max_pending_messages: int
) -> tuple[WaitingRuns | None, SharedInbox | None]:
    """For a store several replicas share (Redis): where its waiting runs and its runs'
    steering messages live; (None, None) for a one-process store (the manager's own)."""
    shared = redis_store_of(store)
    if shared is None:
        return None, None
    from app.runs.redis_messages import RedisInbox
    from app.runs.redis_waiting import RedisWaitingRuns

    waiting = RedisWaitingRuns(shared, queue_key=shared.prefix + "queue")
    return waiting, RedisInbox(shared, max_pending=max_pending_messages)
