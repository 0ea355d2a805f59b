"""The connection pool of `PostgresRunStore`: autocommit connections to its schema, a
connection idle a while checked before it is handed out, and the backend pid of each noted
(`own`: the follower rings no bell for the notifications of this process's own writes)."""

from __future__ import annotations

import time
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

POOL_TIMEOUT_S = 5.0
"""A request that cannot have a connection this long is refused 503 `store_unavailable`."""
CHECK_IDLE_S = 2.0
"""A connection idle longer than this is checked (one round trip) before it is handed out."""
IDLE_TX = "-c idle_in_transaction_session_timeout=5s"
"""A session idle in a transaction 5 s is ended: a frozen replica's row locks go with it."""


def make_pool(url: str, schema: str, size: int, own: set[int]) -> AsyncConnectionPool[Any]:
    """Up to `size` connections; `own` is given the backend pid of each (a few of closed
    ones too, at most: a notification of theirs wakes no reader, one that polls finds it)."""
    returned: dict[int, float] = {}  # id(connection) -> when it was given back

    async def check(conn: psycopg.AsyncConnection[Any]) -> None:
        """Checked before use when idle a while: a dead one is replaced by the pool."""
        if time.monotonic() - returned.get(id(conn), 0.0) > CHECK_IDLE_S:
            await AsyncConnectionPool.check_connection(conn)

    async def note_returned(conn: psycopg.AsyncConnection[Any]) -> None:
        returned[id(conn)] = time.monotonic()
        if len(returned) > 4 * (size + 1):  # ids of closed ones
            returned.clear()
        if len(own) > 4 * (size + 1):
            own.clear()
        own.add(conn.info.backend_pid)

    async def configure(conn: psycopg.AsyncConnection[Any]) -> None:
        own.add(conn.info.backend_pid)

    return AsyncConnectionPool(
        url,
        min_size=1,
        max_size=size,
        open=False,
        timeout=POOL_TIMEOUT_S,
        kwargs={
            "autocommit": True,
            "options": f"-c search_path={schema} {IDLE_TX}",
            "connect_timeout": 5,
        },
        configure=configure,
        check=check,
        reset=note_returned,
        name="finishline",
    )
