"""Takeover on the Redis store, in one process: a run left `running` by a replica that is
gone (no lease key) is taken over by the service's sweeper — resumed with its deadline
counted from its first start, or failed once it was taken over too often."""

from __future__ import annotations

from collections.abc import MutableMapping
from datetime import timedelta
from typing import Any

from app.runs.records import RunRecord, RunStatus, new_run_id, utcnow
from app.runs.spec import RunSettingsIn
from tests.api.kit import app_with_state, settings, wait_ended


async def orphan(state: MutableMapping[str, Any], *, started_s_ago: float) -> RunRecord:
    """A run as a replica that died left it: running, its lease gone."""
    manager = state["manager"]
    record = RunRecord(
        id=new_run_id(),
        request={
            "task": "think",
            "model": "scripted",
            "model_script": [{"content": "my best guess"}],
        },
        model="scripted",
        settings=manager.assembler.resolve_settings(RunSettingsIn(max_time_s=60)),
        status=RunStatus.RUNNING,
        started_at=utcnow() - timedelta(seconds=started_s_ago),
    )
    await manager.store.create(record)
    await manager.store.append(record.id, "run.queued", 0, {})
    await manager.store.append(record.id, "run.started", 0, {})
    return record


async def test_a_run_taken_over_keeps_its_deadline_from_its_first_start(redis_url: str) -> None:
    async with app_with_state(settings(store_url=redis_url, lease_s=1)) as (client, state):
        record = await orphan(state, started_s_ago=100)  # past its 60 s already
        run = await wait_ended(client, record.id)
        assert run["status"] == "incomplete"
        assert run["result"]["reason"] == "timeout"
        types = [e.type for e in await state["manager"].read_events(record.id, 0, 100)]
        assert types[:3] == ["run.queued", "run.started", "run.recovered"]
        assert types[-1] == "run.incomplete"


async def test_a_run_taken_over_too_often_fails_interrupted(redis_url: str) -> None:
    async with app_with_state(settings(store_url=redis_url, lease_s=1, max_run_attempts=2)) as (
        client,
        state,
    ):
        store = state["manager"].store
        record = await orphan(state, started_s_ago=1)
        await store.redis.hset(f"finishline:run:{record.id}", "attempts", 2)
        run = await wait_ended(client, record.id)
        assert run["status"] == "failed"
        assert run["error"]["type"] == "interrupted"
        events = await store.read(record.id)
        assert [e.type for e in events] == ["run.queued", "run.started", "run.failed"]
