"""Approvals and frontend tools as interrupts (DESIGN §16): a waiting run ends the stream with
`RUN_FINISHED {outcome: interrupt}`; the thread's next run answers with `resume` (a frontend
tool's result as a `tool` message too), decides, and streams the same run on."""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.agui.kit import agent_input, of_type, scripted, stream, types, user
from tests.api.kit import error_of, finish, settings
from tests.fakes.llm_server import FakeLLMServer, FakeReply
from tests.fakes.service import api_client

PICK = {
    "name": "pick_color",
    "description": "Ask the user for a color.",
    "parameters": {"type": "object", "properties": {"hint": {"type": "string"}}},
}


def calculator_call(expression: str = "6*7", id: str | None = None) -> dict[str, Any]:
    call: dict[str, Any] = {"name": "calculator", "arguments": {"expression": expression}}
    if id is not None:
        call["id"] = id
    return {"tool_calls": [call]}


def approving(*replies: dict[str, Any]) -> dict[str, Any]:
    return scripted(*replies, tools=["calculator"], approval={"tools": ["calculator"]})


async def interrupted(client: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    """The interrupt a turn's stream ended with."""
    response, events = await stream(client, body)
    assert response.status_code == 200, response.text
    assert types(events)[-1] == "RUN_FINISHED"
    finished = events[-1].data
    assert finished["outcome"]["type"] == "interrupt", finished
    assert finished["result"]["status"] == "requires_action"
    return finished


def resume(*entries: dict[str, Any], run: str = "r2", **fields: Any) -> dict[str, Any]:
    """The thread's next run, answering; HttpAgent re-sends the history (ignored)."""
    return agent_input(user("6 times 7?"), run=run, resume=list(entries), **fields)


async def test_an_approval_interrupt_is_resumed_by_the_next_run() -> None:
    async with api_client(settings()) as client:
        asked = await interrupted(
            client,
            agent_input(user("6 times 7?"), finishline=approving(calculator_call(), finish("42"))),
        )
        (interrupt,) = asked["outcome"]["interrupts"]
        response, events = await stream(
            client,
            resume(
                {"interruptId": interrupt["id"], "status": "resolved", "payload": {"approve": True}}
            ),
        )
        run = (await client.get(f"/runs/{asked['result']['run_id']}")).json()

    assert response.status_code == 200
    assert types(events)[0] == "RUN_STARTED"
    assert events[0].data["runId"] == "r2"  # this turn's runId; the same finishline run
    assert events[0].data["metadata"]["finishline"]["run_id"] == asked["result"]["run_id"]
    assert "TOOL_CALL_START" not in types(events)  # the call was shown in the first run
    (result,) = of_type(events, "TOOL_CALL_RESULT")
    assert (result["toolCallId"], result["content"]) == (interrupt["toolCallId"], "42")
    (decided,) = [
        e for e in of_type(events, "CUSTOM") if e["name"] == "finishline.approval.decided"
    ]
    assert decided["value"]["approved"] is True
    assert of_type(events, "RUN_FINISHED")[0]["result"]["answer"] == "42"
    assert run["status"] == "completed"
    assert int(events[1].id or 0) > int(events[0].id or 0)  # after where the first stream ended


def copilotkit_resume(
    first: dict[str, Any], call_id: str, answer: dict[str, Any]
) -> dict[str, Any]:
    """The body CopilotKit's `useInterrupt` has its runtime's HttpAgent send (v2): the
    interrupted turn's threadId and own runId, the history with the call and a tool message
    (`JSON.stringify` of the answer's payload, or `{"status":"cancelled"}`), and `resume`."""
    payload = answer.get("payload", {"status": answer["status"]})
    call = {"expression": "6*7"}
    return {
        "threadId": first["threadId"],
        "runId": first["runId"],
        "protocolVersion": "1.0",
        "state": {},
        "messages": [
            *first["messages"],
            {
                "id": "run-step-1",
                "role": "assistant",
                "toolCalls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "calculator", "arguments": json.dumps(call)},
                    }
                ],
            },
            {
                "id": "5c3d750f-8a01-4262-8faf-6c99e85eb165",
                "role": "tool",
                "content": json.dumps(payload, separators=(",", ":")),
                "toolCallId": call_id,
            },
        ],
        "tools": [],
        "context": [],
        "forwardedProps": first["forwardedProps"],
        "resume": [{"interruptId": call_id, **answer}],
    }


