"""What A2A refuses (DESIGN §17): the same caps, errors and limits as POST /runs (one path
checks both: the refusal's message is POST /runs' own, its field named where the A2A request
holds it), files, an empty message, and a full queue; auth per key (another key's task, and
another agent's, is not found)."""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest
from a2a.client import A2AClientError
from a2a.helpers.proto_helpers import new_data_part, new_url_part
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    SubscribeToTaskRequest,
)
from a2a.utils.errors import (
    ContentTypeNotSupportedError,
    InternalError,
    InvalidParamsError,
    InvalidRequestError,
    PushNotificationNotSupportedError,
    TaskNotFoundError,
)
from google.protobuf.json_format import ParseDict

from tests.a2a.kit import (
    HANGING,
    KEY_A,
    KEY_B,
    TIMEOUT_S,
    a2a_service,
    a2a_settings,
    finish,
    message,
    request,
    scripted,
    send,
    text,
)

pytestmark = pytest.mark.e2e


async def post_runs_error(
    http: httpx.AsyncClient, url: str, body: dict[str, Any]
) -> dict[str, Any]:
    answer = await http.post(url, json={"task": "a task", "agent": "calc", **body})
    assert answer.status_code == 422, answer.text
    error: dict[str, Any] = answer.json()["error"]
    return error


@pytest.mark.parametrize(
    ("finishline", "field"),
    [
        ({"settings": {"max_steps": 10_000}}, "settings.max_steps"),
        ({"settings": {"nope": 1}}, "settings.nope"),
        ({"tools": ["no_such_tool"]}, "tools"),
        ({"model": "no-such-model-here"}, "model"),
        ({"nope": True}, "nope"),
        ({"metadata": "not an object"}, "metadata"),
        ({"model_script": [{"content": "x" * 200_000}]}, "model_script[0]"),
        ({"outcome": {"rubric": "r", "max_revisions": 99}}, "outcome.max_revisions"),
    ],
)
async def test_a_runs_configuration_is_refused_as_post_runs_refuses_it(
    finishline: dict[str, Any], field: str
) -> None:
    async with a2a_service() as service:
        client = await service.client("calc", streaming=False)
        with pytest.raises(InvalidParamsError) as refused:
            await send(client, text("a task"), finishline={"model": "scripted", **finishline})
        http_error = await post_runs_error(
            service.http, service.url("/runs"), {"model": "scripted", **finishline}
        )
    data = refused.value.data
    assert data["type"] == http_error["type"] == "validation_error"
    fields = [e["field"] for e in data["errors"]]
    assert f"metadata.finishline.{field}" in fields
    # the same check made the same refusal: its message names the field where A2A holds it
    assert refused.value.message.replace("metadata.finishline.", "") == http_error["message"]


async def test_a_task_over_the_task_cap_names_the_message_parts() -> None:
    # (30: the profiles' own placeholder task, checked at start-up, is 24 characters)
    async with a2a_service(a2a_settings(max_task_chars=30)) as service:
        client = await service.client("calc", streaming=False)
        with pytest.raises(InvalidParamsError, match="exceeds the server cap of 30") as refused:
            await send(
                client,
                text("a task much longer than thirty characters"),
                finishline=scripted(finish()),
            )
    assert refused.value.data["field"] == "message.parts"
    assert refused.value.data["cap"] == 30


@pytest.mark.parametrize("name", ["task", "agent", "previous_run_id", "stream", "on_disconnect"])
async def test_fields_the_message_or_endpoint_decide_are_not_taken(name: str) -> None:
    async with a2a_service() as service:
        client = await service.client("calc", streaming=False)
        with pytest.raises(InvalidParamsError, match=f"metadata.finishline.{name}: not taken"):
            await send(client, text("a task"), finishline={name: "x"})


async def test_the_metadata_key_a2a_is_kept_by_the_server() -> None:
    async with a2a_service() as service:
        client = await service.client("calc", streaming=False)
        with pytest.raises(InvalidParamsError, match=r"metadata\.finishline\.metadata\.a2a"):
            await send(client, text("a task"), finishline={"metadata": {"a2a": 1}})


async def test_file_parts_and_empty_messages_are_refused() -> None:
    async with a2a_service() as service:
        client = await service.client("calc", streaming=False)
        with pytest.raises(ContentTypeNotSupportedError, match=r"message\.parts\[1\]: url"):
            await send(client, message(new_data_part({"a": 1}), new_url_part("https://x/y")))
        with pytest.raises(InvalidParamsError) as empty:  # the SDK's check of required fields
            await send(client, message(), finishline=scripted(finish()))
        with pytest.raises(InvalidParamsError, match="messageId: at most 256"):
            await send(client, text("a task", message_id="m" * 300))
    assert [e["field"] for e in empty.value.data["errors"]] == ["message.parts"]


async def test_push_notifications_and_a_configuration_in_the_message_are_refused() -> None:
    async with a2a_service() as service:
        client = await service.client("calc", streaming=False)
        pushed = request(text("a task"), finishline=scripted(finish()))
        pushed.configuration.task_push_notification_config.url = "https://example.com/hook"
        in_message = text("a task")
        ParseDict({"finishline": scripted(finish())}, in_message.metadata)
        with anyio.fail_after(TIMEOUT_S):
            with pytest.raises(PushNotificationNotSupportedError):
                [r async for r in client.send_message(pushed)]
            with pytest.raises(InvalidParamsError, match=r"message\.metadata\.finishline"):
                await send(client, in_message)


