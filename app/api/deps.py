"""Named dependencies: the manager, the settings, and who the caller is (and that it may do
what the request does: read for GET and HEAD, write for the rest, DESIGN §23).

Each is `async def` though none awaits: FastAPI runs a plain `def` dependency in a worker
thread, a hop that cost more than everything these do.

FastAPI resolves each dependency of a request for ~25 µs (its path, query, header and cookie
parameters looked up, even when it has none), more than the route itself does with a part
of the app. So the callers read the settings, manager and tokens from the request's state
themselves rather than through dependencies of their own, and the routes every run calls
(`POST /runs`, its events) take the parts with the `*_of` helpers: one dependency each, the
caller, where they had up to seven.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Query, Request

from app.api.auth import Caller, StreamTokens
from app.api.errors import ApiError
from app.assembly import RunAssembly
from app.identity.bearer import Authenticator
from app.identity.caller import Access
from app.runs.errors import RunNotFoundError
from app.runs.manager import RunManager
from app.runs.metrics import RunMetrics
from app.settings import Settings
from app.tools.registry import ToolRegistry


def manager_of(request: Request) -> RunManager:
    manager: RunManager = request.state.manager  # set by the app's lifespan
    return manager


def settings_of(request: Request) -> Settings:
    settings: Settings = request.state.settings  # set by the app's lifespan
    return settings


def metrics_of(request: Request) -> RunMetrics:
    metrics: RunMetrics = request.state.metrics  # set by the app's lifespan
    return metrics


async def get_manager(request: Request) -> RunManager:
    return manager_of(request)


async def get_settings(request: Request) -> Settings:
    return settings_of(request)


async def get_registry(request: Request) -> ToolRegistry:
    registry: ToolRegistry = request.state.registry  # set by the app's lifespan
    return registry


async def get_assembly(request: Request) -> RunAssembly:
    assembly: RunAssembly = request.state.assembly  # set by the app's lifespan
    return assembly


async def get_metrics(request: Request) -> RunMetrics:
    return metrics_of(request)


async def get_tokens(request: Request) -> StreamTokens:
    tokens: StreamTokens = request.state.tokens  # set by the app's lifespan
    return tokens


ManagerDep = Annotated[RunManager, Depends(get_manager)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
RegistryDep = Annotated[ToolRegistry, Depends(get_registry)]
MetricsDep = Annotated[RunMetrics, Depends(get_metrics)]
AssemblyDep = Annotated[RunAssembly, Depends(get_assembly)]
TokensDep = Annotated[StreamTokens, Depends(get_tokens)]

_CHALLENGE = {"WWW-Authenticate": "Bearer"}
_METHOD_ACCESS = {"GET": Access.READ, "HEAD": Access.READ}
"""What a request needs, by its method: reading for GET and HEAD, writing for the rest
(routes that only read with a POST take `ReaderDep`)."""


def authenticator_of(request: Request) -> Authenticator:
    authenticator: Authenticator = request.state.authenticator  # set by the app's lifespan
    return authenticator


_BEARER = Header(description="Bearer <API key or access token>, when the server has auth on.")


async def get_caller(
    request: Request, authorization: Annotated[str | None, _BEARER] = None
) -> Caller:
    caller = await authenticator_of(request).caller(authorization)
    return caller.require(_METHOD_ACCESS.get(request.method, Access.WRITE))


async def get_identified(
    request: Request, authorization: Annotated[str | None, _BEARER] = None
) -> Caller:
    """The caller, whatever it may do: for a route that checks the access its request needs
    itself (A2A's JSON-RPC, whose method says whether it reads or writes)."""
    return await authenticator_of(request).caller(authorization)


async def get_reader(
    request: Request, authorization: Annotated[str | None, _BEARER] = None
) -> Caller:
    """The caller of a POST that only reads (a stream token, an A2A read): read access."""
    return (await authenticator_of(request).caller(authorization)).require(Access.READ)


async def get_event_caller(
    run_id: str,
    request: Request,
    token: Annotated[
        str | None,
        Query(
            description="A run-scoped stream token (POST /runs/{id}/stream-token), for EventSource."
        ),
    ] = None,
    authorization: Annotated[str | None, _BEARER] = None,
) -> Caller:
    authenticator = authenticator_of(request)
    if token is not None and authenticator.enabled:
        try:  # the run's owner, to check the token against; an unknown run is a bad token
            owner = (await manager_of(request).get(run_id, None, any_owner=True)).owner
        except RunNotFoundError:
            owner = None
        tokens: StreamTokens = request.state.tokens  # set by the app's lifespan
        caller = tokens.verify(token, run_id, owner)
        if caller is None:
            raise ApiError(
                401, "unauthorized", "invalid or expired stream token for this run", _CHALLENGE
            )
        return caller
    return (await authenticator.caller(authorization)).require(Access.READ)


CallerDep = Annotated[Caller, Depends(get_caller)]
ReaderDep = Annotated[Caller, Depends(get_reader)]
IdentifiedDep = Annotated[Caller, Depends(get_identified)]
EventCallerDep = Annotated[Caller, Depends(get_event_caller)]
