"""The /runs resource: create, read, list, cancel, messages, approvals, wait, delete, stream
tokens."""

from __future__ import annotations

import contextlib
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Request, Response
from pydantic import Field

from app.api.deps import (
    CallerDep,
    ManagerDep,
    ReaderDep,
    SettingsDep,
    TokensDep,
    manager_of,
    metrics_of,
    settings_of,
)
from app.api.errors import ApiError, ErrorBody
from app.api.routes.events import SSE_CONTENT, event_stream
from app.api.routes.reports import Agent, Model, Since, Until, run_filter
from app.api.runbody import OPENAPI_BODY, read_run_body
from app.api.schemas import ApprovalsIn, MessageIn, RunList, StreamToken
from app.runs.errors import RunAlreadyEndedError
from app.runs.records import ApprovalDecision, RunStatus
from app.runs.view import RunView, to_view

router = APIRouter(prefix="/runs", tags=["runs"])

UNREADABLE = "run_unreadable: the run's stored record does not read back (docs/decisions.md)"
ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody},
    404: {"model": ErrorBody},
    409: {"model": ErrorBody, "description": UNREADABLE},
}


def conflict(when: str) -> dict[int | str, dict[str, Any]]:
    """ERRORS, with the route's own 409 besides run_unreadable."""
    return {**ERRORS, 409: {"model": ErrorBody, "description": f"{when}; or {UNREADABLE}."}}


WAIT_DEFAULT_S = 30.0
STATUS_LIST = r"^ *[a-z_]+( *, *[a-z_]+)* *$"
TRACEPARENT_MAX_CHARS = 256  # version 00 is 55; later versions may append fields


async def require_json(request: Request) -> None:  # async: no worker thread (deps.py)
    content_type = request.headers.get("content-type", "")
    if content_type.split(";")[0].strip().lower() != "application/json":
        raise ApiError(
            415,
            "unsupported_media_type",
            f"send the body as application/json, not {content_type or 'nothing'!r}",
        )


def _run(view: RunView, status: int) -> Response:
    # pydantic's own encoder: the bytes JSONResponse(view.model_dump(mode="json")) gives,
    # a third of the cost
    return Response(
        view.model_dump_json(),
        status_code=status,
        media_type="application/json",
        headers={"Content-Location": view.links.self},
    )


@router.post(
    "",
    status_code=202,
    response_model=RunView,
    summary="Start a run",
    description="Validates, stores and queues the run; answers 202 with the run (or 200 when an "
    '`Idempotency-Key` replays an earlier identical request). With `"stream": true` the answer is '
    "the run's SSE stream itself.",
    dependencies=[Depends(require_json)],
    openapi_extra=OPENAPI_BODY,  # parsed in a worker thread (app.api.runbody)
    responses={
        200: {
            "model": RunView,
            "description": "Idempotent replay, or the SSE stream when stream is true.",
            "content": SSE_CONTENT,
        },
        401: {"model": ErrorBody},
        404: {"model": ErrorBody, "description": "previous_run_id names no run visible to you."},
        409: {
            "model": ErrorBody,
            "description": "The Idempotency-Key was used with another body, or previous_run_id names a run that has not ended; or the run either names is stored but does not read back (run_unreadable); or (thread_busy) thread_id's latest run has not ended and multitask is reject: details name it (run_id).",
        },
        415: {"model": ErrorBody},
        422: {
            "model": ErrorBody,
            "description": "Unknown field, a value over a server cap, an unknown tool, model or agent profile, a host not allowed; thread_id with previous_run_id, or multitask without thread_id.",
        },
        429: {
            "model": ErrorBody,
            "description": "Every slot busy and the queue full (queue_full); or your API key is at one of its quotas (quota_exceeded: details name the quota, its limit and what is used); see Retry-After.",
        },
        503: {"model": ErrorBody, "description": "The server is shutting down."},
    },
)
async def create_run(
    http: Request,
    caller: CallerDep,
    idempotency_key: Annotated[
        str | None, Header(max_length=200, description="Same key and body: the same run.")
    ] = None,
    traceparent: Annotated[
        str | None,
        Header(
            description="W3C trace context: when the server exports traces, the run's spans join this trace (its trace id becomes the run's `trace_id`). An invalid value is ignored."
        ),
    ] = None,
) -> Response:
    if traceparent is not None and len(traceparent) > TRACEPARENT_MAX_CHARS:
        traceparent = None  # not a W3C traceparent: start a trace of the run's own
    manager, settings = manager_of(http), settings_of(http)  # not dependencies: deps.py
    raw = await http.body()  # the hash only where a replay may compare it: with a key
    body, run_request = await read_run_body(raw, settings, hashed=idempotency_key is not None)
    body.check_thread()
    record, created = await manager.create(
        run_request,
        owner=caller.owner,
        idempotency_key=idempotency_key,
        traceparent=traceparent,
        thread_id=body.thread_id,
        multitask=body.multitask,
    )
    view = to_view(record)
    if body.stream:
        on_disconnect = None
        if body.on_disconnect == "cancel":

            async def on_disconnect(message: object) -> None:
                with contextlib.suppress(RunAlreadyEndedError):
                    await manager.cancel(record.id, caller.owner, any_owner=caller.any_owner)

        return event_stream(
            manager,
            metrics_of(http),
            settings,
            record.id,
            0,
            caller,
            on_disconnect=on_disconnect,
            headers={"Content-Location": view.links.self},
            seen=record,
        )
    return _run(view, 202 if created else 200)


