"""A2A (DESIGN §17): each agent profile at /a2a/NAME (JSON-RPC, A2A 1.0 and, with
FINISHLINE_A2A_V03, 0.3; `/a2a/NAME/` answers the same), its card at
/a2a/NAME/.well-known/agent-card.json, and FINISHLINE_A2A_DEFAULT_AGENT's card at
/.well-known/agent-card.json. Cards are public (they declare the bearer scheme) and cacheable
(ETag, 304); every method needs the key or token. A token held to its `finishline:` scopes
(DESIGN §23) needs `finishline:read` for the methods that read (`A2A_READS`) and
`finishline:write` for the rest.

The endpoints are built by the lifespan (`app.api.a2a.server`, which imports the SDK) only
when agent profiles are configured; this module imports none of it. The JSON-RPC endpoint is
left out of the OpenAPI document: its requests and answers are the protocol's (the card and
the A2A specification describe them). Its streams are the SDK's, served as every stream of the
service is (`app.api.sse.EventStream`).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request, Response
from sse_starlette import EventSourceResponse

from app.api.deps import IdentifiedDep, SettingsDep, metrics_of, settings_of
from app.api.errors import ApiError, ErrorBody
from app.api.sse import EventStream
from app.identity.caller import EVERY_ACCESS, Access

if TYPE_CHECKING:
    from app.api.a2a.server import A2AAgents

router = APIRouter(tags=["a2a"])

CACHE_HEADERS: dict[str, Any] = {
    "ETag": {"description": "A tag of the card's bytes.", "schema": {"type": "string"}},
    "Cache-Control": {"description": "public, max-age=300", "schema": {"type": "string"}},
}
CARD: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The agent card (A2A 1.0, with the fields 0.3 clients read unless "
        "FINISHLINE_A2A_V03 is off).",
        "content": {
            "application/json": {"schema": {"type": "object", "description": "An A2A AgentCard."}}
        },
        "headers": CACHE_HEADERS,
    },
    304: {
        "description": "The card is the one If-None-Match names: keep it (no body).",
        "headers": CACHE_HEADERS,
    },
    404: {"model": ErrorBody, "description": "No such agent profile on this server."},
}


def agents_of(request: Request, name: str | None = None) -> A2AAgents:
    agents: A2AAgents | None = request.state.a2a  # set by the lifespan: None without profiles
    if agents is None:
        raise ApiError(
            404,
            "not_found",
            f"no agent profile {name!r} on this server (FINISHLINE_AGENTS names none)"
            if name
            else "this server names no agent profiles (FINISHLINE_AGENTS)",
            available=[],
        )
    return agents


def served(sdk: EventSourceResponse, request: Request) -> EventStream:
    """The SDK's stream (its updates, which sse-starlette encodes) served as every stream of
    the service: FINISHLINE_SSE_PING_S's keep-alives, FINISHLINE_SSE_SEND_TIMEOUT_S (the SDK
    sets no send timeout), the shutdown grace, and the subscriber gauge. A dropped stream
    leaves its task alone (A2A: the client may subscribe again)."""
    metrics, settings = metrics_of(request), settings_of(request)
    updates = sdk.body_iterator

    async def frames() -> AsyncIterator[Any]:
        metrics.sse_subscribers.inc()
        try:
            async for update in updates:
                yield update
        finally:
            metrics.sse_subscribers.dec()
            aclose = getattr(updates, "aclose", None)
            if aclose is not None:  # the SDK's generator: its own cleanup now, not at GC
                await aclose()

    return EventStream(
        frames(),
        ping_s=settings.sse_ping_s,
        send_timeout_s=settings.sse_send_timeout_s,
        grace_s=settings.shutdown_grace_s,
    )


A2A_READS = frozenset(
    {
        *("GetTask", "ListTasks", "SubscribeToTask", "GetExtendedAgentCard"),
        *("GetTaskPushNotificationConfig", "ListTaskPushNotificationConfigs"),
        *("tasks/get", "tasks/resubscribe", "agent/getAuthenticatedExtendedCard"),
        *("tasks/pushNotificationConfig/get", "tasks/pushNotificationConfig/list"),
    }
)
"""The JSON-RPC methods (A2A 1.0 and 0.3) that only read: finishline:read is enough."""


async def _method(request: Request) -> object:
    try:
        message = json.loads(await request.body())
    except (ValueError, RecursionError):
        return None  # the dispatcher answers a parse error (to a caller that may write)
    return message.get("method") if isinstance(message, dict) else None


# `/a2a/NAME/` too: a JSON-RPC client follows no redirect (Starlette's answer to the slash)
@router.post("/a2a/{name}", name="a2a_rpc", include_in_schema=False)
@router.post("/a2a/{name}/", name="a2a_rpc_slash", include_in_schema=False)
async def a2a_rpc(name: str, request: Request, caller: IdentifiedDep) -> Response:
    if caller.grants != EVERY_ACCESS:  # a token held to its scopes: what does this call do?
        reads = await _method(request) in A2A_READS
        caller.require(Access.READ if reads else Access.WRITE)
    answer = await agents_of(request, name).rpc(name, request, caller)
    if isinstance(answer, EventSourceResponse):
        return served(answer, request)
    return answer


@router.get(
    "/a2a/{name}/.well-known/agent-card.json",
    summary="An agent profile's A2A agent card",
    description="Public: it declares the bearer scheme the agent's methods need when the "
    "server has API keys. The agent's JSON-RPC endpoint is `/a2a/{name}` (see docs/guides/a2a.md).",
    response_class=Response,
    responses=CARD,
)
async def agent_card(name: str, request: Request) -> Response:
    return agents_of(request, name).card(name, request)


@router.get(
    "/.well-known/agent-card.json",
    summary="The host's A2A agent card: FINISHLINE_A2A_DEFAULT_AGENT's",
    description="The card of the profile FINISHLINE_A2A_DEFAULT_AGENT names (404 when it is "
    "unset); each profile's card is at `/a2a/{name}/.well-known/agent-card.json`.",
    response_class=Response,
    responses=CARD,
)
async def default_agent_card(request: Request, settings: SettingsDep) -> Response:
    name = settings.a2a_default_agent
    if name is None:
        raise ApiError(
            404,
            "not_found",
            "no default A2A agent on this server (FINISHLINE_A2A_DEFAULT_AGENT); each profile's "
            "card is at /a2a/NAME/.well-known/agent-card.json",
        )
    return agents_of(request, name).card(name, request)
