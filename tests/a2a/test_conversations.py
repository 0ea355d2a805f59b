"""contextId is a conversation (DESIGN §10, §17): a context's new task continues from its last
one (`previous_run_id`), per API key and agent; a message the server has seen again finds
the task it made; a message on a task steers it."""

from __future__ import annotations

import anyio
import pytest
from a2a.types import CancelTaskRequest, ListTasksRequest
from a2a.utils.errors import InvalidParamsError, UnsupportedOperationError

from tests.a2a.kit import (
    HANGING,
    KEY_A,
    KEY_B,
    TIMEOUT_S,
    a2a_service,
    a2a_settings,
    finish,
    finishline_of,
    request,
    scripted,
    send,
    state_name,
    states,
    stream,
    text,
)
from tests.e2e.kit import e2e_settings
from tests.fakes.llm_server import FakeLLMServer, FakeReply

pytestmark = pytest.mark.e2e


def contents(chat_request: dict[str, object]) -> list[str]:
    return [str(m.get("content")) for m in chat_request["messages"]]


async def test_a_message_in_a_known_context_continues_its_conversation() -> None:
    async with FakeLLMServer(
        [FakeReply.finish("Paris"), FakeReply.finish("About 2.1 million")]
    ) as llm:
        settings = e2e_settings(llm, agents={"geo": {"description": "Geography."}})
        async with a2a_service(settings) as service:
            client = await service.client("geo", streaming=False)
            first = await send(client, text("Capital of France?"))
            second = await send(client, text("Its population?", context_id=first.context_id))
            listed = await client.list_tasks(ListTasksRequest(context_id=first.context_id))
            run = (await service.http.get(service.url(f"/runs/{second.id}"))).json()

    assert first.context_id
    assert second.context_id == first.context_id
    assert run["previous_run_id"] == first.id
    assert finishline_of(second)["previous_run_id"] == first.id
    assert [t.id for t in listed.tasks] == [second.id, first.id]
    # the follow-up's model saw the first exchange, then the new message
    seen = contents(llm.requests[1])
    assert "Capital of France?" in seen
    assert "Paris" in seen
    assert seen[-1] == "Its population?"


async def test_a_context_the_client_names_is_kept_from_its_first_task() -> None:
    async with a2a_service() as service:
        client = await service.client("calc", streaming=False)
        first = await send(client, text("one", context_id="ctx-1"), finishline=scripted(finish()))
        second = await send(client, text("two", context_id="ctx-1"), finishline=scripted(finish()))
        other = await send(client, text("three", context_id="ctx-2"), finishline=scripted(finish()))
        runs = [
            (await service.http.get(service.url(f"/runs/{t.id}"))).json()
            for t in (first, second, other)
        ]
    assert [t.context_id for t in (first, second, other)] == ["ctx-1", "ctx-1", "ctx-2"]
    assert [r["previous_run_id"] for r in runs] == [None, first.id, None]


async def test_contexts_are_per_key_another_keys_context_of_that_id_is_its_own() -> None:
    async with a2a_service(a2a_settings(api_keys=[KEY_A, KEY_B])) as service:
        alice = await service.client("calc", key=KEY_A, streaming=False)
        bob = await service.client("calc", key=KEY_B, streaming=False)
        hers = await send(alice, text("one", context_id="shared"), finishline=scripted(finish()))
        his = await send(bob, text("two", context_id="shared"), finishline=scripted(finish()))
        again = await send(alice, text("three", context_id="shared"), finishline=scripted(finish()))
        bobs_list = await bob.list_tasks(ListTasksRequest(context_id="shared"))

    assert finishline_of(his).get("previous_run_id") is None
    assert finishline_of(again)["previous_run_id"] == hers.id
    assert [t.id for t in bobs_list.tasks] == [his.id]


async def test_contexts_are_per_agent() -> None:
    async with a2a_service() as service:
        calc = await service.client("calc", streaming=False)
        ops = await service.client("ops", streaming=False)
        first = await send(calc, text("one", context_id="c"), finishline=scripted(finish()))
        other = await send(ops, text("two", context_id="c"), finishline=scripted(finish()))
        again = await send(calc, text("three", context_id="c"), finishline=scripted(finish()))
    assert finishline_of(other).get("previous_run_id") is None
    assert finishline_of(again)["previous_run_id"] == first.id


async def test_the_same_message_sent_again_finds_the_task_it_made() -> None:
    async with a2a_service() as service:
        client = await service.client("calc", streaming=False)
        sent = text("once", message_id="retried-message")
        first = await send(client, sent, finishline=scripted(finish("1")))
        again = await send(client, sent, finishline=scripted(finish("1")))
        listed = await client.list_tasks(ListTasksRequest())
    assert again.id == first.id
    assert listed.total_size == 1


