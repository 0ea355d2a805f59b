"""The contract of the `Quotas` seam (DESIGN §13), run against each side: this process's own
(`LocalQuotas`, over a memory and an SQLite store) and the replicas' (`RedisQuotas`, a real
redis-server). What admission and the runs rely on whichever side a deployment has: each
quota refuses past its limit with its name, limit, use and when to retry; concurrent
admissions never pass a quota together (in one process, and across replicas on Redis); a
share not used is given back; counts survive a restart. Time is a clock the test moves."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest

from app.runs.errors import QuotaExceededError
from app.runs.quotas.local import LocalQuotas
from app.runs.quotas.seam import QuotaLimits, Quotas, until_tomorrow_s, utc_day
from app.runs.records import RunRecord, RunStatus, new_run_id
from app.runs.replicas.postgres_quotas import PostgresQuotas
from app.runs.replicas.redis_quotas import RedisQuotas
from app.runs.store import DayUsage, RunStore
from app.runs.stores.memory import MemoryRunStore
from app.runs.stores.postgres import PostgresRunStore
from app.runs.stores.redis_store import RedisRunStore
from app.runs.stores.sqlite import SqliteRunStore

BOUND_S = 10  # a failure bound, not a wait
NOON = datetime(2026, 3, 14, 12, 0, tzinfo=UTC).timestamp()
KEY = "a" * 32  # a key id, as app.api.auth.owner_of makes them


class Clock:
    def __init__(self) -> None:
        self.now = NOON

    def __call__(self) -> float:
        return self.now


@dataclass
class Side:
    store: RunStore
    quotas: Quotas


Make = Callable[[QuotaLimits], Side]
"""Another process on the same store (a restart, or another replica): its own side."""


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture(params=["memory", "sqlite", "redis", "postgres"])
async def make(request: pytest.FixtureRequest, tmp_path: Path, clock: Clock) -> AsyncIterator[Make]:
    stores: list[RunStore] = []
    memory = MemoryRunStore()
    pg_url = request.getfixturevalue("postgres_url") if request.param == "postgres" else ""

    def side(limits: QuotaLimits) -> Side:
        store: RunStore
        if request.param == "memory":
            store = memory  # one process: a "restart" keeps nothing but what it shares
        elif request.param == "sqlite":
            store = SqliteRunStore(str(tmp_path / "q.db"))
        elif request.param == "postgres":
            store = PostgresRunStore(pg_url)
        else:
            store = RedisRunStore(request.getfixturevalue("redis_url"))
        stores.append(store)
        if isinstance(store, RedisRunStore):
            return Side(store, RedisQuotas(store, limits, clock))
        if isinstance(store, PostgresRunStore):
            return Side(store, PostgresQuotas(store, limits, clock))
        return Side(store, LocalQuotas(store, limits, clock))

    try:
        yield side
    finally:
        for store in stores:
            await store.close()


async def opened(make: Make, **limits: float) -> Side:
    side = make(QuotaLimits(**limits))  # type: ignore[arg-type]
    await side.store.open()
    return side


def record(owner: str | None) -> RunRecord:
    return RunRecord.model_validate(
        {
            "id": new_run_id(),
            "owner": owner,
            "request": {"task": "t"},
            "model": "scripted",
            "settings": {},
        }
    )


async def admit(side: Side, owner: str | None = KEY) -> RunRecord:
    """A run admitted and stored, as `Admission.create` does it."""
    run = record(owner)
    async with side.quotas.admit(owner, run.id) as share:
        await side.store.create(run)
        share.made()
    return run


async def refusal(side: Side, owner: str | None = KEY) -> QuotaExceededError:
    with pytest.raises(QuotaExceededError) as refused:
        await admit(side, owner)
    return refused.value


async def spend(side: Side, tokens: int, cost: float = 0.0, owner: str | None = KEY) -> None:
    call = DayUsage(llm_calls=1, prompt_tokens=tokens, cost_usd=cost)
    await (await side.quotas.spend(owner, call))


# -- without quotas ----------------------------------------------------------------------------


async def test_without_quotas_every_run_is_admitted_and_counted(make: Make) -> None:
    side = await opened(make)
    for _ in range(5):
        await admit(side)
    await spend(side, 1500, 0.25)
    usage = await side.quotas.usage(KEY)
    assert (usage.day, usage.used.runs, usage.used.total_tokens) == ("2026-03-14", 5, 1500)
    assert usage.used.cost_usd == pytest.approx(0.25)
    assert usage.concurrent_runs == 5
    assert usage.quotas() == {}
    assert await side.quotas.allowance(KEY) is None  # no day quota: nothing to read


async def test_without_quotas_an_admission_that_made_no_run_is_not_counted(make: Make) -> None:
    side = await opened(make)
    async with side.quotas.admit(KEY, new_run_id()):
        pass  # no run made (on Postgres, the count's write is not even made yet)
    await admit(side)
    assert (await side.quotas.usage(KEY)).used.runs == 1


# -- concurrent runs ---------------------------------------------------------------------------


async def test_a_key_holds_at_most_its_concurrent_runs_and_an_ended_one_frees_a_place(
    make: Make,
) -> None:
    side = await opened(make, concurrent_runs=2)
    first = await admit(side)
    await admit(side)
    refused = await refusal(side)
    assert (refused.quota, refused.retry_after_s) == ("concurrent_runs", 5)
    assert refused.details == {
        "quota": "concurrent_runs",
        "limit": 2,
        "used": 2,
        "retry_after_s": 5,
    }
    await admit(side, owner="b" * 32)  # another key's own quota
    await admit(side, owner=None)  # auth off: one tenant of its own

    first.status = RunStatus.REQUIRES_ACTION  # waiting for a person still counts
    await side.store.save(first)
    await refusal(side)
    await ended(side, first)
    await admit(side)
    assert (await side.quotas.usage(KEY)).quotas() == {"concurrent_runs": (2, 2)}


async def test_forty_admissions_at_once_pass_a_concurrent_quota_of_three_exactly(
    make: Make,
) -> None:
    side = await opened(make, concurrent_runs=3)
    outcomes = await at_once([side] * 40)
    assert outcomes.count("admitted") == 3
    assert outcomes.count("concurrent_runs") == 37


async def test_a_run_stored_before_its_admission_ends_is_counted_once(make: Make) -> None:
    side = await opened(make, concurrent_runs=2)
    run = record(KEY)
    async with side.quotas.admit(KEY, run.id) as share:
        await side.store.create(run)  # stored (queued), its admission not over yet
        share.made()
        await admit(side)  # one run held: the second place is free
        assert (await refusal(side)).details["used"] == 2
    assert (await refusal(side)).details["used"] == 2


async def ended(side: Side, run: RunRecord) -> None:
    """The run ends, as `RunRecorder.end` ends one: stored ended, then `ended`."""
    run.status = RunStatus.COMPLETED
    await side.store.save(run)
    side.quotas.ended(run)


async def at_once(sides: list[Side]) -> list[str]:
    outcomes: list[str] = []

    async def one(side: Side) -> None:
        try:
            await admit(side)
            outcomes.append("admitted")
        except QuotaExceededError as exc:
            outcomes.append(exc.quota)

    with anyio.fail_after(BOUND_S):
        async with anyio.create_task_group() as tg:
            for side in sides:
                tg.start_soon(one, side)
    return outcomes


# -- runs per minute ---------------------------------------------------------------------------


async def test_runs_per_minute_is_a_sliding_window_and_says_when_a_place_frees(
    make: Make, clock: Clock
) -> None:
    side = await opened(make, runs_per_minute=2)
    await admit(side)
    clock.now += 10
    await admit(side)
    clock.now += 10.5
    refused = await refusal(side)
    assert (refused.quota, refused.details["limit"], refused.details["used"]) == (
        "runs_per_minute",
        2,
        2,
    )
    assert refused.retry_after_s == 40  # the first leaves the window at +60 s
    assert (await side.quotas.usage(KEY)).quotas() == {"runs_per_minute": (2, 2)}
    clock.now = NOON + 60.5  # the first left
    await admit(side)
    await refusal(side)


# -- the day's tokens and cost -------------------------------------------------------------------


async def test_a_spent_days_tokens_refuse_new_runs_until_the_next_utc_day(
    make: Make, clock: Clock
) -> None:
    side = await opened(make, tokens_per_day=1000)
    await admit(side)
    await spend(side, 999)
    await admit(side)
    await spend(side, 1)
    refused = await refusal(side)
    assert refused.details == {
        "quota": "tokens_per_day",
        "limit": 1000,
        "used": 1000,
        "retry_after_s": 12 * 3600,
    }
    clock.now = NOON + 12 * 3600  # midnight UTC: a new day
    await admit(side)
    usage = await side.quotas.usage(KEY)
    assert (usage.day, usage.used.runs, usage.used.total_tokens) == ("2026-03-15", 1, 0)


async def test_a_spent_days_cost_refuses_new_runs(make: Make) -> None:
    side = await opened(make, cost_usd_per_day=0.5)
    await spend(side, 10, cost=0.3)
    await admit(side)
    await spend(side, 10, cost=0.2)
    refused = await refusal(side)
    assert (refused.quota, refused.details["limit"]) == ("cost_usd_per_day", 0.5)
    assert refused.details["used"] == pytest.approx(0.5)
    assert (await side.quotas.usage(KEY)).quotas()["cost_usd_per_day"][0] == 0.5


async def test_a_runs_allowance_is_what_its_key_may_still_spend_today(
    make: Make, clock: Clock
) -> None:
    side = await opened(make, tokens_per_day=1000, cost_usd_per_day=1.0)
    allowance = await side.quotas.allowance(KEY)
    assert allowance is not None
    assert (allowance().tokens, allowance().cost_usd) == (1000, 1.0)
    await spend(side, 600, cost=0.25)
    await spend(side, 600, cost=0.25, owner="b" * 32)  # another key's day is its own
    left = allowance()
    assert left.tokens == 400
    assert left.cost_usd == pytest.approx(0.75)
    await spend(side, 500)
    assert allowance().tokens == -100  # spent: a running run ends (token_budget)
    clock.now += 12 * 3600
    assert allowance().tokens == 1000  # a new day


# -- shares given back -------------------------------------------------------------------------


async def test_an_admission_that_made_no_run_gives_its_share_back(make: Make) -> None:
    side = await opened(make, concurrent_runs=1, runs_per_minute=1)
    async with side.quotas.admit(KEY, new_run_id()):
        pass  # a concurrent request with the same Idempotency-Key made the run: none made
    with pytest.raises(RuntimeError):
        async with side.quotas.admit(KEY, new_run_id()):
            raise RuntimeError("the store refused the run")
    usage = await side.quotas.usage(KEY)
    assert (usage.used.runs, usage.concurrent_runs, usage.runs_last_minute) == (0, 0, 0)
    await admit(side)  # both shares are free again


# -- a restart, and replicas ---------------------------------------------------------------------


async def test_the_counts_survive_a_restart(make: Make, clock: Clock) -> None:
    limits = {"runs_per_minute": 2, "tokens_per_day": 1000}
    before = await opened(make, **limits)
    await ended(before, await admit(before))
    await ended(before, await admit(before))
    await spend(before, 400)
    clock.now += 1
    if not isinstance(before.store, MemoryRunStore):
        await before.store.close()  # its process stops (memory: a new side on it)

    after = await opened(make, **limits)  # a new process on the same store
    assert (await refusal(after)).quota == "runs_per_minute"
    usage = await after.quotas.usage(KEY)
    assert (usage.used.runs, usage.used.total_tokens, usage.runs_last_minute) == (2, 400, 2)
    allowance = await after.quotas.allowance(KEY)
    assert allowance is not None
    assert allowance().tokens == 600


async def test_a_restart_counts_the_runs_a_key_left_waiting_until_they_end(make: Make) -> None:
    before = await opened(make, concurrent_runs=2)
    waiting = await admit(before)
    waiting.status = RunStatus.REQUIRES_ACTION  # it waits for a person across the restart
    await before.store.save(waiting)
    await ended(before, await admit(before))
    if not isinstance(before.store, MemoryRunStore):
        await before.store.close()

    after = await opened(make, concurrent_runs=2)
    await admit(after)
    assert (await refusal(after)).details["used"] == 2  # the waiting one, and the new one
    await ended(after, waiting)  # decided and ended, in the new process
    await admit(after)


async def test_a_run_that_ends_while_its_keys_runs_are_read_is_not_counted(
    tmp_path: Path,
) -> None:
    class EndingWhileRead(SqliteRunStore):
        """A store whose read of a key's runs lets one of them end before it answers."""

        ending: RunRecord | None = None

        async def list_runs(self, **kw: Any) -> list[RunRecord]:
            found = await super().list_runs(**kw)
            if self.ending is not None:
                run, self.ending = self.ending, None
                await ended(side, run)  # stored ended, and said so, as the read answers
            return found

    store = EndingWhileRead(str(tmp_path / "q.db"))
    await store.open()
    try:
        side = Side(store, LocalQuotas(store, QuotaLimits(concurrent_runs=1)))
        store.ending = record(KEY)  # a run a previous process left waiting
        store.ending.status = RunStatus.REQUIRES_ACTION
        await store.create(store.ending)
        await admit(side)  # the first sight of the key reads its runs: that one ends then
        assert (await refusal(side)).details["used"] == 1
    finally:
        await store.close()


