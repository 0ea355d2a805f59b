"""Trees of runs across replicas (DESIGN §8, §15): two uvicorn processes on one real
redis-server. A child run is admitted and placed as any run (either replica may execute it);
when the replica executing a parent is killed (SIGKILL) while its sub-agent's child runs,
the other takes the parent over, redoes the step in flight and re-attaches to the child its
call started: exactly one child, and the tree ends normally."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tests.e2e.kit import assert_one_terminal_at_the_end, follow, start_run
from tests.e2e.test_replicas import executor, finish, replicas, scripted, wait_status

pytestmark = pytest.mark.e2e


async def test_a_parent_taken_over_re_attaches_to_its_running_child_never_a_second(
    tmp_path: Path, redis_url: str
) -> None:
    slow_child = {
        "description": "Takes its time.",
        "model": "scripted",
        "model_script": [{"content": "working on it", "delay_s": 4}, finish("child's answer")],
    }
    body = scripted(
        {"tool_calls": [{"name": "w", "arguments": {"task": "take your time"}, "id": "call_w"}]},
        finish("the parent's answer"),
        agents={"w": slow_child},
    )
    async with replicas(tmp_path, redis_url, FINISHLINE_LEASE_S="2") as started:
        apps = [app for app, _ in started]
        parent_id = await start_run(started[0][1], body)
        index = await executor(apps, parent_id)
        reader = started[index][1]
        with anyio.fail_after(10):
            while True:
                listed = (await reader.get("/runs", params={"parent_run_id": parent_id})).json()
                if listed["runs"]:
                    child = listed["runs"][0]
                    break
                await anyio.sleep(0.02)
        await wait_status(reader, child["id"], "running")  # the child's slow call in flight

        apps[index].kill()
        survivor = started[1 - index][1]
        streamed = await follow(survivor, parent_id, timeout_s=40)

        assert_one_terminal_at_the_end(streamed, "run.completed")
        assert streamed[-1].data["result"]["answer"] == "the parent's answer"
        types = [e.event for e in streamed]
        assert "run.recovered" in types
        recovered = types.index("run.recovered")
        after = [e.data for e in streamed[recovered:] if e.event == "agent.started"]
        assert [(e["call_id"], e["child_run_id"]) for e in after] == [("call_w", child["id"])]
        (seen,) = [e.data for e in streamed[recovered:] if e.event == "observation"]
        assert seen["content"].startswith("child's answer")
        listed = (await survivor.get("/runs", params={"parent_run_id": parent_id})).json()
        assert [r["id"] for r in listed["runs"]] == [child["id"]]  # exactly one child
        ended = (await survivor.get(f"/runs/{child['id']}")).json()
        assert ended["status"] == "completed"


async def test_a_child_may_run_on_either_replica_and_its_parent_follows_it(
    tmp_path: Path, redis_url: str
) -> None:
    workers = {f"w{n}": {"description": "A worker.", "model": "scripted"} for n in range(4)}
    for name, spec in workers.items():
        spec["model_script"] = [finish(f"{name} done", delay_s=0.3)]
    body = scripted(
        {"tool_calls": [{"name": n, "arguments": {"task": "go"}} for n in workers]},
        finish("all done"),
        agents=workers,
    )
    async with replicas(tmp_path, redis_url, FINISHLINE_MAX_CONCURRENT_RUNS="2") as started:
        parent_id = await start_run(started[0][1], body)
        streamed = await follow(started[1][1], parent_id, timeout_s=30)
        assert_one_terminal_at_the_end(streamed, "run.completed")
        finished = [e.data for e in streamed if e.event == "agent.finished"]
        assert sorted(e["status"] for e in finished) == ["completed"] * 4