async def test_a_context_at_a_task_that_has_not_ended_refuses_a_new_task() -> None:
    async with a2a_service() as service:
        client = await service.client("calc", streaming=False, polling=True)
        hanging = await send(client, text("hang", context_id="busy"), finishline=scripted(HANGING))
        with pytest.raises(UnsupportedOperationError, match=hanging.id) as refused:
            await send(client, text("next", context_id="busy"), finishline=scripted(finish()))
        await client.cancel_task(CancelTaskRequest(id=hanging.id))
        after = await send(client, text("next", context_id="busy"), finishline=scripted(finish()))
    assert refused.value.data["type"] == "run_not_ended"
    assert finishline_of(after)["previous_run_id"] == hanging.id


async def test_a_message_on_an_ended_task_says_to_follow_up_in_its_context() -> None:
    async with a2a_service() as service:
        client = await service.client("calc", streaming=False)
        done = await send(client, text("one"), finishline=scripted(finish()))
        with pytest.raises(UnsupportedOperationError, match=done.context_id):
            await send(client, text("more", task_id=done.id))


async def test_a_message_on_a_running_task_steers_it() -> None:
    script = scripted({"content": "thinking", "delay_s": 1}, finish("steered"))
    async with a2a_service() as service:
        client = await service.client("calc")
        sent = client.send_message(request(text("go"), finishline=script))
        with anyio.fail_after(TIMEOUT_S):
            async for response in sent:
                if states([response]) == ["TASK_STATE_WORKING"]:
                    break
            task_id = response.status_update.task_id
            polling = await service.client("calc", streaming=False, polling=True)
            await send(polling, text("Answer in French.", task_id=task_id))
            rest = [r async for r in sent]
        events = (
            await service.http.get(
                service.url(f"/runs/{task_id}/events"), headers={"Accept": "application/json"}
            )
        ).json()["events"]
    assert states(rest)[-1] == "TASK_STATE_COMPLETED"
    steered = [e for e in events if e["type"] == "user.message"]
    assert [e["content"] for e in steered] == ["Answer in French."]
    said = [finishline_of(r.status_update)["type"] for r in rest if r.HasField("status_update")]
    assert "user.message" in said


async def test_a_message_naming_a_task_of_another_context_is_refused() -> None:
    async with a2a_service() as service:
        client = await service.client("calc", streaming=False, polling=True)
        task = await send(client, text("hang"), finishline=scripted(HANGING))
        with pytest.raises(InvalidParamsError, match=r"message\.contextId"):
            await send(client, text("more", task_id=task.id, context_id="elsewhere"))
        await client.cancel_task(CancelTaskRequest(id=task.id))


async def test_a_run_made_by_post_runs_is_a_context_of_its_own() -> None:
    async with a2a_service() as service:
        made = await service.http.post(
            service.url("/runs"),
            json={"task": "one", "agent": "calc", **scripted(finish("first"))},
        )
        run_id = made.json()["id"]
        await service.http.get(service.url(f"/runs/{run_id}/wait"), params={"timeout_s": 10})
        client = await service.client("calc", streaming=False)
        follow_up = await send(
            client, text("two", context_id=run_id), finishline=scripted(finish())
        )
    assert follow_up.context_id == run_id
    assert finishline_of(follow_up)["previous_run_id"] == run_id
    assert state_name(follow_up.status.state) == "TASK_STATE_COMPLETED"


async def test_the_same_message_streamed_again_answers_the_task_as_it_stands() -> None:
    async with a2a_service() as service:
        client = await service.client("calc")
        sent = text("once", message_id="streamed-twice")
        first = await stream(client, sent, finishline=scripted(finish("1")))
        again = await stream(client, sent, finishline=scripted(finish("1")))
    assert states(first)[-1] == "TASK_STATE_COMPLETED"
    (only,) = again  # the task, ended: nothing more to stream
    assert only.task.id == first[0].task.id
    assert state_name(only.task.status.state) == "TASK_STATE_COMPLETED"


async def test_a_message_id_sent_again_as_another_message_is_refused() -> None:
    async with a2a_service() as service:
        client = await service.client("calc", streaming=False)
        await send(client, text("one", message_id="reused"), finishline=scripted(finish()))
        with pytest.raises(InvalidParamsError, match="was sent before") as same_context:
            await send(client, text("two", message_id="reused"), finishline=scripted(finish()))
        with pytest.raises(InvalidParamsError, match="was sent before") as elsewhere:
            await send(
                client,
                text("one", message_id="reused", context_id="another"),
                finishline=scripted(finish()),
            )
    assert same_context.value.data["type"] == "idempotency_conflict"
    assert elsewhere.value.data["type"] == "idempotency_conflict"
