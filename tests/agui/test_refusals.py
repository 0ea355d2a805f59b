"""A turn finishline would not run is refused before any event is sent: a 4xx JSON error
naming the field where the AG-UI input holds it, and no run made (DESIGN §16: "validated like
POST /runs (422 before any event)")."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.agui.kit import agent_input, scripted, user
from tests.api.kit import error_of, finish, hanging, settings
from tests.fakes.service import api_client

BIG = 10**9


async def refused(client: httpx.AsyncClient, body: Any, status: int = 422) -> dict[str, Any]:
    response = await client.post("/ag-ui", json=body, headers={"Accept": "text/event-stream"})
    error = error_of(response, status)
    runs = await client.get("/runs")
    assert runs.json()["runs"] == []  # refused before anything was made
    return error


@pytest.mark.parametrize(
    ("finishline", "field"),
    [
        (
            scripted(finish(), settings={"max_steps": BIG}),
            "forwardedProps.finishline.settings.max_steps",
        ),
        (scripted(finish(), bogus=1), "forwardedProps.finishline.bogus"),
        ({"tools": ["no_such_tool"]}, "forwardedProps.finishline.tools"),
        (
            {"model": "no-such-model-here", "model_script": []},
            "forwardedProps.finishline.model_script",
        ),
        ({"task": "mine"}, "forwardedProps.finishline.task"),
        ({"stream": True}, "forwardedProps.finishline.stream"),
        (
            {"previous_run_id": "run_01ARZ3NDEKTSV4RRFFQ69G5FAV"},
            "forwardedProps.finishline.previous_run_id",
        ),
        ({"settings": {"max_steps": "ten"}}, "forwardedProps.finishline.settings.max_steps"),
        ({"outcome": {"rubric": ""}}, "forwardedProps.finishline.outcome.rubric"),
        (
            {"outcome": {"rubric": "r", "max_revisions": BIG}},
            "forwardedProps.finishline.outcome.max_revisions",
        ),
    ],
)
async def test_the_run_configuration_is_checked_like_post_runs(
    finishline: dict[str, Any], field: str
) -> None:
    async with api_client(settings()) as client:
        error = await refused(client, agent_input(finishline=finishline))

    named = error["details"].get("field") or error["details"]["errors"][0]["field"]
    assert named == field
    assert field in error["message"]


async def test_a_cap_is_named_with_its_value_as_post_runs_names_it() -> None:
    async with api_client(settings(max_steps_limit=20)) as client:
        error = await refused(
            client, agent_input(finishline=scripted(finish(), settings={"max_steps": 21}))
        )
        plain = await client.post("/runs", json={"task": "t", "settings": {"max_steps": 21}})

    assert error["details"]["cap"] == 20
    assert (
        error["message"].removeprefix("forwardedProps.finishline.")
        == plain.json()["error"]["message"]
    )


async def test_the_task_is_the_new_user_message_checked_against_its_cap() -> None:
    async with api_client(settings(max_task_chars=10)) as client:
        error = await refused(client, agent_input(user("x" * 11), finishline=scripted(finish())))

    assert error["details"]["field"] == "messages"
    assert error["details"]["cap"] == 10


@pytest.mark.parametrize(
    ("messages", "field"),
    [
        ([], "messages"),
        ([{"id": "a", "role": "assistant", "content": "hello"}], "messages"),
        ([{"id": "u", "role": "user", "content": "  "}], "messages[0].content"),
        (
            [
                {
                    "id": "u",
                    "role": "user",
                    "content": [{"type": "image", "source": {"type": "url", "value": "http://x"}}],
                }
            ],
            "messages[0].content[0]",
        ),
    ],
)
async def test_a_turn_without_a_user_message_to_run_is_refused(
    messages: list[dict[str, Any]], field: str
) -> None:
    async with api_client(settings()) as client:
        body = agent_input(finishline=scripted(finish()))
        body["messages"] = messages
        error = await refused(client, body)

    assert error["details"]["field"] == field


async def test_a_frontend_tool_is_checked_where_the_input_holds_it() -> None:
    clash = {"name": "calculator", "description": "mine", "parameters": {"type": "object"}}
    not_object = {"name": "pick", "description": "d", "parameters": {"type": "string"}}
    async with api_client(settings()) as client:
        named_twice = await refused(
            client, agent_input(tools=[clash], finishline=scripted(finish(), tools=["calculator"]))
        )
        bad_schema = await refused(
            client, agent_input(tools=[not_object], finishline=scripted(finish()))
        )
        bad_name = await refused(
            client, agent_input(tools=[{"name": "no spaces", "description": "d"}])
        )

    assert named_twice["details"]["field"] == "tools[0].name"
    assert bad_schema["details"]["field"] == "tools[0].parameters"
    assert bad_name["details"]["errors"][0]["field"] == "tools[0].name"


@pytest.mark.parametrize(
    "body",
    [
        {"runId": "r", "messages": []},  # no threadId
        {"threadId": "t", "runId": "r", "messages": [{"id": "x", "role": "robot"}]},
        {"threadId": "t" * 257, "runId": "r", "messages": [user("hi")]},
        {"threadId": "t", "runId": "r", "messages": [user("hi")], "forwardedProps": 3},
        {
            "threadId": "t",
            "runId": "r",
            "messages": [user("hi")],
            "forwardedProps": {"finishline": []},
        },
        [1, 2],
    ],
)
async def test_what_is_not_a_run_agent_input_is_refused(body: Any) -> None:
    async with api_client(settings()) as client:
        await refused(client, body)


async def test_the_body_must_be_json() -> None:
    async with api_client(settings()) as client:
        response = await client.post(
            "/ag-ui", content=b"{}", headers={"Content-Type": "text/plain"}
        )

    error_of(response, 415)


async def test_a_bad_last_event_id_is_refused() -> None:
    async with api_client(settings()) as client:
        response = await client.post(
            "/ag-ui",
            json=agent_input(finishline=scripted(finish())),
            headers={"Last-Event-ID": "x"},
        )

    assert error_of(response, 422)["details"]["field"] == "Last-Event-ID"


async def test_a_keys_quota_refuses_a_new_run_before_any_event_as_post_runs_does() -> None:
    async with api_client(settings(quota_concurrent_runs=1)) as client:
        busy = await client.post("/runs", json=hanging())
        response = await client.post(
            "/ag-ui",
            json=agent_input(thread="t-2", finishline=scripted(finish())),
            headers={"Accept": "text/event-stream"},
        )
        listed = (await client.get("/runs")).json()["runs"]
        await client.post(f"/runs/{busy.json()['id']}/cancel")

    error = error_of(response, 429, "quota_exceeded")
    assert (error["details"]["quota"], error["details"]["limit"]) == ("concurrent_runs", 1)
    assert response.headers["retry-after"] == "5"
    assert [run["id"] for run in listed] == [busy.json()["id"]]  # no run made
