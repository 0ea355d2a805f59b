"""The agents a deployment offers (DESIGN §14): the profiles of FINISHLINE_AGENTS."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.deps import AssemblyDep, CallerDep, SettingsDep
from app.api.errors import ApiError, ErrorBody
from app.api.schemas import AgentInfo, AgentList
from app.catalog import describe_profile

router = APIRouter(prefix="/agents", tags=["agents"])


@router.get(
    "",
    response_model=AgentList,
    summary="Agent profiles: what a run naming one gets",
    responses={401: {"model": ErrorBody}},
)
async def list_agents(settings: SettingsDep, assembly: AssemblyDep, caller: CallerDep) -> AgentList:
    profiles = sorted(settings.agents.values(), key=lambda p: p.name)
    return AgentList(agents=[AgentInfo(**describe_profile(p, assembly)) for p in profiles])


@router.get(
    "/{name}",
    response_model=AgentInfo,
    summary="One agent profile",
    responses={401: {"model": ErrorBody}, 404: {"model": ErrorBody}},
)
async def get_agent(
    name: str, settings: SettingsDep, assembly: AssemblyDep, caller: CallerDep
) -> AgentInfo:
    profile = settings.agents.get(name)
    if profile is None:
        raise ApiError(
            404,
            "not_found",
            f"no agent profile {name!r} on this server",
            available=sorted(settings.agents),
        )
    return AgentInfo(**describe_profile(profile, assembly))
