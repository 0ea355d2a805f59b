"""Writing a run's stored record by hand, as an operator, a broken earlier version or a disk
would: what `RunStore.get` then meets is text no write of ours produces.

    await write_raw_record(store, run_id, '{"id": ...}')   # memory, SQLite, Redis or Postgres
    poisoned(record_json)                                   # the record of issue 30
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sqlite3

from app.runs.store import RunStore
from app.runs.stores.memory import MemoryRunStore
from app.runs.stores.postgres import PostgresRunStore
from app.runs.stores.redis_store import RedisRunStore
from app.runs.stores.sqlite import SqliteRunStore

TOO_BIG = 10**19
"""Past 64 bits: what `"max_total_tokens": 1e19` was stored as before it was refused."""


def poisoned(record_json: str) -> str:
    """The record with its request's max_total_tokens past 64 bits: valid JSON, refused on
    read (the request's values must be representable)."""
    record = json.loads(record_json)
    record["request"].setdefault("settings", {})["max_total_tokens"] = TOO_BIG
    return json.dumps(record)


async def raw_record(store: RunStore, run_id: str) -> str:
    """The record's stored text."""
    if isinstance(store, MemoryRunStore):
        return store._runs[run_id].record
    if isinstance(store, SqliteRunStore):
        with contextlib.closing(sqlite3.connect(store.path)) as conn:
            (text,) = conn.execute("SELECT record FROM runs WHERE id = ?", (run_id,)).fetchone()
        return str(text)
    if isinstance(store, PostgresRunStore):
        rows = await store.query("SELECT record FROM runs WHERE id = %s", (run_id,))
        return str(rows[0][0])
    assert isinstance(store, RedisRunStore), store
    return str(await store.redis.hget(f"{store.prefix}run:{run_id}", "record"))


async def write_raw_record(store: RunStore, run_id: str, text: str) -> None:
    """Replace the run's stored record with `text`, leaving what the store indexes as it is."""
    if isinstance(store, MemoryRunStore):
        store._runs[run_id] = dataclasses.replace(store._runs[run_id], record=text)
    elif isinstance(store, SqliteRunStore):
        with contextlib.closing(sqlite3.connect(store.path)) as conn, conn:
            conn.execute("UPDATE runs SET record = ? WHERE id = ?", (text, run_id))
    elif isinstance(store, PostgresRunStore):
        sql = "UPDATE runs SET record = %s WHERE id = %s"
        await store.with_connection(lambda conn: conn.execute(sql, (text, run_id)))
    else:
        assert isinstance(store, RedisRunStore), store
        await store.redis.hset(f"{store.prefix}run:{run_id}", "record", text)