async def test_a_resume_with_the_interrupted_turns_own_run_id_decides_as_copilotkit_sends_it() -> (
    None
):
    first = agent_input(user("6 times 7?"), finishline=approving(calculator_call(), finish("42")))
    async with api_client(settings()) as client:
        asked = await interrupted(client, first)
        (interrupt,) = asked["outcome"]["interrupts"]
        answer = {"status": "resolved", "payload": {"approved": True}}
        body = copilotkit_resume(first, interrupt["id"], answer)
        _, events = await stream(client, body)
        run = (await client.get(f"/runs/{asked['result']['run_id']}")).json()
        _, again = await stream(client, body)  # a re-POST of that turn: where it began
        _, plain = await stream(client, first)  # no resume: re-attaches to the whole run

    assert events[0].data["runId"] == first["runId"]
    (result,) = of_type(events, "TOOL_CALL_RESULT")
    assert (result["toolCallId"], result["content"]) == (interrupt["toolCallId"], "42")
    assert events[-1].data["outcome"] == {"type": "success"}
    assert events[-1].data["result"]["answer"] == "42"
    assert run["status"] == "completed"
    assert [e.id for e in again] == [e.id for e in events]
    assert plain[0].id == "0"  # from the run's first event, the call shown again
    assert "TOOL_CALL_START" in types(plain)
    assert plain[-1].data["result"]["answer"] == "42"


async def test_a_cancel_with_the_interrupted_turns_own_run_id_rejects_as_copilotkit_sends_it() -> (
    None
):
    first = agent_input(user("6 times 7?"), finishline=approving(calculator_call(), finish("no")))
    async with api_client(settings()) as client:
        asked = await interrupted(client, first)
        (interrupt,) = asked["outcome"]["interrupts"]
        body = copilotkit_resume(first, interrupt["id"], {"status": "cancelled"})
        _, events = await stream(client, body)
        run = (await client.get(f"/runs/{asked['result']['run_id']}")).json()

    (result,) = of_type(events, "TOOL_CALL_RESULT")
    assert result["metadata"]["finishline"]["is_error"] is True
    assert "cancelled in the client" in result["content"]
    assert events[-1].data["result"]["answer"] == "no"
    assert run["status"] == "completed"


async def test_a_waiting_run_re_attached_after_its_last_event_ends_with_its_interrupt() -> None:
    """A client that saw the run ask (its stream dropped at the interrupt, say) and re-attaches
    after that point gets no event of the wait, which is none: the stream still ends with it;
    from the start, it ends with it after the replay."""
    body = agent_input(user("6 times 7?"), finishline=approving(calculator_call(), finish()))
    async with api_client(settings()) as client:
        _, events = await stream(client, body)
        last = events[-1].id
        assert last is not None
        _, replayed = await stream(client, body, {"Last-Event-ID": last})
        _, whole = await stream(client, body)  # from the start: the wait's events replayed

    assert int(last) > 0
    assert [e.id for e in whole] == [e.id for e in events]
    assert types(events)[-1] == types(replayed)[-1] == "RUN_FINISHED"
    assert types(replayed) == ["RUN_STARTED", "RUN_FINISHED"]  # nothing after `last`
    assert replayed[-1].data["outcome"] == events[-1].data["outcome"]
    assert replayed[-1].data["outcome"]["type"] == "interrupt"


async def test_a_cancelled_interrupt_is_a_rejection_the_model_is_told_of() -> None:
    async with api_client(settings()) as client:
        asked = await interrupted(
            client, agent_input(finishline=approving(calculator_call(), finish("no")))
        )
        (interrupt,) = asked["outcome"]["interrupts"]
        _, events = await stream(
            client, resume({"interruptId": interrupt["id"], "status": "cancelled"})
        )

    (result,) = of_type(events, "TOOL_CALL_RESULT")
    assert result["metadata"]["finishline"]["is_error"] is True
    assert "cancelled in the client" in result["content"]


async def test_an_approval_may_carry_a_message_and_edited_arguments() -> None:
    async with api_client(settings()) as client:
        asked = await interrupted(
            client, agent_input(finishline=approving(calculator_call(), finish()))
        )
        (interrupt,) = asked["outcome"]["interrupts"]
        payload = {"approved": True, "editedArgs": {"expression": "1+1"}, "message": "smaller"}
        _, events = await stream(
            client,
            resume({"interruptId": interrupt["id"], "status": "resolved", "payload": payload}),
        )

    (result,) = of_type(events, "TOOL_CALL_RESULT")
    assert result["content"] == "2"


