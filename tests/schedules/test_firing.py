"""Firing (DESIGN §21) on every store, on a clock the test moves: one run per due time with
three schedulers racing, overlap skip, misfire once, a quota refusal recorded, a run body no
longer valid, schedules disabled, DST in a named zone, and a firing whose claimant died after
its run was made."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from app.runs.schedules.records import FiringOutcome
from tests.api.kit import finishing, hanging, settings, wait_ended
from tests.schedules.kit import FUTURE, FakeClock, replica, store_url_of

MINUTE = "* * * * *"
NEXT_MINUTE = FUTURE + 30  # FUTURE is hh:59:30


@pytest.fixture(params=["memory", "sqlite", "redis", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return store_url_of(request, tmp_path)


def spec(cron: str = MINUTE, run: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    return {"cron": cron, "run": run or finishing("tick"), **fields}


async def test_three_schedulers_racing_start_one_run_per_due_time(store_url: str) -> None:
    clock = FakeClock()
    async with replica(settings(store_url=store_url)) as app:
        shared = store_url.startswith(("redis", "postgresql"))
        racing = [app.schedules(clock, name=f"r{i}" if shared else "r") for i in range(3)]
        schedule = await racing[0].create(None, spec(overlap="allow"))
        for minute in range(3):
            clock.now = NEXT_MINUTE + 60 * minute + 0.5
            await asyncio.gather(*(s.scheduler.tick() for s in racing))
        firings, _ = await racing[0].firings(None, schedule.id, limit=10)
        assert [f.outcome for f in firings] == [FiringOutcome.FIRED] * 3
        assert [f.due_at for f in firings] == [NEXT_MINUTE + 120, NEXT_MINUTE + 60, NEXT_MINUTE]
        runs = (await app.client.get("/runs")).json()["runs"]
        assert sorted(r["id"] for r in runs) == sorted(f.run_id for f in firings)
        assert {r["schedule_id"] for r in runs} == {schedule.id}


async def test_overlap_skip_passes_a_due_time_while_the_previous_run_is_active(
    store_url: str,
) -> None:
    clock = FakeClock()
    async with replica(settings(store_url=store_url)) as app:
        schedules = app.schedules(clock)
        schedule = await schedules.create(None, spec(run=hanging()))
        clock.now = NEXT_MINUTE
        await schedules.scheduler.tick()
        clock.now += 60
        await schedules.scheduler.tick()
        skipped, fired = (await schedules.firings(None, schedule.id, limit=5))[0]
        assert fired.outcome is FiringOutcome.FIRED
        assert skipped.outcome is FiringOutcome.SKIPPED_OVERLAP
        assert skipped.details == {"previous_run_id": fired.run_id}
        await app.client.post(f"/runs/{fired.run_id}/cancel")
        await wait_ended(app.client, fired.run_id)
        clock.now += 60
        await schedules.scheduler.tick()
        latest = (await schedules.firings(None, schedule.id, limit=1))[0][0]
        assert latest.outcome is FiringOutcome.FIRED


@pytest.mark.parametrize(
    ("cron", "misfire", "late_s", "outcome", "due_at", "missed", "next_due"),
    [
        # ten due times passed: the latest (now) fires once, the nine before it counted
        (MINUTE, "run_once", 600, "fired", NEXT_MINUTE + 600, 10, NEXT_MINUTE + 660),
        (MINUTE, "skip", 600, "missed", NEXT_MINUTE + 600, 10, NEXT_MINUTE + 660),
        # 09:00 passed two hours ago: past the hour of grace
        ("0 9 * * *", "run_once", 7200, "missed", NEXT_MINUTE, 0, NEXT_MINUTE + 86400),
        ("0 9 * * *", "run_once", 1800, "fired", NEXT_MINUTE, 0, NEXT_MINUTE + 86400),
    ],
)
async def test_due_times_missed_while_no_scheduler_ran_fire_once_within_the_grace(
    store_url: str,
    cron: str,
    misfire: str,
    late_s: float,
    outcome: str,
    due_at: float,
    missed: int,
    next_due: float,
) -> None:
    clock = FakeClock()
    async with replica(settings(store_url=store_url)) as app:
        schedules = app.schedules(clock, grace_s=3600)
        schedule = await schedules.create(None, spec(cron, misfire=misfire))
        clock.now = NEXT_MINUTE + late_s  # a scheduler coming back after a down time
        await schedules.scheduler.tick()
        await schedules.scheduler.tick()
        (firing,), _ = await schedules.firings(None, schedule.id, limit=5)
        assert (firing.outcome, firing.due_at, firing.missed) == (outcome, due_at, missed)
        assert (firing.run_id is not None) == (outcome == "fired")
        assert (await schedules.get(None, schedule.id)).next_due_at == next_due


async def test_a_quota_refusal_is_recorded_and_the_next_due_time_fires_again(
    store_url: str,
) -> None:
    clock = FakeClock()
    key = {"Authorization": "Bearer key-one-8f2a"}
    owned = settings(store_url=store_url, api_keys=["key-one-8f2a"], quota_concurrent_runs=1)
    async with replica(owned) as app:
        schedules = app.schedules(clock)
        made = await app.client.post("/schedules", json=spec(overlap="allow"), headers=key)
        firings = f"/schedules/{made.json()['id']}/firings"
        blocker = (await app.client.post("/runs", json=hanging(), headers=key)).json()
        clock.now = NEXT_MINUTE
        await schedules.scheduler.tick()
        (refused,) = (await app.client.get(firings, headers=key)).json()["firings"]
        assert (refused["outcome"], refused["run_id"]) == ("refused", None)
        assert refused["details"]["quota"] == "concurrent_runs"
        assert "quota concurrent_runs exceeded" in refused["reason"]
        await app.client.post(f"/runs/{blocker['id']}/cancel", headers=key)
        await wait_ended(app.client, blocker["id"], headers=key)
        clock.now += 60
        await schedules.scheduler.tick()
        latest = (await app.client.get(firings, headers=key)).json()["firings"][0]
        assert latest["outcome"] == "fired"
        assert (await wait_ended(app.client, latest["run_id"], headers=key))[
            "status"
        ] == "completed"


async def test_a_body_the_server_no_longer_accepts_and_disabled_schedules_are_recorded(
    store_url: str,
) -> None:
    clock = FakeClock()
    async with replica(settings(store_url=store_url)) as app:
        schedules = app.schedules(clock, enabled=False)
        schedule = await schedules.create(None, spec(run=finishing(settings={"max_steps": 50})))
        clock.now = NEXT_MINUTE
        await schedules.scheduler.tick()
        (disabled,), _ = await schedules.firings(None, schedule.id, limit=5)
        assert (disabled.outcome, disabled.run_id) == (FiringOutcome.DISABLED, None)
        # the server's cap changes under the stored schedule: its next firing is refused
        app.settings.max_steps_limit = 10
        clock.now += 60
        await app.schedules(clock).scheduler.tick()
        invalid = (await schedules.firings(None, schedule.id, limit=1))[0][0]
        assert invalid.outcome is FiringOutcome.INVALID
        assert invalid.reason is not None
        assert invalid.reason.startswith("run.settings.max_steps")


async def test_dst_in_a_named_zone_fires_as_cronsim_documents(store_url: str) -> None:
    """Europe/Paris, 02:30 daily: on 2031-03-30 02:00 CET jumps to 03:00 CEST (no 02:30), the
    job runs at the jump; on 2031-10-26 02:00-03:00 happens twice, the job runs once."""
    clock = FakeClock()
    async with replica(settings(store_url=store_url)) as app:
        schedules = app.schedules(clock, grace_s=0)
        clock.at("2031-03-29T12:00:00+00:00")
        schedule = await schedules.create(
            None, spec("30 2 * * *", timezone="Europe/Paris", overlap="allow")
        )
        for _ in range(96):  # every half hour, as a scheduler on time would
            clock.now += 1800
            await schedules.scheduler.tick()
        clock.at("2031-10-25T12:00:00+00:00")
        await schedules.update(None, schedule.id, {})  # its next due time from now
        for _ in range(48):
            clock.now += 1800
            await schedules.scheduler.tick()
        firings, _ = await schedules.firings(None, schedule.id, limit=9)
        assert {f.outcome for f in firings} == {FiringOutcome.FIRED}
        fired = [f.due_at for f in firings]
        assert [datetime.fromtimestamp(t, UTC).isoformat() for t in reversed(fired)] == [
            "2031-03-30T01:00:00+00:00",  # 03:00 CEST, the jump
            "2031-03-31T00:30:00+00:00",  # 02:30 CEST
            "2031-10-26T00:30:00+00:00",  # 02:30 CEST, the first pass; not 01:30 UTC
        ]


async def test_each_firing_continues_the_schedules_thread(store_url: str) -> None:
    clock = FakeClock()
    async with replica(settings(store_url=store_url)) as app:
        schedules = app.schedules(clock)
        digest = finishing("digest", thread_id="weekly-digest")
        schedule = await schedules.create(None, spec("0 9 * * MON", run=digest))
        runs = []
        for week in range(2):
            clock.now = NEXT_MINUTE + week * 7 * 86400  # 2031-01-06 is a Monday
            await schedules.scheduler.tick()
            firing = (await schedules.firings(None, schedule.id, limit=1))[0][0]
            assert firing.run_id is not None
            runs.append(await wait_ended(app.client, firing.run_id))
        assert [r["thread_id"] for r in runs] == ["weekly-digest"] * 2
        assert runs[1]["previous_run_id"] == runs[0]["id"]
        thread = (await app.client.get("/threads/weekly-digest")).json()
        assert (thread["runs"], thread["latest_run_id"]) == (2, runs[1]["id"])


async def test_no_due_time_before_starts_at_nor_after_ends_at(store_url: str) -> None:
    clock = FakeClock()
    async with replica(settings(store_url=store_url)) as app:
        schedules = app.schedules(clock, grace_s=0)
        window = {
            "starts_at": datetime.fromtimestamp(NEXT_MINUTE + 120, UTC),
            "ends_at": datetime.fromtimestamp(NEXT_MINUTE + 180, UTC),
        }
        schedule = await schedules.create(None, spec(overlap="allow", **window))
        assert schedule.next_due_at == NEXT_MINUTE + 120  # starts_at itself is due
        for minute in range(6):
            clock.now = NEXT_MINUTE + 60 * minute
            await schedules.scheduler.tick()
        firings, _ = await schedules.firings(None, schedule.id, limit=10)
        assert [f.due_at for f in firings] == [NEXT_MINUTE + 180, NEXT_MINUTE + 120]
        assert (await schedules.get(None, schedule.id)).next_due_at is None
        ended = await schedules.create(
            None, spec(ends_at=datetime.fromtimestamp(NEXT_MINUTE - 1, UTC))
        )
        assert ended.next_due_at is None


async def test_a_schedule_whose_firing_fails_on_a_bug_does_not_stop_the_others() -> None:
    clock = FakeClock()
    async with replica(settings()) as app:
        schedules = app.schedules(clock)
        broken = await schedules.create(None, spec(run=finishing("never")))
        working = await schedules.create(None, spec(run=finishing("still")))
        real_start = schedules.scheduler.start

        async def start(schedule: Any, key: str) -> Any:
            if schedule.id == broken.id:
                raise RuntimeError("a bug")
            return await real_start(schedule, key)

        schedules.scheduler.start = start
        clock.now = NEXT_MINUTE
        with capture_logs() as logs:
            await schedules.scheduler.tick()
        assert [e["schedule_id"] for e in logs if e["event"] == "schedule_firing_failed"] == [
            broken.id
        ]
        (fired,), _ = await schedules.firings(None, working.id, limit=5)
        assert fired.outcome is FiringOutcome.FIRED
