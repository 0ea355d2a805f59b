"""Postgres outages under running runs (DESIGN §18; as "When Redis goes away" for Redis): a
real Postgres stopped and started again, made read-only, and every connection of the
service terminated (`pg_terminate_backend`). Throughout, the process stays up (`/healthz`
200), `/readyz` is 503 naming the cause, requests that need the store are refused 503
`store_unavailable` with `Retry-After`; once Postgres is back, every acknowledged run ends
(those given up in the outage taken over from their checkpoint), none is left `running`.
Also: a long LLM call holds no connection idle in a transaction."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.kit import app_with_state, create, finish, scripted, settings, wait_for_status
from tests.api.test_redis_outages import (
    BACK_WITHIN_S,
    assert_ended_once,
    assert_resumed_and_completed,
    assert_weather,
    busy,
    given_up,
    ready,
    under_way,
    until,
)
from tests.fakes.postgres_server import ROLE, PostgresServer


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    """A Postgres of this module's own: its tests stop and restart it."""
    directory = Path(tempfile.mkdtemp(prefix="finishline-pg-outage-"))
    try:
        with PostgresServer(directory, own=True) as made:
            yield made
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@asynccontextmanager
async def service(url: str, **overrides: Any) -> AsyncIterator[tuple[httpx.AsyncClient, Any]]:
    values: dict[str, Any] = {"store_url": url, "lease_s": 1, **overrides}
    async with app_with_state(settings(**values)) as (client, state):
        yield client, state["manager"]


HELD_S = 2.0
"""Longer than any one batch of writes takes between its statements (a transaction is idle
for a moment while the client sends its next statement): a connection idle in a
transaction this long is held across something else."""


def held_in_transactions(server: PostgresServer, database: str) -> list[str]:
    """The service's connections idle in a transaction for more than `HELD_S`."""
    with server.admin() as admin:
        rows = admin.execute(
            "SELECT state FROM pg_stat_activity WHERE usename = %s AND datname = %s"
            " AND state LIKE 'idle in transaction%%' AND now() - state_change > %s",
            (ROLE, database, timedelta(seconds=HELD_S)),
        ).fetchall()
    return [str(state) for (state,) in rows]


async def test_a_replica_rides_out_a_postgres_that_stops_and_comes_back(
    server: PostgresServer,
) -> None:
    url = server.url(server.database())
    async with service(url) as (client, manager):
        runs = [await create(client, busy(f"answer {i}")) for i in range(3)]
        await under_way(client, runs)
        server.stop()
        try:
            await assert_weather(client, "Postgres does not answer")
            await given_up(manager)
        finally:
            server.start_again()
        await until(lambda: ready(client), BACK_WITHIN_S, "ready again")
        await assert_resumed_and_completed(client, runs)
        running = await client.get("/runs", params={"status": "running"})
        assert running.json()["runs"] == []


async def test_a_read_only_postgres_refuses_writes_with_503_and_runs_go_on_after(
    server: PostgresServer,
) -> None:
    database = server.database()
    async with service(server.url(database)) as (client, manager):
        runs = [await create(client, busy(f"answer {i}")) for i in range(3)]
        await under_way(client, runs)
        with server.admin() as admin:
            admin.execute("ALTER SYSTEM SET default_transaction_read_only = on")
            admin.execute("SELECT pg_reload_conf()")
            try:
                await assert_weather(client, "read-only", reads=True)
                await given_up(manager)
            finally:
                admin.execute("ALTER SYSTEM RESET default_transaction_read_only")
                admin.execute("SELECT pg_reload_conf()")
        await until(lambda: ready(client), BACK_WITHIN_S, "ready again")
        await assert_resumed_and_completed(client, runs)


async def test_runs_go_on_when_every_connection_of_the_service_is_terminated(
    server: PostgresServer,
) -> None:
    database = server.database()
    async with service(server.url(database)) as (client, _):
        runs = [await create(client, busy(f"answer {i}")) for i in range(3)]
        await under_way(client, runs)
        with server.admin() as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE usename = %s AND datname = %s",
                (ROLE, database),
            )

        async def all_ended() -> bool:  # (a run given up here ends after its takeover)
            found = [await client.get(f"/runs/{run['id']}") for run in runs]
            if any(r.status_code == 503 for r in found):  # a connection the pool still held
                return False
            return all(r.json()["status"] != "running" for r in found)

        await until(all_ended, BACK_WITHIN_S, "every run ended")
        for i, run in enumerate(runs):  # taken over where a write failed; each ends once
            ended = await assert_ended_once(client, run["id"])
            assert (ended["status"], ended["result"]["answer"]) == ("completed", f"answer {i}")
        assert (await client.get("/readyz")).status_code == 200


async def test_a_long_llm_call_holds_no_connection_idle_in_a_transaction(
    server: PostgresServer,
) -> None:
    database = server.database()
    async with service(server.url(database)) as (client, _):
        long_call = scripted({"content": "thinking", "delay_s": 10}, finish("done"))
        run = await create(client, long_call)
        await wait_for_status(client, run["id"], "running")
        held: list[str] = []
        deadline = time.monotonic() + 30  # a failure bound: the run ends after ~10 s
        while (await client.get(f"/runs/{run['id']}")).json()["status"] == "running":
            assert time.monotonic() < deadline
            held += held_in_transactions(server, database)
            await asyncio.sleep(0.2)  # sampling pg_stat_activity through the call
        assert held == []
        ended = await assert_ended_once(client, run["id"])
        assert ended["status"] == "completed", (ended.get("error"), ended.get("stop_reason"))


async def stepping_anywhere(client: httpx.AsyncClient, runs: list[dict[str, Any]]) -> None:
    """Each run is running and a few steps in, on whichever replica executes it: read from its
    events (a replica that does not execute a run reads its stored record, whose usage is not
    saved at each step: `under_way` sees only the runs this replica executes)."""

    async def stepping() -> bool:
        for run in runs:
            found = await client.get(f"/runs/{run['id']}")
            if found.json()["status"] != "running":
                return False
            page = await client.get(
                f"/runs/{run['id']}/events",
                params={"limit": 1000},
                headers={"Accept": "application/json"},
            )
            if sum(e["type"] == "llm.call" for e in page.json()["events"]) < 3:
                return False
        return True

    await until(stepping, BACK_WITHIN_S, "the runs a few steps in")


async def test_a_postgres_restart_under_20_runs_on_two_replicas_ends_every_run_once(
    server: PostgresServer,
) -> None:
    url = server.url(server.database())
    async with service(url) as (a, _), service(url) as (b, _):
        runs = [await create((a, b)[i % 2], busy(f"answer {i}", steps=15)) for i in range(20)]
        await stepping_anywhere(a, runs[:2])
        server.stop()
        try:
            await assert_weather(a, "Postgres does not answer")
            await assert_weather(b, "Postgres does not answer")
        finally:
            server.start_again()
        await until(lambda: ready(a), BACK_WITHIN_S, "ready again")

        async def all_ended() -> bool:
            found = [(await a.get(f"/runs/{run['id']}")).json() for run in runs]
            return all(r["status"] not in ("queued", "running") for r in found)

        await until(all_ended, 3 * BACK_WITHIN_S, "every run ended")
        for i, run in enumerate(runs):  # each ended once, its log 1..N, with its own answer
            ended = await assert_ended_once((a, b)[i % 2], run["id"])
            assert (ended["status"], ended["result"]["answer"]) == ("completed", f"answer {i}")
