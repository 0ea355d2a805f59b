"""Approvals over A2A (DESIGN §9, §17): a run waiting for a person is INPUT_REQUIRED with its
pending calls in the status message; a message on that task with a data part
`{"decisions": [...]}` decides them, checked as POST /runs/{id}/approvals checks its own; text
alone rejects them all, the text being the reason; a stream on a task that waits already is
the task alone."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from a2a.helpers.proto_helpers import new_data_part, new_text_part
from a2a.types import GetTaskRequest, SubscribeToTaskRequest
from a2a.utils.errors import InvalidParamsError, UnsupportedOperationError

from tests.a2a.kit import (
    TIMEOUT_S,
    A2AService,
    a2a_service,
    calculate,
    data_parts,
    decisions,
    finish,
    finishline_of,
    message,
    scripted,
    send,
    state_name,
    states,
    stream,
    text,
    texts,
    updates,
)

pytestmark = pytest.mark.e2e

APPROVE_THEN_FINISH = scripted(calculate("2+3"), finish("5"))
TWO_SUMS = {
    "tool_calls": [
        {"name": "calculator", "arguments": {"expression": "1+1"}},
        {"name": "calculator", "arguments": {"expression": "2+2"}},
    ]
}


def pending_of(stream_or_task: Any) -> list[dict[str, Any]]:
    """The pending calls of an INPUT_REQUIRED status: a Task's, or a stream's last update's."""
    if isinstance(stream_or_task, list):
        status = updates(stream_or_task)[-1].status
    else:
        status = stream_or_task.status
    pending: list[dict[str, Any]] = data_parts(status.message.parts)[0]["pending_approvals"]
    return pending


async def events_of(service: A2AService, run_id: str) -> list[dict[str, Any]]:
    answer = await service.http.get(
        service.url(f"/runs/{run_id}/events"), headers={"Accept": "application/json"}
    )
    events: list[dict[str, Any]] = answer.json()["events"]
    return events


async def test_a_streamed_task_waits_then_a_decisions_message_streams_it_on_to_its_end() -> None:
    async with a2a_service() as service:
        client = await service.client("ops")
        waiting = await stream(client, text("2+3?"), finishline=APPROVE_THEN_FINISH)
        task_id = waiting[0].task.id
        (call,) = pending_of(waiting)
        resumed = await stream(
            client, decisions({"call_id": call["call_id"], "approve": True}, task_id=task_id)
        )
        events = await events_of(service, task_id)

    assert states(waiting)[-1] == "TASK_STATE_INPUT_REQUIRED"
    last = updates(waiting)[-1]
    assert finishline_of(last)["type"] in {e["type"] for e in events}
    assert call["tool"] == "calculator"
    assert call["arguments"] == {"expression": "2+3"}
    assert resumed[0].task.id == task_id
    assert states(resumed)[-1] == "TASK_STATE_COMPLETED"
    types = [finishline_of(u)["type"] for u in updates(resumed)]
    assert types[0] == "approval.decided"
    assert "observation" in types
    decided = updates(resumed)[0].status.message
    assert data_parts(decided.parts)[0]["approved"] is True
    assert texts(updates(resumed)[-2].artifact.parts) == ["5"]
    observation = next(e for e in events if e["type"] == "observation")
    assert observation["content"] == "5"
    assert observation["is_error"] is False


async def test_a_blocking_decisions_message_answers_with_the_task_at_its_end() -> None:
    script = scripted(calculate("2+3"), finish("not computed"))
    async with a2a_service() as service:
        client = await service.client("ops", streaming=False)
        waiting = await send(client, text("2+3?"), finishline=script)
        (call,) = pending_of(waiting)
        ended = await send(
            client,
            decisions(
                {"call_id": call["call_id"], "approve": False, "message": "Not today."},
                task_id=waiting.id,
                context_id=waiting.context_id,
            ),
        )
        events = await events_of(service, waiting.id)

    assert state_name(waiting.status.state) == "TASK_STATE_INPUT_REQUIRED"
    assert ended.id == waiting.id
    assert state_name(ended.status.state) == "TASK_STATE_COMPLETED"
    assert texts(ended.artifacts[0].parts) == ["not computed"]
    observation = next(e for e in events if e["type"] == "observation")
    assert observation["is_error"] is True
    assert "Not today." in observation["content"]


