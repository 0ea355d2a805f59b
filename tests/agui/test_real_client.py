"""POST /ag-ui driven by the protocol's own client: @ag-ui/client's HttpAgent under node
(tests/agui_client, pinned by its package-lock.json and installed by `npm ci`: `make test` and
.ci/run do it), against the app served by uvicorn on loopback. Every event the client saw is
validated again with ag-ui-protocol's pydantic models. A client we wrote would share our
misreadings of the spec; this one has its own (its verifier rejects a stream out of order)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from app.main import create_app
from tests.agui.kit import protocol_event
from tests.api.kit import finish, settings
from tests.fakes.serving import Served

pytestmark = pytest.mark.e2e

CLIENT = Path(__file__).resolve().parent.parent / "agui_client"
BOUND_S = 60  # a failure bound: each scenario takes about a second


def calculator_call(expression: str = "6*7") -> dict[str, Any]:
    return {"tool_calls": [{"name": "calculator", "arguments": {"expression": expression}}]}


async def drive(url: str, turns: list[dict[str, Any]], **scenario: Any) -> list[dict[str, Any]]:
    """Run the scenario's turns with one HttpAgent (one thread); what the client saw, each
    event checked with the protocol's own models."""
    node = shutil.which("node")
    assert node is not None, "the AG-UI client test needs node 20 (apt-get install nodejs)"
    assert (CLIENT / "node_modules" / "@ag-ui" / "client").is_dir(), (
        "tests/agui_client/node_modules is missing: run `make agui-client` (npm ci)"
    )
    body = {"url": url, "threadId": "thread-real", "turns": turns, **scenario}
    with anyio.fail_after(BOUND_S):
        done = await anyio.run_process(
            [node, str(CLIENT / "drive.mjs")], input=json.dumps(body).encode(), check=False
        )
    assert done.returncode == 0, done.stderr.decode()
    seen: list[dict[str, Any]] = json.loads(done.stdout)
    for turn in seen:
        for event in turn["events"]:
            protocol_event(event)
    return seen


def scripted(*replies: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"finishline": {"model": "scripted", "model_script": list(replies), **fields}}


def kinds(turn: dict[str, Any]) -> list[str]:
    return [e["type"] for e in turn["events"]]


async def served_run(url: str, run_id: str) -> dict[str, Any]:
    async with httpx.AsyncClient() as client:
        response = await client.get(f"{url}/runs/{run_id}")
    assert response.status_code == 200, response.text
    run: dict[str, Any] = response.json()
    return run


@pytest.fixture
async def server() -> Any:
    async with Served(create_app(settings()), lifespan="on") as served:
        yield served


async def test_a_run_reaches_the_client_as_a_complete_ag_ui_stream(server: Served) -> None:
    props = scripted(
        {"content": "Let me compute.", **calculator_call()}, finish("42"), tools=["calculator"]
    )
    (turn,) = await drive(
        server.url("/ag-ui"), [{"runId": "r1", "message": "6 times 7?", "forwardedProps": props}]
    )

    assert turn["error"] is None
    seen = kinds(turn)
    assert seen[0] == "RUN_STARTED"
    assert seen[-1] == "RUN_FINISHED"
    for kind in ("STEP_STARTED", "REASONING_MESSAGE_CONTENT", "TOOL_CALL_START"):
        assert kind in seen
    assert "TOOL_CALL_RESULT" in seen
    assert turn["result"]["answer"] == "42"
    assert turn["result"]["status"] == "completed"
    assert turn["result"]["reason"] == "finished"
    assert turn["messages"][-1] == {
        "id": f"{turn['result']['run_id']}-answer",
        "role": "assistant",
        "content": "42",
    }
    tool_message = next(m for m in turn["messages"] if m["role"] == "tool")
    assert tool_message["content"] == "42"


async def test_the_next_run_of_a_thread_continues_the_last(server: Served) -> None:
    first, second = await drive(
        server.url("/ag-ui"),
        [
            {"runId": "r1", "message": "hello", "forwardedProps": scripted(finish("hi"))},
            {"runId": "r2", "message": "again", "forwardedProps": scripted(finish("hi again"))},
        ],
    )

    assert (first["error"], second["error"]) == (None, None)
    run = await served_run(server.url(), second["result"]["run_id"])
    assert run["previous_run_id"] == first["result"]["run_id"]
    assert run["task"] == "again"  # the history the client re-sent is the server's already


