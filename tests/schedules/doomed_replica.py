"""A replica that claims the due time at `now` of every due schedule, says so on stdout, and
then hangs before its run is started: the test SIGKILLs it there.

    python -m tests.schedules.doomed_replica STORE_URL NOW
"""

from __future__ import annotations

import asyncio
import sys

from app.runs.backends import open_store
from app.runs.records import RunRecord
from app.runs.schedules.records import Schedule
from app.runs.schedules.scheduler import Scheduler, SchedulerOptions


async def main(url: str, now: float) -> None:
    store = open_store(url)
    await store.open()

    async def start(schedule: Schedule, key: str) -> RunRecord:
        print("claimed", schedule.id, key, flush=True)
        await asyncio.Event().wait()  # killed here, between the claim and the run
        raise AssertionError("unreachable")

    async def status_of(run_id: str) -> None:
        return None

    scheduler = Scheduler(
        store=store.schedules,
        start=start,
        status_of=status_of,
        options=SchedulerOptions(name="doomed", lease_s=15.0),
        clock=lambda: now,
    )
    await scheduler.tick()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], float(sys.argv[2])))
