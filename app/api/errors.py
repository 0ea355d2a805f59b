"""The one place errors become HTTP: `{"error": {"type", "message", "details"}}`.

A client's mistake is a 4xx naming the problem; only our bugs are a 500.
"""

from __future__ import annotations

from typing import Any

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.routing import Match

from app.engine.errors import FinishlineError
from app.engine.paths import field_path
from app.identity.errors import (
    IdentityError,
    InsufficientScopeError,
    InvalidApiKeyError,
    InvalidTokenError,
    IssuerUnavailableError,
    MissingCredentialsError,
)
from app.runs.errors import (
    AmbiguousCallError,
    IdempotencyConflictError,
    InvalidRunError,
    QueueFullError,
    QuotaExceededError,
    RunAlreadyEndedError,
    RunClosingError,
    RunNotEndedError,
    RunNotFoundError,
    RunNotWaitingError,
    RunsError,
    RunUnreadableError,
    ScheduleNotFoundError,
    ShuttingDownError,
    StoreUnavailableError,
    ThreadBusyError,
    ThreadNotFoundError,
    TooManyMessagesError,
)

log = structlog.get_logger("finishline.api")


class ErrorInfo(BaseModel):
    """What went wrong."""

    type: str = Field(description="Stable error type, e.g. validation_error, not_found, conflict.")
    message: str = Field(description="What is wrong, naming the field or the run.")
    details: dict[str, Any] = Field(
        default_factory=dict,
        description="Facts for programs: the field, the cap, the run id, validation errors.",
    )


class ErrorBody(BaseModel):
    """Every error answer has this shape."""

    error: ErrorInfo = Field(description="The error.")


class BodyTooLargeError(FinishlineError, StarletteHTTPException):
    """Raised by `app.api.bodylimit` while the body streams in; answered as JSON here."""

    def __init__(self, cap: int) -> None:
        super().__init__(413, f"the request body exceeds the server cap of {cap:,} bytes")
        self.cap = cap


class BodyTimeoutError(FinishlineError, StarletteHTTPException):
    """Raised by `app.api.bodylimit` when a body is not all in by its deadline."""

    def __init__(self, timeout_s: float) -> None:
        super().__init__(408, f"the request body did not arrive within {timeout_s:g} s")
        self.timeout_s = timeout_s


class ApiError(FinishlineError):
    """An HTTP-level refusal raised by routes and dependencies."""

    def __init__(
        self,
        status: int,
        type: str,
        message: str,
        headers: dict[str, str] | None = None,
        **details: Any,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.type = type
        self.message = message
        self.headers = headers
        self.details = details


RUNS_ERRORS: dict[type[RunsError], tuple[int, str]] = {
    RunsError: (400, "bad_request"),  # the default for a refusal with no entry of its own
    InvalidRunError: (422, "validation_error"),
    RunNotFoundError: (404, "not_found"),
    RunNotEndedError: (409, "run_not_ended"),
    RunClosingError: (409, "run_closing"),  # ended; its task still closing: retry (Retry-After)
    RunAlreadyEndedError: (409, "run_already_ended"),
    RunNotWaitingError: (409, "run_not_waiting"),
    ThreadBusyError: (409, "thread_busy"),  # its latest run has not ended (DESIGN §19)
    ThreadNotFoundError: (404, "not_found"),
    ScheduleNotFoundError: (404, "not_found"),  # DESIGN §21
    AmbiguousCallError: (409, "ambiguous_call"),  # a call id several runs of a tree wait on
    RunUnreadableError: (409, "run_unreadable"),  # the server's data: docs/decisions.md
    IdempotencyConflictError: (409, "idempotency_conflict"),
    QueueFullError: (429, "queue_full"),
    QuotaExceededError: (429, "quota_exceeded"),
    TooManyMessagesError: (429, "too_many_messages"),
    ShuttingDownError: (503, "shutting_down"),
    StoreUnavailableError: (503, "store_unavailable"),  # Redis away: try again, Retry-After
}

IDENTITY_ERRORS: dict[type[IdentityError], tuple[int, str]] = {
    IdentityError: (401, "unauthorized"),
    MissingCredentialsError: (401, "unauthorized"),
    InvalidApiKeyError: (401, "unauthorized"),
    InvalidTokenError: (401, "invalid_token"),  # RFC 6750's codes, in the challenge too
    InsufficientScopeError: (403, "insufficient_scope"),
    IssuerUnavailableError: (503, "identity_provider_unavailable"),
}

STATUS_TYPES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    408: "request_timeout",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "validation_error",
    429: "too_many_requests",
    503: "unavailable",
}


