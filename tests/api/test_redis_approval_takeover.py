"""A decided run whose replica died before it settled the calls it waited on (Redis store,
one process): the replica that takes it over runs them with the person's decisions, and its
clock counts the time since the last decision, not the wait (DESIGN §8, §9)."""

from __future__ import annotations

from datetime import timedelta

from app.runs.records import ApprovalDecision, RunStatus, utcnow
from tests.api.kit import app_with_state, create, finish, scripted, settings, wait_ended


async def test_a_decided_run_taken_over_before_it_resumed_keeps_its_decisions_and_clock(
    redis_url: str,
) -> None:
    body = scripted(
        {"tool_calls": [{"name": "calculator", "arguments": {"expression": "6*7"}, "id": "c1"}]},
        finish("42"),
        tools=["calculator"],
        approval={"tools": ["calculator"]},
        settings={"max_time_s": 60},
    )
    async with app_with_state(settings(store_url=redis_url, lease_s=1)) as (client, state):
        store = state["manager"].store
        run = await create(client, body)
        waited = await client.get(f"/runs/{run['id']}/wait", params={"timeout_s": 10})
        assert waited.json()["status"] == "requires_action", waited.text

        # as a replica left it that claimed the decided run, started it and died at once,
        # after a wait far longer than max_time_s: running, its lease gone
        record = await store.get(run["id"])
        long_ago = utcnow() - timedelta(seconds=1000)
        assert record.approval is not None
        record.approval.waiting_since = long_ago
        record.approval.decided = [ApprovalDecision(call_id="c1", approved=True)]
        record.approval.requeued_at = utcnow()
        record.started_at = long_ago
        record.status = RunStatus.RUNNING
        await store.save(record)

        done = await wait_ended(client, run["id"])

        assert (done["status"], done["result"]["answer"]) == ("completed", "42")
        events = await state["manager"].read_events(run["id"], 0, 100)
        assert [e.type for e in events].count("run.recovered") == 1
        (observation,) = [e for e in events if e.type == "observation"]
        assert (observation.data["content"], observation.data["is_error"]) == ("42", False)
