"""A sub-agent call starts a child run that is a real run (DESIGN §15): its own id, record,
event log and stream token, its parent named on it, listed by `GET /runs?parent_run_id=`,
owned by its parent's key. The parent logs `agent.started` / `agent.finished`; the call's
observation is the child's answer verbatim with one status line, an error when the child
failed or was cancelled, and says so when the answer is a degraded one."""

from __future__ import annotations

from tests.api.kit import (
    cancel,
    error_of,
    finish,
    run_to_end,
    scripted,
    settings,
    wait_ended,
    wait_for_status,
)
from tests.api.subagent_kit import (
    call,
    calling,
    children,
    events,
    of_type,
    started_children,
    worker,
)
from tests.fakes.service import api_client

K1 = {"Authorization": "Bearer k1"}
K2 = {"Authorization": "Bearer k2"}


async def test_a_child_is_a_run_of_its_own_named_by_its_parent_and_its_call() -> None:
    body = scripted(call("calc", "2+2"), finish("it is 4"), agents={"calc": worker(finish("4"))})
    async with api_client(settings()) as client:
        parent = await run_to_end(client, body)
        assert parent["status"] == "completed", parent
        (child,) = await children(client, parent["id"])
        assert child["id"] != parent["id"]
        assert child["parent_run_id"] == parent["id"]
        assert child["parent_call_id"] == "call_0_0"
        assert child["task"] == "2+2"
        assert child["status"] == "completed"
        assert child["result"]["answer"] == "4"
        assert child["settings"]["max_time_s"] <= parent["settings"]["max_time_s"]
        child_events = await events(client, child["id"])
        assert next(e["type"] for e in child_events) == "run.queued"
        assert child_events[0]["parent_run_id"] == parent["id"]
        assert child_events[-1]["type"] == "run.completed"
        token = (await client.post(f"/runs/{child['id']}/stream-token")).json()
        assert token["events_url"].startswith(f"/runs/{child['id']}/events?token=")
        # a run started by a request is nobody's child
        assert await children(client, child["id"]) == []
        assert (await client.get(f"/runs/{parent['id']}")).json()["parent_run_id"] is None


async def test_the_parent_logs_the_childs_start_and_end_and_sees_its_answer() -> None:
    body = scripted(call("calc", "2+2"), finish("4"), agents={"calc": worker(finish("  4  "))})
    async with api_client(settings()) as client:
        parent = await run_to_end(client, body)
        (child,) = await children(client, parent["id"])
        found = await events(client, parent["id"])
        started, ended = of_type(found, "agent.started"), of_type(found, "agent.finished")
        assert [(e["call_id"], e["agent"], e["child_run_id"]) for e in started] == [
            ("call_0_0", "calc", child["id"])
        ]
        assert [(e["child_run_id"], e["status"], e["reason"]) for e in ended] == [
            (child["id"], "completed", "finished")
        ]
        (seen,) = [e for e in of_type(found, "observation") if e["tool"] == "calc"]
        assert (
            seen["content"]
            == f"  4  \n\n[Sub-agent calc (run {child['id']}): completed, finished.]"
        )
        assert not seen["is_error"]
        order = [e["type"] for e in found]
        assert order.index("agent.started") < order.index("agent.finished")
        assert order.index("agent.finished") < order.index("observation")


async def test_a_child_belongs_to_its_parents_key() -> None:
    body = scripted(call("calc", "2+2"), finish("4"), agents={"calc": worker(finish("4"))})
    async with api_client(settings(api_keys=["k1", "k2"])) as client:
        parent = await run_to_end(client, body, headers=K1)
        (child,) = await children(client, parent["id"], **K1)
        assert (await client.get(f"/runs/{child['id']}", headers=K1)).status_code == 200
        error_of(await client.get(f"/runs/{child['id']}", headers=K2), 404)
        assert await children(client, parent["id"], **K2) == []