async def test_a_waiting_thread_takes_no_input_that_does_not_answer_it() -> None:
    two = {
        "tool_calls": [
            calculator_call(id="c1")["tool_calls"][0],
            calculator_call("1+1", id="c2")["tool_calls"][0],
        ]
    }
    async with api_client(settings()) as client:
        asked = await interrupted(client, agent_input(finishline=approving(two, finish())))
        ignored = await client.post("/ag-ui", json=agent_input(user("hello?"), run="r2"))
        partial = await client.post(
            "/ag-ui",
            json=resume({"interruptId": "c1", "status": "resolved", "payload": {"approve": True}}),
        )
        stranger = await client.post(
            "/ag-ui",
            json=resume(
                {"interruptId": "c1", "status": "cancelled"},
                {"interruptId": "c2", "status": "cancelled"},
                {"interruptId": "c9", "status": "cancelled"},
            ),
        )
        bad = await client.post(
            "/ag-ui",
            json=resume(
                {"interruptId": "c1", "status": "resolved", "payload": {"approve": "yes"}},
                {"interruptId": "c2", "status": "cancelled"},
            ),
        )
        run = (await client.get(f"/runs/{asked['result']['run_id']}")).json()

    assert sorted(i["id"] for i in asked["outcome"]["interrupts"]) == ["c1", "c2"]
    assert error_of(ignored, 409, "interrupts_pending")["details"]["interrupts"] == ["c1", "c2"]
    assert error_of(partial, 409, "interrupts_pending")["details"]["interrupts"] == ["c2"]
    assert error_of(stranger, 404)["details"]["interrupts"] == ["c9"]
    assert error_of(bad, 422)["details"]["field"] == "resume[0].payload.approve"
    assert run["status"] == "requires_action"  # none of those decided anything
    assert len(run["pending_approvals"]) == 2


async def test_a_resume_answering_one_interrupt_twice_is_refused_naming_it() -> None:
    async with api_client(settings()) as client:
        asked = await interrupted(
            client, agent_input(finishline=approving(calculator_call(id="c1"), finish()))
        )
        twice = await client.post(
            "/ag-ui",
            json=resume(
                {"interruptId": "c1", "status": "resolved", "payload": {"approve": True}},
                {"interruptId": "c1", "status": "cancelled"},
            ),
        )
        run = (await client.get(f"/runs/{asked['result']['run_id']}")).json()

    error = error_of(twice, 422)
    assert error["details"]["field"] == "resume[1].interruptId"
    assert error["details"]["interrupts"] == ["c1"]
    assert "'c1'" in error["message"]
    assert run["status"] == "requires_action"  # nothing decided


async def test_a_resume_naming_another_keys_interrupts_is_not_found() -> None:
    keys = {"api_keys": ["key-a", "key-b"]}
    a, b = {"Authorization": "Bearer key-a"}, {"Authorization": "Bearer key-b"}
    async with api_client(settings(**keys)) as client:
        _, events = await stream(
            client, agent_input(finishline=approving(calculator_call(), finish())), a
        )
        (interrupt,) = events[-1].data["outcome"]["interrupts"]
        theirs = await client.post(
            "/ag-ui",
            json=resume({"interruptId": interrupt["id"], "status": "cancelled"}),
            headers=b,
        )
        run = (
            await client.get(f"/runs/{interrupt['metadata']['finishline']['run_id']}", headers=a)
        ).json()

    assert error_of(theirs, 404)["details"]["interrupts"] == [interrupt["id"]]
    assert run["status"] == "requires_action"


async def test_a_frontend_tool_is_offered_to_the_model_with_its_description_and_schema() -> None:
    async with FakeLLMServer([FakeReply.call("pick_color", {"hint": "warm"})]) as llm:
        config = settings(llm_base_url=llm.base_url, llm_model="fake-model")
        async with api_client(config) as client:
            asked = await interrupted(client, agent_input(user("a color?"), tools=[PICK]))

    (request,) = llm.requests  # the model's one call: then the run waits for the client
    offered = {t["function"]["name"]: t["function"] for t in request["tools"]}
    function = offered["pick_color"]
    assert (function["description"], function["parameters"]) == (
        PICK["description"],
        PICK["parameters"],
    )
    (interrupt,) = asked["outcome"]["interrupts"]
    assert interrupt["metadata"]["finishline"]["tool"] == "pick_color"
    assert interrupt["metadata"]["finishline"]["arguments"] == {"hint": "warm"}


