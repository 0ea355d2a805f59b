"""The Postgres schema of `PostgresRunStore` and its migrations (DESIGN §18).

Everything lives in one schema (`FINISHLINE_PG_SCHEMA`, default `finishline`), its version
in `schema_version`. `MIGRATIONS[n]` takes it from version n to n + 1; `migrate` applies the
missing ones in one transaction under an advisory lock keyed by the schema's name, so
replicas starting at once on an empty database wait for each other and all come up (the
first migrates, the others find it done). A schema newer than this code is refused, naming
both versions: an older replica must not write rows it does not understand.

Indexes: every list and filter of the API reads an index (`tests/runs/test_postgres_plans.py`
shows the plans): a run's events (the primary key), a key's runs (owner, id), by status,
follow-ups, children, a thread and its runs, a tree's members, the claimable queue, a key's
schedules, the schedules due, a schedule's firings, a key's run summaries in a window.
"""

from __future__ import annotations

import psycopg
from psycopg import sql

from app.runs.store import StoreError
from app.runs.stores.postgres_names import check_schema_name

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "SchemaTooNewError", "check_schema_name", "migrate"]

MIGRATIONS = (
    # 1: runs (the record as the model's JSON text, plus the columns indexes and the
    # replicas' coordination need: the queue, the lease and its fencing token, a wait's
    # deadline, the webhook outbox), events, checkpoints, trees, quotas' counters, threads,
    # steering messages. `owner` is '' in the counters and thread tables for runs without one.
    """
    CREATE TABLE runs (
        id TEXT PRIMARY KEY,
        owner TEXT,
        status TEXT NOT NULL,
        idempotency_key TEXT,
        created_at TEXT NOT NULL,
        previous_run_id TEXT,
        parent_run_id TEXT,
        record TEXT NOT NULL,
        last_seq BIGINT NOT NULL DEFAULT 0,
        ended_at DOUBLE PRECISION,
        lease_owner TEXT,
        lease_token TEXT,
        lease_until DOUBLE PRECISION,
        attempts INTEGER NOT NULL DEFAULT 0,
        queued_at DOUBLE PRECISION,
        held_behind TEXT,
        cancel_requested BOOLEAN NOT NULL DEFAULT FALSE,
        inbox_closed BOOLEAN NOT NULL DEFAULT FALSE,
        wait_deadline DOUBLE PRECISION,
        webhook_due BOOLEAN NOT NULL DEFAULT FALSE,
        webhook_owner TEXT,
        webhook_until DOUBLE PRECISION
    );
    CREATE UNIQUE INDEX runs_owner_key ON runs (owner, idempotency_key)
        WHERE idempotency_key IS NOT NULL AND owner IS NOT NULL;
    CREATE UNIQUE INDEX runs_anonymous_key ON runs (idempotency_key)
        WHERE idempotency_key IS NOT NULL AND owner IS NULL;
    CREATE INDEX runs_by_owner ON runs (owner, id);
    CREATE INDEX runs_by_owner_status ON runs (owner, status, id);
    CREATE INDEX runs_by_status ON runs (status, id);
    CREATE INDEX runs_by_previous ON runs (previous_run_id, id)
        WHERE previous_run_id IS NOT NULL;
    CREATE INDEX runs_by_parent ON runs (parent_run_id, id) WHERE parent_run_id IS NOT NULL;
    CREATE INDEX runs_ended ON runs (ended_at) WHERE ended_at IS NOT NULL;
    CREATE INDEX runs_queued ON runs (queued_at) WHERE queued_at IS NOT NULL;
    CREATE INDEX runs_leased ON runs (lease_until) WHERE lease_token IS NOT NULL;
    CREATE INDEX runs_held ON runs (held_behind) WHERE held_behind IS NOT NULL;
    CREATE INDEX runs_webhooks ON runs (id) WHERE webhook_due;
    CREATE INDEX runs_waiting ON runs (wait_deadline) WHERE wait_deadline IS NOT NULL;
    CREATE TABLE queue_places (
        ticket TEXT PRIMARY KEY,
        at DOUBLE PRECISION NOT NULL
    );
    CREATE TABLE events (
        run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        seq BIGINT NOT NULL,
        type TEXT NOT NULL,
        ts DOUBLE PRECISION NOT NULL,
        step INTEGER NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (run_id, seq)
    );
    CREATE TABLE checkpoints (
        run_id TEXT PRIMARY KEY REFERENCES runs (id) ON DELETE CASCADE,
        step INTEGER NOT NULL,
        state TEXT NOT NULL,
        version INTEGER
    );
    CREATE TABLE checkpoint_chunks (
        run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        start INTEGER NOT NULL,
        messages TEXT NOT NULL,
        PRIMARY KEY (run_id, start)
    );
    CREATE TABLE tree_runs (
        root_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        member TEXT NOT NULL,
        PRIMARY KEY (root_id, member)
    );
    CREATE TABLE key_days (
        owner TEXT NOT NULL,
        day TEXT NOT NULL,
        runs BIGINT NOT NULL DEFAULT 0,
        llm_calls BIGINT NOT NULL DEFAULT 0,
        unpriced_calls BIGINT NOT NULL DEFAULT 0,
        prompt_tokens BIGINT NOT NULL DEFAULT 0,
        completion_tokens BIGINT NOT NULL DEFAULT 0,
        cost_usd DOUBLE PRECISION NOT NULL DEFAULT 0,
        PRIMARY KEY (owner, day)
    );
    CREATE TABLE key_admissions (
        owner TEXT NOT NULL,
        ticket TEXT NOT NULL,
        at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (owner, ticket)
    );
    CREATE INDEX key_admissions_by_time ON key_admissions (owner, at);
    CREATE TABLE key_admitting (
        owner TEXT NOT NULL,
        ticket TEXT NOT NULL,
        at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (owner, ticket)
    );
    CREATE TABLE threads (
        owner TEXT NOT NULL,
        thread_id TEXT NOT NULL,
        head TEXT,
        created_at DOUBLE PRECISION NOT NULL,
        updated_at DOUBLE PRECISION NOT NULL,
        metadata TEXT NOT NULL DEFAULT '{}',
        runs INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (owner, thread_id)
    );
    CREATE INDEX threads_by_activity ON threads (owner, updated_at, thread_id);
    CREATE TABLE thread_runs (
        owner TEXT NOT NULL,
        thread_id TEXT NOT NULL,
        pos INTEGER NOT NULL,
        run_id TEXT NOT NULL,
        PRIMARY KEY (owner, thread_id, pos)
    );
    CREATE TABLE run_messages (
        run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        pos BIGINT NOT NULL,
        content TEXT NOT NULL,
        PRIMARY KEY (run_id, pos)
    );
    """,
    # 2: schedules (DESIGN §21; `postgres_schedules`): a schedule as JSON with its next due
    # time beside it (indexed: the scheduler asks which are due), and one row per firing,
    # claimed once under (schedule_id, due_at). `owner` is '' for schedules without one. No
    # foreign key: a firing claimed as its schedule is deleted is deleted with it after.
    """
    CREATE TABLE schedules (
        id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        next_due_at DOUBLE PRECISION,
        record TEXT NOT NULL
    );
    CREATE INDEX schedules_by_owner ON schedules (owner, id);
    CREATE INDEX schedules_by_due ON schedules (next_due_at, id) WHERE next_due_at IS NOT NULL;
    CREATE TABLE schedule_firings (
        schedule_id TEXT NOT NULL,
        due_at DOUBLE PRECISION NOT NULL,
        settled BOOLEAN NOT NULL,
        claimed_by TEXT NOT NULL,
        lease_until DOUBLE PRECISION NOT NULL,
        firing TEXT NOT NULL,
        PRIMARY KEY (schedule_id, due_at)
    );
    """,
    # 3: run summaries (DESIGN §20; `postgres_reports`): how each ended run ended, written
    # with its terminal record, deleted with the run; termination reports sum them. Runs that
    # ended before have none until the backfill (`app.runs.reports.service`) writes theirs.
    # Read by owner and time, or by time (any owner); `owner` is '' for runs without one.
    # `tokens` NUMERIC: a usage past 2^63 (a model's own figures) must not refuse the run's end.
    """
    CREATE TABLE run_summaries (
        run_id TEXT PRIMARY KEY REFERENCES runs (id) ON DELETE CASCADE,
        owner TEXT NOT NULL,
        created_at TEXT NOT NULL,
        agent TEXT,
        model TEXT NOT NULL,
        status TEXT NOT NULL,
        reason TEXT,
        degraded BOOLEAN NOT NULL,
        finish_tool BOOLEAN NOT NULL,
        steps INTEGER NOT NULL,
        duration_s DOUBLE PRECISION NOT NULL,
        tokens NUMERIC NOT NULL,
        cost_usd DOUBLE PRECISION,
        tally TEXT NOT NULL
    );
    CREATE INDEX run_summaries_by_owner ON run_summaries (owner, created_at);
    CREATE INDEX run_summaries_by_time ON run_summaries (created_at);
    CREATE INDEX runs_ended_by_id ON runs (id)
        WHERE status IN ('completed', 'incomplete', 'failed', 'cancelled');
    """,
    # 4: cheaper writes (measured in bench/README, "Fifth pass"). A run's events and
    # checkpoint rows no longer name it by a foreign key: each such row was checked against
    # `runs` one at a time (about 40 lookups a run), while every statement writing them
    # already goes through the run's row, locked (`postgres_appends`, `checkpoint_sql`); a
    # run's deletion deletes them after its row (`postgres_rows.delete_runs`). And `runs`
    # and `checkpoints`, each row changed many times a run, keep room in every page so that
    # a change leaving the indexed columns alone is a HOT update (no new index entries:
    # 23% of the runs' updates were, 64% are). Pages written before keep theirs full.
    """
    ALTER TABLE events DROP CONSTRAINT events_run_id_fkey;
    ALTER TABLE checkpoint_chunks DROP CONSTRAINT checkpoint_chunks_run_id_fkey;
    ALTER TABLE checkpoints DROP CONSTRAINT checkpoints_run_id_fkey;
    ALTER TABLE runs SET (fillfactor = 50);
    ALTER TABLE checkpoints SET (fillfactor = 50);
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)


class SchemaTooNewError(StoreError):
    """The database's schema is newer than this code knows: it refuses to start."""


async def migrate(conn: psycopg.AsyncConnection[tuple[object, ...]], schema: str) -> int:
    """Bring `schema` up to `SCHEMA_VERSION` (made when missing); the version found."""
    name = sql.Identifier(schema)
    async with conn.transaction():
        # one migrator at a time per schema: the others wait here, then find it done
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", ("finishline:" + schema,))
        await conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(name))
        await conn.execute(
            sql.SQL("CREATE TABLE IF NOT EXISTS {}.schema_version (version INTEGER NOT NULL)")
            .format(name)
        )  # fmt: skip
        cur = await conn.execute(sql.SQL("SELECT version FROM {}.schema_version").format(name))
        row = await cur.fetchone()
        found = int(row[0]) if row is not None else 0  # type: ignore[call-overload]
        if found > SCHEMA_VERSION:
            raise SchemaTooNewError(
                f"the Postgres schema {schema!r} is at version {found}, newer than this"
                f" finishline knows ({SCHEMA_VERSION}): upgrade finishline, or use another"
                " FINISHLINE_PG_SCHEMA"
            )
        await conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(name))
        for script in MIGRATIONS[found:]:
            await conn.execute(script)
        if row is None:
            await conn.execute(
                "INSERT INTO schema_version (version) VALUES (%s)", (SCHEMA_VERSION,)
            )
        elif found < SCHEMA_VERSION:
            await conn.execute("UPDATE schema_version SET version = %s", (SCHEMA_VERSION,))
    return found
