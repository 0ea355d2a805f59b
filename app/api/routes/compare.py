"""GET /runs/compare: two to four of the caller's runs side by side, and POST
/runs/{id}/replay (DESIGN §20). Its own router, included before /runs/{run_id}'s, whose path
`/runs/compare` would otherwise match."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query

from app.api.deps import CallerDep, ManagerDep
from app.api.errors import REFUSING, ApiError, ErrorBody
from app.api.report_schemas import CompareView, ForkIn, ReplayIn, ReplayView
from app.runs.reports.compare import MAX_RUNS, MIN_RUNS
from app.runs.view import RunView, to_view

router = APIRouter(tags=["runs"])
IDS = r"^run_[0-9A-Z]{26}(,run_[0-9A-Z]{26}){1,3}$"


@router.get(
    "/runs/compare",
    response_model=CompareView,
    summary="Two to four runs side by side",
    description="Each run's outcome (model, agent, status, reason, degraded, answer, steps, "
    "tokens, USD, duration) and their steps aligned by step number: per step, what each run "
    "did (its thought, the tools it called, errors, interventions), null where a run had no "
    "such step. Every run must be the caller's (404 otherwise). The viewer shows it at "
    "#/compare/A,B.",
    responses={401: {"model": ErrorBody}, 404: {"model": ErrorBody}, 409: {"model": ErrorBody}},
)
async def compare_runs(
    manager: ManagerDep,
    caller: CallerDep,
    ids: Annotated[
        str,
        Query(pattern=IDS, description=f"{MIN_RUNS} to {MAX_RUNS} run ids, comma-separated."),
    ],
) -> CompareView:
    wanted = ids.split(",")
    if len(set(wanted)) != len(wanted):
        raise ApiError(422, "validation_error", "ids: a run is named twice", field="ids")
    records = [
        await manager.get(run_id, caller.owner, any_owner=caller.any_owner) for run_id in wanted
    ]
    return CompareView.model_validate(await manager.reports.compare(records))


@router.api_route(
    "/runs/compare",
    methods=["POST", "PUT", "PATCH", "DELETE"],
    include_in_schema=False,
    name=REFUSING,
)
async def not_a_run() -> None:
    """405 for the path's other methods (not /runs/{run_id}'s DELETE of a run `compare`)."""
    raise HTTPException(405)


@router.post(
    "/runs/{run_id}/replay",
    response_model=ReplayView,
    summary="Replay an ended run on today's engine",
    description="Runs the loop again on the run's recorded model replies and tool results: "
    "no model or tool is called, no token spent, nothing stored. Answers whether the engine "
    "makes the same events (`identical`) or where it first differs. `settings` replay with "
    "other values than the run's (caps do not apply: nothing runs). 409 run_not_ended for a "
    "run that has not ended. See docs/guides/reports.md.",
    responses={401: {"model": ErrorBody}, 404: {"model": ErrorBody}, 409: {"model": ErrorBody}},
)
async def replay_run(
    run_id: str, manager: ManagerDep, caller: CallerDep, body: ReplayIn | None = None
) -> ReplayView:
    record = await manager.get(run_id, caller.owner, any_owner=caller.any_owner)
    settings = None
    if body is not None and body.settings is not None:
        given = body.settings.model_fields_set
        settings = {name: getattr(body.settings, name) for name in given}
    return ReplayView.model_validate(await manager.reports.replay(record, settings))


@router.post(
    "/runs/{run_id}/fork",
    status_code=202,
    response_model=RunView,
    summary="Fork an ended run at a step, with changes",
    description="A new run (202) whose conversation is the ended run's as it stood before "
    "`at_step` (its model replies and recorded tool results: nothing is called again), then "
    "goes on live with the changes given (model, agent, settings, tools; system_prompt and "
    "task at step 1 only). `forked_from {run_id, step}` on the new run and its run.queued "
    "event. Quotas and caps apply as to any run. 409 run_not_ended for a run that has not "
    "ended; 422 for a step it did not reach. See docs/guides/reports.md.",
    responses={401: {"model": ErrorBody}, 404: {"model": ErrorBody}, 409: {"model": ErrorBody}},
)
async def fork_run(run_id: str, body: ForkIn, manager: ManagerDep, caller: CallerDep) -> RunView:
    record = await manager.get(run_id, caller.owner, any_owner=caller.any_owner)
    overrides = body.model_dump(exclude_unset=True, exclude={"at_step", "settings"})
    if body.settings is not None:
        given = body.settings.model_fields_set
        overrides["settings"] = {n: getattr(body.settings, n) for n in given}
    return to_view(await manager.reports.fork(record, body.at_step, overrides, caller.owner))
