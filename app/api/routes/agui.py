"""POST /ag-ui: a run (or the next turn of a thread) as an AG-UI event stream (DESIGN §16).

The protocol's package is imported on the first request, not with the app: `app.api.agui`."""

from __future__ import annotations

import contextlib
import re
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Request
from fastapi.exceptions import RequestValidationError

from app.api.deps import CallerDep, ManagerDep, MetricsDep, SettingsDep
from app.api.errors import ApiError, ErrorBody
from app.api.routes.events import LAST_EVENT_ID, MAX_SEQ
from app.api.routes.runs import require_json
from app.api.sse import EventStream
from app.runs.errors import RunAlreadyEndedError

router = APIRouter(tags=["ag-ui"])

INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "AG-UI's RunAgentInput (protocol 1.0); the document declares it from the "
    "protocol's own model (app.api.openapi).",
}
AGUI_SSE = {
    "text/event-stream": {
        "schema": {
            "type": "object",
            "description": "AG-UI events: `id` is the finishline event seq they came from, "
            "`data` one event of the protocol, as its own encoder writes it.",
            "properties": {"id": {"type": "string"}, "data": {"type": "string"}},
        }
    }
}


@router.post(
    "/ag-ui",
    summary="Run an agent for an AG-UI client (CopilotKit, @ag-ui/client's HttpAgent)",
    description="Takes AG-UI's `RunAgentInput` and answers with the run as AG-UI events (SSE). "
    "`threadId` is a conversation: a thread's next run continues from its last. The run's "
    "configuration is `forwardedProps.finishline`, checked like POST /runs before any event "
    "is sent. A run that waits for approval or for a frontend tool's result ends the stream "
    "with an interrupt; the thread's next run answers it in `resume` (with a new runId or, "
    "as CopilotKit does, the interrupted turn's own) and streams the same run on. The same "
    "key, threadId and runId again, with no `resume`, re-attach to that run (`Last-Event-ID`: "
    "after that seq). See docs/guides/agui.md.",
    dependencies=[Depends(require_json)],
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": INPUT_SCHEMA}},
        }
    },
    response_class=EventStream,
    responses={
        200: {"description": "The AG-UI event stream.", "content": AGUI_SSE},
        401: {"model": ErrorBody},
        404: {"model": ErrorBody, "description": "resume names an interrupt of no run you see."},
        409: {
            "model": ErrorBody,
            "description": "The thread's run has not ended, or waits on interrupts the input "
            "does not answer.",
        },
        415: {"model": ErrorBody},
        422: {
            "model": ErrorBody,
            "description": "Not a RunAgentInput, a `resume` answering an interrupt twice, or "
            "a run POST /runs would refuse (the field named where the input holds it).",
        },
        429: {
            "model": ErrorBody,
            "description": "The queue is full (queue_full), or your key is at a quota "
            "(quota_exceeded, naming it); see Retry-After.",
        },
        503: {"model": ErrorBody, "description": "The server is shutting down."},
    },
)
async def run_agent(
    http: Request,
    manager: ManagerDep,
    metrics: MetricsDep,
    settings: SettingsDep,
    caller: CallerDep,
    last_event_id: Annotated[
        str | None,
        Header(
            description="Re-attaching: resume after this seq.",
            json_schema_extra={"pattern": LAST_EVENT_ID},
        ),
    ] = None,
) -> EventStream:
    from pydantic import ValidationError

    from app.api.agui.body import TurnRunBody
    from app.api.agui.session import AguiThreads
    from app.api.agui.turns import read_turn

    after = None
    if last_event_id is not None:
        if not re.fullmatch(LAST_EVENT_ID, last_event_id):
            raise ApiError(
                422,
                "validation_error",
                f"Last-Event-ID: must be an event seq, an integer from 0 to {MAX_SEQ}",
                field="Last-Event-ID",
            )
        after = int(last_event_id)
    raw = await http.body()
    try:
        turn = read_turn(raw)
    except ValidationError as exc:
        raise RequestValidationError(
            [{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False)]
        ) from None
    agui = AguiThreads(manager, TurnRunBody(settings, len(raw)))
    opened = await agui.open(turn, caller, after)

    on_disconnect = None
    if opened.cancel_on_disconnect:

        async def on_disconnect(message: object) -> None:
            with contextlib.suppress(RunAlreadyEndedError):
                await manager.cancel(opened.run_id, caller.owner, any_owner=caller.any_owner)

    async def frames() -> Any:
        metrics.sse_subscribers.inc()
        try:
            async for chunk in agui.stream(opened, turn, caller):
                yield chunk
        finally:
            metrics.sse_subscribers.dec()

    return EventStream(
        frames(),
        ping_s=settings.sse_ping_s,
        send_timeout_s=settings.sse_send_timeout_s,
        grace_s=settings.shutdown_grace_s,
        on_disconnect=on_disconnect,
        headers={"Content-Location": f"/runs/{opened.run_id}"},
    )
