"""A2A (DESIGN §17): each agent profile at /a2a/NAME (JSON-RPC, A2A 1.0 and 0.3), its card at
/a2a/NAME/.well-known/agent-card.json, and FINISHLINE_A2A_DEFAULT_AGENT's card at
/.well-known/agent-card.json. Cards are public (they declare the bearer scheme); every method
needs the key or token. A token held to its `finishline:` scopes (DESIGN §23) needs
`finishline:read` for the methods that read (`A2A_READS`) and `finishline:write` for the rest.

The endpoints are built by the lifespan (`app.api.a2a.server`, which imports the SDK) only
when agent profiles are configured; this module imports none of it. The JSON-RPC endpoint is
left out of the OpenAPI document: its requests and answers are the protocol's (the card and
the A2A specification describe them).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request, Response

from app.api.deps import IdentifiedDep, SettingsDep
from app.api.errors import ApiError, ErrorBody
from app.identity.caller import EVERY_ACCESS, Access

if TYPE_CHECKING:
    from app.api.a2a.server import A2AAgents

router = APIRouter(tags=["a2a"])

CARD: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The agent card (A2A 1.0, with the fields 0.3 clients read).",
        "content": {
            "application/json": {"schema": {"type": "object", "description": "An A2A AgentCard."}}
        },
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


@router.post("/a2a/{name}", name="a2a_rpc", include_in_schema=False)
async def a2a_rpc(name: str, request: Request, caller: IdentifiedDep) -> Response:
    if caller.grants != EVERY_ACCESS:  # a token held to its scopes: what does this call do?
        reads = await _method(request) in A2A_READS
        caller.require(Access.READ if reads else Access.WRITE)
    return await agents_of(request, name).rpc(name, request, caller)


@router.get(
    "/a2a/{name}/.well-known/agent-card.json",
    summary="An agent profile's A2A agent card",
    description="Public: it declares the bearer scheme the agent's methods need when the "
    "server has API keys. The agent's JSON-RPC endpoint is `/a2a/{name}` (see the README, 'A2A').",
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