@router.get(
    "",
    response_model=RunList,
    summary="List runs, newest first",
    responses={401: {"model": ErrorBody}, 422: {"model": ErrorBody}},
)
async def list_runs(
    manager: ManagerDep,
    caller: CallerDep,
    status: Annotated[
        list[Annotated[str, Field(pattern=STATUS_LIST)]] | None,
        Query(description="Filter by status; repeat or comma-separate."),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: Annotated[
        str | None,
        Query(pattern=r"^run_[0-9A-Z]{26}$", description="next_cursor of the previous page."),
    ] = None,
    previous_run_id: Annotated[
        str | None,
        Query(
            pattern=r"^run_[0-9A-Z]{26}$",
            description="Only the follow-ups of this run, to walk a conversation forward.",
        ),
    ] = None,
    parent_run_id: Annotated[
        str | None,
        Query(
            pattern=r"^run_[0-9A-Z]{26}$",
            description="Only the child runs this run's sub-agent calls started (DESIGN §15).",
        ),
    ] = None,
    since: Since = None,
    until: Until = None,
    model: Model = None,
    agent: Agent = None,
) -> RunList:
    matching = run_filter(since, until, model, agent)
    statuses: list[RunStatus] = []
    for part in ",".join(status or []).split(","):
        if part.strip():
            try:
                statuses.append(RunStatus(part.strip()))
            except ValueError:
                allowed = ", ".join(s.value for s in RunStatus)
                raise ApiError(
                    422,
                    "validation_error",
                    f"status: {part.strip()!r} is not one of {allowed}",
                    field="status",
                ) from None
    unreadable: list[str] = []
    records, next_cursor = await manager.list_runs(
        owner=caller.owner,
        statuses=statuses,
        limit=limit,
        cursor=cursor,
        any_owner=caller.any_owner,
        previous_run_id=previous_run_id,
        unreadable=unreadable,
        parent_run_id=parent_run_id,
        matching=None if matching.empty else matching,
    )
    runs = [to_view(r) for r in records]
    return RunList(runs=runs, next_cursor=next_cursor, unreadable=unreadable)


@router.get("/{run_id}", response_model=RunView, summary="Read a run", responses=ERRORS)
async def get_run(run_id: str, manager: ManagerDep, caller: CallerDep) -> RunView:
    return to_view(await manager.get(run_id, caller.owner, any_owner=caller.any_owner))


@router.post(
    "/{run_id}/cancel",
    status_code=202,
    response_model=RunView,
    summary="Cancel a run",
    description="Interrupts in-flight LLM and tool calls at once; answers with the run (ended, "
    "unless it takes more than a few seconds to stop).",
    responses=conflict("run_already_ended: the run has already ended"),
)
async def cancel_run(run_id: str, manager: ManagerDep, caller: CallerDep) -> Response:
    record = await manager.cancel(run_id, caller.owner, any_owner=caller.any_owner)
    return _run(to_view(record), 202)


@router.post(
    "/{run_id}/messages",
    status_code=202,
    response_model=RunView,
    summary="Send a live run a message (steering)",
    description="The message joins the conversation as a user message right before the run's next "
    "LLM call (never inside a tool-call exchange), with a `user.message` event; several keep their "
    "order. On a run waiting in the stop-tool nudge loop it replaces the nudge. One accepted after "
    "the run's last LLM call is logged with `delivered: false`. With the Redis store any replica "
    "accepts it, whichever replica the run is queued, waiting or running on. Answers with the run.",
    dependencies=[Depends(require_json)],
    responses={
        **conflict("run_already_ended: the run has ended; start a follow-up instead"),
        415: {"model": ErrorBody},
        422: {"model": ErrorBody, "description": "Empty, or longer than the server cap."},
        429: {"model": ErrorBody, "description": "The run holds too many undelivered messages."},
    },
)
async def post_message(
    run_id: str, body: MessageIn, manager: ManagerDep, caller: CallerDep
) -> Response:
    record = await manager.post_message(
        run_id, caller.owner, body.content, any_owner=caller.any_owner
    )
    return _run(to_view(record), 202)


@router.post(
    "/{run_id}/approvals",
    status_code=202,
    response_model=RunView,
    summary="Approve or reject the tool calls a run waits on",
    description="For a run in `requires_action`: decide some or all of its `pending_approvals` "
    "(an `approval.decided` event each). Once every pending call is decided the run is queued "
    "again and resumes from its checkpoint: an approved call runs (with `arguments`, if given), "
    "a rejected one gives the model an error observation carrying `message`. Answers with the run.",
    dependencies=[Depends(require_json)],
    responses={
        **conflict(
            "run_not_waiting: the run is not waiting on that call; ambiguous_call: several "
            "runs of the tree wait on that call id, say which with run_id"
        ),
        415: {"model": ErrorBody},
        422: {
            "model": ErrorBody,
            "description": "Malformed, a call decided twice, or edited arguments that fail the "
            "tool's schema.",
        },
    },
)
async def decide_approvals(
    run_id: str, body: ApprovalsIn, manager: ManagerDep, caller: CallerDep
) -> Response:
    decisions = [
        ApprovalDecision(
            call_id=d.call_id,
            approved=d.approve,
            message=d.message,
            arguments=d.arguments,
            result=d.result,
            run_id=d.run_id,
        )
        for d in body.decisions
    ]
    record = await manager.decide(run_id, caller.owner, decisions, any_owner=caller.any_owner)
    return _run(to_view(record), 202)


@router.get(
    "/{run_id}/wait",
    response_model=RunView,
    summary="Wait for a run to end",
    description="Blocks until the run ends (its terminal event stored: the events read after "
    "it are complete) or waits for a person (`requires_action`), or answers with the run as it "
    "stands after timeout_s.",
    responses={**ERRORS, 422: {"model": ErrorBody}},
)
async def wait_run(
    run_id: str,
    manager: ManagerDep,
    settings: SettingsDep,
    caller: CallerDep,
    timeout_s: Annotated[
        float | None,
        Query(
            ge=0,
            description="Longest wait in seconds (server cap: FINISHLINE_MAX_WAIT_S); "
            "default 30, or the cap when it is lower.",
        ),
    ] = None,
) -> RunView:
    if timeout_s is None:
        timeout_s = min(WAIT_DEFAULT_S, settings.max_wait_s)
    elif timeout_s > settings.max_wait_s:
        raise ApiError(
            422,
            "validation_error",
            f"timeout_s: {timeout_s:g} exceeds the server cap of {settings.max_wait_s:g}",
            field="timeout_s",
            cap=settings.max_wait_s,
        )
    return to_view(await manager.wait(run_id, caller.owner, timeout_s, any_owner=caller.any_owner))


@router.delete(
    "/{run_id}",
    status_code=204,
    summary="Delete an ended run and its events",
    description="A run whose task is still storing its end (a follower may have its terminal "
    "event already) or closing is waited for, a few seconds at most.",
    responses=conflict(
        "run_not_ended: the run has not ended; run_closing: it has ended and its task is "
        "still closing after a few seconds (Retry-After)"
    ),
)
async def delete_run(run_id: str, manager: ManagerDep, caller: CallerDep) -> Response:
    await manager.delete(run_id, caller.owner, any_owner=caller.any_owner)
    return Response(status_code=204)


@router.post(
    "/{run_id}/stream-token",
    response_model=StreamToken,
    summary="Get a token to follow this run's events with EventSource",
    description="Short-lived and scoped to this run's events: pass it as ?token= where headers cannot be sent.",
    responses=ERRORS,
)
async def stream_token(
    run_id: str, manager: ManagerDep, tokens: TokensDep, caller: ReaderDep
) -> StreamToken:
    await manager.get(run_id, caller.owner, any_owner=caller.any_owner)
    token, expires = tokens.issue(run_id, caller.owner)
    return StreamToken(
        token=token, expires_at=expires, events_url=f"/runs/{run_id}/events?token={token}"
    )