def error_response(
    status: int,
    type: str,
    message: str,
    details: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body = {"error": {"type": type, "message": message, "details": details or {}}}
    return JSONResponse(body, status_code=status, headers=headers)


def _field(loc: tuple[Any, ...]) -> str:
    """A problem's place as a client wrote it: its `loc` past where it was (body, query…)."""
    if loc and loc[0] in ("body", "query", "header", "path", "cookie"):
        return field_path(loc[1:]) or str(loc[0])
    return field_path(loc)


def validation_problems(exc: RequestValidationError) -> list[dict[str, Any]]:
    """Each problem of a refused body: `{field, message, type}`, the field named as a client
    wrote it (`settings.max_steps`, `http_tools[0].url`)."""
    problems = []
    for error in exc.errors():
        loc = tuple(error.get("loc", ()))
        field = _field(loc)
        message = error.get("msg", "invalid")
        if error.get("type") == "extra_forbidden":
            message = "unknown field"
        elif error.get("type") == "json_value":  # app.runs.jsonsafe: names the value itself
            field, message = error["ctx"]["path"], error["ctx"]["problem"]
        elif error.get("type") == "json_invalid":
            field, message = "body", f"invalid JSON: {error.get('ctx', {}).get('error', message)}"
        problems.append({"field": field, "message": message, "type": error.get("type")})
    return problems


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    problems = validation_problems(exc)
    summary = "; ".join(f"{p['field']}: {p['message']}" for p in problems) or "invalid request"
    details: dict[str, Any] = {"errors": problems}
    if len(problems) == 1 and problems[0]["type"] == "json_value":
        # a value no JSON schema can rule out (a lone surrogate, NaN, a 65-bit integer):
        # named like the server's other runtime checks
        details["field"] = problems[0]["field"]
    return error_response(422, "validation_error", summary, details)


def runs_error_status(exc: RunsError) -> tuple[int, str]:
    """The HTTP status and error type of a runs-layer refusal: the entry of its nearest class
    along the MRO, so a new subclass inherits its parent's answer (and `RunsError`'s at worst)."""
    for klass in type(exc).__mro__:
        if klass in RUNS_ERRORS:
            return RUNS_ERRORS[klass]
    raise AssertionError("RunsError is in RUNS_ERRORS")  # pragma: no cover


async def _runs_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RunsError)
    status, type_ = runs_error_status(exc)
    headers = None
    if isinstance(
        exc, QueueFullError | QuotaExceededError | StoreUnavailableError | RunClosingError
    ):
        headers = {"Retry-After": str(exc.retry_after_s)}
    return error_response(status, type_, exc.message, exc.details, headers)


def _quoted(text: str) -> str:
    """`text` as RFC 6750 allows an error_description: printable ASCII, no `"` nor `\\`."""
    clean = "".join(c if " " <= c <= "~" and c not in '"\\' else "'" for c in text)
    return f'"{clean}"'


def identity_answer(exc: IdentityError) -> tuple[int, str, dict[str, Any], dict[str, str]]:
    """The status, error type, details and headers of a refused credential: a Bearer
    challenge (RFC 6750) on 401 and 403, naming what failed; Retry-After on 503."""
    status, type_ = next(IDENTITY_ERRORS[k] for k in type(exc).__mro__ if k in IDENTITY_ERRORS)
    challenge = "Bearer"
    details: dict[str, Any] = {}
    if isinstance(exc, InvalidTokenError):
        details = {"problem": exc.problem.value}
        challenge += f' error="invalid_token", error_description={_quoted(exc.message)}'
    elif isinstance(exc, InsufficientScopeError):
        details = {"scope": exc.scope}
        challenge += f' error="insufficient_scope", scope={_quoted(exc.scope)}'
    if isinstance(exc, IssuerUnavailableError):
        return (
            status,
            type_,
            {"retry_after_s": exc.retry_after_s},
            {"Retry-After": str(exc.retry_after_s)},
        )
    return status, type_, details, {"WWW-Authenticate": challenge}


