"""The /schedules resource (DESIGN §21): runs that start themselves on a cron, per API key
(another key's schedule is a 404). Every field is checked before anything is stored; the run
body as POST /runs checks its own (422 naming `run.FIELD`)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request, Response

from app.api.deps import CallerDep
from app.api.errors import ErrorBody
from app.api.routes.runs import require_json
from app.api.schedule_schemas import (
    FiringList,
    FiringView,
    ScheduleCreate,
    ScheduleList,
    SchedulePatch,
    ScheduleView,
    to_firing_view,
    to_schedule_view,
)
from app.runs.schedules.service import Schedules

router = APIRouter(prefix="/schedules", tags=["schedules"])

ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody},
    404: {"model": ErrorBody, "description": "No such schedule of your API key."},
}
INVALID: dict[int | str, dict[str, Any]] = {
    415: {"model": ErrorBody},
    422: {
        "model": ErrorBody,
        "description": "A field is invalid, named: an impossible cron, an unknown time zone, "
        "ends_at not after starts_at, or a run body POST /runs would refuse (run.FIELD).",
    },
}
ScheduleId = Annotated[str, Path(max_length=40, description="The schedule's id.")]
Limit = Annotated[int, Query(ge=1, le=200, description="Page size.")]


async def get_schedules(request: Request) -> Schedules:
    schedules: Schedules = request.state.schedules  # set by the app's lifespan
    return schedules


SchedulesDep = Annotated[Schedules, Depends(get_schedules)]


@router.post(
    "",
    status_code=201,
    response_model=ScheduleView,
    summary="Make a schedule",
    responses={401: {"model": ErrorBody}, **INVALID},
)
async def create_schedule(
    caller: CallerDep,
    _: Annotated[None, Depends(require_json)],
    body: ScheduleCreate,
    schedules: SchedulesDep,
) -> ScheduleView:
    schedule = await schedules.create(caller.owner, body.model_dump())
    return to_schedule_view(schedule)


@router.get(
    "",
    response_model=ScheduleList,
    summary="List your schedules, oldest first",
    responses={401: {"model": ErrorBody}, 422: {"model": ErrorBody}},
)
async def list_schedules(
    caller: CallerDep,
    schedules: SchedulesDep,
    limit: Limit = 50,
    cursor: Annotated[str | None, Query(max_length=40, description="next_cursor.")] = None,
) -> ScheduleList:
    page, next_cursor = await schedules.listed(caller.owner, limit=limit, cursor=cursor)
    return ScheduleList(schedules=[to_schedule_view(s) for s in page], next_cursor=next_cursor)


@router.get(
    "/{schedule_id}", response_model=ScheduleView, summary="Read a schedule", responses=ERRORS
)
async def get_schedule(
    schedule_id: ScheduleId, caller: CallerDep, schedules: SchedulesDep
) -> ScheduleView:
    return to_schedule_view(await schedules.get(caller.owner, schedule_id))


@router.patch(
    "/{schedule_id}",
    response_model=ScheduleView,
    summary="Change a schedule",
    description="The fields sent replace the schedule's; the whole is checked again, and its "
    "next due time computed from now.",
    responses={**ERRORS, **INVALID},
)
async def patch_schedule(
    schedule_id: ScheduleId,
    caller: CallerDep,
    _: Annotated[None, Depends(require_json)],
    body: SchedulePatch,
    schedules: SchedulesDep,
) -> ScheduleView:
    return to_schedule_view(await schedules.update(caller.owner, schedule_id, body.changes()))


@router.delete(
    "/{schedule_id}",
    status_code=204,
    summary="Delete a schedule and its firings",
    description="Its runs stay.",
    responses=ERRORS,
)
async def delete_schedule(
    schedule_id: ScheduleId, caller: CallerDep, schedules: SchedulesDep
) -> Response:
    await schedules.delete(caller.owner, schedule_id)
    return Response(status_code=204)


@router.post(
    "/{schedule_id}/trigger",
    response_model=FiringView,
    summary="Fire a schedule now",
    description="A firing due now, outside the cron, kept with the others; its overlap "
    "policy applies. Answers the firing: its run, or why none.",
    responses=ERRORS,
)
async def trigger_schedule(
    schedule_id: ScheduleId, caller: CallerDep, schedules: SchedulesDep
) -> FiringView:
    return to_firing_view(await schedules.trigger(caller.owner, schedule_id))


@router.get(
    "/{schedule_id}/firings",
    response_model=FiringList,
    summary="A schedule's firings, newest first",
    description="Each due time and what came of it: the run, or why none.",
    responses={**ERRORS, 422: {"model": ErrorBody}},
)
async def schedule_firings(
    schedule_id: ScheduleId,
    caller: CallerDep,
    schedules: SchedulesDep,
    limit: Limit = 50,
    before: Annotated[
        float | None,
        Query(ge=0, le=1e11, description="next_cursor of the previous page (a due time)."),
    ] = None,
) -> FiringList:
    page, cursor = await schedules.firings(caller.owner, schedule_id, limit=limit, before=before)
    return FiringList(
        firings=[to_firing_view(f) for f in page],
        next_cursor=str(cursor) if cursor is not None else None,
    )
