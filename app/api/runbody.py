"""A run's body, read and checked in one place for every face: POST /runs (its bytes), and the
new run of an AG-UI turn or an A2A message (a value their protocol's library parsed, given as
it is: no JSON written and read again).

`checked_run_body` is the one function: the POST /runs body model (`RunCreate`), the run's
sizes against the server's caps, its `request_hash` when a replay may compare it. A face names
where its input holds each field (`where`), so every refusal says where the client wrote it
(`forwardedProps.finishline.settings.max_steps`, `metadata.finishline.tools[0]`). What it
checked travels with the request (`RunRequest.within_caps`, `.digest`): no flag follows it.

Parsing and validating cost time in proportion to how many values a body holds, and one within
the size cap can hold hundreds of thousands (`[[],[],…]`): done on the event loop, that stalled
every other request for seconds. A large input is read whole in a worker thread (one at a
time: `app.offload`), after a cheap count of its values bounds the work
(FINISHLINE_MAX_BODY_JSON_VALUES); a small one on the loop, its HTTP tools' schemas compiled
off it."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from app.api.schemas import RunCreate
from app.caps import check_sizes
from app.engine.paths import field_path
from app.offload import off_loop
from app.runs.errors import InvalidRunError
from app.runs.records import request_hash
from app.runs.spec import RunRequest
from app.settings import Settings
from app.tools.base import compiled_schema

OPENAPI_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/RunCreate"}}},
    }
}
"""What the route declares, as FastAPI would for a `RunCreate` parameter."""
INLINE_BODY_BYTES = 16_384
"""An input this small is read on the event loop: it holds at most a few thousand JSON values
(tens of microseconds), less than the hop to a worker thread and back costs. Its HTTP tools'
schemas, if any, are still compiled off the loop."""

Relocate = Callable[[str], str]
"""Where a face's input holds a field of the POST /runs body (`settings.max_steps` ->
`forwardedProps.finishline.settings.max_steps`); "body" stands for the body whole."""


def as_sent(field: str) -> str:
    """POST /runs' own fields are where they are."""
    return field


def relocated(exc: InvalidRunError, where: Relocate) -> InvalidRunError:
    """A refusal of a POST /runs field (a cap, a tool or model name), naming where the face's
    input holds it."""
    message = exc.message.removeprefix(f"{exc.field}: ")
    details = {k: v for k, v in exc.details.items() if k != "field"}
    return InvalidRunError(where(exc.field), message, **details)


def check_value_count(raw: bytes, settings: Settings) -> None:
    """Refuse a body of more JSON values than FINISHLINE_MAX_BODY_JSON_VALUES (InvalidRunError,
    field `body`). Parsing and validating run in C and Rust, holding the interpreter for their
    whole length: how many values they may meet is bounded first, in a pass over the bytes."""
    values = raw.count(b",") + raw.count(b"[") + raw.count(b"{")
    if values > settings.max_body_json_values:
        raise InvalidRunError(
            "body",
            f"holds about {values:,} JSON values (commas, arrays and objects), more than the "
            f"server cap of {settings.max_body_json_values:,}",
            cap=settings.max_body_json_values,
        )


def checked_run_body(
    value: Any, settings: Settings, *, hashed: bool = True, where: Relocate = as_sent
) -> tuple[RunCreate, RunRequest]:
    """The body and its run: validated (RequestValidationError, each problem named where the
    face's input holds it), within the caps (InvalidRunError, likewise), its `request_hash`
    kept on it when `hashed` (a replay of a key compares it)."""
    try:
        body = RunCreate.model_validate(value)
    except ValidationError as exc:
        raise RequestValidationError(
            [_located(e, where) for e in exc.errors(include_url=False)]
        ) from None
    request = body.run_request()
    try:
        check_sizes(request, settings)
    except InvalidRunError as exc:
        raise relocated(exc, where) from None
    return body, request.checked(request_hash(request) if hashed else None)


def _located(error: Any, where: Relocate) -> Any:
    """A pydantic error of the body, its place (`loc`; a value's own path for `json_value`)
    where the face's input holds it: ("body", the field as the face names it)."""
    path = field_path(error["loc"]) or "body"
    located = {**error, "loc": ("body", where(path))}
    if error.get("type") == "json_value":  # (names the offending value's path itself)
        ctx = error["ctx"]
        located["ctx"] = {**ctx, "path": where(ctx["path"])}
    return located


def _compiled(request: RunRequest) -> None:
    """The costly check and compile of the HTTP and client tools' schemas (remembered)."""
    for schema in [t.parameters for t in request.http_tools + request.client_tools]:
        compiled_schema(schema)


def _whole(
    value: Any, settings: Settings, hashed: bool, where: Relocate
) -> tuple[RunCreate, RunRequest]:
    body, request = checked_run_body(value, settings, hashed=hashed, where=where)
    _compiled(request)
    return body, request


async def run_body(
    value: Any, settings: Settings, *, size: int, hashed: bool = True, where: Relocate = as_sent
) -> tuple[RunCreate, RunRequest]:
    """`checked_run_body` of a parsed value, its schemas compiled; in the worker thread when
    the value came in more than INLINE_BODY_BYTES (`size`: the bytes of the input it is in)."""
    if size > INLINE_BODY_BYTES:
        return await off_loop(_whole, value, settings, hashed, where)
    body, request = checked_run_body(value, settings, hashed=hashed, where=where)
    if request.http_tools or request.client_tools:
        await off_loop(_compiled, request)
    return body, request


def _parsed(raw: bytes, settings: Settings) -> Any:
    check_value_count(raw, settings)
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:
        error = {"type": "json_invalid", "loc": ("body",), "msg": "JSON decode error"}
        raise RequestValidationError([{**error, "ctx": {"error": str(exc)[:200]}}]) from None


def _from_bytes(raw: bytes, settings: Settings, hashed: bool) -> tuple[RunCreate, RunRequest]:
    return _whole(_parsed(raw, settings), settings, hashed, as_sent)


async def read_run_body(
    raw: bytes, settings: Settings, *, hashed: bool = True
) -> tuple[RunCreate, RunRequest]:
    """POST /runs' body: parsed, then `run_body` (a large one parsed in the worker thread
    too). `hashed=False`: a run with no idempotency key, whose hash nothing compares."""
    if len(raw) > INLINE_BODY_BYTES:
        return await off_loop(_from_bytes, raw, settings, hashed)
    return await run_body(_parsed(raw, settings), settings, size=len(raw), hashed=hashed)
