"""The A2A methods over runs (DESIGN §17), driven by the SDK's client against the app on
loopback: SendMessage (blocking and not), SendStreamingMessage, GetTask, ListTasks,
CancelTask, SubscribeToTask. A task is a run: its id is the run id, and the run is what
GET /runs shows."""

from __future__ import annotations

import anyio
import pytest
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import TaskNotCancelableError, UnsupportedOperationError
from google.protobuf.json_format import MessageToDict

from tests.a2a.kit import (
    HANGING,
    TIMEOUT_S,
    a2a_service,
    a2a_settings,
    calculate,
    data_parts,
    finish,
    finishline_of,
    request,
    scripted,
    send,
    state_name,
    states,
    stream,
    subscribe,
    text,
    texts,
    updates,
)
from tests.e2e.kit import e2e_settings
from tests.fakes.llm_server import FakeLLMServer, FakeReply

pytestmark = pytest.mark.e2e

COMPUTING = scripted(calculate("2+3", content="I will compute it."), finish("5"))


async def test_the_endpoint_with_a_trailing_slash_answers_as_the_endpoint() -> None:
    """A client joining a path to the card's URL (`/a2a/calc` + `/`) meets no redirect, which
    a JSON-RPC client cannot follow."""
    async with a2a_service() as service:
        card = AgentCard()
        card.CopyFrom(await service.card("calc"))
        for interface in card.supported_interfaces:
            interface.url += "/"
        blocking = await service.client("calc", streaming=False, card=card)
        streaming = await service.client("calc", card=card)
        done = await send(blocking, text("2+3?"), finishline=COMPUTING)
        streamed = await stream(streaming, text("2+3?"), finishline=COMPUTING)
        got = await blocking.get_task(GetTaskRequest(id=done.id))

    assert state_name(done.status.state) == "TASK_STATE_COMPLETED"
    assert states(streamed)[-1] == "TASK_STATE_COMPLETED"
    assert got.id == done.id


async def test_send_message_blocks_until_the_task_ends_and_answers_as_an_artifact() -> None:
    async with a2a_service() as service:
        client = await service.client("calc", streaming=False)
        task = await send(client, text("What is 2+3?"), finishline=COMPUTING)
        run = (await service.http.get(service.url(f"/runs/{task.id}"))).json()

    assert state_name(task.status.state) == "TASK_STATE_COMPLETED"
    assert task.id == run["id"]
    assert run["status"] == "completed"
    assert run["agent"] == "calc"
    assert run["task"] == "What is 2+3?"
    (artifact,) = task.artifacts
    assert artifact.name == "answer"
    assert texts(artifact.parts) == ["5"]
    meta = finishline_of(task)
    assert meta["run_id"] == task.id
    assert meta["reason"] == "finished"
    assert meta["usage"]["tool_calls"] == 1
    assert [texts(m.parts) for m in task.history] == [["What is 2+3?"]]
    assert run["metadata"]["a2a"]["context_id"] == task.context_id


async def test_send_message_returning_immediately_answers_the_task_as_it_stands() -> None:
    async with a2a_service() as service:
        client = await service.client("calc", streaming=False, polling=True)
        task = await send(client, text("hang"), finishline=scripted(HANGING))
        got = await client.get_task(GetTaskRequest(id=task.id))
        await client.cancel_task(CancelTaskRequest(id=task.id))

    assert state_name(task.status.state) in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")
    assert got.id == task.id
    assert state_name(got.status.state) in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")


