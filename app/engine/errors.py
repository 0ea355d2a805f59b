"""Every error finishline raises on purpose has one root, `FinishlineError`, defined here.

    FinishlineError
    ├── CancelRequestedError     (engine.guard) the run was asked to stop; control flow
    ├── DeadlineError            (engine.guard) a deadline passed; control flow
    ├── LLMError                 a model call failed; `retryable` says whether to try again
        ├── LLMTimeoutError      no complete answer within the call's timeout       (retryable)
        ├── LLMConnectionError   the endpoint could not be reached or hung up       (retryable)
        ├── LLMStatusError       the endpoint answered with an HTTP error status
        │                        (retryable when 408, 409, 429 or 5xx)
        ├── LLMResponseError     the endpoint answered, but not with a usable reply (not retryable)
        │   └── LLMResponseTooLargeError  its response passed the size cap; not read further
        └── ScriptExhaustedError a scripted model was called more times than it has replies
    ├── ToolError                a tool failed in a way it can explain to the model
    │   └── BlockedHostError     (tools) the network guard refused a host or an address
    ├── UnknownToolError         (tools.registry) names no registered tool has (also LookupError)
    ├── DuplicateToolError       (tools.registry) a tool name taken twice (also ValueError)
    ├── ModelUnavailableError    (llm.models) the request names a model this server lacks
    ├── RunsError                (runs.errors) what the runs layer refuses; each subclass maps
    │                            to an HTTP status in `app.api.errors` (a test checks them all)
    ├── StoreError               (runs.store) storage failed or was misused; never a client's
    │                            mistake, so it reaches the client as a 500 / failed run
    ├── IdentityError            (identity.errors) a credential refused (401, 403) or not
    │                            checkable yet (503); mapped in `app.api.errors` too
    ├── IssuerFetchError         (identity.discovery) the OIDC issuer's keys could not be fetched
    └── ApiError                 (api.errors) a refusal raised by routes and dependencies

The CLI is a separate client program: its errors descend from `app.cli.errors.CliError`.

Adapters translate their library's errors into these at the boundary
(`raise LLMTimeoutError(...) from exc`), so the engine never sees httpx or any SDK.
Exceptions carry facts; they never log.
"""

from __future__ import annotations

RETRYABLE_STATUSES = frozenset({408, 409, 429}) | frozenset(range(500, 600))


class FinishlineError(Exception):
    """Base of every error finishline raises on purpose."""


class LLMError(FinishlineError):
    """A call to the model failed."""

    retryable: bool = False
    kind: str = "llm_error"

    def __init__(self, message: str, *, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after_s = retry_after_s


class LLMTimeoutError(LLMError):
    retryable = True
    kind = "llm_timeout"


class LLMConnectionError(LLMError):
    retryable = True
    kind = "llm_connection"


class LLMStatusError(LLMError):
    kind = "llm_status"

    def __init__(self, status: int, message: str, *, retry_after_s: float | None = None) -> None:
        super().__init__(f"HTTP {status}: {message}", retry_after_s=retry_after_s)
        self.status = status
        self.retryable = status in RETRYABLE_STATUSES


class LLMResponseError(LLMError):
    kind = "llm_bad_response"


class LLMResponseTooLargeError(LLMResponseError):
    kind = "llm_response_too_large"


class ScriptExhaustedError(LLMError):
    kind = "script_exhausted"


class ToolError(FinishlineError):
    """An expected tool failure; its message is written for the model and shown to it as is.

    Any other exception a tool raises is shown as `TypeName: message`.
    """
