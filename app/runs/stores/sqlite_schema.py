"""The SQLite schema of `SqliteRunStore`, its migrations, and how connections are opened.

`PRAGMA user_version` holds the schema version: `MIGRATIONS[n]` takes a database from
version n to n + 1, and `prepare_writer` applies the missing ones in one transaction.
A database newer than this code is refused rather than guessed at.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from app.runs.store import StoreError

MIGRATIONS = (
    # 1: runs (the RunRecord as JSON, plus the columns indexes need), events, checkpoints.
    # An idempotency key is unique per owner; runs without an owner share one namespace,
    # apart from every owner's (two partial indexes, as NULLs never collide in one).
    """
    CREATE TABLE runs (
        id TEXT PRIMARY KEY,
        owner TEXT,
        status TEXT NOT NULL,
        idempotency_key TEXT,
        created_at TEXT NOT NULL,
        record TEXT NOT NULL
    );
    CREATE UNIQUE INDEX runs_owner_key ON runs (owner, idempotency_key)
        WHERE idempotency_key IS NOT NULL AND owner IS NOT NULL;
    CREATE UNIQUE INDEX runs_anonymous_key ON runs (idempotency_key)
        WHERE idempotency_key IS NOT NULL AND owner IS NULL;
    CREATE INDEX runs_by_owner ON runs (owner, id);
    CREATE INDEX runs_by_status ON runs (status, id);
    CREATE TABLE events (
        run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        seq INTEGER NOT NULL,
        type TEXT NOT NULL,
        ts REAL NOT NULL,
        step INTEGER NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (run_id, seq)
    ) WITHOUT ROWID;
    CREATE TABLE checkpoints (
        run_id TEXT PRIMARY KEY REFERENCES runs (id) ON DELETE CASCADE,
        step INTEGER NOT NULL,
        state TEXT NOT NULL
    );
    """,
    # 2: follow-up runs name the run they continue; GET /runs?previous_run_id= lists them
    """
    ALTER TABLE runs ADD COLUMN previous_run_id TEXT;
    CREATE INDEX runs_by_previous ON runs (previous_run_id, id)
        WHERE previous_run_id IS NOT NULL;
    """,
    # 3: incremental checkpoints (`app.runs.stores.checkpoints`): a checkpoint's messages in chunks
    # by the index of their first message, its `state` holding their count; older
    # checkpoints keep theirs in `state`
    """
    CREATE TABLE checkpoint_chunks (
        run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        start INTEGER NOT NULL,
        messages TEXT NOT NULL,
        PRIMARY KEY (run_id, start)
    ) WITHOUT ROWID;
    """,
    # 4: a checkpoint names its layout (`app.runs.store.CHECKPOINT_FORMAT`); NULL for one
    # stored before, whose layout its `state` tells
    """
    ALTER TABLE checkpoints ADD COLUMN version INTEGER;
    """,
    # 5: conversation threads (AG-UI's threadId, DESIGN §16): the run each owner's thread is at,
    # forgotten with that run. `owner` is '' for runs without one (owners are hex digests).
    """
    CREATE TABLE threads (
        owner TEXT NOT NULL,
        thread_id TEXT NOT NULL,
        run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        PRIMARY KEY (owner, thread_id)
    ) WITHOUT ROWID;
    CREATE INDEX threads_by_run ON threads (run_id);
    """,
    # 6: sub-agents (DESIGN §15): a child run names its parent, GET /runs?parent_run_id= lists
    # them; the members of each tree of runs, counted against FINISHLINE_MAX_AGENT_RUNS,
    # forgotten with the tree's root
    """
    ALTER TABLE runs ADD COLUMN parent_run_id TEXT;
    CREATE INDEX runs_by_parent ON runs (parent_run_id, id) WHERE parent_run_id IS NOT NULL;
    CREATE TABLE tree_runs (
        root_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        member TEXT NOT NULL,
        PRIMARY KEY (root_id, member)
    ) WITHOUT ROWID;
    """,
    # 7: quotas per API key (DESIGN §13; `sqlite_counters`): what each key used by UTC day,
    # when its runs of the last minute were admitted, and an index to count its unended runs.
    # `owner` is '' for runs without one, as in `threads`.
    """
    CREATE TABLE key_days (
        owner TEXT NOT NULL,
        day TEXT NOT NULL,
        runs INTEGER NOT NULL DEFAULT 0,
        llm_calls INTEGER NOT NULL DEFAULT 0,
        unpriced_calls INTEGER NOT NULL DEFAULT 0,
        prompt_tokens INTEGER NOT NULL DEFAULT 0,
        completion_tokens INTEGER NOT NULL DEFAULT 0,
        cost_usd REAL NOT NULL DEFAULT 0,
        PRIMARY KEY (owner, day)
    ) WITHOUT ROWID;
    CREATE TABLE key_admissions (
        owner TEXT NOT NULL,
        ticket TEXT NOT NULL,
        at REAL NOT NULL,
        PRIMARY KEY (owner, ticket)
    ) WITHOUT ROWID;
    CREATE INDEX key_admissions_by_time ON key_admissions (owner, at);
    CREATE INDEX runs_by_owner_status ON runs (owner, status);
    """,
    # 8: threads as a resource (DESIGN §19; `sqlite_thread_index`): a thread keeps its head,
    # times, metadata and count of runs, and outlives its runs; its runs in order are rows of
    # `thread_runs`. The heads of schema 5 (AG-UI's threads, A2A's contexts) become threads of
    # one run each, made and changed when that run was made.
    """
    ALTER TABLE threads RENAME TO threads_v5;
    CREATE TABLE threads (
        owner TEXT NOT NULL,
        thread_id TEXT NOT NULL,
        head TEXT,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        metadata TEXT NOT NULL DEFAULT '{}',
        runs INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (owner, thread_id)
    ) WITHOUT ROWID;
    CREATE INDEX threads_by_activity ON threads (owner, updated_at, thread_id);
    CREATE TABLE thread_runs (
        owner TEXT NOT NULL,
        thread_id TEXT NOT NULL,
        pos INTEGER NOT NULL,
        run_id TEXT NOT NULL,
        PRIMARY KEY (owner, thread_id, pos)
    ) WITHOUT ROWID;
    INSERT INTO threads (owner, thread_id, head, created_at, updated_at, runs)
        SELECT t.owner, t.thread_id, t.run_id,
            (julianday(r.created_at) - 2440587.5) * 86400.0,
            (julianday(r.created_at) - 2440587.5) * 86400.0, 1
        FROM threads_v5 t JOIN runs r ON r.id = t.run_id;
    INSERT INTO thread_runs (owner, thread_id, pos, run_id)
        SELECT owner, thread_id, 0, run_id FROM threads_v5;
    DROP TABLE threads_v5;
    """,
    # 9: schedules (DESIGN §21; `sqlite_schedules`): a schedule as JSON with its next due time
    # beside it (indexed: the scheduler asks which are due), and one row per firing, claimed
    # once under (schedule_id, due_at). `owner` is '' for schedules without one. No foreign
    # key: a firing claimed as its schedule is deleted is deleted with it after.
    """
    CREATE TABLE schedules (
        id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        next_due_at REAL,
        record TEXT NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX schedules_by_owner ON schedules (owner, id);
    CREATE INDEX schedules_by_due ON schedules (next_due_at) WHERE next_due_at IS NOT NULL;
    CREATE TABLE schedule_firings (
        schedule_id TEXT NOT NULL,
        due_at REAL NOT NULL,
        settled INTEGER NOT NULL,
        claimed_by TEXT NOT NULL,
        lease_until REAL NOT NULL,
        firing TEXT NOT NULL,
        PRIMARY KEY (schedule_id, due_at)
    ) WITHOUT ROWID;
    """,
    # 10: run summaries (DESIGN §20; `sqlite_reports`): how each ended run ended, written with
    # its terminal record, deleted with the run; termination reports sum them. Runs that ended
    # before have none until the backfill (`app.runs.reports.service`) writes theirs. Kept in
    # the order a report reads them (an owner's, by time); `owner` is '' for runs without one.
    """
    CREATE TABLE run_summaries (
        owner TEXT NOT NULL,
        created_at TEXT NOT NULL,
        run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        agent TEXT,
        model TEXT NOT NULL,
        status TEXT NOT NULL,
        reason TEXT,
        degraded INTEGER NOT NULL,
        finish_tool INTEGER NOT NULL,
        steps INTEGER NOT NULL,
        duration_s REAL NOT NULL,
        tokens INTEGER NOT NULL,
        cost_usd REAL,
        tally TEXT NOT NULL,
        PRIMARY KEY (owner, created_at, run_id)
    ) WITHOUT ROWID;
    CREATE UNIQUE INDEX run_summaries_by_run ON run_summaries (run_id);
    CREATE INDEX run_summaries_by_time ON run_summaries (created_at);
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)
SYNCHRONOUS_MODES = ("OFF", "NORMAL", "FULL", "EXTRA")