async def test_a_partial_decision_leaves_the_task_input_required_for_the_rest() -> None:
    async with a2a_service() as service:
        client = await service.client("ops", streaming=False)
        waiting = await send(
            client, text("two sums"), finishline=scripted(TWO_SUMS, finish("2, 4"))
        )
        first, second = pending_of(waiting)
        partly = await send(
            client, decisions({"call_id": first["call_id"], "approve": True}, task_id=waiting.id)
        )
        ended = await send(
            client, decisions({"call_id": second["call_id"], "approve": True}, task_id=waiting.id)
        )

    assert state_name(partly.status.state) == "TASK_STATE_INPUT_REQUIRED"
    assert [p["call_id"] for p in pending_of(partly)] == [second["call_id"]]
    assert state_name(ended.status.state) == "TASK_STATE_COMPLETED"


async def test_a_subscriber_joining_a_waiting_task_follows_it_past_the_decision() -> None:
    async with a2a_service() as service:
        blocking = await service.client("ops", streaming=False)
        polling = await service.client("ops", streaming=False, polling=True)
        waiting = await send(blocking, text("2+3?"), finishline=APPROVE_THEN_FINISH)
        (call,) = pending_of(waiting)
        watcher = await service.client("ops")
        watched = watcher.subscribe(SubscribeToTaskRequest(id=waiting.id))
        with anyio.fail_after(TIMEOUT_S):
            first = await anext(watched)
            await send(
                polling,
                decisions({"call_id": call["call_id"], "approve": True}, task_id=waiting.id),
            )
            rest = [r async for r in watched]

    assert state_name(first.task.status.state) == "TASK_STATE_INPUT_REQUIRED"
    assert states(rest)[-1] == "TASK_STATE_COMPLETED"
    assert finishline_of(updates(rest)[0])["type"] == "approval.decided"


async def test_text_alone_on_a_waiting_task_rejects_its_calls_the_text_being_the_reason() -> None:
    async with a2a_service() as service:
        client = await service.client("ops", streaming=False)
        waiting = await send(
            client, text("two sums"), finishline=scripted(TWO_SUMS, finish("none"))
        )
        ended = await send(client, text("Not these: use 3.", task_id=waiting.id))
        events = await events_of(service, waiting.id)

    # the status message told the client what text would do
    assert "text alone rejects them all" in texts(waiting.status.message.parts)[0]
    assert state_name(ended.status.state) == "TASK_STATE_COMPLETED"
    decided = [e for e in events if e["type"] == "approval.decided"]
    assert [(d["approved"], d["message"]) for d in decided] == [(False, "Not these: use 3.")] * 2
    observations = [e for e in events if e["type"] == "observation"]
    assert [o["is_error"] for o in observations] == [True, True]
    assert all("Not these: use 3." in o["content"] for o in observations)
    assert not [e for e in events if e["type"] == "user.message"]  # the reason, not a message


async def test_text_alone_streamed_on_a_waiting_task_streams_it_on_to_its_end() -> None:
    async with a2a_service() as service:
        client = await service.client("ops")
        waiting = await stream(client, text("2+3?"), finishline=APPROVE_THEN_FINISH)
        task_id = waiting[0].task.id
        resumed = await stream(client, text("No calculator, please.", task_id=task_id))

    assert states(waiting)[-1] == "TASK_STATE_INPUT_REQUIRED"
    assert resumed[0].task.id == task_id
    assert states(resumed)[-1] == "TASK_STATE_COMPLETED"
    first = updates(resumed)[0]
    assert finishline_of(first)["type"] == "approval.decided"
    assert data_parts(first.status.message.parts)[0]["approved"] is False