async def test_a_frontend_tool_call_is_answered_by_the_clients_tool_message() -> None:
    call = {"tool_calls": [{"name": "pick_color", "arguments": {"hint": "warm"}, "id": "p1"}]}
    async with api_client(settings()) as client:
        asked = await interrupted(
            client,
            agent_input(
                user("a color?"), tools=[PICK], finishline=scripted(call, finish("teal it is"))
            ),
        )
        history = [
            user("a color?"),
            {
                "id": "a1",
                "role": "assistant",
                "toolCalls": [
                    {
                        "id": "p1",
                        "type": "function",
                        "function": {"name": "pick_color", "arguments": "{}"},
                    }
                ],
            },
            {"id": "t1", "role": "tool", "toolCallId": "p1", "content": "teal"},
        ]
        body = agent_input(
            *history, run="r2", tools=[PICK], resume=[{"interruptId": "p1", "status": "resolved"}]
        )
        _, events = await stream(client, body)
        page = await client.get(
            f"/runs/{asked['result']['run_id']}/events", headers={"Accept": "application/json"}
        )

    (interrupt,) = asked["outcome"]["interrupts"]
    assert interrupt["metadata"]["finishline"]["kind"] == "client_tool"
    assert interrupt["responseSchema"]["required"] == ["result"]
    (result,) = of_type(events, "TOOL_CALL_RESULT")
    assert (result["toolCallId"], result["content"]) == ("p1", "teal")
    assert result["metadata"]["finishline"]["is_error"] is False
    assert of_type(events, "RUN_FINISHED")[0]["result"]["answer"] == "teal it is"
    (observation,) = [e for e in page.json()["events"] if e["type"] == "observation"]
    assert observation["content"] == "teal"  # what the model was shown


async def test_a_frontend_tools_result_may_come_in_the_resume_payload_and_a_failure_too() -> None:
    call = {"tool_calls": [{"name": "pick_color", "arguments": {}, "id": "p1"}]}
    again = {"tool_calls": [{"name": "pick_color", "arguments": {}, "id": "p2"}]}
    async with api_client(settings()) as client:
        await interrupted(
            client, agent_input(tools=[PICK], finishline=scripted(call, again, finish()))
        )
        payload = {"result": {"color": "teal"}}
        _, second = await stream(
            client, resume({"interruptId": "p1", "status": "resolved", "payload": payload})
        )
        failed_message = {
            "id": "t2",
            "role": "tool",
            "toolCallId": "p2",
            "content": "",
            "error": "the dialog was closed",
        }
        _, events = await stream(client, agent_input(failed_message, run="r3"))

    (first,) = of_type(second, "TOOL_CALL_RESULT")
    assert first["content"] == '{"color": "teal"}'  # JSON as its text
    assert [i["id"] for i in second[-1].data["outcome"]["interrupts"]] == ["p2"]
    (result,) = of_type(events, "TOOL_CALL_RESULT")
    assert result["metadata"]["finishline"]["is_error"] is True
    assert "the dialog was closed" in result["content"]


async def test_a_frontend_tools_answer_needs_its_result() -> None:
    call = {"tool_calls": [{"name": "pick_color", "arguments": {}, "id": "p1"}]}
    async with api_client(settings()) as client:
        await interrupted(client, agent_input(tools=[PICK], finishline=scripted(call, finish())))
        response = await client.post(
            "/ag-ui",
            json=resume({"interruptId": "p1", "status": "resolved", "payload": {"approve": True}}),
        )

    assert error_of(response, 422)["details"]["field"] == "resume[0].payload"


async def test_a_tool_message_of_an_earlier_call_with_the_same_id_answers_nothing() -> None:
    call = {"tool_calls": [{"name": "pick_color", "arguments": {}, "id": "p1"}]}
    async with api_client(settings()) as client:
        await interrupted(
            client,
            agent_input(user("a color?"), tools=[PICK], finishline=scripted(call, finish("ok"))),
        )
        _, first = await stream(
            client,
            resume({"interruptId": "p1", "status": "resolved", "payload": {"result": "teal"}}),
        )
        assert of_type(first, "RUN_FINISHED")[0]["outcome"] == {"type": "success"}
        # the next run calls a tool with the same id (a provider may reuse ids across runs)
        await interrupted(
            client,
            agent_input(
                user("another?", id="u2"),
                run="r3",
                tools=[PICK],
                finishline=scripted(call, finish("ok")),
            ),
        )
        history = [
            user("a color?"),
            {
                "id": "a1",
                "role": "assistant",
                "toolCalls": [
                    {
                        "id": "p1",
                        "type": "function",
                        "function": {"name": "pick_color", "arguments": "{}"},
                    }
                ],
            },
            {"id": "t1", "role": "tool", "toolCallId": "p1", "content": "teal"},
            user("another?", id="u2"),
            {
                "id": "a2",
                "role": "assistant",
                "toolCalls": [
                    {
                        "id": "p1",
                        "type": "function",
                        "function": {"name": "pick_color", "arguments": "{}"},
                    }
                ],
            },
        ]
        answer = {"interruptId": "p1", "status": "resolved", "payload": {"result": "amber"}}
        _, events = await stream(client, agent_input(*history, run="r4", resume=[answer]))

    (result,) = of_type(events, "TOOL_CALL_RESULT")
    assert result["content"] == "amber"  # not the earlier call's "teal"
