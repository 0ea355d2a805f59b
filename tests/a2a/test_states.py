"""Each run status as its A2A task state (DESIGN §17), read with GetTask and seen at the end of
a stream: queued -> SUBMITTED, running -> WORKING, requires_action -> INPUT_REQUIRED,
completed -> COMPLETED, incomplete -> COMPLETED with the reason in metadata (FAILED when it has
no answer), failed -> FAILED, cancelled -> CANCELED."""

from __future__ import annotations

import anyio
import pytest
from a2a.types import CancelTaskRequest, GetTaskRequest

from tests.a2a.kit import (
    HANGING,
    TIMEOUT_S,
    a2a_service,
    a2a_settings,
    calculate,
    data_parts,
    decisions,
    finish,
    finishline_of,
    request,
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

LIMITED = {"settings": {"max_steps": 1}}
"""One step: a reply without the finish tool ends the run at max_steps."""


async def test_a_queued_run_is_submitted_and_a_running_one_working() -> None:
    async with a2a_service(a2a_settings(max_concurrent_runs=1)) as service:
        client = await service.client("calc")
        polling = await service.client("calc", streaming=False, polling=True)
        sent = client.send_message(request(text("hang"), finishline=scripted(HANGING)))
        with anyio.fail_after(TIMEOUT_S):
            async for response in sent:
                if states([response]) == ["TASK_STATE_WORKING"]:
                    break
            running = response.status_update.task_id
            queued = await send(polling, text("behind it"), finishline=scripted(finish()))
            got_running = await polling.get_task(GetTaskRequest(id=running))
            got_queued = await polling.get_task(GetTaskRequest(id=queued.id))
            await polling.cancel_task(CancelTaskRequest(id=running))
            await sent.aclose()

    assert state_name(queued.status.state) == "TASK_STATE_SUBMITTED"
    assert state_name(got_queued.status.state) == "TASK_STATE_SUBMITTED"
    assert finishline_of(got_queued)["status"] == "queued"
    assert state_name(got_running.status.state) == "TASK_STATE_WORKING"
    assert finishline_of(got_running)["status"] == "running"


async def test_a_run_waiting_for_approval_is_input_required_with_its_pending_calls() -> None:
    async with a2a_service() as service:
        client = await service.client("ops", streaming=False)
        task = await send(client, text("2+3?"), finishline=scripted(calculate("2+3")))
        got = await client.get_task(GetTaskRequest(id=task.id))

    for seen in (task, got):
        assert state_name(seen.status.state) == "TASK_STATE_INPUT_REQUIRED"
        message = seen.status.message
        (pending,) = data_parts(message.parts)[0]["pending_approvals"]
        assert pending["tool"] == "calculator"
        assert pending["arguments"] == {"expression": "2+3"}
        assert '"decisions"' in texts(message.parts)[0]
        assert finishline_of(seen)["status"] == "requires_action"


async def test_an_incomplete_run_with_an_answer_is_completed_with_its_reason() -> None:
    script = scripted({"content": "still thinking"}, {"content": "best guess: 4"}, **LIMITED)
    async with a2a_service() as service:
        client = await service.client("calc")
        responses = await stream(client, text("2+2?"), finishline=script)
        polling = await service.client("calc", streaming=False)
        got = await polling.get_task(GetTaskRequest(id=responses[0].task.id))

    assert states(responses)[-1] == "TASK_STATE_COMPLETED"
    last = finishline_of(updates(responses)[-1])
    assert (last["type"], last["reason"], last["degraded"]) == ("run.incomplete", "max_steps", True)
    assert texts(updates(responses)[-2].artifact.parts) == ["best guess: 4"]
    assert state_name(got.status.state) == "TASK_STATE_COMPLETED"
    meta = finishline_of(got)
    assert (meta["status"], meta["reason"], meta["degraded"]) == ("incomplete", "max_steps", True)
    assert texts(got.artifacts[0].parts) == ["best guess: 4"]


async def test_an_incomplete_run_without_an_answer_is_failed() -> None:
    script = scripted(
        {"content": "still thinking"},
        settings={"max_steps": 1, "final_answer_on_limit": False},
    )
    async with a2a_service() as service:
        client = await service.client("calc")
        responses = await stream(client, text("2+2?"), finishline=script)
        polling = await service.client("calc", streaming=False)
        got = await polling.get_task(GetTaskRequest(id=responses[0].task.id))

    assert states(responses)[-1] == "TASK_STATE_FAILED"
    assert not [r for r in responses if r.HasField("artifact_update")]
    assert finishline_of(updates(responses)[-1])["reason"] == "max_steps"
    assert state_name(got.status.state) == "TASK_STATE_FAILED"
    assert not got.artifacts
    assert "without an answer: max_steps" in texts(got.status.message.parts)[0]
    assert finishline_of(got)["status"] == "incomplete"


async def test_a_failed_run_is_failed_with_its_error() -> None:
    async with a2a_service() as service:
        client = await service.client("calc")
        responses = await stream(client, text("no script"), finishline=scripted())
        polling = await service.client("calc", streaming=False)
        got = await polling.get_task(GetTaskRequest(id=responses[0].task.id))

    assert states(responses)[-1] == "TASK_STATE_FAILED"
    failed = updates(responses)[-1]
    assert finishline_of(failed)["type"] == "run.failed"
    assert "The run failed" in texts(failed.status.message.parts)[0]
    assert state_name(got.status.state) == "TASK_STATE_FAILED"
    assert finishline_of(got)["error"]["type"]
    assert texts(got.status.message.parts)[0].startswith("The run failed")


async def test_a_cancelled_run_is_canceled() -> None:
    async with a2a_service() as service:
        client = await service.client("calc", streaming=False, polling=True)
        task = await send(client, text("hang"), finishline=scripted(HANGING))
        cancelled = await client.cancel_task(CancelTaskRequest(id=task.id))
        got = await client.get_task(GetTaskRequest(id=task.id))
    assert state_name(cancelled.status.state) == "TASK_STATE_CANCELED"
    assert state_name(got.status.state) == "TASK_STATE_CANCELED"
    assert finishline_of(got)["reason"] == "cancelled"


async def test_a_run_queued_again_after_a_decision_is_working_not_submitted() -> None:
    async with a2a_service(a2a_settings(max_concurrent_runs=1)) as service:
        ops = await service.client("ops", streaming=False)
        ops_polling = await service.client("ops", streaming=False, polling=True)
        calc = await service.client("calc")
        waiting = await send(ops, text("2+3?"), finishline=scripted(calculate("2+3"), finish("5")))
        (call,) = data_parts(waiting.status.message.parts)[0]["pending_approvals"]
        busy = calc.send_message(request(text("hang"), finishline=scripted(HANGING)))
        with anyio.fail_after(TIMEOUT_S):
            async for response in busy:  # the one slot is taken
                if states([response]) == ["TASK_STATE_WORKING"]:
                    break
            decided = await send(
                ops_polling,
                decisions({"call_id": call["call_id"], "approve": True}, task_id=waiting.id),
            )
            got = await ops_polling.get_task(GetTaskRequest(id=waiting.id))
            await ops_polling.cancel_task(CancelTaskRequest(id=waiting.id))
            await busy.aclose()

    assert finishline_of(got)["status"] == "queued"  # behind the busy slot, as it began to wait
    assert state_name(got.status.state) == "TASK_STATE_WORKING"
    assert state_name(decided.status.state) == "TASK_STATE_WORKING"
