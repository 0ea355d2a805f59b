"""Redis outages under running runs (docs/operations/outages.md): a real redis-server
stopped and started again empty, crashed and restarted from its append-only file, paused,
and filled to its maxmemory. Throughout, the process stays up (`/healthz` 200), `/readyz` is
503 naming the store, requests that need the store are refused 503 `store_unavailable` with
`Retry-After` within seconds; afterwards the replica serves again without a restart and no
run is left `running`: each one Redis kept resumes (takeover from its checkpoint) and ends."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.api.kit import (
    app_with_state,
    assert_sequential,
    create,
    error_of,
    finish,
    finishing,
    hanging,
    scripted,
    settings,
    sse,
    wait_ended,
    wait_for_status,
)
from tests.fakes.redis_server import RedisServer

BACK_WITHIN_S = 30  # a failure bound: Redis back, the replica must serve again before this
OUTAGE_ANSWER_S = 15  # a failure bound: a refusal during an outage comes before this (~5 s)


def busy(answer: str, steps: int = 40) -> dict[str, Any]:
    """A run that writes all the time (a step every 0.1 s, each a tool call) for a few
    seconds, then finishes with `answer`: Redis going away meets it in a write."""
    replies = [
        {
            "content": f"adding {n}",
            "delay_s": 0.1,
            "tool_calls": [{"name": "calculator", "arguments": {"expression": f"{n}+1"}}],
        }
        for n in range(steps)
    ]
    body = scripted(*replies, finish(answer), tools=["calculator"])
    body["settings"] = {"max_steps": steps + 5}
    return body


@asynccontextmanager
async def service(
    server: RedisServer, **overrides: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, Any]]:
    """The service on `server`'s Redis, and its run manager. A short lease: a run given up in
    the outage is taken over soon after Redis is back."""
    values: dict[str, Any] = {"store_url": server.url(), "lease_s": 1, **overrides}
    async with app_with_state(settings(**values)) as (client, state):
        yield client, state["manager"]


async def under_way(client: httpx.AsyncClient, runs: list[dict[str, Any]]) -> None:
    """Each run is running and has made a few steps (checkpointed) already."""

    async def stepping() -> bool:
        found = [(await client.get(f"/runs/{run['id']}")).json() for run in runs]
        return all(r["status"] == "running" and r["usage"]["steps"] >= 3 for r in found)

    await until(stepping, BACK_WITHIN_S, "the runs a few steps in")


async def given_up(manager: Any) -> None:
    """Every run executing here met the outage in a write and was given up."""

    async def none_left() -> bool:
        return not manager.live.executing_ids()

    await until(none_left, OUTAGE_ANSWER_S, "the runs in flight given up")


async def until(check: Callable[[], Awaitable[bool]], bound_s: float, what: str) -> None:
    """Poll `check` until it holds, failing after `bound_s`."""
    deadline = time.monotonic() + bound_s
    while not await check():
        assert time.monotonic() < deadline, f"not within {bound_s} s: {what}"
        await asyncio.sleep(0.2)


async def following(client: httpx.AsyncClient) -> bool:
    metrics = (await client.get("/metrics")).text
    return "finishline_sse_subscribers 1.0" in metrics


async def ready(client: httpx.AsyncClient) -> bool:
    return (await client.get("/readyz")).status_code == 200


async def assert_store_unavailable(response: httpx.Response) -> dict[str, Any]:
    error = error_of(response, 503, "store_unavailable")
    assert int(response.headers["Retry-After"]) > 0
    return error


async def assert_weather(client: httpx.AsyncClient, detail: str, *, reads: bool = False) -> None:
    """What a client sees while the store is away: the process is alive, not ready, and a
    request that needs the store is refused 503 store_unavailable, within seconds (a read
    is served when the store still reads: `reads`)."""
    assert (await client.get("/healthz")).status_code == 200
    readyz = await client.get("/readyz")
    assert readyz.status_code == 503
    assert readyz.json()["status"] == "unavailable"
    assert detail in readyz.json()["detail"]
    started = time.monotonic()
    refused = await client.post("/runs", json=finishing("never"))
    await assert_store_unavailable(refused)
    listed = await client.get("/runs")
    if reads:
        assert listed.status_code == 200, listed.text
    else:
        await assert_store_unavailable(listed)
    assert time.monotonic() - started < 2 * OUTAGE_ANSWER_S


async def event_types(client: httpx.AsyncClient, run_id: str) -> list[str]:
    return [e.event or "" for e in (await sse(client, "GET", f"/runs/{run_id}/events"))[1]]


async def assert_resumed_and_completed(
    client: httpx.AsyncClient, runs: list[dict[str, Any]]
) -> None:
    """Each run (made by `busy(f"answer {i}")`) was taken over after the outage and
    completed with its own answer, its log 1..N with one terminal event."""
    for i, run in enumerate(runs):
        ended = await assert_ended_once(client, run["id"])
        assert ended["status"] == "completed", (ended.get("error"), ended.get("stop_reason"))
        assert ended["result"]["answer"] == f"answer {i}"
        assert "run.recovered" in await event_types(client, run["id"])


async def assert_ended_once(client: httpx.AsyncClient, run_id: str) -> dict[str, Any]:
    """The run ended, its log 1..N with no gap and one terminal event."""
    run = await wait_ended(client, run_id)
    response, events = await sse(client, "GET", f"/runs/{run_id}/events")
    assert response.status_code == 200
    assert_sequential(events)  # one terminal event, the last
    return run


async def test_a_replica_rides_out_a_redis_that_stops_and_comes_back_empty(
    tmp_path: Path,
) -> None:
    """No persistence: the runs in flight are gone with Redis's data (their followers' streams
    close; they read 404 afterwards), none is left running, and the replica serves again."""
    with RedisServer(tmp_path) as server:
        async with service(server) as (client, _):
            runs = [await create(client, hanging()) for _ in range(3)]
            for run in runs:
                await wait_for_status(client, run["id"], "running")
            follower = asyncio.create_task(sse(client, "GET", f"/runs/{runs[0]['id']}/events"))
            server.stop()

            await assert_weather(client, "Redis does not answer")
            server.start_again()
            await until(lambda: ready(client), BACK_WITHIN_S, "ready again")

            response, events = await asyncio.wait_for(follower, BACK_WITHIN_S)
            assert response.status_code == 200  # closed cleanly: a client may reconnect
            seen = [e.event for e in events]  # what it read before the crash, if it had begun
            assert seen == ["run.queued", "run.started"][: len(seen)]

            async def gone() -> bool:
                answers = [await client.get(f"/runs/{run['id']}") for run in runs]
                return all(a.status_code == 404 for a in answers)

            await until(gone, BACK_WITHIN_S, "the lost runs read 404")
            run = await assert_ended_once(client, (await create(client, finishing("after")))["id"])
            assert run["result"]["answer"] == "after"
            running = await client.get("/runs", params={"status": "running"})
            assert running.json()["runs"] == []


async def test_runs_acknowledged_before_a_redis_crash_resume_when_it_restarts_from_its_aof(
    tmp_path: Path,
) -> None:
    """AOF (everysec): Redis is killed under running runs; restarted from its append-only
    file, it has every run acknowledged before the crash, and each resumes from its
    checkpoint (run.recovered) and completes, its log without gap or duplicate."""
    aof = ("--appendonly", "yes", "--appendfsync", "everysec")
    with RedisServer(tmp_path, extra_args=aof) as server:
        async with service(server) as (client, manager):
            runs = [await create(client, busy(f"answer {i}")) for i in range(4)]
            await under_way(client, runs)
            follower = asyncio.create_task(sse(client, "GET", f"/runs/{runs[0]['id']}/events"))
            await until(lambda: following(client), BACK_WITHIN_S, "the follower connected")
            server.kill()

            await assert_weather(client, "Redis does not answer")
            await given_up(manager)
            server.start_again()
            await until(lambda: ready(client), BACK_WITHIN_S, "ready again")

            await assert_resumed_and_completed(client, runs)
            # the follower stayed connected through the outage and saw the run to its end
            response, events = await asyncio.wait_for(follower, BACK_WITHIN_S)
            assert response.status_code == 200
            assert_sequential(events)
            assert events[-1].event == "run.completed"
            assert "run.recovered" in [e.event for e in events]


async def test_a_paused_redis_is_answered_within_seconds_and_runs_go_on_after(
    tmp_path: Path,
) -> None:
    """SIGSTOP: connections are accepted and nothing is answered. Requests that need the
    store are refused after the socket timeout, not after the client's; SIGCONT, and the runs
    in flight end (resumed where their writes failed)."""
    with RedisServer(tmp_path) as server:
        async with service(server) as (client, manager):
            runs = [await create(client, busy(f"answer {i}")) for i in range(3)]
            await under_way(client, runs)
            server.pause()
            try:
                await assert_weather(client, "Redis does not answer")
                await given_up(manager)
            finally:
                server.resume()
            await until(lambda: ready(client), BACK_WITHIN_S, "ready again")
            await assert_resumed_and_completed(client, runs)


async def test_a_redis_at_its_maxmemory_refuses_runs_with_503_and_they_go_on_once_it_has_room(
    tmp_path: Path,
) -> None:
    """maxmemory with noeviction: writes are refused, reads still answer. A new run is a 503
    saying Redis is out of memory (never a 500), a stored run still reads back; once the limit
    is lifted, the runs in flight end."""
    with RedisServer(tmp_path) as server:
        async with service(server) as (client, manager):
            runs = [await create(client, busy(f"answer {i}")) for i in range(3)]
            await under_way(client, runs)
            with server.client() as admin:
                admin.config_set("maxmemory-policy", "noeviction")
                admin.config_set("maxmemory", 1)
                try:
                    await assert_weather(client, "out of memory", reads=True)
                    await given_up(manager)
                    refused = await client.post("/runs", json=finishing("never"))
                    assert "out of memory" in (await assert_store_unavailable(refused))["message"]
                    done = await client.get(f"/runs/{runs[0]['id']}")
                    assert done.status_code == 200, done.text
                finally:
                    admin.config_set("maxmemory", 0)
            await until(lambda: ready(client), BACK_WITHIN_S, "ready again")
            await assert_resumed_and_completed(client, runs)
