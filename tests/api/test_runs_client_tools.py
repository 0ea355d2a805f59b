"""Client tools over the native API (`client_tools`; AG-UI's frontend tools, DESIGN §16): the
model may call them, the server never runs them; each call waits like one that needs approval
(DESIGN §9), and a decision with `result` answers it: the model sees the result."""

from __future__ import annotations

from typing import Any

import httpx

from tests.api.kit import create, error_of, finish, json_events, scripted, settings
from tests.fakes.service import api_client

PICK = {
    "name": "pick_color",
    "description": "Ask the user for a color.",
    "parameters": {"type": "object", "properties": {"hint": {"type": "string"}}},
}


def picking(*replies: dict[str, Any], **fields: Any) -> dict[str, Any]:
    call = {"tool_calls": [{"name": "pick_color", "arguments": {"hint": "warm"}, "id": "p1"}]}
    return scripted(call, *replies, client_tools=[PICK], **fields)


async def waiting(client: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    run = await create(client, body)
    response = await client.get(f"/runs/{run['id']}/wait", params={"timeout_s": 10})
    assert response.json()["status"] == "requires_action", response.text
    waited: dict[str, Any] = response.json()
    return waited


async def decide(
    client: httpx.AsyncClient, run_id: str, *decisions: dict[str, Any]
) -> httpx.Response:
    return await client.post(f"/runs/{run_id}/approvals", json={"decisions": list(decisions)})


async def test_a_client_tools_call_waits_and_its_result_is_what_the_model_sees() -> None:
    async with api_client(settings()) as client:
        run = await waiting(client, picking(finish("teal it is")))
        decided = await decide(
            client, run["id"], {"call_id": "p1", "approve": True, "result": "teal"}
        )
        ended = (await client.get(f"/runs/{run['id']}/wait", params={"timeout_s": 10})).json()
        events = (await json_events(client, run["id"]))["events"]

    assert run["pending_approvals"][0]["tool"] == "pick_color"
    assert run["client_tools"] == [PICK]
    assert decided.status_code == 202, decided.text
    assert ended["status"] == "completed"
    assert ended["result"]["answer"] == "teal it is"
    (observation,) = [e for e in events if e["type"] == "observation"]
    assert (observation["tool"], observation["content"], observation["is_error"]) == (
        "pick_color",
        "teal",
        False,
    )
    (decision,) = [e for e in events if e["type"] == "approval.decided"]
    assert decision["result"] == "teal"


async def test_a_rejected_client_call_is_an_error_the_model_reads() -> None:
    async with api_client(settings()) as client:
        run = await waiting(client, picking(finish()))
        await decide(client, run["id"], {"call_id": "p1", "approve": False, "message": "closed"})
        await client.get(f"/runs/{run['id']}/wait", params={"timeout_s": 10})
        events = (await json_events(client, run["id"]))["events"]

    (observation,) = [e for e in events if e["type"] == "observation"]
    assert observation["is_error"] is True
    assert "closed" in observation["content"]


async def test_a_result_answers_only_an_approved_client_call() -> None:
    calc = {"tool_calls": [{"name": "calculator", "arguments": {"expression": "1+1"}, "id": "c1"}]}
    async with api_client(settings()) as client:
        client_run = await waiting(client, picking(finish()))
        no_result = await decide(client, client_run["id"], {"call_id": "p1", "approve": True})
        rejected_with = await decide(
            client, client_run["id"], {"call_id": "p1", "approve": False, "result": "x"}
        )
        server_run = await waiting(
            client,
            scripted(calc, finish(), tools=["calculator"], approval={"tools": ["calculator"]}),
        )
        on_server_call = await decide(
            client, server_run["id"], {"call_id": "c1", "approve": True, "result": "3"}
        )
        still = (await client.get(f"/runs/{client_run['id']}")).json()

    assert error_of(no_result, 422)["details"]["field"] == "decisions[0].result"
    assert error_of(rejected_with, 422)["details"]["field"] == "decisions[0].result"
    assert error_of(on_server_call, 422)["details"]["field"] == "decisions[0].result"
    assert still["status"] == "requires_action"


async def test_client_tools_are_checked_like_http_tools() -> None:
    async with api_client(settings(max_tools=2)) as client:
        clash = await client.post(
            "/runs",
            json=scripted(
                finish(), tools=["calculator"], client_tools=[{**PICK, "name": "calculator"}]
            ),
        )
        not_object = await client.post(
            "/runs",
            json=scripted(finish(), client_tools=[{**PICK, "parameters": {"type": "array"}}]),
        )
        bad_schema = await client.post(
            "/runs", json=scripted(finish(), client_tools=[{**PICK, "parameters": {"type": 3}}])
        )
        too_many = await client.post(
            "/runs",
            json=scripted(
                finish(), tools=["calculator"], client_tools=[PICK, {**PICK, "name": "other"}]
            ),
        )

    assert error_of(clash, 422)["details"]["field"] == "client_tools[0].name"
    assert error_of(not_object, 422)["details"]["field"] == "client_tools[0].parameters"
    assert error_of(bad_schema, 422)["details"]["field"] == "client_tools[0].parameters"
    assert error_of(too_many, 422)["details"]["field"] == "tools"
