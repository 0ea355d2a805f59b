"""What the A2A tests share: the app served by uvicorn on loopback with agent profiles, and the
official `a2a-sdk` client (its card resolver, its client factory, its auth interceptor) to
talk to it. No JSON-RPC is built by hand here: every request goes through the SDK's client.

    async with a2a_service() as service:
        client = await service.client("calc")
        task = await send(client, text("2+3?"), finishline=scripted(finish("5")))
        assert task.status.state == TaskState.TASK_STATE_COMPLETED

Every wait is on a stream's events or a blocking call, under `anyio.fail_after`.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx
from a2a.client import (
    A2ACardResolver,
    AuthInterceptor,
    Client,
    ClientCallContext,
    ClientConfig,
    ClientFactory,
    CredentialService,
)
from a2a.helpers.proto_helpers import new_data_part, new_text_part
from a2a.types import (
    AgentCard,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from google.protobuf.json_format import MessageToDict, ParseDict

from app.main import create_app
from app.settings import Settings
from tests.fakes.service import service_settings
from tests.fakes.serving import Served

AGENTS: dict[str, Any] = {
    "calc": {"description": "Computes with the calculator.", "tools": ["calculator"]},
    "ops": {
        "description": "Computes, each calculation approved by a person first.",
        "tools": ["calculator"],
        "approval": {"tools": ["calculator"]},
    },
}
KEY_A, KEY_B = "key-of-alice", "key-of-bob"
TIMEOUT_S = 15
_ids = itertools.count(1)


def a2a_settings(**overrides: Any) -> Settings:
    """`service_settings` with the test profiles and no shutdown grace."""
    return service_settings(**{"agents": AGENTS, "shutdown_grace_s": 0, **overrides})


class Key(CredentialService):
    """One API key for the card's bearer scheme (what `AuthInterceptor` asks for)."""

    def __init__(self, key: str) -> None:
        self.key = key

    async def get_credentials(
        self, security_scheme_name: str, context: ClientCallContext | None
    ) -> str | None:
        return self.key


@dataclass
class A2AService:
    server: Served
    http: httpx.AsyncClient
    stack: AsyncExitStack
    cards: dict[str, AgentCard] = field(default_factory=dict)

    def url(self, path: str = "") -> str:
        return self.server.url(path)

    async def card(self, name: str) -> AgentCard:
        """The agent's card, resolved by the SDK's resolver from its base URL."""
        if name not in self.cards:
            self.cards[name] = await resolve_card(self.http, self.url(f"/a2a/{name}"))
        return self.cards[name]

    async def client(
        self,
        name: str,
        *,
        key: str | None = None,
        streaming: bool = True,
        polling: bool = False,
        card: AgentCard | None = None,
    ) -> Client:
        """The SDK's client for agent `name` (its bearer key given by the auth interceptor)."""
        card = card if card is not None else await self.card(name)
        return await open_client(self.stack, card, key=key, streaming=streaming, polling=polling)


async def resolve_card(http: httpx.AsyncClient, agent_url: str) -> AgentCard:
    """The card of the agent at `agent_url` (`.../a2a/NAME`), by the SDK's resolver."""
    return await A2ACardResolver(http, agent_url).get_agent_card()


async def open_client(
    stack: AsyncExitStack,
    card: AgentCard,
    *,
    key: str | None = None,
    streaming: bool = True,
    polling: bool = False,
) -> Client:
    """The SDK's client for `card` (closed with `stack`), its own HTTP client and, with `key`,
    the auth interceptor giving it for the card's bearer scheme."""
    http = await stack.enter_async_context(httpx.AsyncClient(timeout=httpx.Timeout(TIMEOUT_S)))
    factory = ClientFactory(ClientConfig(streaming=streaming, polling=polling, httpx_client=http))
    interceptors = [AuthInterceptor(Key(key))] if key is not None else []
    client = factory.create(card, interceptors=interceptors)
    stack.push_async_callback(client.close)
    return client


@asynccontextmanager
async def a2a_service(settings: Settings | None = None) -> AsyncIterator[A2AService]:
    async with AsyncExitStack() as stack:
        server = await stack.enter_async_context(
            Served(create_app(settings or a2a_settings()), lifespan="on")
        )
        http = await stack.enter_async_context(httpx.AsyncClient(timeout=TIMEOUT_S))
        yield A2AService(server, http, stack)


