"""SIGTERM, as an orchestrator sends it, to the service running as its own process: runs in
flight get the grace period, then are cancelled with their terminal event; followers' streams
end cleanly on that event; new runs are refused with 503; the process then exits."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import anyio.abc
import httpx
import pytest

from tests.e2e.kit import (
    TERMINAL,
    assert_one_terminal_at_the_end,
    e2e_settings,
    follow,
    sqlite_url,
    start_run,
)
from tests.fakes.llm_server import FakeLLMServer, FakeReply
from tests.fakes.process import AppProcess
from tests.fakes.service import SSE, read_sse, served_app

pytestmark = pytest.mark.e2e

EXIT_SLACK_S = 4.0
"""How long after the grace period the process may take to exit."""


class LatePost:
    """POST /runs sent in two parts: the head and the start of the body at once, the rest of
    the body only when the test says, on a connection the server has already accepted."""

    HEAD, REST = b'{"task": ', b'"too late"}'

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.response: httpx.Response | None = None
        self._rest = anyio.Event()

    def send_the_rest(self) -> None:
        self._rest.set()

    async def run(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Started with `tg.start`: returns once the head and the first part are sent."""

        async def body() -> AsyncIterator[bytes]:
            yield self.HEAD
            task_status.started()  # httpx asks for more only once the first part is out
            await self._rest.wait()
            yield self.REST

        limits = httpx.Limits(max_connections=1)
        async with httpx.AsyncClient(base_url=self.base_url, limits=limits, timeout=15) as client:
            assert (await client.get("/healthz")).status_code == 200  # accepted, reading
            headers = {
                "Content-Type": "application/json",
                "Content-Length": str(len(self.HEAD + self.REST)),
            }
            self.response = await client.post("/runs", content=body(), headers=headers)


def process_env(tmp_path: Path, llm: FakeLLMServer, grace_s: float) -> dict[str, str]:
    return {
        "FINISHLINE_STORE_URL": sqlite_url(tmp_path),
        "FINISHLINE_LLM_BASE_URL": llm.base_url,
        "FINISHLINE_SHUTDOWN_GRACE_S": str(grace_s),
        "FINISHLINE_MAX_CONCURRENT_RUNS": "1",
        "FINISHLINE_LOG_LEVEL": "INFO",
    }


async def test_sigterm_cancels_a_run_still_going_after_the_grace_period(tmp_path: Path) -> None:
    grace_s = 1.0
    async with (
        FakeLLMServer([FakeReply.finish("never", hang=True)]) as llm,
        AppProcess(tmp_path, process_env(tmp_path, llm, grace_s)) as app,
        httpx.AsyncClient(base_url=app.url(), timeout=15) as client,
        anyio.create_task_group() as tg,
    ):
        run_id = await start_run(client, {"task": "hang until shutdown"})
        streamed: list[SSE] = []
        stream_ended = anyio.Event()

        async def follow_stream() -> None:
            # read_sse raises (httpx.RemoteProtocolError) if the connection drops mid-body
            async with client.stream("GET", f"/runs/{run_id}/events") as response:
                async for event in read_sse(response):
                    streamed.append(event)
            stream_ended.set()

        tg.start_soon(follow_stream)
        await llm.wait_for_requests(1)  # the run is in its LLM call, the follower attached
        queued = (await client.post("/runs", json={"task": "wait for a slot"})).json()
        assert queued["status"] == "queued"  # one run at a time on this server

        # a POST whose body is still on its way when SIGTERM arrives: the only way in once
        # the server has begun to shut down (it closes its listening socket at once)
        late = LatePost(app.url())
        await tg.start(late.run)
        # a round trip on another connection: the server has read the late POST's head
        assert (await client.get("/healthz")).status_code == 200

        app.terminate()
        terminated = time.perf_counter()
        await app.wait_for_log("runs_draining")
        late.send_the_rest()
        code = await app.wait_exit(timeout_s=grace_s + EXIT_SLACK_S)
        exited = time.perf_counter() - terminated
        with anyio.fail_after(1):
            await stream_ended.wait()

    assert code in (0, -15)  # uvicorn re-raises the SIGTERM it handled
    assert grace_s <= exited < grace_s + EXIT_SLACK_S
    assert_one_terminal_at_the_end(streamed, "run.cancelled")
    assert [int(e.id or 0) for e in streamed] == list(range(1, len(streamed) + 1))
    refused = late.response
    assert refused is not None
    assert refused.status_code == 503, refused.text
    assert refused.json()["error"]["type"] == "shutting_down"

    # what the process left in its store: both runs cancelled (not interrupted), no other
    async with served_app(e2e_settings(store_url=sqlite_url(tmp_path))) as (_, reader):
        runs = (await reader.get("/runs")).json()["runs"]
        queued_events = [e.event for e in await follow(reader, queued["id"])]
    assert [(r["id"], r["status"]) for r in runs] == [
        (queued["id"], "cancelled"),
        (run_id, "cancelled"),
    ]
    assert all(r["error"] is None for r in runs)
    assert queued_events == ["run.queued", "run.cancelled"]


async def test_sigterm_lets_a_run_that_ends_within_the_grace_period_complete(
    tmp_path: Path,
) -> None:
    grace_s = 10.0
    async with FakeLLMServer([FakeReply.finish("made it", hang=True)]) as llm:
        env = {**process_env(tmp_path, llm, grace_s), "FINISHLINE_SSE_PING_S": "0.2"}
        async with (
            AppProcess(tmp_path, env) as app,
            httpx.AsyncClient(base_url=app.url(), timeout=15) as client,
            anyio.create_task_group() as tg,
        ):
            run_id = await start_run(client, {"task": "finish during the drain"})
            lines: list[str] = []  # the raw stream: events and keep-alive comments
            draining = False
            pings_in_drain = 0
            well_into_drain = anyio.Event()

            async def follow_stream() -> None:
                nonlocal pings_in_drain
                async with client.stream("GET", f"/runs/{run_id}/events") as response:
                    async for line in response.aiter_lines():
                        lines.append(line)
                        if draining and line.startswith(": ping"):
                            pings_in_drain += 1
                            if pings_in_drain == 2:
                                well_into_drain.set()

            tg.start_soon(follow_stream)
            await llm.wait_for_requests(1)

            app.terminate()
            terminated = time.perf_counter()
            await app.wait_for_log("runs_draining")
            draining = True
            with anyio.fail_after(5):
                await well_into_drain.wait()  # two keep-alives later the run is still held
            held = [line for line in lines if line.startswith("event: run.")]
            assert held == ["event: run.queued", "event: run.started"]  # no terminal yet
            llm.release()
            await app.wait_exit(timeout_s=grace_s)
            exited = time.perf_counter() - terminated

    types = [line.removeprefix("event: ") for line in lines if line.startswith("event: ")]
    assert types[:2] == ["run.queued", "run.started"]
    assert types[-1] == "run.completed"
    assert sum(t in TERMINAL for t in types) == 1
    last = json.loads([line for line in lines if line.startswith("data: ")][-1][6:])
    assert last["result"] == {"answer": "made it", "reason": "finished", "degraded": False}
    assert exited < grace_s / 2  # the drain waited for the run, not for the whole grace
