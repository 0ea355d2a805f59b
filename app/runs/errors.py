"""What the runs layer refuses, and why. `app.api.errors` maps each to an HTTP status."""

from __future__ import annotations

from typing import Any

from app.engine.errors import FinishlineError


class RunsError(FinishlineError):
    """Base of the runs layer's refusals."""

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details


class InvalidRunError(RunsError):
    """The request is well-formed but not acceptable here (a cap, an allow-list, a name)."""

    def __init__(self, field: str, message: str, **details: Any) -> None:
        super().__init__(f"{field}: {message}", field=field, **details)
        self.field = field


class RunNotFoundError(RunsError):
    """No such run, or not visible to this caller."""


class RunNotEndedError(RunsError):
    """The operation needs a terminal run."""


class RunClosingError(RunsError):
    """The run has ended, and its task here is still storing its end or closing."""

    def __init__(self, message: str, retry_after_s: int, **details: Any) -> None:
        super().__init__(message, retry_after_s=retry_after_s, **details)
        self.retry_after_s = retry_after_s


class RunAlreadyEndedError(RunsError):
    """The operation needs a run that has not ended."""


class IdempotencyConflictError(RunsError):
    """The idempotency key was used before with a different request body."""


class QueueFullError(RunsError):
    """Every run slot is busy and the queue is full."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message, retry_after_s=retry_after_s)
        self.retry_after_s = retry_after_s


class TooManyMessagesError(RunsError):
    """The run holds as many undelivered steering messages as the server allows."""


class ShuttingDownError(RunsError):
    """The server is draining and takes no new runs."""


class StoreUnavailableError(RunsError):
    """The store does not answer, or refuses writes for now (Redis stopped, restarting,
    paused or at its `maxmemory`): the request may succeed once it is back. Raised at the
    store's boundary in place of its client's errors (`app.runs.stores.redis_errors`)."""

    def __init__(self, message: str, retry_after_s: int = 2) -> None:
        super().__init__(message, retry_after_s=retry_after_s)
        self.retry_after_s = retry_after_s


class ThreadBusyError(RunsError):
    """The thread's latest run has not ended, and the request would not wait for it
    (`multitask: reject`, DESIGN §19): its id is `run_id`."""


class ThreadNotFoundError(RunNotFoundError):
    """No such thread, or not this caller's (DESIGN §19)."""


class ScheduleNotFoundError(RunNotFoundError):
    """No such schedule, or not this caller's (DESIGN §21)."""


class RunNotWaitingError(RunsError):
    """The run is not waiting for a decision on that call (DESIGN §9)."""


class AmbiguousCallError(RunsError):
    """A decision names a call id that several runs of a tree wait on, without `run_id`
    (DESIGN §15): which call it decides is not known."""


class RunUnreadableError(RunsError):
    """The run is stored but does not read back as a run (a row written by hand, or by a
    version with a bug since fixed): that run alone cannot be served, until an operator
    repairs or removes it. `owner` is the owner the store keeps beside the record (the
    caller may see the run only if it is theirs)."""

    def __init__(self, run_id: str, problem: str, *, owner: str | None = None) -> None:
        super().__init__(
            f"run {run_id!r} is stored but cannot be read back ({problem}); an operator must "
            "repair or delete its record",
            run_id=run_id,
            problem=problem,
        )
        self.run_id = run_id
        self.problem = problem
        self.owner = owner


class QuotaExceededError(RunsError):
    """The caller's API key is at one of its quotas (DESIGN §13): `quota` names it, `limit`
    is the quota, `used` what the key holds or spent of it; `retry_after_s` says when to
    try again (the day's end for a day quota)."""

    def __init__(self, quota: str, limit: float, used: float, retry_after_s: int) -> None:
        super().__init__(
            f"quota {quota} exceeded: {used:g} of {limit:g} used; try again in {retry_after_s} s",
            quota=quota,
            limit=limit,
            used=used,
            retry_after_s=retry_after_s,
        )
        self.quota = quota
        self.retry_after_s = retry_after_s