async def test_a_stream_says_each_thought_tool_call_and_result_then_the_answer() -> None:
    async with a2a_service() as service:
        client = await service.client("calc")
        responses = await stream(client, text("What is 2+3?"), finishline=COMPUTING)
        events = (
            await service.http.get(
                service.url(f"/runs/{responses[0].task.id}/events"),
                headers={"Accept": "application/json"},
            )
        ).json()["events"]

    first = responses[0].task
    assert state_name(first.status.state) == "TASK_STATE_SUBMITTED"
    assert states(responses)[-1] == "TASK_STATE_COMPLETED"
    assert set(states(responses)[1:-1]) == {"TASK_STATE_WORKING"}
    said = updates(responses)
    metas = [finishline_of(u) for u in said]
    by_seq = {e["seq"]: e["type"] for e in events}
    assert all(by_seq[m["seq"]] == m["type"] for m in metas)  # finishline's seq and type
    assert [m["seq"] for m in metas] == sorted(m["seq"] for m in metas)
    types = [m["type"] for m in metas]
    assert types[:4] == ["run.started", "thought", "action", "observation"]
    assert types[-2:] == ["run.completed", "run.completed"]
    thought, action, observation = (u.status.message for u in said[1:4])
    assert texts(thought.parts) == ["I will compute it."]
    assert data_parts(action.parts) == [
        {
            "call_id": data_parts(action.parts)[0]["call_id"],
            "tool": "calculator",
            "arguments": {"expression": "2+3"},
        }
    ]
    assert texts(observation.parts) == ["5"]
    assert data_parts(observation.parts)[0]["tool"] == "calculator"
    assert data_parts(observation.parts)[0]["is_error"] is False
    answer = said[-2]
    assert answer.artifact.name == "answer"
    assert texts(answer.artifact.parts) == ["5"]
    assert finishline_of(said[-1])["reason"] == "finished"
    assert finishline_of(said[-1])["usage"]["tool_calls"] == 1
    assert all(u.task_id == first.id and u.context_id == first.context_id for u in said)


async def test_get_task_reads_the_run_with_the_history_length_asked() -> None:
    async with a2a_service() as service:
        client = await service.client("calc", streaming=False)
        task = await send(client, text("What is 2+3?"), finishline=COMPUTING)
        got = await client.get_task(GetTaskRequest(id=task.id))
        trimmed = await client.get_task(GetTaskRequest(id=task.id, history_length=0))

    assert MessageToDict(got) == MessageToDict(task)
    assert len(got.history) == 1
    assert len(trimmed.history) == 0


async def test_cancel_task_cancels_the_run_and_a_second_cancel_is_refused() -> None:
    async with a2a_service() as service:
        client = await service.client("calc")
        sent = client.send_message(request(text("hang"), finishline=scripted(HANGING)))
        with anyio.fail_after(TIMEOUT_S):
            async for response in sent:  # the task is running once it says WORKING
                if states([response]) == ["TASK_STATE_WORKING"]:
                    break
            task_id = response.status_update.task_id
            cancelled = await client.cancel_task(CancelTaskRequest(id=task_id))
            rest = [r async for r in sent]
        with pytest.raises(TaskNotCancelableError):
            await client.cancel_task(CancelTaskRequest(id=task_id))
        run = (await service.http.get(service.url(f"/runs/{task_id}"))).json()

    assert state_name(cancelled.status.state) == "TASK_STATE_CANCELED"
    assert states(rest)[-1] == "TASK_STATE_CANCELED"
    assert finishline_of(updates(rest)[-1])["type"] == "run.cancelled"
    assert run["status"] == "cancelled"


async def test_list_tasks_lists_the_agents_tasks_newest_first_with_filters_and_pages() -> None:
    async with a2a_service() as service:
        calc = await service.client("calc", streaming=False)
        ops = await service.client("ops", streaming=False)
        done = [
            await send(calc, text(f"task {n}"), finishline=scripted(finish(str(n))))
            for n in range(3)
        ]
        failed = await send(calc, text("no script"), finishline=scripted())
        await send(ops, text("another agent's"), finishline=scripted(finish()))

        everything = await calc.list_tasks(ListTasksRequest())
        completed = await calc.list_tasks(
            ListTasksRequest(status=TaskState.TASK_STATE_COMPLETED, page_size=2)
        )
        rest = await calc.list_tasks(
            ListTasksRequest(
                status=TaskState.TASK_STATE_COMPLETED,
                page_size=2,
                page_token=completed.next_page_token,
            )
        )
        in_context = await calc.list_tasks(ListTasksRequest(context_id=done[1].context_id))
        with_artifacts = await calc.list_tasks(
            ListTasksRequest(
                include_artifacts=True, status=TaskState.TASK_STATE_COMPLETED, page_size=1
            )
        )

    newest_first = [failed.id, *(t.id for t in reversed(done))]
    assert [t.id for t in everything.tasks] == newest_first
    assert everything.total_size == 4
    assert everything.next_page_token == ""
    assert not any(t.artifacts for t in everything.tasks)  # unless asked for
    assert [t.id for t in completed.tasks] == [done[2].id, done[1].id]
    assert completed.total_size == 3
    assert completed.next_page_token
    assert [t.id for t in rest.tasks] == [done[0].id]
    assert rest.next_page_token == ""
    assert [t.id for t in in_context.tasks] == [done[1].id]
    assert [t.id for t in with_artifacts.tasks] == [done[2].id]
    assert texts(with_artifacts.tasks[0].artifacts[0].parts) == ["2"]


