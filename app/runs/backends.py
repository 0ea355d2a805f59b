"""Which store a URL names (`open_store`) and the backend made of it (`open_backend`): the
one place that knows every store, and where the one-process / replica choice is made, once.
A backend is the store and the sides of every seam that differs between one process and
many replicas (DESIGN §8): where runs wait and execute (`Placement`), where steering messages
are kept (`Inbox`), where runs waiting for a person are (`WaitingRuns`), and how each API
key's quotas are checked and counted (`Quotas`, DESIGN §13). Nothing
downstream asks which side it has."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from app.runs.inbox import Inbox, LocalInbox
from app.runs.live import LiveRuns
from app.runs.metrics import RunMetrics
from app.runs.placement import LocalPlacement, Placement
from app.runs.quotas.local import LocalQuotas
from app.runs.quotas.seam import QuotaLimits, Quotas
from app.runs.store import RunStore, UnsupportedStoreError
from app.runs.stores.memory import MemoryRunStore
from app.runs.stores.sqlite import SqliteRunStore
from app.runs.waiting import LocalWaitingRuns, WaitingRuns

if TYPE_CHECKING:
    from app.runs.stores.postgres import PostgresRunStore
    from app.runs.stores.redis_store import RedisRunStore


@dataclass(frozen=True, slots=True)
class Capacity:
    """How many runs one process executes at once, how many may queue (one process: here;
    replicas: in the cluster's queue), and how many steering messages a run may hold."""

    max_concurrent_runs: int
    max_queued_runs: int
    max_pending_messages: int = 100


@dataclass(frozen=True, slots=True)
class ReplicaOptions:
    """This process among the replicas of a shared store."""

    name: str
    lease_s: float = 15.0
    max_attempts: int = 3
    """Takeovers of one run before it fails `interrupted`."""


@dataclass(frozen=True, slots=True)
class Backend:
    store: RunStore
    live: LiveRuns
    """The runs this process holds: shared by the placement, the inbox and the manager."""
    placement: Placement
    inbox: Inbox
    waiting: WaitingRuns
    quotas: Quotas


def open_store(
    url: str,
    *,
    retention_s: float | None = None,
    pg_schema: str = "finishline",
    pg_pool_size: int = 10,
) -> RunStore:
    """A store for `sqlite:///path/to/file.db`, `memory://`, `redis://HOST:PORT/DB`
    (`rediss://` for TLS) or `postgresql://USER:PASSWORD@HOST:PORT/DB` (`postgres://`).
    `retention_s`: how long Redis or Postgres keeps a terminal run (Redis: default 7 days;
    Postgres: 0 or None, for good); `pg_schema`, `pg_pool_size`: Postgres's schema and pool."""
    if url.startswith("memory://"):
        return MemoryRunStore()
    if url.startswith("sqlite://"):
        path = url.removeprefix("sqlite://")
        return SqliteRunStore(path[1:] if path.startswith("/") else path)
    if url.startswith(("redis://", "rediss://")):
        from app.runs.stores.redis_store import DEFAULT_RETENTION_S, RedisRunStore

        if retention_s == 0:  # Redis keeps what it holds in RAM: never for good
            raise UnsupportedStoreError(
                "FINISHLINE_RETENTION_S=0 (keep runs for good) is for the Postgres store;"
                " the Redis store needs a retention"
            )
        return RedisRunStore(url, retention_s=retention_s or DEFAULT_RETENTION_S)
    if url.startswith(("postgresql://", "postgres://")):
        from app.runs.stores.postgres import PostgresRunStore

        return PostgresRunStore(
            url, schema=pg_schema, pool_size=pg_pool_size, retention_s=retention_s or 0.0
        )
    raise UnsupportedStoreError(
        f"unsupported store URL {url!r}: use sqlite:///path, redis://host:port/db,"
        " postgresql://user:password@host:port/db or memory://"
    )


def open_backend(
    store: RunStore,
    *,
    capacity: Capacity,
    metrics: RunMetrics,
    replica: ReplicaOptions,
    quotas: QuotaLimits | None = None,
) -> Backend:
    """The sides of the seams for `store` (from `open_store`): this process's own for a
    one-process store (memory, SQLite), the cluster's for the ones replicas share (Redis,
    Postgres)."""
    live = LiveRuns(capacity.max_concurrent_runs)
    limits = quotas or QuotaLimits()
    postgres = postgres_store_of(store)
    if postgres is not None:
        return _postgres_backend(postgres, live, capacity, metrics, replica, limits)
    shared = redis_store_of(store)
    if shared is None:
        placement = LocalPlacement(
            store=store, live=live, metrics=metrics, max_queued=capacity.max_queued_runs
        )
        waiting = LocalWaitingRuns(store, placement.requeue)
        inbox = LocalInbox(live=live, waiting=waiting, max_pending=capacity.max_pending_messages)
        return Backend(store, live, placement, inbox, waiting, LocalQuotas(store, limits))
    from app.runs.replicas.placement import ReplicaPlacement
    from app.runs.replicas.redis_cluster import RedisCoordinator
    from app.runs.replicas.redis_messages import RedisInbox
    from app.runs.replicas.redis_quotas import RedisQuotas
    from app.runs.replicas.redis_waiting import RedisWaitingRuns

    coordinator = RedisCoordinator(
        shared, replica=replica.name, lease_s=replica.lease_s, max_attempts=replica.max_attempts
    )
    return Backend(
        shared,
        live,
        ReplicaPlacement(
            store=shared,
            coordinator=coordinator,
            live=live,
            metrics=metrics,
            max_queued=capacity.max_queued_runs,
        ),
        RedisInbox(shared, live=live, max_pending=capacity.max_pending_messages),
        RedisWaitingRuns(shared, queue_key=coordinator.queue_key),
        RedisQuotas(shared, limits),
    )


def _postgres_backend(
    store: PostgresRunStore,
    live: LiveRuns,
    capacity: Capacity,
    metrics: RunMetrics,
    replica: ReplicaOptions,
    limits: QuotaLimits,
) -> Backend:
    """Every seam's Postgres side (DESIGN §18): Postgres alone is the whole backend."""
    from app.runs.replicas.placement import ReplicaPlacement
    from app.runs.replicas.postgres_cluster import PostgresCoordinator
    from app.runs.replicas.postgres_messages import PostgresInbox
    from app.runs.replicas.postgres_quotas import PostgresQuotas
    from app.runs.replicas.postgres_waiting import PostgresWaitingRuns

    coordinator = PostgresCoordinator(
        store, replica=replica.name, lease_s=replica.lease_s, max_attempts=replica.max_attempts
    )
    return Backend(
        store,
        live,
        ReplicaPlacement(
            store=store,
            coordinator=coordinator,
            live=live,
            metrics=metrics,
            max_queued=capacity.max_queued_runs,
        ),
        PostgresInbox(store, live=live, max_pending=capacity.max_pending_messages),
        PostgresWaitingRuns(store),
        PostgresQuotas(store, limits),
    )


def postgres_store_of(store: RunStore) -> PostgresRunStore | None:
    """`store` when it is the Postgres store, else None, without importing psycopg for the
    others (as `redis_store_of`)."""
    module = sys.modules.get("app.runs.stores.postgres")
    if module is None or not isinstance(store, module.PostgresRunStore):
        return None
    return cast("PostgresRunStore", store)


def redis_store_of(store: RunStore) -> RedisRunStore | None:
    """`store` when it is the Redis store (the one replicas share), else None, without
    importing the Redis client for the others: a Redis store exists only once its module
    was imported (by `open_store`)."""
    module = sys.modules.get("app.runs.stores.redis_store")
    if module is None or not isinstance(store, module.RedisRunStore):
        return None
    return cast("RedisRunStore", store)
