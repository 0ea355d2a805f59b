"""The bench's durable floor (`bench/durable_floor.py`, issue #29) writes what a finishline run
writes: the same store calls, for the same events, in the same order. When the recorder or
admission change what a run writes or where it waits, this fails until the floor follows."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import structlog

from app.main import create_app
from app.runs.stores.sqlite import SqliteRunStore
from app.runs.stores.sqlite_counters import SqliteCounters
from app.settings import Settings
from bench import durable_floor
from bench.service_client import scripted_body
from tests.fakes.serving import Served

WRITES = (
    "create",
    "append",
    "append_soon",
    "append_closing",
    "save_checkpoint",
    "save_checkpoint_soon",
)
COUNTS = ("add_usage", "admitted", "unadmitted")
"""The key's books (GET /usage, quotas): written by a run too, in the same commits."""


def recording(calls: list[tuple[str, str]], name: str, cls: type = SqliteRunStore) -> Any:
    original = getattr(cls, name)

    @functools.wraps(original)
    async def write(self: Any, *args: Any, **kwargs: Any) -> Any:
        if name in COUNTS:
            calls.append((name, ""))
        elif name == "create":
            first = kwargs.get("first_event")
            calls.append((name, str(first[0]) if first else ""))
        elif name.startswith("save_checkpoint"):
            calls.append((name, ""))
        else:
            record = "+record" if kwargs.get("record") is not None else ""
            calls.append((name, f"{args[1]}{record}"))
        return await original(self, *args, **kwargs)

    return write


async def one_run(app: Any) -> None:
    async with Served(app, lifespan="on") as served, httpx.AsyncClient(timeout=30) as client:
        answer = await client.post(served.url("/runs"), json=scripted_body(5))
        assert answer.status_code == 202, answer.text
        run_id = answer.json()["id"]
        with anyio.fail_after(30):
            async with client.stream("GET", served.url(f"/runs/{run_id}/events")) as stream:
                async for line in stream.aiter_lines():
                    if line in ("event: run.completed", "event: run.failed"):
                        break


async def test_the_durable_floor_writes_what_a_finishline_run_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[str, str]] = []
    for name in WRITES:
        monkeypatch.setattr(SqliteRunStore, name, recording(calls, name))
    for name in COUNTS:
        monkeypatch.setattr(SqliteCounters, name, recording(calls, name, SqliteCounters))
    settings = Settings(_env_file=None, store_url=f"sqlite:///{tmp_path / 'fl.db'}")
    await one_run(create_app(settings))
    finishline = list(calls)

    calls.clear()
    monkeypatch.setenv("FINISHLINE_STORE_URL", f"sqlite:///{tmp_path / 'floor.db'}")
    logging = structlog.get_config()  # the floor turns logging down for its process
    try:
        await one_run(durable_floor.create_app())
    finally:
        structlog.configure(**logging)
    assert calls == finishline
    assert finishline[:2] == [("add_usage", ""), ("create", "run.queued")]
    assert finishline[-1] == ("append_closing", "run.completed+record")
    assert sum(1 for name, _ in finishline if name == "save_checkpoint_soon") == 5
    assert ("append_soon", "run.started+record") in finishline
    assert sum(1 for name, _ in finishline if name == "add_usage") == 6  # the run, 5 calls
