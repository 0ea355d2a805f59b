"""finishline with timers on where a run waits: the breakdown of `bench/walltime.py --probe`.

`python -m uvicorn --factory bench.walltime_probe:create_app` serves `app.main.create_app`
(SQLite store) with these timers patched in, and `POST /_probe` answering what they saw since
the previous call (then forgetting it):

- `create_ms`: the POST's `store.create` (the run and its first event in one commit);
  `start_ms`: from that commit to the run's first model call;
- `model_ms`: each model call (`OpenAIChatModel.complete`: the request, the fake LLM's
  latency, the reply read and parsed);
- `settle_ms`: the run's end (`RunRecorder.settle`: its last queued writes and its terminal
  commit);
- per step, from the model's reply to the next model call of the run (`step_gap_ms`), split
  into the time the run awaited the store (`step_store_ms`: commits it waits for, their fsync
  and the queue in front of them) and the rest (`step_other_ms`: engine work and event-loop
  turns);
- the writer thread: each write's wait in the queue behind other writes (`write_queue_ms`),
  each transaction (`batch_ms`, and `fsync_ms`: its COMMIT), writes per transaction;
- event-loop lag: a 5 ms sleep's overshoot (`loop_lag_ms`), and the hand-back of a commit's
  outcome to the loop (`handoff_ms`);
- fan-out: publishing an event to its subscribers (`publish_us`).

Commits per run are the writer's commits over the runs that ended. Nothing here is used by
the service or the tests.
"""

from __future__ import annotations

import asyncio
import functools
import sqlite3
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import structlog
from fastapi import FastAPI

from app.llm.openai import OpenAIChatModel
from app.main import create_app as create_finishline
from app.runs.recorder import RunRecorder
from app.runs.stores import sqlite as sqlite_store
from app.runs.stores.fanout import Fanout
from app.runs.stores.sqlite_threads import GroupCommitWriter

SAMPLES: defaultdict[str, list[float]] = defaultdict(list)
COUNTS: defaultdict[str, int] = defaultdict(int)
STORES: list[sqlite_store.SqliteRunStore] = []  # the ones opened, for their commit count
_replied: dict[str, float] = {}  # run id -> when its last model reply came back
_waited: dict[str, float] = {}  # run id -> store waits since then
_created: dict[str, float] = {}  # run id -> when its create committed
_now = time.perf_counter


def _run_id() -> str | None:
    value = structlog.contextvars.get_contextvars().get("run_id")
    return value if isinstance(value, str) else None


def _store_wait(method: Callable[..., Any], name: str) -> Callable[..., Any]:
    @functools.wraps(method)
    async def timed(*args: Any, **kwargs: Any) -> Any:
        started = _now()
        try:
            return await method(*args, **kwargs)
        finally:
            took = _now() - started
            SAMPLES[name].append(took * 1000)
            run_id = _run_id()
            if run_id is not None and run_id in _waited:
                _waited[run_id] += took

    return timed