async def test_an_approval_is_an_interrupt_the_next_run_resumes(server: Served) -> None:
    props = scripted(calculator_call(), finish("42"), tools=["calculator"])
    props["finishline"]["approval"] = {"tools": ["calculator"]}
    asked, resumed = await drive(
        server.url("/ag-ui"),
        [
            {"runId": "r1", "message": "6 times 7?", "forwardedProps": props},
            {"runId": "r2", "answer": "approve"},
        ],
    )

    assert asked["error"] is None
    (interrupt,) = asked["pendingInterrupts"]
    assert interrupt["reason"] == "tool_call"
    assert interrupt["id"] == interrupt["toolCallId"]
    assert resumed["error"] is None
    assert resumed["pendingInterrupts"] == []
    assert resumed["result"]["answer"] == "42"
    run_id = resumed["result"]["run_id"]
    assert run_id == interrupt["metadata"]["finishline"]["run_id"]  # the same run, streamed on
    result = next(e for e in resumed["events"] if e["type"] == "TOOL_CALL_RESULT")
    assert (result["toolCallId"], result["content"]) == (interrupt["toolCallId"], "42")


async def test_a_frontend_tool_call_comes_back_with_the_clients_result(server: Served) -> None:
    tool = {
        "name": "pick_color",
        "description": "Ask the user for a color.",
        "parameters": {"type": "object", "properties": {"hint": {"type": "string"}}},
    }
    call = {"tool_calls": [{"name": "pick_color", "arguments": {"hint": "warm"}}]}
    asked, answered = await drive(
        server.url("/ag-ui"),
        [
            {
                "runId": "r1",
                "message": "choose a color",
                "tools": [tool],
                "forwardedProps": scripted(call, finish("you chose teal")),
            },
            {"runId": "r2", "answer": {"result": "teal"}, "tools": [tool]},
        ],
    )

    assert asked["error"] is None
    (interrupt,) = asked["pendingInterrupts"]
    assert interrupt["metadata"]["finishline"]["kind"] == "client_tool"
    start = next(e for e in asked["events"] if e["type"] == "TOOL_CALL_START")
    assert start["toolCallName"] == "pick_color"
    assert answered["error"] is None
    assert answered["result"]["answer"] == "you chose teal"
    async with httpx.AsyncClient() as client:
        page = await client.get(
            server.url(f"/runs/{answered['result']['run_id']}/events"),
            headers={"Accept": "application/json"},
        )
    observation = next(e for e in page.json()["events"] if e["type"] == "observation")
    assert (observation["tool"], observation["content"]) == ("pick_color", "teal")
    assert observation["is_error"] is False


async def test_streamed_tokens_reach_the_client_as_message_deltas(server: Served) -> None:
    props = scripted(
        {"content": "thinking about the answer slowly", **calculator_call()},
        finish("42"),
        tools=["calculator"],
        settings={"stream_tokens": True},
    )
    (turn,) = await drive(
        server.url("/ag-ui"), [{"runId": "r1", "message": "go", "forwardedProps": props}]
    )

    assert turn["error"] is None
    deltas = [e["delta"] for e in turn["events"] if e["type"] == "REASONING_MESSAGE_CONTENT"]
    assert len(deltas) > 1  # in pieces, as they came
    assert "".join(deltas) == "thinking about the answer slowly"


