"""Postgres's errors, translated at the store's boundary, as Redis's are (`redis_errors`).

A Postgres that is away (stopped, restarting, failing over, every connection terminated,
the pool out of connections for `POOL_TIMEOUT_S`) or that refuses writes for now (a
read-only standby, a disk full) is weather: a request that needs it is refused with
`StoreUnavailableError` (503 `store_unavailable`, `Retry-After`), a run executing here is
given up to the takeover, and the background loops wait it out. Any other error (a
constraint, a syntax error) is a bug or a conflict, and stays what it is.
"""

from __future__ import annotations

import psycopg
from psycopg import errors as pg_errors
from psycopg_pool import PoolTimeout

from app.runs.errors import StoreUnavailableError

RETRY_AFTER_S = 2
RETRY_S = 0.5
"""How long a background loop waits after Postgres failed it, before it tries again."""

_WEATHER = (
    psycopg.OperationalError,  # connection lost, terminated (AdminShutdown), refused
    psycopg.InterfaceError,  # the connection is closed
    PoolTimeout,
    pg_errors.ReadOnlySqlTransaction,  # a standby, or default_transaction_read_only
    pg_errors.DiskFull,
    pg_errors.InsufficientResources,
    pg_errors.CannotConnectNow,
)


def is_outage(exc: BaseException) -> bool:
    return isinstance(exc, (*_WEATHER, StoreUnavailableError))


def outage(message: str) -> StoreUnavailableError:
    return StoreUnavailableError(message, retry_after_s=RETRY_AFTER_S)


def cause(exc: BaseException) -> str:
    """What is wrong, for /readyz and the logs (never a password: psycopg's messages name
    the host and port only)."""
    if isinstance(exc, PoolTimeout):
        return "Postgres does not answer: no connection could be had from the pool in time"
    if isinstance(exc, pg_errors.ReadOnlySqlTransaction):
        return "Postgres is read-only (a standby, or default_transaction_read_only)"
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return f"Postgres does not answer: {text}"