def _created_at(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    async def timed(*args: Any, **kwargs: Any) -> Any:
        answer = await method(*args, **kwargs)
        _created[args[1].id] = _now()  # (self, record)
        return answer

    return timed


def _model_call(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    async def timed(*args: Any, **kwargs: Any) -> Any:
        run_id = _run_id()
        if run_id is not None and run_id in _replied:
            gap = _now() - _replied.pop(run_id)
            store = _waited.pop(run_id, 0.0)
            SAMPLES["step_gap_ms"].append(gap * 1000)
            SAMPLES["step_store_ms"].append(store * 1000)
            SAMPLES["step_other_ms"].append((gap - store) * 1000)
        elif run_id is not None and run_id in _created:
            SAMPLES["start_ms"].append((_now() - _created.pop(run_id)) * 1000)
        called = _now()
        try:
            return await method(*args, **kwargs)
        finally:
            SAMPLES["model_ms"].append((_now() - called) * 1000)
            if run_id is not None:
                _replied[run_id] = _now()
                _waited[run_id] = 0.0

    return timed


class _TimedConnection:
    """The writer's connection, timing its COMMITs (the fsync, in WAL mode FULL)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def execute(self, sql: str, *args: Any) -> Any:
        if sql != "COMMIT":
            return self._conn.execute(sql, *args)
        started = _now()
        try:
            return self._conn.execute(sql, *args)
        finally:
            SAMPLES["fsync_ms"].append((_now() - started) * 1000)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def _patch_writer() -> None:
    submit, commit, to_loop = (
        GroupCommitWriter.submit,
        GroupCommitWriter._commit,
        GroupCommitWriter._to_loop,
    )

    def timed_submit(
        self: GroupCommitWriter, apply: Any, after_commit: Any = None, **options: Any
    ) -> Any:
        queued = _now()

        def applied(conn: Any) -> Any:
            SAMPLES["write_queue_ms"].append((_now() - queued) * 1000)  # (list.append: atomic)
            return apply(conn)

        return submit(self, applied, after_commit, **options)

    def timed_commit(self: GroupCommitWriter, conn: sqlite3.Connection, batch: list[Any]) -> None:
        started = _now()
        commit(self, _TimedConnection(conn), batch)  # type: ignore[arg-type]
        SAMPLES["batch_ms"].append((_now() - started) * 1000)
        SAMPLES["batch_writes"].append(float(len(batch)))

    def timed_to_loop(self: GroupCommitWriter, callback: Any, *args: Any) -> None:
        sent = _now()

        def handed(*inner: Any) -> None:
            SAMPLES["handoff_ms"].append((_now() - sent) * 1000)
            callback(*inner)

        to_loop(self, handed, *args)

    GroupCommitWriter.submit = timed_submit  # type: ignore[method-assign]
    GroupCommitWriter._commit = timed_commit  # type: ignore[method-assign]
    GroupCommitWriter._to_loop = timed_to_loop  # type: ignore[method-assign]


def _patch() -> None:
    store = sqlite_store.SqliteRunStore
    opening = store.open

    async def registered(self: sqlite_store.SqliteRunStore) -> None:
        await opening(self)
        STORES.append(self)

    store.open = registered  # type: ignore[method-assign]
    store.create = _created_at(_store_wait(store.create, "create_ms"))  # type: ignore[method-assign]
    for name in ("append", "save_checkpoint", "save_checkpoint_soon", "append_soon"):
        if hasattr(store, name):
            setattr(store, name, _store_wait(getattr(store, name), f"{name}_ms"))
    RunRecorder.settle = _store_wait(RunRecorder.settle, "settle_ms")  # type: ignore[method-assign]
    OpenAIChatModel.complete = _model_call(OpenAIChatModel.complete)  # type: ignore[method-assign]
    publish = Fanout.publish

    def timed_publish(self: Fanout, event: Any) -> None:
        started = _now()
        publish(self, event)
        SAMPLES["publish_us"].append((_now() - started) * 1e6)
        if event.terminal:
            COUNTS["runs_ended"] += 1

    Fanout.publish = timed_publish  # type: ignore[method-assign]
    _patch_writer()


async def _watch_loop() -> None:
    while True:
        started = _now()
        await asyncio.sleep(0.005)
        SAMPLES["loop_lag_ms"].append((_now() - started - 0.005) * 1000)


def create_app() -> FastAPI:
    _patch()
    app = create_finishline()
    watcher: list[asyncio.Task[None]] = []

    async def probe() -> dict[str, Any]:
        if not watcher:
            watcher.append(asyncio.create_task(_watch_loop()))
        commits = sum(s.commits for s in STORES)
        taken = {"samples": {k: list(v) for k, v in SAMPLES.items()}, "counts": dict(COUNTS)}
        taken["counts"]["commits"] = commits - COUNTS.get("commits_before", 0)
        SAMPLES.clear()
        COUNTS.clear()
        COUNTS["commits_before"] = commits
        return taken

    app.add_api_route("/_probe", probe, methods=["POST"])
    return app
