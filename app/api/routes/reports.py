"""GET /reports/termination: how the caller's runs ended, by model, agent, key or day
(DESIGN §20). Served from per-run summaries (`app.runs.reports.summaries`)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Query

from app.api.deps import CallerDep, ManagerDep
from app.api.errors import ApiError, ErrorBody
from app.api.report_schemas import ReportGroup, TerminationReport
from app.runs.reports.groups import GroupBy
from app.runs.reports.summaries import RunFilter

router = APIRouter(prefix="/reports", tags=["reports"])

NAME = r"^[A-Za-z0-9][A-Za-z0-9._:/@-]{0,199}$"


def utc(name: str, at: str | None) -> datetime | None:
    """A bound as UTC (a date: its midnight; no offset: UTC); 422 for no such time."""
    if at is None:
        return None
    try:
        parsed = datetime.fromisoformat(at)
    except ValueError:
        raise ApiError(
            422, "validation_error", f"{name}: {at!r} is not a date or time", field=name
        ) from None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


def run_filter(
    since: str | None, until: str | None, model: str | None, agent: str | None
) -> RunFilter:
    """The filter of GET /runs and GET /reports/termination; 422 for an empty window."""
    matching = RunFilter(
        since=utc("since", since), until=utc("until", until), model=model, agent=agent
    )
    if matching.since and matching.until and matching.since >= matching.until:
        raise ApiError(422, "validation_error", "until: must be after since", field="until")
    return matching


ISO = r"^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?(Z|[+-]\d{2}:\d{2})?)?$"
Since = Annotated[
    str | None,
    Query(
        pattern=ISO,
        description="Only runs made at or after this time (ISO 8601; a date: its midnight; "
        "no offset: UTC).",
    ),
]
Until = Annotated[
    str | None,
    Query(pattern=ISO, description="Only runs made before this time (as `since`)."),
]
Model = Annotated[str | None, Query(pattern=NAME, description="Only runs of this model.")]
Agent = Annotated[
    str | None,
    Query(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$", description="Only runs of this profile."),
]


@router.get(
    "/termination",
    response_model=TerminationReport,
    summary="How runs ended, by model, agent, key or day",
    description="Per group of the caller's ended runs made in [since, until): runs by "
    "status and by stop reason, degraded answers, runs ended through the finish tool, "
    "interventions, retries and takeovers per run, p50/p90 of steps, duration and tokens, "
    "USD. The runs counted are exactly those GET /runs lists with the same since, until, "
    "model and agent and an ended status. A key sees its own runs; an admin key "
    "(FINISHLINE_ADMIN_KEYS) sees every key's and may group_by=key. See "
    "docs/guides/reports.md.",
    responses={401: {"model": ErrorBody}, 403: {"model": ErrorBody}},
)
async def termination(
    manager: ManagerDep,
    caller: CallerDep,
    since: Since = None,
    until: Until = None,
    model: Model = None,
    agent: Agent = None,
    group_by: Annotated[GroupBy, Query(description="What the groups are.")] = GroupBy.MODEL,
) -> TerminationReport:
    matching = run_filter(since, until, model, agent)
    all_keys = caller.admin or caller.any_owner
    if group_by is GroupBy.KEY and not all_keys:
        raise ApiError(
            403, "forbidden", "group_by=key: only admin keys (FINISHLINE_ADMIN_KEYS) see keys"
        )
    groups = await manager.reports.termination(
        owner=caller.owner, any_owner=all_keys, matching=matching, group_by=group_by
    )
    return TerminationReport(
        group_by=group_by,
        since=matching.since,
        until=matching.until,
        model=model,
        agent=agent,
        all_keys=all_keys,
        runs=sum(g["runs"] for g in groups),
        groups=[ReportGroup.model_validate(g) for g in groups],
    )
