"""The body of POST /runs, parsed and validated in a worker thread (unless it is small).

Parsing and validating JSON costs time in proportion to how many values it holds, and a
body within the size cap can hold hundreds of thousands (`[[],[],…]`): done on the event
loop, that stalled every other request for seconds. In a thread (one at a time:
`app.offload`), the loop keeps answering (the interpreter switches threads every few
milliseconds), and the size caps are checked there too, so an oversized request never
reaches the loop's own work (storing); a large request is hashed there too (its
`request_hash`, for idempotency).
JSON parsing and pydantic validation run in C and Rust without letting go of the interpreter,
so a cheap count of the body's values bounds them first (FINISHLINE_MAX_BODY_JSON_VALUES)."""

from __future__ import annotations

import json
from typing import Any, Literal, overload

from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from app.api.schemas import RunCreate
from app.caps import check_sizes
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


def parse_run_body(
    raw: bytes, settings: Settings, *, compile_schemas: bool = True
) -> tuple[RunCreate, RunRequest]:
    """The request and its run, or RequestValidationError / InvalidRunError (a cap); with
    `compile_schemas`, its HTTP tools' schemas checked and compiled (remembered) too."""
    check_value_count(raw, settings)
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        error = {"type": "json_invalid", "loc": ("body",), "msg": "JSON decode error"}
        raise RequestValidationError([{**error, "ctx": {"error": str(exc)[:200]}}]) from None
    try:
        body = RunCreate.model_validate(data)
    except ValidationError as exc:
        raise RequestValidationError(
            [{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False)]
        ) from None
    request = body.run_request()
    check_sizes(request, settings)
    if compile_schemas:
        _compile_schemas(request)
    return body, request


def _compile_schemas(request: RunRequest) -> None:
    """The costly check and compile of the HTTP tools' schemas (off the loop; remembered)."""
    for schema in [t.parameters for t in request.http_tools + request.client_tools]:
        compiled_schema(schema)


INLINE_BODY_BYTES = 16_384
"""A body this small is parsed on the event loop: it holds at most a few thousand JSON values
(tens of microseconds), less than the hop to a worker thread and back costs. Its HTTP tools'
schemas, if any, are still compiled off the loop."""


def _parse_and_hash(
    raw: bytes, settings: Settings, hashed: bool
) -> tuple[RunCreate, RunRequest, str | None]:
    body, request = parse_run_body(raw, settings)
    return body, request, request_hash(request) if hashed else None


@overload
async def read_run_body(
    raw: bytes, settings: Settings, *, hashed: Literal[True] = True
) -> tuple[RunCreate, RunRequest, str]: ...


@overload
async def read_run_body(
    raw: bytes, settings: Settings, *, hashed: bool
) -> tuple[RunCreate, RunRequest, str | None]: ...


async def read_run_body(
    raw: bytes, settings: Settings, *, hashed: bool = True
) -> tuple[RunCreate, RunRequest, str | None]:
    """The request, its run and the run's `request_hash` (idempotency), computed where the
    body is parsed: on the loop for a small body, in the worker thread for a large one.
    `hashed=False` (a run with no idempotency key, whose hash nothing compares): None."""
    if len(raw) > INLINE_BODY_BYTES:
        return await off_loop(_parse_and_hash, raw, settings, hashed)
    body, request = parse_run_body(raw, settings, compile_schemas=False)
    if request.http_tools or request.client_tools:
        await off_loop(_compile_schemas, request)
    return body, request, request_hash(request) if hashed else None
