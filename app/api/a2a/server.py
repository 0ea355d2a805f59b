"""The A2A endpoints of a deployment (DESIGN §17): one per agent profile, `/a2a/NAME`, each
the SDK's JSON-RPC dispatcher (with its 0.3 compatibility layer on) over a
`FinishlineRequestHandler`, and its card at `/a2a/NAME/.well-known/agent-card.json`.

Built by the app's lifespan when FINISHLINE_AGENTS names profiles (so a server without them
never imports the SDK). The routes (`app.api.routes.a2a`) authenticate the caller first; the
dispatcher's call context carries it to the handler.
"""

from __future__ import annotations

from typing import Any

from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.response_helpers import agent_card_to_dict, build_error_response
from a2a.server.routes import DefaultServerCallContextBuilder
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from a2a.utils.errors import InvalidRequestError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.api.a2a.cards import agent_card
from app.api.a2a.conversations import Conversations, ThreadIndex
from app.api.a2a.handler import CALLER, FinishlineRequestHandler
from app.api.auth import Caller
from app.api.errors import ApiError
from app.api.runbody import check_value_count
from app.assembly import RunAssembly
from app.catalog import describe_profile
from app.runs.errors import InvalidRunError
from app.runs.manager import RunManager
from app.settings import Settings

STATE_CALLER = "a2a_caller"
"""The request state attribute the route sets to the authenticated caller."""
STREAM_GRACE_S = 10.0
"""How long an open stream may go on past the drain on shutdown (its run ends by then)."""


class CallerContextBuilder(DefaultServerCallContextBuilder):
    """The SDK's call context, with the caller the route authenticated."""

    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        context.state[CALLER] = getattr(request.state, STATE_CALLER)
        return context


class A2AAgents:
    def __init__(
        self,
        *,
        manager: RunManager,
        settings: Settings,
        assembly: RunAssembly,
        threads: ThreadIndex,
    ) -> None:
        self.settings = settings
        self.assembly = assembly
        builder = CallerContextBuilder()
        self._dispatchers: dict[str, JsonRpcDispatcher] = {}
        for name in settings.agents:
            handler = FinishlineRequestHandler(
                Conversations(manager, threads, settings, name), max_wait_s=settings.max_wait_s
            )
            self._dispatchers[name] = JsonRpcDispatcher(
                request_handler=handler,
                context_builder=builder,
                enable_v0_3_compat=True,
                shutdown_grace_period=settings.shutdown_grace_s + STREAM_GRACE_S,
            )

    def _known(self, name: str) -> None:
        if name not in self._dispatchers:
            raise ApiError(
                404,
                "not_found",
                f"no agent profile {name!r} on this server",
                available=sorted(self._dispatchers),
            )

    async def rpc(self, name: str, request: Request, caller: Caller) -> Response:
        """One JSON-RPC request to agent `name`, by the authenticated `caller`."""
        self._known(name)
        try:  # the body cap held already (BodyLimit); its JSON values are bounded here
            check_value_count(await request.body(), self.settings)
        except InvalidRunError as exc:
            error = InvalidRequestError(exc.message, data={"type": "validation_error"})
            return JSONResponse(build_error_response(None, error))
        setattr(request.state, STATE_CALLER, caller)
        return await self._dispatchers[name].handle_requests(request)

    def card(self, name: str, request: Request) -> Response:
        """Agent `name`'s card, as the SDK encodes it (with its 0.3 fields)."""
        self._known(name)
        profile = self.settings.agents[name]
        url = str(request.url_for("a2a_rpc", name=name))
        card = agent_card(
            describe_profile(profile, self.assembly), url, keys=self.settings.auth_enabled
        )
        body: dict[str, Any] = agent_card_to_dict(card)
        return JSONResponse(body)