def connect(
    path: str, *, busy_timeout_s: float, check_same_thread: bool = True
) -> sqlite3.Connection:
    """A connection in autocommit mode (we say BEGIN and COMMIT), foreign keys on."""
    conn = sqlite3.connect(
        path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=check_same_thread
    )
    conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


def prepare_writer(path: str, *, synchronous: str, busy_timeout_s: float) -> sqlite3.Connection:
    """The writer's connection: the directory and file made, WAL on, the schema up to date."""
    if synchronous not in SYNCHRONOUS_MODES:  # it is spliced into a PRAGMA
        raise ValueError(f"synchronous must be one of {SYNCHRONOUS_MODES}, not {synchronous!r}")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    conn = connect(path, busy_timeout_s=busy_timeout_s)
    try:
        (mode,) = conn.execute("PRAGMA journal_mode = WAL").fetchone()
        if mode.lower() != "wal":
            raise StoreError(f"{path}: cannot use WAL mode (got {mode!r})")
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        migrate(conn, path)
    except BaseException:
        conn.close()
        raise
    return conn


def migrate(conn: sqlite3.Connection, path: str) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        (version,) = conn.execute("PRAGMA user_version").fetchone()
        if version > SCHEMA_VERSION:
            raise StoreError(f"{path}: schema version {version} is newer than {SCHEMA_VERSION}")
        for script in MIGRATIONS[version:]:  # statement by statement: executescript() commits
            for statement in filter(str.strip, script.split(";")):
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
