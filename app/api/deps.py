"""Named dependencies: the manager, the settings, and who the caller is.

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

from app.api.auth import Caller, StreamTokens, key_matches, owner_of
from app.api.errors import ApiError
from app.assembly import RunAssembly
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


def bearer_caller(settings: Settings, authorization: str | None) -> Caller:
    if not settings.api_keys:
        return Caller(None)
    if not authorization:
        raise ApiError(401, "unauthorized", "missing Authorization: Bearer <key>", _CHALLENGE)
    scheme, _, key = authorization.partition(" ")
    if scheme.lower() != "bearer" or not key_matches(key.strip(), settings.api_keys):
        raise ApiError(401, "unauthorized", "invalid API key", _CHALLENGE)
    return Caller(owner_of(key.strip()))


async def get_caller(
    request: Request,
    authorization: Annotated[
        str | None, Header(description="Bearer <API key>, when the server has keys.")
    ] = None,
) -> Caller:
    return bearer_caller(settings_of(request), authorization)


async def get_event_caller(
    run_id: str,
    request: Request,
    token: Annotated[
        str | None,
        Query(
            description="A run-scoped stream token (POST /runs/{id}/stream-token), for EventSource."
        ),
    ] = None,
    authorization: Annotated[str | None, Header(description="Bearer <API key>.")] = None,
) -> Caller:
    settings = settings_of(request)
    if token is not None and settings.api_keys:
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
    return bearer_caller(settings, authorization)


CallerDep = Annotated[Caller, Depends(get_caller)]
EventCallerDep = Annotated[Caller, Depends(get_event_caller)]