async def test_a_failed_child_is_an_error_observation_and_the_parent_goes_on() -> None:
    failing = worker({"content": "thinking"}, settings={"stop_tool": True, "max_nudges": 5})
    body = scripted(call("w", "do it"), finish("done anyway"), agents={"w": failing})
    async with api_client(settings()) as client:
        parent = await run_to_end(client, body)
        assert parent["status"] == "completed"
        (child,) = await children(client, parent["id"])
        assert child["status"] == "failed"
        (seen,) = [
            e
            for e in of_type(await events(client, parent["id"]), "observation")
            if e["tool"] == "w"
        ]
        assert seen["is_error"]
        assert f"Sub-agent w (run {child['id']}) failed: " in seen["content"]
        assert "script" in seen["content"]


async def test_a_cancelled_child_is_an_error_observation_and_the_parent_goes_on() -> None:
    body = scripted(
        call("w", "wait forever"),
        finish("went on"),
        agents={"w": worker({"content": "thinking", "delay_s": 600})},
    )
    async with api_client(settings()) as client:
        parent = (await client.post("/runs", json=body)).json()
        kids = await started_children(client, parent["id"])
        await wait_for_status(client, kids[0]["id"], "running")
        await cancel(client, kids[0]["id"])
        ended = await wait_ended(client, parent["id"])
        assert ended["status"] == "completed"
        (seen,) = [
            e
            for e in of_type(await events(client, parent["id"]), "observation")
            if e["tool"] == "w"
        ]
        assert seen["is_error"]
        assert "was cancelled" in seen["content"]


async def test_a_degraded_child_answer_says_it_is_one() -> None:
    stopping = worker(
        {"content": "working", "tool_calls": []},
        {"content": "best guess: 5"},
        settings={"max_steps": 1},
    )
    body = scripted(call("w", "guess"), finish("5"), agents={"w": stopping})
    async with api_client(settings()) as client:
        parent = await run_to_end(client, body)
        (child,) = await children(client, parent["id"])
        assert (child["status"], child["result"]["reason"]) == ("incomplete", "max_steps")
        (seen,) = [
            e
            for e in of_type(await events(client, parent["id"]), "observation")
            if e["tool"] == "w"
        ]
        assert not seen["is_error"]
        assert seen["content"].startswith("best guess: 5\n\n")
        assert "stopped at a limit (max_steps)" in seen["content"]
        ended = of_type(await events(client, parent["id"]), "agent.finished")[0]
        assert (ended["status"], ended["reason"]) == ("incomplete", "max_steps")


async def test_calls_of_one_step_run_their_children_at_once_and_a_cancel_stops_them_all() -> None:
    hanging = worker({"content": "thinking", "delay_s": 600})
    body = scripted(
        calling(("a", "one"), ("b", "two")),
        finish("never"),
        agents={"a": hanging, "b": hanging},
    )
    async with api_client(settings()) as client:
        parent = (await client.post("/runs", json=body)).json()
        kids = await started_children(client, parent["id"], 2)
        for kid in kids:  # both running at once
            await wait_for_status(client, kid["id"], "running")
        await cancel(client, parent["id"])
        assert (await wait_ended(client, parent["id"]))["status"] == "cancelled"
        for kid in kids:
            assert (await wait_ended(client, kid["id"]))["status"] == "cancelled"


async def test_a_typed_childs_observation_is_its_validated_value_as_json() -> None:
    """DESIGN §15 with §12: a sub-agent with an output_schema answers its `output`, as JSON."""
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    typed = worker(
        {"tool_calls": [{"name": "task_finished", "arguments": {"answer": {"n": 4}}}]},
        output_schema=schema,
    )
    body = scripted(call("calc", "2+2"), finish("it is 4"), agents={"calc": typed})
    async with api_client(settings()) as client:
        parent = await run_to_end(client, body)
        (child,) = await children(client, parent["id"])
        assert child["output_schema"] == schema
        assert child["result"]["output"] == {"n": 4}
        (observation,) = of_type(await events(client, parent["id"]), "observation")
        assert observation["content"].startswith('{"n": 4}\n')
        assert observation["is_error"] is False


async def test_a_sub_agents_invalid_output_schema_is_a_422_naming_it() -> None:
    bad = worker(finish("x"), output_schema={"type": "nope"})
    body = scripted(call("calc", "2+2"), finish("x"), agents={"calc": bad})
    async with api_client(settings()) as client:
        response = await client.post("/runs", json=body)
        error = error_of(response, 422, "validation_error")
        assert error["details"]["field"] == "agents.calc.output_schema"