async def test_a_client_that_dropped_its_stream_re_attaches_with_the_same_run_id(
    server: Served,
) -> None:
    slow = scripted({"content": "thinking it over", "delay_s": 600})
    (dropped,) = await drive(
        server.url("/ag-ui"),
        [{"runId": "r1", "message": "go", "forwardedProps": slow, "abortAfter": "STEP_STARTED"}],
    )
    run_id = dropped["events"][0]["metadata"]["finishline"]["run_id"]
    assert (await served_run(server.url(), run_id))["status"] == "running"  # still going
    async with httpx.AsyncClient() as client:
        cancelled = await client.post(server.url(f"/runs/{run_id}/cancel"))
    assert cancelled.status_code == 202

    (again,) = await drive(  # a new agent on the thread: the turn's runId again
        server.url("/ag-ui"), [{"runId": "r1", "message": "go", "forwardedProps": slow}]
    )

    assert again["error"] is None
    assert again["events"][0]["metadata"]["finishline"]["run_id"] == run_id
    finished = again["events"][-1]
    assert finished["type"] == "RUN_FINISHED"
    assert finished["outcome"] == {"type": "cancelled"}
    async with httpx.AsyncClient() as client:
        runs = (await client.get(server.url("/runs"))).json()["runs"]
    assert [r["id"] for r in runs] == [run_id]


async def copilotkit_approval(server: Served, answer: str) -> tuple[dict[str, Any], ...]:
    """A run waiting on an approval, answered as CopilotKit's `useInterrupt` answers it (v2
    runtime, HttpAgent): the interrupted turn's own runId again, with `resume` and a tool
    message; then the thread's next turn."""
    props = scripted(calculator_call(), finish("done"), tools=["calculator"])
    props["finishline"]["approval"] = {"tools": ["calculator"]}
    seen = await drive(
        server.url("/ag-ui"),
        [
            {"runId": "r1", "message": "6 times 7?", "forwardedProps": props},
            {"copilotkit": {"answer": answer}, "forwardedProps": props},
            {"runId": "r2", "message": "and then?", "forwardedProps": scripted(finish("next"))},
        ],
    )
    return tuple(seen)


async def test_copilotkit_approves_by_resuming_with_the_interrupted_turns_run_id(
    server: Served,
) -> None:
    asked, resumed, after = await copilotkit_approval(server, "approve")

    (interrupt,) = asked["pendingInterrupts"]
    body = resumed["body"]
    assert body["runId"] == "r1"  # the interrupted turn's own runId, as CopilotKit sends it
    assert body["resume"] == [
        {"interruptId": interrupt["id"], "status": "resolved", "payload": {"approved": True}}
    ]
    assert body["messages"][-1]["role"] == "tool"
    assert body["messages"][-1]["toolCallId"] == interrupt["toolCallId"]
    assert body["messages"][-1]["content"] == '{"approved":true}'
    assert resumed["error"] is None
    assert resumed["pendingInterrupts"] == []
    assert resumed["result"]["answer"] == "done"
    run = await served_run(server.url(), resumed["result"]["run_id"])
    assert run["id"] == interrupt["metadata"]["finishline"]["run_id"]
    assert run["status"] == "completed"
    (decided,) = [
        e
        for e in resumed["events"]
        if e["type"] == "CUSTOM" and e["name"] == "finishline.approval.decided"
    ]
    assert decided["value"]["approved"] is True
    result = next(e for e in resumed["events"] if e["type"] == "TOOL_CALL_RESULT")
    assert (result["toolCallId"], result["content"]) == (interrupt["toolCallId"], "42")
    assert after["error"] is None  # the thread is not stuck on the interrupt
    assert after["result"]["answer"] == "next"


async def test_copilotkit_rejects_by_resuming_with_the_interrupted_turns_run_id(
    server: Served,
) -> None:
    asked, resumed, after = await copilotkit_approval(server, "reject")

    (interrupt,) = asked["pendingInterrupts"]
    body = resumed["body"]
    assert body["runId"] == "r1"
    assert body["resume"] == [{"interruptId": interrupt["id"], "status": "cancelled"}]
    assert body["messages"][-1]["content"] == '{"status":"cancelled"}'
    assert resumed["error"] is None
    assert resumed["pendingInterrupts"] == []
    assert resumed["result"]["answer"] == "done"
    assert resumed["result"]["status"] == "completed"
    result = next(e for e in resumed["events"] if e["type"] == "TOOL_CALL_RESULT")
    assert result["toolCallId"] == interrupt["toolCallId"]
    assert result["metadata"]["finishline"]["is_error"] is True
    assert "cancelled in the client" in result["content"]
    assert after["error"] is None
    assert after["result"]["answer"] == "next"