@pytest.fixture
async def replicas(redis_url: str, clock: Clock) -> AsyncIterator[Callable[..., Side]]:
    """Replicas on one redis-server: each its own store client and `RedisQuotas`."""
    stores: list[RedisRunStore] = []

    def replica(**limits: float) -> Side:
        store = RedisRunStore(redis_url)
        stores.append(store)
        return Side(store, RedisQuotas(store, QuotaLimits(**limits), clock))  # type: ignore[arg-type]

    try:
        yield replica
    finally:
        for store in stores:
            await store.close()


async def test_forty_admissions_on_two_replicas_pass_a_concurrent_quota_exactly(
    replicas: Callable[..., Side],
) -> None:
    one, other = replicas(concurrent_runs=3), replicas(concurrent_runs=3)
    outcomes = await at_once([one, other] * 20)
    assert outcomes.count("admitted") == 3
    assert outcomes.count("concurrent_runs") == 37


async def test_a_replica_counts_what_the_others_spent_at_its_next_read_or_spend(
    replicas: Callable[..., Side],
) -> None:
    one, other = replicas(tokens_per_day=1000), replicas(tokens_per_day=1000)
    allowance = await one.quotas.allowance(KEY)  # a run starts on `one`
    assert allowance is not None
    await spend(other, 600)  # another run of the key, on the other replica
    await spend(one, 100)  # the run's own call: the day as Redis has it, both spends in it
    assert allowance().tokens == 300
    await spend(other, 300)
    assert (await refusal(one)).quota == "tokens_per_day"  # admission reads Redis itself
    fresh = await one.quotas.allowance(KEY)
    assert fresh is not None
    assert fresh().tokens == 0


def test_a_day_is_the_utc_date_and_its_retry_after_runs_to_midnight() -> None:
    assert utc_day(NOON) == "2026-03-14"
    assert until_tomorrow_s(NOON) == 12 * 3600
    assert until_tomorrow_s(NOON + 12 * 3600 - 0.25) == 1