async def _identity_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, IdentityError)
    status, type_, details, headers = identity_answer(exc)
    return error_response(status, type_, exc.message, details, headers)


async def _api_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return error_response(exc.status, exc.type, exc.message, exc.details, exc.headers)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    type_ = STATUS_TYPES.get(exc.status_code, "http_error")
    message = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
    headers = getattr(exc, "headers", None)
    if exc.status_code == 400 and exc.__cause__ is not None:
        # FastAPI's answer to a JSON body it could not decode (not UTF-8, nested too deep):
        # malformed JSON, refused like any other
        problem = f"invalid JSON: {str(exc.__cause__)[:200]}"
        errors = [{"field": "body", "message": problem, "type": "json_invalid"}]
        return error_response(422, "validation_error", f"body: {problem}", {"errors": errors})
    if exc.status_code == 404 and message == "Not Found":
        message = f"no route {request.method} {request.url.path}"
    elif exc.status_code == 405:
        headers = {**(headers or {}), "Allow": _allowed_methods(request)}
    return error_response(exc.status_code, type_, message, headers=headers)


def _leaves(routes: Any) -> list[Any]:
    """The routes themselves, out of the routers included (included with no prefix)."""
    found: list[Any] = []
    for route in routes:
        inner = getattr(route, "original_router", None)
        found += _leaves(inner.routes) if inner is not None else [route]
    return found


REFUSING = "method_refused"
"""The name of a route that only answers 405 for its path's other methods: never allowed."""


def _allowed_methods(request: Request) -> str:
    """Every method some route of this path takes (Starlette names only the first route's).
    A path some route names literally (`/runs/compare`) is that route's alone, not also the
    templated routes' it would match (`/runs/{run_id}`)."""
    routes = [r for r in _leaves(request.app.router.routes) if getattr(r, "name", "") != REFUSING]
    methods = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")

    def takes(route: Any, method: str) -> bool:
        return bool(route.matches({**request.scope, "method": method})[0] == Match.FULL)

    matching = [r for r in routes if any(takes(r, m) for m in methods)]
    literal = [r for r in matching if not getattr(r, "param_convertors", None)]
    chosen = literal or matching
    return ", ".join(m for m in methods if any(takes(r, m) for r in chosen))


def body_too_large(cap: int) -> JSONResponse:
    message = f"the request body exceeds the server cap of {cap:,} bytes"
    return error_response(413, "payload_too_large", message, {"cap": cap})


async def _body_too_large(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, BodyTooLargeError)
    return body_too_large(exc.cap)


async def _body_timeout(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, BodyTimeoutError)
    message = f"the request body did not arrive within {exc.timeout_s:g} s"
    return error_response(408, "request_timeout", message, {"cap": exc.timeout_s})


async def _client_gone(request: Request, exc: Exception) -> JSONResponse:
    """The client closed the connection before its request body was all in: its own doing,
    logged as such (no traceback); the answer goes nowhere."""
    log.info("request_abandoned", method=request.method, path=request.url.path)
    message = "the client closed the connection before its request body arrived"
    return error_response(400, "bad_request", message)


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.exception("request_failed", path=request.url.path)
    return error_response(500, "internal", "internal server error")


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(RunsError, _runs_error)
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(IdentityError, _identity_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(BodyTooLargeError, _body_too_large)
    app.add_exception_handler(BodyTimeoutError, _body_timeout)
    app.add_exception_handler(ClientDisconnect, _client_gone)
    app.add_exception_handler(Exception, _unexpected)
