"""Takeover on the Redis store, in one process: a run left `running` by a replica that is
gone (no lease key) is taken over by the service's sweeper — resumed with its deadline
counted from its first start (a scripted model from the reply after the checkpoint's), or
failed once it was taken over too often."""

from __future__ import annotations

from collections.abc import MutableMapping
from datetime import timedelta
from typing import Any

from app.engine.loop import run_react
from app.engine.steps import Checkpoint
from app.llm.scripted import ScriptedModel
from app.runs.records import RunRecord, RunStatus, new_run_id, utcnow
from app.runs.spec import RunSettingsIn
from app.tools.calculator import CalculatorTool
from tests.api.kit import app_with_state, finish, settings, wait_ended


async def orphan(
    state: MutableMapping[str, Any],
    *,
    started_s_ago: float,
    script: list[dict[str, Any]] | None = None,
    tools: list[str] | None = None,
) -> RunRecord:
    """A run as a replica that died left it: running, its lease gone."""
    manager = state["manager"]
    record = RunRecord(
        id=new_run_id(),
        request={
            "task": "think",
            "model": "scripted",
            "model_script": script or [{"content": "my best guess"}],
            "tools": tools or [],
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


def calculate(expression: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "calculator", "arguments": {"expression": expression}}]}


async def test_a_scripted_run_taken_over_mid_script_goes_on_from_its_next_reply(
    redis_url: str,
) -> None:
    script = [calculate("1+1"), calculate("2+2"), finish("4")]
    async with app_with_state(settings(store_url=redis_url, lease_s=1)) as (client, state):
        record = await orphan(state, started_s_ago=1, script=script, tools=["calculator"])
        # its replica had done step 1 (the engine's own checkpoint of it) when it died; its
        # record still says what it said at the start: no LLM call made
        model = ScriptedModel(script)
        steps = run_react(task="think", model=model, tools=[CalculatorTool()])
        checkpoint = None
        async for step in steps:
            if isinstance(step, Checkpoint) and not step.state["acting"]:
                checkpoint = step
                break
        await steps.aclose()
        assert checkpoint is not None
        assert checkpoint.step == 1
        await state["manager"].store.save_checkpoint(record.id, 1, checkpoint.state)

        run = await wait_ended(client, record.id)

        assert (run["status"], run["result"]["answer"]) == ("completed", "4")
        events = await state["manager"].read_events(record.id, 0, 100)
        types = [e.type for e in events]
        redone = events[types.index("run.recovered") :]
        actions = [(e.step, e.data["arguments"]) for e in redone if e.type == "action"]
        assert actions == [(2, {"expression": "2+2"}), (3, {"answer": "4"})]
        assert (run["usage"]["steps"], run["usage"]["llm_calls"]) == (3, 3)
