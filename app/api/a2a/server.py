"""The A2A endpoints of a deployment (DESIGN §17): one per agent profile, `/a2a/NAME`, each
the SDK's JSON-RPC dispatcher (with its 0.3 compatibility layer, FINISHLINE_A2A_V03) over a
`FinishlineRequestHandler`, and its card at `/a2a/NAME/.well-known/agent-card.json`.

Built by the app's lifespan when FINISHLINE_AGENTS names profiles (so a server without them
never imports the SDK). The routes (`app.api.routes.a2a`) authenticate the caller first; the
dispatcher's call context carries it to the handler.
"""

from __future__ import annotations

from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.response_helpers import build_error_response
from a2a.server.routes import DefaultServerCallContextBuilder
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.api.a2a.cards import agent_card, card_response
from app.api.a2a.conversations import Conversations
from app.api.a2a.handler import CALLER, FinishlineRequestHandler
from app.api.a2a.intake import quiet_client_mistakes, refusal
from app.api.auth import Caller
from app.api.errors import ApiError
from app.assembly import RunAssembly
from app.catalog import describe_profile
from app.runs.manager import RunManager
from app.settings import Settings

STATE_CALLER = "a2a_caller"
"""The request state attribute the route sets to the authenticated caller."""


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
    ) -> None:
        self.settings = settings
        self.assembly = assembly
        builder = CallerContextBuilder()
        quiet_client_mistakes()
        self._dispatchers: dict[str, JsonRpcDispatcher] = {}
        for name in settings.agents:
            handler = FinishlineRequestHandler(
                Conversations(manager, settings, name), max_wait_s=settings.max_wait_s
            )
            self._dispatchers[name] = JsonRpcDispatcher(
                request_handler=handler,
                context_builder=builder,
                # its streams are served by the route (app.api.sse)
                enable_v0_3_compat=settings.a2a_v03,
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
        body, content_type = await request.body(), request.headers.get("content-type")
        refused = refusal(body, content_type, self.settings)  # its type, values, nesting
        if refused is not None:
            return JSONResponse(build_error_response(*refused))
        setattr(request.state, STATE_CALLER, caller)
        return await self._dispatchers[name].handle_requests(request)

    def card(self, name: str, request: Request) -> Response:
        """Agent `name`'s card (`app.api.a2a.cards`): 304 when the request's If-None-Match
        names the card it would get."""
        self._known(name)
        profile = self.settings.agents[name]
        url = str(request.url_for("a2a_rpc", name=name))
        card = agent_card(
            describe_profile(profile, self.assembly),
            url,
            keys=self.settings.auth_enabled,
            v03=self.settings.a2a_v03,
        )
        return card_response(card, request.headers.get("if-none-match"))