# -- messages ---------------------------------------------------------------------------------


def message(
    *parts: Part, task_id: str = "", context_id: str = "", message_id: str | None = None
) -> Message:
    return Message(
        message_id=message_id or f"message-{next(_ids)}",
        role=Role.ROLE_USER,
        parts=list(parts),
        task_id=task_id,
        context_id=context_id,
    )


def text(content: str, **fields: Any) -> Message:
    return message(new_text_part(content), **fields)


def decisions(*decided: dict[str, Any], **fields: Any) -> Message:
    """A message whose data part decides calls a task waits on."""
    return message(new_data_part({"decisions": list(decided)}), **fields)


def request(
    sent: Message,
    *,
    finishline: dict[str, Any] | None = None,
    return_immediately: bool = False,
    history_length: int | None = None,
) -> SendMessageRequest:
    """SendMessageRequest; `finishline` goes in its metadata (the run's POST /runs fields)."""
    built = SendMessageRequest(message=sent)
    if finishline is not None:
        ParseDict({"finishline": finishline}, built.metadata)
    built.configuration.return_immediately = return_immediately
    if history_length is not None:
        built.configuration.history_length = history_length
    return built


def scripted(*replies: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """`metadata.finishline` of a scripted run."""
    return {"model": "scripted", "model_script": list(replies), **fields}


def finish(answer: str = "done") -> dict[str, Any]:
    return {"tool_calls": [{"name": "task_finished", "arguments": {"answer": answer}}]}


def calculate(expression: str, content: str | None = None) -> dict[str, Any]:
    reply: dict[str, Any] = {
        "tool_calls": [{"name": "calculator", "arguments": {"expression": expression}}]
    }
    if content is not None:
        reply["content"] = content
    return reply


HANGING = {"content": "thinking it over", "delay_s": 600}
"""A scripted reply that takes ten minutes: the run is WORKING until cancelled."""


# -- calls --------------------------------------------------------------------------------------


async def send(client: Client, sent: Message, timeout_s: float = TIMEOUT_S, **fields: Any) -> Task:
    """SendMessage with a non-streaming client: the Task it answers."""
    with anyio.fail_after(timeout_s):
        responses = [r async for r in client.send_message(request(sent, **fields))]
    assert len(responses) == 1, responses
    assert responses[0].HasField("task"), responses
    return responses[0].task


async def stream(
    client: Client, sent: Message, timeout_s: float = TIMEOUT_S, **fields: Any
) -> list[StreamResponse]:
    """A whole SendStreamingMessage stream, until the server ends it."""
    with anyio.fail_after(timeout_s):
        return [r async for r in client.send_message(request(sent, **fields))]


async def subscribe(
    client: Client, task_id: str, timeout_s: float = TIMEOUT_S
) -> list[StreamResponse]:
    with anyio.fail_after(timeout_s):
        return [r async for r in client.subscribe(SubscribeToTaskRequest(id=task_id))]


def state_name(state: Any) -> str:
    return TaskState.Name(state)


def states(responses: Sequence[StreamResponse]) -> list[str]:
    """The task state each response states: the Task's, then each status update's."""
    found = []
    for response in responses:
        if response.HasField("task"):
            found.append(state_name(response.task.status.state))
        elif response.HasField("status_update"):
            found.append(state_name(response.status_update.status.state))
    return found


def finishline_of(update: Any) -> dict[str, Any]:
    """`metadata.finishline` of an update or task, with whole numbers as ints."""
    meta = MessageToDict(update.metadata).get("finishline", {})
    return {k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in meta.items()}


def updates(responses: Sequence[StreamResponse]) -> list[Any]:
    """The status and artifact updates of a stream, in order."""
    found = []
    for response in responses:
        if response.HasField("status_update"):
            found.append(response.status_update)
        elif response.HasField("artifact_update"):
            found.append(response.artifact_update)
    return found


def data_parts(parts: Sequence[Part]) -> list[Any]:
    return [MessageToDict(p.data) for p in parts if p.HasField("data")]


def texts(parts: Sequence[Part]) -> list[str]:
    return [p.text for p in parts if p.HasField("text")]