async def test_a_data_part_of_a_new_task_is_its_json_text() -> None:
    async with a2a_service() as service:
        client = await service.client("calc", streaming=False)
        task = await send(
            client,
            message(new_data_part({"order": 42, "items": ["a"]})),
            finishline=scripted(finish()),
        )
        run = (await service.http.get(service.url(f"/runs/{task.id}"))).json()
    assert run["task"] in ('{"order": 42, "items": ["a"]}', '{"items": ["a"], "order": 42}')


async def test_a_full_queue_is_an_error_that_says_so_and_when_to_retry() -> None:
    async with a2a_service(a2a_settings(max_concurrent_runs=1, max_queued_runs=0)) as service:
        client = await service.client("calc", streaming=False, polling=True)
        busy = await send(client, text("hang"), finishline=scripted(HANGING))
        with pytest.raises(InternalError, match="try again later") as refused:
            await send(client, text("one more"), finishline=scripted(finish()))
        await client.cancel_task(CancelTaskRequest(id=busy.id))
    assert refused.value.data["type"] == "queue_full"
    assert refused.value.data["retry_after_s"] == 5


async def test_a_keys_quota_is_an_error_naming_the_quota_its_use_and_when_to_retry() -> None:
    async with a2a_service(a2a_settings(quota_concurrent_runs=1)) as service:
        client = await service.client("calc", streaming=False, polling=True)
        busy = await send(client, text("hang"), finishline=scripted(HANGING))
        with pytest.raises(InternalError, match="quota concurrent_runs exceeded") as refused:
            await send(client, text("one more"), finishline=scripted(finish()))
        await client.cancel_task(CancelTaskRequest(id=busy.id))
    assert refused.value.data == {
        "type": "quota_exceeded",
        "quota": "concurrent_runs",
        "limit": 1,
        "used": 1,
        "retry_after_s": 5,
    }


async def test_a_body_of_too_many_json_values_is_refused_before_it_is_parsed() -> None:
    async with a2a_service(a2a_settings(max_body_json_values=200)) as service:
        client = await service.client("calc", streaming=False)
        with pytest.raises(InvalidRequestError, match="more than the server cap of 200"):
            await send(client, message(new_data_part({"values": list(range(300))})))


async def test_every_method_needs_the_key() -> None:
    async with a2a_service(a2a_settings(api_keys=[KEY_A])) as service:
        anonymous = await service.client("calc", streaming=False)
        wrong = await service.client("calc", key="not-a-key", streaming=False)
        for client in (anonymous, wrong):
            with pytest.raises(A2AClientError, match="401"):
                await send(client, text("a task"), finishline=scripted(finish()))
            with pytest.raises(A2AClientError, match="401"):
                await client.list_tasks(ListTasksRequest())
        answer = await service.http.post(service.url("/a2a/calc"), content=b"{}")
    assert answer.status_code == 401
    assert answer.headers["WWW-Authenticate"] == "Bearer"


async def test_another_keys_task_is_not_found_for_any_method() -> None:
    async with a2a_service(a2a_settings(api_keys=[KEY_A, KEY_B])) as service:
        alice = await service.client("calc", key=KEY_A, streaming=False, polling=True)
        bob = await service.client("calc", key=KEY_B, streaming=False)
        bob_streaming = await service.client("calc", key=KEY_B)
        hers = await send(alice, text("hang"), finishline=scripted(HANGING))
        with pytest.raises(TaskNotFoundError):
            await bob.get_task(GetTaskRequest(id=hers.id))
        with pytest.raises(TaskNotFoundError):
            await bob.cancel_task(CancelTaskRequest(id=hers.id))
        with pytest.raises(TaskNotFoundError):
            await send(bob, text("steer", task_id=hers.id))
        with anyio.fail_after(TIMEOUT_S), pytest.raises(TaskNotFoundError):
            async for _ in bob_streaming.subscribe(SubscribeToTaskRequest(id=hers.id)):
                pass
        bobs = await bob.list_tasks(ListTasksRequest())
        still = await alice.get_task(GetTaskRequest(id=hers.id))
        await alice.cancel_task(CancelTaskRequest(id=hers.id))
    assert bobs.total_size == 0
    assert still.id == hers.id


async def test_another_agents_task_is_not_found_here() -> None:
    async with a2a_service() as service:
        calc = await service.client("calc", streaming=False)
        ops = await service.client("ops", streaming=False)
        task = await send(calc, text("one"), finishline=scripted(finish()))
        with pytest.raises(TaskNotFoundError):
            await ops.get_task(GetTaskRequest(id=task.id))
        with pytest.raises(TaskNotFoundError):
            await ops.get_task(GetTaskRequest(id="run_00000000000000000000000000"))


async def test_junk_sent_to_the_endpoint_is_a_json_rpc_error_never_a_5xx() -> None:
    """Bytes no A2A client sends (not JSON, not a request object): the SDK's dispatcher
    answers each with a JSON-RPC error."""
    async with a2a_service() as service:
        url = service.url("/a2a/calc")
        for body in (b"not json", b"[]", b"{}"):
            answer = await service.http.post(url, content=body)
            assert answer.status_code == 200, answer.text
            assert "error" in answer.json()
        unknown = await service.http.post(service.url("/a2a/nobody"), content=b"{}")
    assert unknown.status_code == 404
