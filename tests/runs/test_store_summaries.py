"""The run summaries part of the `RunStore` contract (DESIGN §20), on every store: a summary
written with the terminal record, tallied from the run's events, deleted with the run; the
termination report exact against `list_runs` for the same filter; per owner; the backfill."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from app.engine.events import EventType
from app.engine.policies import StopReason
from app.runs.records import RunRecord, RunResult, RunStatus, Usage, status_for
from app.runs.reports.groups import GroupBy
from app.runs.reports.service import Reports
from app.runs.reports.summaries import RunFilter
from app.runs.stores.memory import MemoryRunStore
from app.runs.stores.postgres import PostgresRunStore
from app.runs.stores.redis_store import RedisRunStore
from app.runs.stores.sqlite import SqliteRunStore
from tests.runs.test_store_contract import Store, record


@pytest.fixture(params=["memory", "sqlite", "redis", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    made: Store
    if request.param == "memory":
        made = MemoryRunStore()
    elif request.param == "sqlite":
        made = SqliteRunStore(str(tmp_path / "r.db"))
    elif request.param == "postgres":  # a real Postgres, a new database for this test
        made = PostgresRunStore(request.getfixturevalue("postgres_url"))
    else:  # a real redis-server, its database flushed for this test
        made = RedisRunStore(request.getfixturevalue("redis_url"))
    await made.open()
    try:
        yield made
    finally:
        await made.close()


T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
ALL = RunFilter()


async def ended(
    store: Store,
    reason: StopReason,
    *,
    owner: str | None = "alice",
    model: str = "m1",
    agent: str | None = None,
    created_at: datetime = T0,
    events: list[tuple[EventType, dict[str, Any]]] = (),  # type: ignore[assignment]
    cost: float | None = 0.5,
    degraded: bool = False,
) -> RunRecord:
    """A run made, its events appended, then ended as the recorder ends one."""
    request: dict[str, Any] = {"task": "t"} | ({"agent": agent} if agent else {})
    run = record(owner=owner, model=model, request=request, created_at=created_at)
    await store.create(run)
    for type, data in events:
        await store.append(run.id, type, 1, data)
    run.status = status_for(reason)
    run.started_at = created_at + timedelta(seconds=1)
    run.ended_at = created_at + timedelta(seconds=4)
    run.result = RunResult(answer="a", reason=reason, degraded=degraded)
    run.usage = Usage(steps=3, llm_calls=3, total_tokens=30, cost_usd=cost)
    terminal = {
        RunStatus.COMPLETED: EventType.RUN_COMPLETED,
        RunStatus.INCOMPLETE: EventType.RUN_INCOMPLETE,
        RunStatus.FAILED: EventType.RUN_FAILED,
        RunStatus.CANCELLED: EventType.RUN_CANCELLED,
    }[run.status]
    await store.append(run.id, terminal, 3, {}, record=run)
    return run


def nudge(kind: str = "stop_prompt") -> tuple[EventType, dict[str, Any]]:
    return EventType.INTERVENTION, {"kind": kind, "message": "m"}


async def report(store: Store, group_by: GroupBy = GroupBy.MODEL, **kw: Any) -> dict[Any, Any]:
    owner = kw.pop("owner", "alice")
    any_owner = kw.pop("any_owner", False)
    groups = await store.termination_report(
        owner=owner, any_owner=any_owner, matching=RunFilter(**kw), group_by=group_by
    )
    return {g["group"]: g for g in groups}


async def test_every_reason_and_status_is_counted_with_its_tally(store: Store) -> None:
    for reason in StopReason:
        await ended(store, reason)
    await ended(
        store,
        StopReason.NUDGE_LIMIT,
        events=[
            nudge(),
            nudge(),
            nudge("repetition"),
            nudge("context_trim"),
            nudge("invalid_output"),
            (EventType.LLM_RETRY, {"attempt": 1}),
            (EventType.RUN_RECOVERED, {}),
            (EventType.OBSERVATION, {"call_id": "c", "content": "x", "truncated": True}),
            (EventType.OBSERVATION, {"call_id": "c", "content": "x", "truncated": False}),
            (EventType.LLM_CALL, {"model": "m1", "cost_usd": None}),
            (EventType.LLM_CALL, {"model": "m1", "cost_usd": 0.1}),
        ],
        cost=None,
        degraded=True,
    )
    group = (await report(store))["m1"]
    n = len(StopReason) + 1
    assert group["runs"] == n
    assert group["by_reason"] == {
        r.value: (2 if r is StopReason.NUDGE_LIMIT else 1) for r in StopReason
    }
    assert group["by_status"] == {
        "completed": 2,
        "incomplete": n - 4,
        "failed": 1,
        "cancelled": 1,
    }
    assert group["finish_tool"] == 1
    assert group["degraded"] == 1
    assert group["totals"] == {
        "nudges": 2,
        "repetition_hints": 1,
        "truncations": 1,
        "context_trims": 1,
        "output_retries": 1,
        "retries": 1,
        "takeovers": 1,
    }
    assert group["interventions"]["stop_prompt"] == 2
    assert group["unpriced_calls"] == 1
    assert group["usd"]["total"] == pytest.approx(0.5 * (n - 1))
    assert group["usd"]["per_run"] == pytest.approx(0.5)
    assert group["steps"] == {"p50": 3, "p90": 3}
    assert group["duration_s"] == {"p50": 3.0, "p90": 3.0}


async def test_report_counts_exactly_what_list_runs_lists_for_the_same_filter(
    store: Store,
) -> None:
    for i in range(12):
        await ended(
            store,
            [StopReason.FINISHED, StopReason.MAX_STEPS, StopReason.ERROR][i % 3],
            model=f"m{i % 2}",
            agent=["a", None, "b"][i % 3],
            created_at=T0 + timedelta(hours=i * 5),
            owner=["alice", "bob"][i % 4 == 3],
        )
    unended = record(owner="alice", model="m0")
    await store.create(unended)  # not ended: in neither
    ended_statuses = [s for s in RunStatus if s.terminal]
    for matching in (
        ALL,
        RunFilter(since=T0 + timedelta(hours=10)),
        RunFilter(until=T0 + timedelta(hours=30)),
        RunFilter(since=T0 + timedelta(hours=5), until=T0 + timedelta(hours=25), model="m1"),
        RunFilter(agent="a"),
        RunFilter(model="m0", agent="b"),
    ):
        listed = await store.list_runs(
            owner="alice", statuses=ended_statuses, limit=1000, matching=matching
        )
        for group_by in GroupBy:
            groups = await store.termination_report(
                owner="alice", any_owner=False, matching=matching, group_by=group_by
            )
            assert sum(g["runs"] for g in groups) == len(listed), (matching, group_by)
    by_day = await report(store, GroupBy.DAY)
    assert sum(g["runs"] for g in by_day.values()) == 9
    assert "2026-03-01" in by_day
    assert by_day["2026-03-01"]["runs"] == 3


async def test_a_key_sees_its_own_runs_and_all_keys_are_seen_with_any_owner(store: Store) -> None:
    await ended(store, StopReason.FINISHED, owner="alice")
    await ended(store, StopReason.ERROR, owner="bob")
    await ended(store, StopReason.ERROR, owner="bob")
    assert (await report(store, owner="alice"))["m1"]["runs"] == 1
    assert (await report(store, owner="bob"))["m1"]["runs"] == 2
    assert (await report(store, owner="carol")) == {}
    by_key = await report(store, GroupBy.KEY, any_owner=True)
    assert sorted(g["runs"] for g in by_key.values()) == [1, 2]


async def test_a_summary_is_deleted_with_its_run(store: Store) -> None:
    run = await ended(store, StopReason.FINISHED)
    await ended(store, StopReason.FINISHED)
    await store.delete(run.id)
    assert (await report(store))["m1"]["runs"] == 1


async def test_saving_a_terminal_record_again_keeps_one_summary(store: Store) -> None:
    run = await ended(store, StopReason.FINISHED, events=[nudge()])
    await store.save(run)  # a webhook's delivery state, say
    group = (await report(store))["m1"]
    assert group["runs"] == 1
    assert group["totals"]["nudges"] == 1


async def test_the_backfill_summarizes_runs_stored_before_summaries(store: Store) -> None:
    old = await ended(store, StopReason.MAX_STEPS, events=[nudge(), nudge()])
    await ended(store, StopReason.FINISHED)
    await forget_summary(store, old.id)
    assert (await report(store))["m1"]["runs"] == 1
    assert [i for i, _ in await store.unsummarized(10)] == [old.id]
    assert await Reports(store).summarized() == 1
    group = (await report(store))["m1"]
    assert group["runs"] == 2
    assert group["totals"]["nudges"] == 2
    assert await store.unsummarized(10) == []
    assert await Reports(store).summarized() == 0


async def forget_summary(store: Store, run_id: str) -> None:
    """The run as a store wrote it before this change: no summary."""
    if isinstance(store, MemoryRunStore):
        store.forget_summary(run_id)
    elif isinstance(store, SqliteRunStore):
        await store._write(
            lambda conn: conn.execute("DELETE FROM run_summaries WHERE run_id = ?", (run_id,))
        )
    elif isinstance(store, PostgresRunStore):
        sql = "DELETE FROM run_summaries WHERE run_id = %s RETURNING run_id"
        assert await store.query(sql, (run_id,)) == [(run_id,)]
    else:
        assert isinstance(store, RedisRunStore)
        await store.redis.hdel(store.prefix + "run:" + run_id, "summary")
        await store.redis.zrem(store.prefix + "sum:all", run_id)
        await store.redis.zrem(store.prefix + "sum:o5:alice", run_id)


async def test_percentiles_are_nearest_rank_on_every_store(store: Store) -> None:
    for steps in (7, 1, 10, 4, 2, 9, 3, 8, 6, 5, 11):  # 11 runs: ranks 6 and 10
        run = await ended(store, StopReason.FINISHED, model="m2")
        run.usage = Usage(steps=steps, total_tokens=steps * 10, cost_usd=0.5)
        await store.save(run)
    await ended(store, StopReason.FINISHED, model="m3")
    groups = await report(store)
    assert groups["m2"]["steps"] == {"p50": 6, "p90": 10}
    assert groups["m2"]["tokens"] == {"p50": 60, "p90": 100}
    assert groups["m3"]["steps"] == {"p50": 3, "p90": 3}


async def test_postgres_ends_and_reports_a_run_whose_tokens_pass_2_to_the_63(
    postgres_url: str,
) -> None:
    """A model's own usage figures may be anything: past a BIGINT they must not refuse the
    terminal write (its summary's `tokens` is NUMERIC), and read back exact."""
    store = PostgresRunStore(postgres_url)
    await store.open()
    try:
        run = await ended(store, StopReason.FINISHED, model="m2")
        run.usage = Usage(steps=3, total_tokens=2**64 + 1, cost_usd=0.5)
        await store.save(run)
        assert await store.get(run.id) == run
        assert (await report(store))["m2"]["tokens"] == {"p50": 2**64 + 1, "p90": 2**64 + 1}
    finally:
        await store.close()
