"""What the scheduler costs when nothing is due (issue #38): its loop, as the service runs it
(`Scheduler.serve`, polling every FINISHLINE_SCHEDULE_POLL_S), over a store holding N
schedules none of which is due, for T seconds of wall time; the process's CPU time (every
thread: SQLite reads run on reader threads) against the same T of an idle event loop.

    python -m bench.schedules [--schedules 1000] [--seconds 10] [--stores memory,sqlite]
        [--redis redis://127.0.0.1:PORT/0]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from app.runs.backends import open_store
from app.runs.schedules.records import Schedule
from app.runs.schedules.scheduler import Scheduler, SchedulerOptions
from bench.common import fmt, machine, machine_line, say, table, write_results

FAR = time.time() + 365 * 86400.0


async def _cpu_over(seconds: float, scheduler: Scheduler | None) -> tuple[float, int]:
    """CPU seconds of the process over `seconds` of wall time, and the ticks made."""
    ticks = 0
    task = None
    if scheduler is not None:
        tick = scheduler.tick

        async def counted() -> float | None:
            nonlocal ticks
            ticks += 1
            return await tick()

        scheduler.tick = counted  # type: ignore[method-assign]
        task = asyncio.create_task(scheduler.serve())
    await asyncio.sleep(0.5)  # past the first tick's warm-up
    ticks = 0
    start = time.process_time()
    await asyncio.sleep(seconds)
    used = time.process_time() - start
    if task is not None:
        task.cancel()
    return used, ticks


async def measure(url: str, schedules: int, seconds: float) -> dict[str, Any]:
    store = open_store(url)
    await store.open()
    try:
        for i in range(schedules):
            await store.schedules.insert(
                Schedule(
                    id=f"sch_{i:024d}",
                    cron="0 9 * * *",
                    run={"task": "t"},
                    next_due_at=FAR + i,
                )
            )

        async def nothing(*_: Any) -> Any:
            raise AssertionError("nothing is due")

        scheduler = Scheduler(
            store=store.schedules,
            start=nothing,
            status_of=nothing,
            options=SchedulerOptions(name="bench"),
        )
        idle, _ = await _cpu_over(seconds, None)
        busy, ticks = await _cpu_over(seconds, scheduler)
    finally:
        await store.close()
    return {
        "store": url.split("://")[0],
        "schedules": schedules,
        "seconds": seconds,
        "idle_cpu_s": idle,
        "scheduler_cpu_s": busy,
        "ticks": ticks,
        "cpu_ms_per_s": (busy - idle) * 1000 / seconds,
        "cpu_us_per_tick": (busy - idle) * 1e6 / max(ticks, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.schedules")
    parser.add_argument("--schedules", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--stores", default="memory,sqlite")
    parser.add_argument("--redis", help="also a Redis store at this URL (its data is added to)")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        urls = [
            "memory://" if s == "memory" else f"sqlite:///{Path(tmp) / 'bench.db'}"
            for s in args.stores.split(",")
        ]
        urls += [args.redis] if args.redis else []
        for url in urls:
            say("measuring", url.split("://")[0])
            rows.append(asyncio.run(measure(url, args.schedules, args.seconds)))
    info = machine()
    markdown = "\n\n".join(
        [
            "# The scheduler when nothing is due (issue #38)",
            machine_line(info),
            table(
                ["store", "schedules", "ticks", "CPU ms / s of wall", "CPU µs / tick"],
                [
                    (
                        r["store"],
                        r["schedules"],
                        r["ticks"],
                        fmt(r["cpu_ms_per_s"], 3),
                        fmt(r["cpu_us_per_tick"], 0),
                    )
                    for r in rows
                ],
            ),
        ]
    )
    say(write_results("schedules", markdown, {"machine": info, "rows": rows}))
    print(markdown)


if __name__ == "__main__":
    main()
