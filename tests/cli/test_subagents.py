"""The CLI follows a tree of runs (DESIGN §15): `finishline events RUN --follow` shows a
sub-agent's child run, and its own child, indented under the call that started each, then
the parent on to its end; `finishline run` names the child to follow."""

from __future__ import annotations

from typing import Any

import httpx

from app.cli.exits import ExitCode
from tests.cli.kit import cli, cli_settings, finish
from tests.fakes.service import served_app


def call(agent: str, task: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": agent, "arguments": {"task": task}}]}


def worker(*replies: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {
        "description": "A worker.",
        "model": "scripted",
        "model_script": list(replies),
        **fields,
    }


TREE = {
    "task": "route it",
    "model": "scripted",
    "model_script": [call("middle", "ask the leaf"), finish("root done")],
    "agents": {
        "middle": worker(
            call("leaf", "answer"),
            finish("middle done"),
            agents={"leaf": worker(finish("leaf done"))},
        )
    },
}


async def tree_run(client: httpx.AsyncClient) -> str:
    response = await client.post("/runs", json=TREE)
    assert response.status_code == 202, response.text
    run_id: str = response.json()["id"]
    return run_id


async def test_events_follow_shows_each_child_indented_under_its_call() -> None:
    async with served_app(cli_settings()) as (server, client):
        run_id = await tree_run(client)
        result = await cli(server, "events", run_id, "--follow")
    assert result.code == ExitCode.OK, result
    lines = result.out.splitlines()

    def at(depth: int, kind: str) -> list[int]:
        prefix = "│ " * depth
        return [
            i
            for i, line in enumerate(lines)
            if line.startswith(prefix)
            and not line[len(prefix) :].startswith("│")
            and f" {kind} " in line
        ]

    (root_started,) = at(0, "agent.started")
    (middle_started,) = at(1, "agent.started")
    (leaf_done,) = at(2, "run.completed")
    (middle_done,) = at(1, "run.completed")
    (root_done,) = at(0, "run.completed")
    assert root_started < middle_started < leaf_done < middle_done < root_done
    assert "leaf done" in lines[leaf_done]
    assert "middle done" in lines[middle_done]
    assert "root done" in lines[root_done]
    assert lines[root_started].split()[-1].startswith("run_")  # agent → its child run


async def test_events_follow_as_json_lines_includes_the_childrens_events() -> None:
    async with served_app(cli_settings()) as (server, client):
        run_id = await tree_run(client)
        result = await cli(server, "events", run_id, "--follow", "--json")
    assert result.code == ExitCode.OK, result
    events = result.json_lines()
    runs = {e["run_id"] for e in events}
    assert len(runs) == 3
    ends = [e for e in events if e["type"] == "run.completed"]
    assert [e["run_id"] for e in ends][-1] == run_id  # the parent's end comes last


async def test_run_names_the_child_a_sub_agent_call_started() -> None:
    async with served_app(cli_settings()) as (server, client):
        run_id = await tree_run(client)
        result = await cli(server, "events", run_id)  # stored events, no following
        assert result.code == ExitCode.OK
        assert "agent.started" in result.out
        assert "agent.finished" in result.out
        assert "middle completed (finished)" in result.out
