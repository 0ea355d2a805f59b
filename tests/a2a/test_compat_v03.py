"""A2A 0.3 clients (LangGraph and CrewAI still speak it) on the same endpoint: the card names a
0.3 interface, and the SDK's own 0.3 transport (`CompatJsonRpcTransport`: message/send,
message/stream, tasks/get, tasks/cancel, tasks/resubscribe) reaches the same runs."""

from __future__ import annotations

import json

import anyio
import pytest
from a2a.compat.v0_3.jsonrpc_transport import CompatJsonRpcTransport
from a2a.types import AgentCard, AgentInterface, CancelTaskRequest, GetTaskRequest
from a2a.utils.errors import MethodNotFoundError

from tests.a2a.kit import (
    HANGING,
    TIMEOUT_S,
    A2AService,
    a2a_service,
    a2a_settings,
    calculate,
    data_parts,
    decisions,
    finish,
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


async def legacy_card(service: A2AService, name: str) -> AgentCard:
    """The agent's card as a 0.3 client takes it: its 0.3 interface alone."""
    card = AgentCard()
    card.CopyFrom(await service.card(name))
    del card.supported_interfaces[:]
    card.supported_interfaces.extend(
        i for i in (await service.card(name)).supported_interfaces if i.protocol_version == "0.3"
    )
    return card


async def test_a_0_3_client_sends_streams_gets_and_cancels() -> None:
    async with a2a_service() as service:
        card = await legacy_card(service, "calc")
        blocking = await service.client("calc", streaming=False, card=card)
        streaming = await service.client("calc", card=card)
        assert isinstance(blocking._transport, CompatJsonRpcTransport)

        done = await send(
            blocking, text("2+3?"), finishline=scripted(calculate("2+3"), finish("5"))
        )
        streamed = await stream(streaming, text("again"), finishline=scripted(finish("6")))
        got = await blocking.get_task(GetTaskRequest(id=done.id))
        polling = await service.client("calc", streaming=False, polling=True, card=card)
        hanging = await send(polling, text("hang"), finishline=scripted(HANGING))
        cancelled = await polling.cancel_task(CancelTaskRequest(id=hanging.id))

    assert state_name(done.status.state) == "TASK_STATE_COMPLETED"
    assert texts(done.artifacts[0].parts) == ["5"]
    assert states(streamed)[-1] == "TASK_STATE_COMPLETED"
    assert texts(updates(streamed)[-2].artifact.parts) == ["6"]
    assert got.id == done.id
    assert state_name(cancelled.status.state) == "TASK_STATE_CANCELED"


async def test_a_0_3_client_decides_an_approval() -> None:
    async with a2a_service() as service:
        card = await legacy_card(service, "ops")
        client = await service.client("ops", streaming=False, card=card)
        waiting = await send(
            client, text("2+3?"), finishline=scripted(calculate("2+3"), finish("5"))
        )
        (call,) = data_parts(waiting.status.message.parts)[0]["pending_approvals"]
        with anyio.fail_after(TIMEOUT_S):
            ended = await send(
                client, decisions({"call_id": call["call_id"], "approve": True}, task_id=waiting.id)
            )
    assert state_name(waiting.status.state) == "TASK_STATE_INPUT_REQUIRED"
    assert state_name(ended.status.state) == "TASK_STATE_COMPLETED"


@pytest.mark.parametrize("output", [{"sum": 5}, [5, 6], "five", 5], ids=type)
async def test_a_0_3_client_gets_any_typed_answer(output: object) -> None:
    answering = {"tool_calls": [{"name": "task_finished", "arguments": {"answer": output}}]}
    body = scripted(answering, output_schema={"type": ["object", "array", "string", "integer"]})
    async with a2a_service() as service:
        card = await legacy_card(service, "calc")
        blocking = await service.client("calc", streaming=False, card=card)
        done = await send(blocking, text("2+3?"), finishline=body)
    assert state_name(done.status.state) == "TASK_STATE_COMPLETED"
    (artifact,) = done.artifacts
    assert texts(artifact.parts) == [json.dumps(output)]
    assert data_parts(artifact.parts) == [json.loads(json.dumps(output), parse_int=float)]


async def test_with_0_3_compatibility_off_a_0_3_client_finds_no_method() -> None:
    async with a2a_service(a2a_settings(a2a_v03=False)) as service:
        modern = await service.client("calc", streaming=False)
        done = await send(modern, text("2+3?"), finishline=scripted(finish("5")))
        card = AgentCard()
        card.CopyFrom(await service.card("calc"))
        del card.supported_interfaces[:]
        card.supported_interfaces.append(
            AgentInterface(
                url=service.url("/a2a/calc"), protocol_binding="JSONRPC", protocol_version="0.3"
            )
        )
        legacy = await service.client("calc", streaming=False, card=card)
        assert isinstance(legacy._transport, CompatJsonRpcTransport)
        with pytest.raises(MethodNotFoundError):
            await send(legacy, text("2+3?"), finishline=scripted(finish("5")))
    assert state_name(done.status.state) == "TASK_STATE_COMPLETED"