async def test_text_beside_decisions_is_a_steering_message_held_for_the_run() -> None:
    async with a2a_service() as service:
        client = await service.client("ops", streaming=False)
        waiting = await send(client, text("2+3?"), finishline=APPROVE_THEN_FINISH)
        (call,) = pending_of(waiting)
        both = await send(
            client,
            message(
                new_text_part("And be brief."),
                new_data_part({"decisions": [{"call_id": call["call_id"], "approve": True}]}),
                task_id=waiting.id,
            ),
        )
        events = await events_of(service, waiting.id)

    assert state_name(both.status.state) == "TASK_STATE_COMPLETED"
    said = [e["content"] for e in events if e["type"] == "user.message"]
    assert said == ["And be brief."]
    observation = next(e for e in events if e["type"] == "observation")
    assert observation["is_error"] is False


async def test_text_alone_too_long_to_be_a_reason_is_refused_and_decides_nothing() -> None:
    async with a2a_service() as service:
        client = await service.client("ops", streaming=False)
        waiting = await send(client, text("2+3?"), finishline=APPROVE_THEN_FINISH)
        with pytest.raises(InvalidParamsError, match="rejects its calls") as refused:
            await send(client, text("x" * 10_001, task_id=waiting.id))
        still = await client.get_task(GetTaskRequest(id=waiting.id))

    assert "10000 characters" in str(refused.value)
    assert state_name(still.status.state) == "TASK_STATE_INPUT_REQUIRED"


async def test_the_same_message_streamed_again_on_a_waiting_task_is_the_task_then_the_end() -> None:
    """The TCK's streaming retry: one SendStreamingMessage sent twice (the same messageId, no
    metadata), to an agent whose every calculation waits for a person (the demo model)."""
    async with a2a_service() as service:
        client = await service.client("ops")
        sent = text("TCK streaming test", message_id="tck-sse-streaming-001-session")
        first = await stream(client, sent)
        again = await stream(client, sent)

    assert states(first)[-1] == "TASK_STATE_INPUT_REQUIRED"
    (only,) = again  # the task, waiting: the stream closes with it (A2A §3.1.2, §11.7)
    assert only.task.id == first[0].task.id
    assert state_name(only.task.status.state) == "TASK_STATE_INPUT_REQUIRED"
    assert pending_of(only.task) == pending_of(first)


async def test_decisions_are_checked_like_post_approvals_each_problem_named() -> None:
    async with a2a_service() as service:
        client = await service.client("ops", streaming=False)
        waiting = await send(client, text("2+3?"), finishline=APPROVE_THEN_FINISH)
        (call,) = pending_of(waiting)
        on = {"task_id": waiting.id}
        with pytest.raises(InvalidParamsError) as not_a_bool:
            await send(client, decisions({"call_id": call["call_id"], "approve": "yes"}, **on))
        with pytest.raises(InvalidParamsError) as unknown_field:
            await send(
                client, decisions({"call_id": call["call_id"], "approve": True, "why": 1}, **on)
            )
        with pytest.raises(UnsupportedOperationError) as not_waiting_on:
            await send(client, decisions({"call_id": "call_nope", "approve": True}, **on))
        with pytest.raises(InvalidParamsError) as bad_arguments:
            await send(
                client,
                decisions(
                    {"call_id": call["call_id"], "approve": True, "arguments": {"expression": 5}},
                    **on,
                ),
            )
        with pytest.raises(InvalidParamsError, match="send them with its taskId"):
            await send(client, decisions({"call_id": call["call_id"], "approve": True}))
        still = await client.get_task(GetTaskRequest(id=waiting.id))

    field = "message.parts[0].data.decisions[0]"
    assert not_a_bool.value.data["errors"][0]["field"] == f"{field}.approve"
    assert unknown_field.value.data["errors"][0] == {
        "field": f"{field}.why",
        "message": "unknown field",
    }
    assert not_waiting_on.value.data["type"] == "run_not_waiting"
    assert not_waiting_on.value.data["pending"] == [call["call_id"]]
    assert bad_arguments.value.data["field"] == f"{field}.arguments"
    assert state_name(still.status.state) == "TASK_STATE_INPUT_REQUIRED"  # none of them decided


async def test_decisions_for_a_task_that_waits_on_nothing_are_refused() -> None:
    async with a2a_service() as service:
        client = await service.client("calc", streaming=False)
        ended = await send(client, text("quick"), finishline=scripted(finish()))
        with pytest.raises(UnsupportedOperationError, match="has ended"):
            await send(client, decisions({"call_id": "c", "approve": True}, task_id=ended.id))
