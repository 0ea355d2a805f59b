"""finishline's refusals as A2A errors (JSON-RPC error objects, built by the SDK).

The type of each comes from the one error map (`app.api.errors`, what POST /runs answers) and
goes in the error's data (`{"type", ...details}`: the field, the cap, the run id), so an A2A
client reads the same facts as an HTTP one. The A2A error class follows the HTTP status:
404 -> TaskNotFoundError, 422 -> InvalidParamsError (each problem in `errors`), 409 ->
UnsupportedOperationError (TaskNotCancelableError for a cancel), 400 -> InvalidRequestError;
A2A 1.0 has no code for a full queue, a key at its quota or a server shutting down (429,
503): those are InternalError, with `type` (and `retry_after_s`; a quota's `quota`, `limit`
and `used`) in the data.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from a2a.utils.errors import (
    A2AError,
    InternalError,
    InvalidParamsError,
    InvalidRequestError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from fastapi.exceptions import RequestValidationError

from app.api.errors import runs_error_status, validation_problems
from app.runs.errors import InvalidRunError, RunsError

BY_STATUS: dict[int, type[A2AError]] = {
    400: InvalidRequestError,
    404: TaskNotFoundError,
    409: UnsupportedOperationError,
    422: InvalidParamsError,
}


def a2a_error(exc: RunsError, *, cancelling: bool = False) -> A2AError:
    status, type_ = runs_error_status(exc)
    data: dict[str, Any] = {"type": type_, **exc.details}
    if isinstance(exc, InvalidRunError):
        message = exc.message.removeprefix(f"{exc.field}: ")
        data["errors"] = [{"field": exc.field, "message": message}]
    kind = TaskNotCancelableError if cancelling and status == 409 else BY_STATUS.get(status)
    return (kind or InternalError)(exc.message, data=_json(data))


def invalid_params(exc: RequestValidationError, where: Any = None) -> InvalidParamsError:
    """A refused body (the run's configuration): each problem named where the A2A request
    holds it (`where(field)`)."""
    problems = validation_problems(exc)
    for problem in problems:
        if where is not None:
            problem["field"] = where(problem["field"])
    summary = "; ".join(f"{p['field']}: {p['message']}" for p in problems) or "invalid request"
    data = {"type": "validation_error", "errors": problems}
    return InvalidParamsError(summary, data=_json(data))


def _json(data: dict[str, Any]) -> dict[str, Any]:
    """`data` with only JSON values (a detail may hold a tuple or a set)."""
    return {k: (sorted(v) if isinstance(v, set | frozenset) else v) for k, v in data.items()}


@contextmanager
def translated(*, cancelling: bool = False) -> Iterator[None]:
    """Raise a runs-layer refusal inside as its A2A error."""
    try:
        yield
    except RunsError as exc:
        raise a2a_error(exc, cancelling=cancelling) from None
