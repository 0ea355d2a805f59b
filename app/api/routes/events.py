"""A run's events: SSE (replay, then live, then close) or a JSON page."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import Response
from starlette.types import Message

from app.api.auth import Caller
from app.api.deps import EventCallerDep, manager_of, metrics_of, settings_of
from app.api.errors import ApiError, ErrorBody
from app.api.schemas import EventPage
from app.api.sse import EventStream
from app.runs.follow.wiretime import wire_ts
from app.runs.manager import RunManager
from app.runs.metrics import RunMetrics
from app.runs.records import Event, RunRecord
from app.settings import Settings

router = APIRouter(tags=["events"])

SSE_EVENT = {
    "type": "object",
    "description": "One server-sent event (OpenAPI 3.1: the schema of each event of the stream).",
    "properties": {
        "id": {"type": "string", "description": "The event's seq: 1, 2, 3 … with no gaps."},
        "event": {"type": "string", "description": "The event's type, as in its data."},
        "data": {
            "type": "string",
            "contentMediaType": "application/json",
            "contentSchema": {"$ref": "#/components/schemas/EventOut"},
        },
        "retry": {"type": "integer"},
    },
    "required": ["data"],
}
SSE_CONTENT = {"text/event-stream": {"schema": SSE_EVENT}}
MAX_SEQ = 10**18 - 1
"""The largest event seq a client may name (`?after=`, `Last-Event-ID`): 18 digits, well inside
SQLite's 64-bit integers."""
LAST_EVENT_ID = r"^[0-9]{1,18}$"


def utf8(text: str) -> bytes:
    """`text` as UTF-8. A lone UTF-16 surrogate is not text and has no UTF-8: one in a stored
    event (from a model's or a tool's output, or a request an earlier version let through)
    is sent as U+FFFD, so one bad character never makes a run's event log unreadable."""
    try:
        return text.encode()
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace").encode()


LINE_BREAKS = re.compile("[\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
"""What JSON leaves unescaped but line readers split on (Python's `splitlines`, so httpx's
`aiter_lines` and the SSE clients built on it), besides the CR and LF JSON escapes."""


def _escaped(found: re.Match[str]) -> str:
    return f"\\u{ord(found.group()):04x}"


def sse_frames(events: list[Event]) -> bytes:
    """The SSE frames of `events`, as one chunk: `id` (the seq), `event` (the type) and one
    `data` line (compact JSON, which escapes every line break, `LINE_BREAKS` included: found
    only inside its strings, so escaped the value is the same), each frame ended by a blank
    line."""
    return b"".join([_frame(e) for e in events])


ENVELOPE = frozenset(("run_id", "seq", "type", "ts", "step"))
"""The wire form's fields before the payload's (`Event.to_dict`)."""


def _frame(event: Event) -> bytes:
    """The event's frame, its data `event.to_dict()` as compact JSON. When the store's JSON of
    the payload is at hand, plain ASCII with no escape a second encoding would write otherwise
    (`ensure_ascii=False` writes non-ASCII text as itself), the envelope is put before it as
    is: the same text, without encoding the payload again, and no line break to escape
    (issue #42)."""
    raw = event.raw
    head = f"id: {event.seq}\r\nevent: {event.type.value}\r\ndata: "
    if (
        raw is None
        or not (raw.isascii() and event.run_id.isascii())
        or "\\u" in raw
        or not ENVELOPE.isdisjoint(event.data)
    ):
        text = f"{head}{_DUMPS(event.to_dict())}\r\n\r\n"
        return utf8(LINE_BREAKS.sub(_escaped, text))
    envelope = (
        f'{head}{{"run_id":{_quoted(event.run_id)},"seq":{event.seq},'
        f'"type":"{event.type.value}","ts":"{wire_ts(event.ts)}","step":{event.step}'
    )
    tail = "}" if raw == "{}" else f",{raw[1:]}"
    return f"{envelope}{tail}\r\n\r\n".encode()


@functools.lru_cache(maxsize=1024)
def _quoted(run_id: str) -> str:
    return _DUMPS(run_id)


_DUMPS = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def event_stream(
    manager: RunManager,
    metrics: RunMetrics,
    settings: Settings,
    run_id: str,
    after: int,
    caller: Caller,
    *,
    on_disconnect: Callable[[Message], Awaitable[None]] | None = None,
    headers: dict[str, str] | None = None,
    seen: RunRecord | None = None,
) -> EventStream:
    """The SSE response following `run_id` from seq `after` to its terminal event (through
    any `run.waiting` on the way: DESIGN §19); `seen`: the run as the caller just got it."""

    async def frames() -> AsyncIterator[bytes]:
        metrics.sse_subscribers.inc()
        try:
            async for batch in manager.follow(
                run_id, caller.owner, after, any_owner=caller.any_owner, seen=seen
            ):
                yield sse_frames(batch)  # one write for whatever is ready
        finally:
            metrics.sse_subscribers.dec()

    return EventStream(
        frames(),
        ping_s=settings.sse_ping_s,
        send_timeout_s=settings.sse_send_timeout_s,
        grace_s=settings.shutdown_grace_s,
        headers=headers,
        on_disconnect=on_disconnect,
    )


def _start(after: int | None, last_event_id: str | None) -> int:
    if last_event_id is not None:
        if not re.fullmatch(LAST_EVENT_ID, last_event_id):
            raise ApiError(
                422,
                "validation_error",
                f"Last-Event-ID: must be an event seq, an integer from 0 to {MAX_SEQ}",
                field="Last-Event-ID",
            )
        return int(last_event_id)
    return after or 0


@router.get(
    "/runs/{run_id}/events",
    summary="Follow a run's events",
    description="SSE by default: replays the run's events from the start (or after `Last-Event-ID` / "
    "`?after=N`), then follows live and closes after the terminal event; keep-alive comments "
    "meanwhile. With `Accept: application/json`, one page of stored events instead.",
    response_model=EventPage,
    responses={
        200: {
            "content": SSE_CONTENT,
            "description": "SSE stream, or a JSON page.",
        },
        401: {"model": ErrorBody},
        404: {"model": ErrorBody},
        409: {
            "model": ErrorBody,
            "description": "run_unreadable: the run's stored record does not read back.",
        },
        422: {"model": ErrorBody},
    },
)
async def follow_events(
    run_id: str,
    request: Request,
    caller: EventCallerDep,
    after: Annotated[
        int | None, Query(ge=0, le=MAX_SEQ, description="Start after this seq.")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000, description="Page size (JSON only).")] = 500,
    last_event_id: Annotated[
        str | None,
        Header(
            description="SSE reconnection: resume after this seq.",
            json_schema_extra={"pattern": LAST_EVENT_ID},
        ),
    ] = None,
) -> Response:
    manager = manager_of(request)  # not a dependency: app.api.deps
    record = await manager.get(run_id, caller.owner, any_owner=caller.any_owner)
    start = _start(after, last_event_id)
    accept = request.headers.get("accept", "")
    if "application/json" in accept and "text/event-stream" not in accept:
        events = await manager.read_events(run_id, start, limit)
        body = {  # an EventPage, each event in its wire form (`Event.to_dict`) as stored
            "events": [e.to_dict() for e in events],
            "next_after": events[-1].seq if events else start,
            "done": bool(events) and events[-1].terminal,
        }
        text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
        return Response(utf8(text), media_type="application/json")
    settings = settings_of(request)
    return event_stream(manager, metrics_of(request), settings, run_id, start, caller, seen=record)