async def test_subscribe_to_task_after_a_dropped_stream_goes_on_from_where_the_run_is() -> None:
    async with FakeLLMServer(
        [FakeReply.call("calculator", {"expression": "6*7"}), FakeReply.finish("42", hang=True)]
    ) as llm:
        settings = e2e_settings(llm, agents={"calc": {"description": "d", "tools": ["calculator"]}})
        async with a2a_service(settings) as service:
            client = await service.client("calc")
            seen = []
            sent = client.send_message(request(text("What is 6*7?")))
            with anyio.fail_after(TIMEOUT_S):
                async for response in sent:
                    seen.append(response)
                    if (
                        response.HasField("status_update")
                        and finishline_of(response.status_update).get("type") == "observation"
                    ):
                        break
                await sent.aclose()  # the stream drops; the run goes on
                task_id = seen[0].task.id
                await llm.wait_for_requests(2)  # the run waits for the model's second reply
                resubscribed = client.subscribe(SubscribeToTaskRequest(id=task_id))
                first = await anext(resubscribed)
                llm.release()
                after = [r async for r in resubscribed]

    assert first.task.id == task_id
    assert state_name(first.task.status.state) == "TASK_STATE_WORKING"
    before = [finishline_of(u)["seq"] for u in updates(seen)]
    resumed = [finishline_of(u)["seq"] for u in updates(after)]
    assert resumed
    assert min(resumed) > max(before)  # nothing twice
    assert states(after)[-1] == "TASK_STATE_COMPLETED"
    assert texts(updates(after)[-2].artifact.parts) == ["42"]


async def test_subscribing_to_an_ended_task_is_refused() -> None:
    async with a2a_service() as service:
        client = await service.client("calc", streaming=False)
        task = await send(client, text("quick"), finishline=scripted(finish()))
        streaming = await service.client("calc")
        with pytest.raises(UnsupportedOperationError, match="has ended"):
            await subscribe(streaming, task.id)


async def test_blocking_waits_at_most_the_servers_wait_cap() -> None:
    async with a2a_service(a2a_settings(max_wait_s=0.5)) as service:
        client = await service.client("calc", streaming=False)
        task = await send(client, text("hang"), finishline=scripted(HANGING))
        await client.cancel_task(CancelTaskRequest(id=task.id))
    assert state_name(task.status.state) == "TASK_STATE_WORKING"


TYPED = {
    "type": "object",
    "properties": {"sum": {"type": "integer"}},
    "required": ["sum"],
}


async def test_a_typed_answer_is_the_artifacts_data_part_on_get_and_in_the_stream() -> None:
    answering = {"tool_calls": [{"name": "task_finished", "arguments": {"answer": {"sum": 5}}}]}
    async with a2a_service() as service:
        client = await service.client("calc", streaming=False)
        task = await send(client, text("2+3?"), finishline=scripted(answering, output_schema=TYPED))
        got = await client.get_task(GetTaskRequest(id=task.id))
        streaming = await service.client("calc")
        responses = await stream(
            streaming, text("2+3?"), finishline=scripted(answering, output_schema=TYPED)
        )

    for ended in (task, got):
        (artifact,) = ended.artifacts
        assert texts(artifact.parts) == ['{"sum": 5}']
        assert data_parts(artifact.parts) == [{"sum": 5.0}]  # protobuf's numbers are doubles
    (update,) = [r.artifact_update for r in responses if r.HasField("artifact_update")]
    assert data_parts(update.artifact.parts) == [{"sum": 5.0}]
