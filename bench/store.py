"""The event log: appends per second to SQLite with the service's durability, and replay.

The store is `SqliteRunStore` as the service opens it (WAL, `synchronous=FULL`, one writer
thread with group commit): `append` returns, and subscribers see the event, only after the
transaction holding it committed and the WAL was fsynced, so a crash (process, OS or power)
loses only appends nobody was told about.

1. Appends/s with N appenders at once (N runs each appending in a loop, each append awaited
   before the next, as RunManager does): the rate, and events per commit (group commit).
2. Replay of a 10,000-event run, from `Last-Event-ID: 0` and from the middle (5,000), through
   the HTTP API (SSE, a server process on that file) and through the store alone
   (`subscribe`).

    python -m bench.store [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from app.engine.events import EventType
from app.engine.policies import Limits
from app.runs.records import RunRecord, new_run_id
from app.runs.spec import RunRequest
from app.runs.stores.sqlite import SqliteRunStore
from bench.common import fmt, machine, machine_line, say, summary, table, write_results
from bench.procs import Server

PAYLOAD = {
    "call_id": "call_0_0",
    "tool": "calculator",
    "content": "42" * 60,
    "is_error": False,
    "truncated": False,
    "original_chars": 120,
    "shown_chars": 120,
    "duration_ms": 0,
    "repeated": False,
    "timed_out": False,
    "model_content": None,
}
REPLAY_EVENTS = 10_000


def _record() -> RunRecord:
    return RunRecord(
        id=new_run_id(), request=RunRequest(task="bench"), model="scripted", settings=Limits()
    )


async def appends(path: Path, appenders: int, per_appender: int) -> dict[str, Any]:
    store = SqliteRunStore(str(path))
    await store.open()
    try:
        records = [_record() for _ in range(appenders)]
        for record in records:
            await store.create(record)
        commits = store.commits

        async def appender(run_id: str) -> None:
            for _ in range(per_appender):
                await store.append(run_id, EventType.OBSERVATION, 1, PAYLOAD)

        started = time.perf_counter()
        await asyncio.gather(*(appender(r.id) for r in records))
        elapsed = time.perf_counter() - started
        events = appenders * per_appender
        return {
            "appenders": appenders,
            "events": events,
            "seconds": elapsed,
            "per_s": events / elapsed,
            "per_commit": events / max(store.commits - commits, 1),
        }
    finally:
        await store.close()


async def fill(path: Path) -> str:
    """A terminal run of REPLAY_EVENTS events in a fresh store file; its id."""
    store = SqliteRunStore(str(path))
    await store.open()
    try:
        record = _record()
        record.status = record.status.COMPLETED
        await store.create(record)

        async def chunk(start: int, count: int) -> None:
            for _ in range(count):
                await store.append(record.id, EventType.OBSERVATION, 1, PAYLOAD)

        # appends of one run are queued in call order: one appender keeps seqs in order
        await chunk(0, REPLAY_EVENTS - 1)
        await store.append(record.id, EventType.RUN_COMPLETED, 1, {"usage": {}, "result": {}})
        return record.id
    finally:
        await store.close()


async def replay_store(path: Path, run_id: str, after: int, rounds: int) -> list[float]:
    store = SqliteRunStore(str(path))
    await store.open()
    try:
        times = []
        for _ in range(rounds):
            started = time.perf_counter()
            count = 0
            async for _event in store.subscribe(run_id, after=after):
                count += 1
            times.append((time.perf_counter() - started) * 1000)
            assert count == REPLAY_EVENTS - after, count
        return times
    finally:
        await store.close()


def replay_http(url: str, run_id: str, after: int, rounds: int) -> list[float]:
    times = []
    with httpx.Client(base_url=url, timeout=60) as client:
        for _ in range(rounds):
            started = time.perf_counter()
            count = 0
            headers = {"Accept": "text/event-stream", "Last-Event-ID": str(after)}
            with client.stream("GET", f"/runs/{run_id}/events", headers=headers) as stream:
                for line in stream.iter_lines():
                    if line.startswith("id:"):
                        count += 1
            times.append((time.perf_counter() - started) * 1000)
            assert count == REPLAY_EVENTS - after, count
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    info = machine()
    workdir = Path(tempfile.mkdtemp(prefix="finishline-store-"))
    rounds = 3 if args.quick else 7
    total = 2_000 if args.quick else 10_000
    try:
        rates = []
        for n in (1, 10, 100, 1000):
            say(f"store bench: {n} appenders")
            rates.append(asyncio.run(appends(workdir / f"appends-{n}.db", n, max(total // n, 5))))
        say("store bench: replay")
        db = workdir / "replay.db"
        run_id = asyncio.run(fill(db))
        store_times = {a: asyncio.run(replay_store(db, run_id, a, rounds)) for a in (0, 5000)}
        server = Server(workdir, {"FINISHLINE_STORE_URL": f"sqlite:///{db}"})
        server.start()
        try:
            replay_http(server.url, run_id, 0, 1)  # warm-up
            http_times = {a: replay_http(server.url, run_id, a, rounds) for a in (0, 5000)}
        finally:
            server.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    rows = [
        [
            r["appenders"],
            f"{r['events']:,}",
            fmt(r["per_s"], 0),
            fmt(r["per_commit"], 1),
            fmt(r["seconds"] * 1e6 / r["events"] * r["appenders"], 0),
        ]
        for r in rates
    ]
    replay_rows = []
    for where, times in (
        ("HTTP SSE (server process)", http_times),
        ("store.subscribe", store_times),
    ):
        for after, values in times.items():
            s = summary(values)
            replay_rows.append(
                [
                    where,
                    f"{after:,}",
                    f"{REPLAY_EVENTS - after:,}",
                    fmt(s["median"]),
                    f"{fmt(s['min'])}–{fmt(s['max'])}",
                    fmt((REPLAY_EVENTS - after) / s["median"] * 1000, 0),
                ]
            )
    markdown = "\n".join(
        [
            "# The event log (SQLite, as the service uses it)",
            "",
            machine_line(info),
            "",
            "Durability: WAL with `synchronous=FULL` and group commit (one writer thread; "
            "whatever is queued commits in one transaction). An append returns, and "
            "subscribers see the event, only after its transaction committed and the WAL was "
            "fsynced: a crash of the process, the OS or the power loses only appends that "
            "were never acknowledged, so nothing a client saw. Payload: an observation event "
            f"({len(str(PAYLOAD))} chars of JSON).",
            "",
            "## Appends",
            "",
            table(
                [
                    "appenders at once",
                    "events",
                    "events/s",
                    "events per commit",
                    "µs per append (one appender's view)",
                ],
                rows,
            ),
            "",
            f"## Replay of a {REPLAY_EVENTS:,}-event run",
            "",
            table(
                ["through", "after (Last-Event-ID)", "events", "median ms", "min–max", "events/s"],
                replay_rows,
            ),
        ]
    )
    write_results(
        "store-quick" if args.quick else "store",
        markdown,
        {
            "machine": info,
            "appends": rates,
            "replay_http_ms": http_times,
            "replay_store_ms": store_times,
        },
    )
    print(markdown)


if __name__ == "__main__":
    main()
