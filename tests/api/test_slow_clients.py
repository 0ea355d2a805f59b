"""Slow clients cannot hold connections: a header block or a body trickled a byte at a time is
answered 408 and closed; an answer to a body nobody reads closes the connection; a client
that leaves mid-body is logged as its own doing. Real
uvicorn on loopback (in process with both of its HTTP protocols, and the service's own
command line as a child process) and raw sockets trickling bytes. The delay between the
bytes is the stimulus; every wait is bounded."""

from __future__ import annotations

import json
import logging
import re
import shlex
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import structlog
from anyio.abc import SocketStream

from app.api.protocols import UVICORN_ARGS
from app.main import create_app
from tests.api.kit import create, hanging, settings
from tests.fakes.process import AppProcess
from tests.fakes.serving import Served

ROOT = Path(__file__).resolve().parents[2]
PROTOCOLS = [pytest.param(False, id="h11"), pytest.param(True, id="httptools")]
QUICK = 1.0
"""Each deadline in the in-process tests; the bytes trickle five times faster than that
would need to cover it, so only a deadline can end the exchange."""


async def trickle(port: int, head: bytes, *, every_s: float, bound_s: float) -> bytes:
    """Send `head`, then one byte every `every_s` for as long as the server listens; return
    all it answered once it closed the connection (failing after `bound_s`)."""
    answer = b""
    with anyio.fail_after(bound_s):
        stream = await anyio.connect_tcp("127.0.0.1", port)
        async with stream, anyio.create_task_group() as tasks:
            tasks.start_soon(_drip, stream, head, every_s)
            while True:
                try:
                    answer += await stream.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionError):
                    break
            tasks.cancel_scope.cancel()
    return answer


async def _drip(stream: SocketStream, head: bytes, every_s: float) -> None:
    try:
        if head:
            await stream.send(head)
        while True:
            await anyio.sleep(every_s)  # the stimulus: a client this slow
            await stream.send(b"a")
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, ConnectionError):
        return  # the server closed the connection


def status_and_body(answer: bytes) -> tuple[int, dict[str, Any]]:
    head, _, body = answer.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1])
    return status, (json.loads(body) if body else {})


def served(httptools: bool, **overrides: Any) -> Served:
    config = settings(body_timeout_s=QUICK, **overrides)
    return Served(create_app(config), lifespan="on", header_timeout_s=QUICK, httptools=httptools)


@pytest.mark.parametrize("httptools", PROTOCOLS)
async def test_a_trickled_header_block_is_answered_408_and_closed(httptools: bool) -> None:
    async with served(httptools) as server:
        head = b"GET /healthz HTTP/1.1\r\nHost: test\r\nX-Slow: "
        answer = await trickle(server.port, head, every_s=QUICK / 5, bound_s=20)
        status, body = status_and_body(answer)
        assert status == 408
        assert body["error"]["type"] == "request_timeout"
        assert body["error"]["details"] == {"cap": QUICK}
        assert "headers did not arrive within 1 s" in body["error"]["message"]


@pytest.mark.parametrize("httptools", PROTOCOLS)
async def test_a_connection_that_never_sends_is_closed_without_an_answer(
    httptools: bool,
) -> None:
    async with served(httptools) as server:
        with anyio.fail_after(20):
            stream = await anyio.connect_tcp("127.0.0.1", server.port)
            async with stream:
                with pytest.raises((anyio.EndOfStream, ConnectionError)):
                    await stream.receive()


@pytest.mark.parametrize("httptools", PROTOCOLS)
async def test_a_trickled_body_is_answered_408_and_closed(httptools: bool) -> None:
    async with served(httptools) as server:
        head = (
            b"POST /runs HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
            b'Content-Length: 1000\r\n\r\n{"task": "'
        )
        answer = await trickle(server.port, head, every_s=QUICK / 5, bound_s=20)
        status, body = status_and_body(answer)
        assert status == 408
        assert body["error"]["type"] == "request_timeout"
        assert body["error"]["message"] == "the request body did not arrive within 1 s"
        assert b"connection: close" in answer.lower()


@pytest.mark.parametrize("httptools", PROTOCOLS)
async def test_a_body_no_route_reads_closes_the_connection_once_answered(
    httptools: bool,
) -> None:
    async with served(httptools) as server:
        head = b"GET /healthz HTTP/1.1\r\nHost: test\r\nContent-Length: 1000\r\n\r\n"
        answer = await trickle(server.port, head, every_s=QUICK / 5, bound_s=20)
        status, body = status_and_body(answer)
        assert (status, body["status"]) == (200, "ok")
        assert b"connection: close" in answer.lower()


