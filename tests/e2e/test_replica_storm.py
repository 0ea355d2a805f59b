"""A storm of takeovers (DESIGN §8): three replicas on one redis-server, runs of the scripted
model whose every step calls an HTTP tool marked `idempotent: false` that counts its calls,
and one replica after another SIGKILLed while a call of a run it executes is in flight (each
replaced by a new replica). However the kills fall, no call ever runs twice (a step redone
after a takeover gets the reply it got before, and its call in flight is reported unknown,
not run again), every run completes, and each run's event seq is 1..N without a gap.

The tool holds each call until the test releases the calls in flight, so every kill lands on
a run mid-call, by construction: no timing decides what the test sees."""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from app.engine.prompts import EN
from tests.e2e.kit import TERMINAL, http_tool, start_run, stored_events
from tests.e2e.test_replicas import replica_env
from tests.fakes.process import AppProcess
from tests.fakes.serving import Served

pytestmark = pytest.mark.e2e

REPLICAS = 3
KILLS = 6
WAVE = 4
"""Runs posted before each kill: runs are in flight at every kill, and each ends."""
CALLS = 3
"""Steps of each run that call the tool, before it finishes."""


class CountingTool:
    """POST /count {"key"}: counts the call, then holds it until `release()` (or until its
    caller goes away: its replica died) and answers `counted <key>`; after
    `release(for_good=True)` it answers at once."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.held: list[tuple[int, str]] = []
        """The calls held now, oldest first: (the release they wait for, their key)."""
        self._releases = 0
        self._gated = True
        self._release = anyio.Event()
        self._arrived = anyio.Event()
        self.served = Served(
            Starlette(routes=[Route("/count", self._count, methods=["POST"])]),
            timeout_graceful_shutdown=1,
        )

    async def _count(self, request: Request) -> Response:
        key = (await request.json())["key"]
        self.counts[key] += 1
        if self._gated:
            held = (self._releases, key)
            self.held.append(held)
            arrived, self._arrived = self._arrived, anyio.Event()
            arrived.set()
            try:
                await self._held_until_released(request, self._release)
            finally:
                self.held.remove(held)
        return PlainTextResponse(f"counted {key}")

    @staticmethod
    async def _held_until_released(request: Request, release: anyio.Event) -> None:
        async with anyio.create_task_group() as tg:

            async def released() -> None:
                await release.wait()
                tg.cancel_scope.cancel()

            async def left() -> None:
                while (await request.receive())["type"] != "http.disconnect":
                    pass
                tg.cancel_scope.cancel()

            tg.start_soon(released)
            tg.start_soon(left)

    async def newest_held(self, timeout_s: float = 60) -> str:
        """The key of the call held last since the last release, once one is."""
        with anyio.fail_after(timeout_s):
            while not self.held or self.held[-1][0] != self._releases:
                await self._arrived.wait()
        return self.held[-1][1]

    def release(self, *, for_good: bool = False) -> None:
        """Answer every call held now; later calls are held again unless `for_good`."""
        if for_good:
            self._gated = False
        release, self._release = self._release, anyio.Event()
        self._releases += 1
        release.set()


def run_body(index: int, tool_url: str) -> dict[str, Any]:
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "count", "arguments": {"key": f"{index}-{step}"}}]}
        for step in range(CALLS)
    ]
    script.append({"tool_calls": [{"name": "task_finished", "arguments": {"answer": f"{index}"}}]})
    return {
        "task": f"count for run {index}",
        "model": "scripted",
        "model_script": script,
        "http_tools": [http_tool("count", tool_url, idempotent=False, timeout_s=120)],
        "settings": {"tool_timeout_s": 120, "max_time_s": 300},
    }


class Cluster:
    """The replicas: `live` (serving), others starting; `add()` starts one more, `kill(app)`
    SIGKILLs a live one."""

    def __init__(self, tmp_path: Path, env: dict[str, str], stack: contextlib.AsyncExitStack):
        self.tmp_path = tmp_path
        self.env = env
        self.stack = stack
        self.live: dict[AppProcess, httpx.AsyncClient] = {}
        self.running: list[AppProcess] = []
        """Every replica not killed: live, or starting."""
        self._changed = anyio.Event()

    async def add(self) -> None:
        cwd = self.tmp_path / f"replica{len(list(self.tmp_path.glob('replica*')))}"
        cwd.mkdir()
        app = AppProcess(cwd, self.env, start_timeout_s=60)  # start-up is CPU-bound
        self.running.append(app)
        self.stack.push_async_exit(app.__aexit__)
        await app.__aenter__()
        client = httpx.AsyncClient(base_url=app.url(), timeout=30)
        self.stack.push_async_exit(client.__aexit__)
        self.live[app] = client
        changed, self._changed = self._changed, anyio.Event()
        changed.set()

    def clients(self) -> list[httpx.AsyncClient]:
        return list(self.live.values())

    async def until(self, ready: Any, timeout_s: float = 90) -> None:
        with anyio.fail_after(timeout_s):
            while not ready():
                await self._changed.wait()

    def kill(self, app: AppProcess) -> None:
        app.kill()
        del self.live[app]
        self.running.remove(app)

    async def executor(self, run_id: str) -> AppProcess:
        """A replica whose log says it started the run or took it over."""

        def matches(line: str) -> bool:
            with contextlib.suppress(ValueError):
                parsed = json.loads(line)
                return (
                    isinstance(parsed, dict)
                    and parsed.get("run_id") == run_id
                    and parsed.get("event") in ("run_started", "run_recovered")
                )
            return False

        found: list[AppProcess] = []
        async with anyio.create_task_group() as tg:

            async def watch(app: AppProcess) -> None:
                await app.wait_for_line(matches, timeout_s=10)
                found.append(app)
                tg.cancel_scope.cancel()

            for app in self.running:
                tg.start_soon(watch, app)
        return found[0]


@contextlib.asynccontextmanager
async def cluster(tmp_path: Path, redis_url: str, **extra: str) -> AsyncIterator[Cluster]:
    async with contextlib.AsyncExitStack() as stack:
        made = Cluster(tmp_path, replica_env(redis_url, **extra), stack)
        async with anyio.create_task_group() as tg:
            for _ in range(REPLICAS):
                tg.start_soon(made.add)
        yield made


async def wait_all_ended(client: httpx.AsyncClient, run_ids: list[str]) -> list[dict[str, Any]]:
    runs = []
    with anyio.fail_after(90):
        for run_id in run_ids:
            while True:
                response = await client.get(f"/runs/{run_id}/wait", params={"timeout_s": 10})
                assert response.status_code == 200, response.text
                run: dict[str, Any] = response.json()
                if run["status"] not in ("queued", "running"):
                    runs.append(run)
                    break
    return runs


async def test_a_storm_of_takeovers_never_runs_a_non_idempotent_call_twice(
    tmp_path: Path, redis_url: str
) -> None:
    tool = CountingTool()
    env = {
        "FINISHLINE_LEASE_S": "2",
        "FINISHLINE_MAX_RUN_ATTEMPTS": "100",
        "FINISHLINE_HTTP_TOOL_ALLOW_HOSTS": "127.0.0.1",
    }
    run_ids: list[str] = []
    killed_runs: list[str] = []
    async with tool.served, cluster(tmp_path, redis_url, **env) as replicas:
        url = tool.served.url("/count")
        async with anyio.create_task_group() as starting:
            for _ in range(KILLS):
                for _ in range(WAVE):
                    clients = replicas.clients()
                    client = clients[len(run_ids) % len(clients)]
                    run_ids.append(await start_run(client, run_body(len(run_ids), url)))
                await replicas.until(lambda: len(replicas.live) >= 2)  # one outlives the kill
                # the replica executing the run whose call came in last dies with it in flight
                run_id = run_ids[int((await tool.newest_held()).split("-")[0])]
                victim = await replicas.executor(run_id)
                await replicas.until(lambda v=victim: v in replicas.live)  # if just started
                replicas.kill(victim)
                killed_runs.append(run_id)
                tool.release()
                if len(killed_runs) < KILLS:
                    starting.start_soon(replicas.add)  # its replacement
        tool.release(for_good=True)

        client = replicas.clients()[0]
        runs = await wait_all_ended(client, run_ids)
        logs = {run_id: await stored_events(client, run_id) for run_id in run_ids}

    twice = {key: n for key, n in tool.counts.items() if n > 1}
    assert twice == {}, f"non-idempotent calls that ran more than once: {twice}"
    for index, (run, events) in enumerate(zip(runs, logs.values(), strict=True)):
        assert run["status"] == "completed", (run["error"], events)
        assert run["result"]["answer"] == f"{index}"
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
        types = [e["type"] for e in events]
        assert types[-1] == "run.completed", types
        assert sum(t in TERMINAL for t in types) == 1, types
        # each call observed once, in order: run (counted once) or, if it was in flight at a
        # takeover, reported unknown (counted once or never: it may not have arrived)
        observed = [e for e in events if e["type"] == "observation"]
        keys = [f"{index}-{step}" for step in range(CALLS)]
        assert [d["tool"] for d in observed] == ["count"] * CALLS, observed
        for key, data in zip(keys, observed, strict=True):
            if data["is_error"]:
                assert data["content"] == EN.outcome_unknown.format(tool="count")
                assert tool.counts[key] <= 1
            else:
                assert data["content"] == f"counted {key}"
                assert tool.counts[key] == 1
    for run_id in killed_runs:  # the kills fell on runs in flight: each was taken over
        assert "run.recovered" in [e["type"] for e in logs[run_id]]
