"""A replica killed mid-firing never gives a second run for that due time, nor none (DESIGN
§21): SIGKILLed between its claim and its run (a real process on SQLite and Redis), or gone
after its run was made and before its firing was settled (every store)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from app.runs.records import RunRecord
from app.runs.schedules.records import FiringOutcome, Schedule
from tests.api.kit import finishing, settings, wait_ended
from tests.schedules.kit import FUTURE, FakeClock, replica, store_url_of

ROOT = Path(__file__).resolve().parents[2]
NEXT_MINUTE = FUTURE + 30
SPEC = {"cron": "* * * * *", "run": finishing("once")}


@pytest.fixture(params=["memory", "sqlite", "redis", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return store_url_of(request, tmp_path)


async def runs_of(app: Any, schedule_id: str) -> list[dict[str, Any]]:
    runs = (await app.client.get("/runs")).json()["runs"]
    return [r for r in runs if r["schedule_id"] == schedule_id]


@pytest.mark.parametrize("store", ["sqlite", "redis", "postgres"])
async def test_a_replica_sigkilled_between_claim_and_run_gives_exactly_one_run(
    store: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = f"sqlite:///{tmp_path}/r.db"
    if store != "sqlite":
        url = request.getfixturevalue(f"{store}_url")
    clock = FakeClock()
    async with replica(settings(store_url=url)) as app:
        schedules = app.schedules(clock, name="survivor")
        schedule = await schedules.create(None, SPEC)
        doomed = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.schedules.doomed_replica",
            url,
            repr(NEXT_MINUTE),
            cwd=ROOT,
            stdout=asyncio.subprocess.PIPE,
        )
        assert doomed.stdout is not None
        line = await asyncio.wait_for(doomed.stdout.readline(), 30)
        assert line.split()[:2] == [b"claimed", schedule.id.encode()]
        doomed.send_signal(signal.SIGKILL)
        assert await asyncio.wait_for(doomed.wait(), 30) == -signal.SIGKILL
        (held,), _ = await schedules.firings(None, schedule.id, limit=5)
        assert (held.outcome, held.claimed_by) == (FiringOutcome.CLAIMED, "doomed")
        clock.now = NEXT_MINUTE + 1
        await schedules.scheduler.tick()
        if store != "sqlite":  # replicas: the dead one's lease must run out first
            assert (await schedules.firings(None, schedule.id, limit=5))[0][0].run_id is None
            clock.now = NEXT_MINUTE + 15
            await schedules.scheduler.tick()
        (fired,), _ = await schedules.firings(None, schedule.id, limit=5)
        assert (fired.outcome, fired.attempt, fired.claimed_by) == ("fired", 2, "survivor")
        assert [r["id"] for r in await runs_of(app, schedule.id)] == [fired.run_id]
        assert (await wait_ended(app.client, fired.run_id))["result"]["answer"] == "once"


async def test_a_claimant_gone_after_making_its_run_leaves_that_run_the_only_one(
    store_url: str,
) -> None:
    clock = FakeClock()
    async with replica(settings(store_url=store_url)) as app:
        first = app.schedules(clock, name="first")
        schedule = await first.create(None, SPEC)
        made = asyncio.Event()
        real_start = first.scheduler.start

        async def start_then_hang(s: Schedule, key: str) -> RunRecord:
            record = await real_start(s, key)
            made.set()
            await asyncio.Event().wait()  # gone before settling
            return record

        first.scheduler.start = start_then_hang
        clock.now = NEXT_MINUTE
        ticking = asyncio.create_task(first.scheduler.tick())
        await asyncio.wait_for(made.wait(), 10)
        ticking.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ticking
        (made_run,) = await runs_of(app, schedule.id)
        second = app.schedules(clock, name="second")
        clock.now = NEXT_MINUTE + 15  # past the first one's lease
        await second.scheduler.tick()
        (fired,), _ = await second.firings(None, schedule.id, limit=5)
        assert (fired.outcome, fired.attempt, fired.run_id) == ("fired", 2, made_run["id"])
        assert [r["id"] for r in await runs_of(app, schedule.id)] == [made_run["id"]]


@pytest.mark.parametrize("shared", ["redis", "postgres"])
async def test_three_replica_apps_on_one_store_start_one_run_per_due_time(
    shared: str, request: pytest.FixtureRequest
) -> None:
    """Three apps (each its own manager, placement and scheduler) on one Redis or one
    Postgres, racing on every due time: one run each."""
    clock = FakeClock()
    config = settings(store_url=request.getfixturevalue(f"{shared}_url"))
    async with replica(config) as a, replica(config) as b, replica(config) as c:
        replicas = [app.schedules(clock, name=name) for app, name in ((a, "a"), (b, "b"), (c, "c"))]
        schedule = await replicas[0].create(None, {**SPEC, "overlap": "allow"})
        for minute in range(4):
            clock.now = NEXT_MINUTE + 60 * minute
            await asyncio.gather(*(r.scheduler.tick() for r in reversed(replicas)))
        firings, _ = await replicas[1].firings(None, schedule.id, limit=10)
        assert [f.outcome for f in firings] == [FiringOutcome.FIRED] * 4
        runs = await runs_of(b, schedule.id)
        assert sorted(r["id"] for r in runs) == sorted(f.run_id for f in firings)
        assert {f.claimed_by for f in firings} <= {"a", "b", "c"}


async def test_a_takeover_after_the_body_changed_records_the_run_the_dead_claimant_made(
    store_url: str,
) -> None:
    clock = FakeClock()
    async with replica(settings(store_url=store_url)) as app:
        first = app.schedules(clock, name="first")
        schedule = await first.create(None, SPEC)
        made = asyncio.Event()
        real_start = first.scheduler.start

        async def start_then_hang(s: Schedule, key: str) -> RunRecord:
            record = await real_start(s, key)
            made.set()
            await asyncio.Event().wait()
            return record

        first.scheduler.start = start_then_hang
        clock.now = NEXT_MINUTE
        ticking = asyncio.create_task(first.scheduler.tick())
        await asyncio.wait_for(made.wait(), 10)
        ticking.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ticking
        (made_run,) = await runs_of(app, schedule.id)
        second = app.schedules(clock, name="second")
        stored = await second.store.get(schedule.id)
        assert stored is not None
        stored.run = finishing("changed since")  # as a PATCH would, keeping the due time
        assert await second.store.replace(stored)
        clock.now = NEXT_MINUTE + 15
        await second.scheduler.tick()
        (fired,), _ = await second.firings(None, schedule.id, limit=5)
        assert (fired.outcome, fired.run_id) == ("fired", made_run["id"])
        assert len(await runs_of(app, schedule.id)) == 1