@pytest.mark.parametrize("httptools", PROTOCOLS)
async def test_kept_alive_connections_and_long_streams_outlive_both_deadlines(
    httptools: bool,
) -> None:
    async with (
        served(httptools, sse_ping_s=QUICK / 4) as server,
        httpx.AsyncClient(base_url=server.url(), timeout=20) as client,
    ):
        run = await create(client, hanging())
        pings = 0
        with anyio.fail_after(20):
            async with client.stream("GET", f"/runs/{run['id']}/events") as response:
                assert response.status_code == 200
                async for line in response.aiter_lines():
                    pings += line.startswith(":")
                    if pings == 8:  # twice the deadlines, on one connection
                        break
        # the same client's connection, kept alive between these requests, still serves
        for _ in range(3):
            assert (await client.get("/healthz")).status_code == 200
        assert (await client.post(f"/runs/{run['id']}/cancel")).status_code == 202


# -- the service's own command line ---------------------------------------------------------


def test_every_command_line_that_serves_the_app_uses_the_header_deadline() -> None:
    flags = " ".join(UVICORN_ARGS)
    run = re.search(r"^run:.*?\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert run is not None
    assert flags in " ".join(shlex.split(run[1].replace("\\\n", " ")))
    cmd = re.search(r"^CMD (\[.*\])$", (ROOT / "Dockerfile").read_text(), re.MULTILINE)
    assert cmd is not None
    assert flags in " ".join(json.loads(cmd[1]))


async def test_a_byte_every_two_seconds_is_closed_within_30_s_by_the_default_deadlines(
    tmp_path: Path,
) -> None:
    """The service as make run and the image start it, with its default deadlines (10 s for
    headers, 15 s for a body): a header block and a body each trickled a byte every 2 s."""
    env = {"FINISHLINE_STORE_URL": "memory://"}
    async with AppProcess(tmp_path, env) as app, anyio.create_task_group() as tasks:
        answers: dict[str, bytes] = {}

        async def slow(name: str, head: bytes) -> None:
            answers[name] = await trickle(app.port, head, every_s=2.0, bound_s=30)

        tasks.start_soon(slow, "headers", b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Slow: ")
        json_head = b"POST /runs HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        body = json_head + b"Content-Length: 5000\r\n\r\n{"
        tasks.start_soon(slow, "body", body)
    assert status_and_body(answers["headers"])[0] == 408
    assert status_and_body(answers["body"])[1]["error"]["type"] == "request_timeout"


class Logged:
    """A structlog processor keeping what is logged (`capture_logs`' shape) and telling when
    one of `ends` is."""

    def __init__(self, *ends: str) -> None:
        self.entries: list[dict[str, Any]] = []
        self.ends = ends
        self.ended = anyio.Event()

    def __call__(self, logger: Any, method: str, event_dict: Any) -> Any:
        self.entries.append({**event_dict, "log_level": method})
        if event_dict["event"] in self.ends:
            self.ended.set()
        raise structlog.DropEvent


@pytest.mark.parametrize("httptools", PROTOCOLS)
async def test_a_client_that_leaves_mid_body_is_logged_as_its_own_doing(
    httptools: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """`Content-Length: 100`, 8 bytes, then the connection closed: one info line saying the
    request was abandoned; no error, no traceback (from finishline or from uvicorn)."""
    head = (
        b"POST /runs HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
        b"Content-Length: 100\r\n\r\n"
    )
    app = create_app(settings(log_level="INFO"))
    async with Served(app, lifespan="on", httptools=httptools) as server:
        logged = Logged("request_abandoned", "request_failed")
        structlog.configure(processors=[logged])  # the app's level filter stays
        stream = await anyio.connect_tcp("127.0.0.1", server.port)
        async with stream:
            await stream.send(head + b'{"task":')  # 8 of its 100 bytes, then closed
        with anyio.fail_after(10):
            await logged.ended.wait()

    (abandoned,) = [e for e in logged.entries if e["event"] == "request_abandoned"]
    assert abandoned == {
        "event": "request_abandoned",
        "log_level": "info",
        "method": "POST",
        "path": "/runs",
    }
    assert [e for e in logged.entries if e["log_level"] in ("error", "critical")] == []
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
