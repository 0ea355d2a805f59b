"""Request and response bodies of the HTTP API (the run's own shapes live in app.runs)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from app.engine.events import EventType
from app.runs.errors import InvalidRunError
from app.runs.jsonsafe import json_problem, shallow
from app.runs.spec import RunRequest
from app.runs.threads.threads import Multitask
from app.runs.threads.view import ThreadView
from app.runs.view import RunView

THREAD_ID = r"^[A-Za-z0-9._:-]{1,128}$"
FACE_THREADS = ("ag-ui:", "a2a:")
"""The ids of the threads AG-UI's threadIds and A2A's contexts are kept as."""


class RunCreate(RunRequest):
    """POST /runs: the run, plus how to answer."""

    model_config = ConfigDict(
        extra="forbid", json_schema_extra=RunRequest.model_config.get("json_schema_extra")
    )

    stream: bool = Field(
        False,
        description="Answer with the run's SSE stream itself (200 text/event-stream) instead of 202 and the run.",
    )
    on_disconnect: Literal["continue", "cancel"] = Field(
        "continue", description="With stream: what a dropped stream does to the run."
    )
    thread_id: str | None = Field(
        None,
        pattern=THREAD_ID,
        description="The thread (conversation, DESIGN §19) this run joins: its first run makes "
        "it (yours: per API key), a later one continues from its latest run (as "
        "previous_run_id does). Not with previous_run_id; `ag-ui:` and `a2a:` ids are "
        "AG-UI's and A2A's threads (continue them there).",
    )
    multitask: Multitask = Field(
        Multitask.REJECT,
        strict=False,  # its value, as JSON sends it
        description="With thread_id, while the thread's latest run has not ended: `reject` (409 "
        "thread_busy naming it), `enqueue` (this run is queued to start when it ends) or "
        "`interrupt` (this run is queued, and the thread's runs that have not ended are "
        "cancelled).",
    )

    def check_thread(self) -> None:
        """What the schema cannot say of `thread_id` and `multitask` (InvalidRunError, 422
        naming the field): not with previous_run_id; not an AG-UI or A2A thread's id;
        multitask only with a thread."""
        if self.thread_id is not None and self.previous_run_id is not None:
            raise InvalidRunError(
                "thread_id",
                "not with previous_run_id: a thread's run continues from the thread's latest",
            )
        if self.thread_id is not None and self.thread_id.startswith(FACE_THREADS):
            raise InvalidRunError(
                "thread_id",
                "ag-ui: and a2a: ids are AG-UI's threads and A2A's contexts: continue them "
                "there (GET /threads lists them)",
            )
        if self.thread_id is None and "multitask" in self.model_fields_set:
            raise InvalidRunError("multitask", "only with thread_id")

    def run_request(self) -> RunRequest:
        """The run itself, without how to answer: the validated values, not validated again."""
        run_fields = RunRequest.model_fields
        return RunRequest.model_construct(
            self.model_fields_set & run_fields.keys(),
            **{name: getattr(self, name) for name in run_fields},
        )


class _Representable(BaseModel):
    """A body refused whole when any value in it could not be stored and read back: NaN,
    Infinity (`1e400`), a lone surrogate in a string or a key, an integer past 64 bits
    (`app.runs.jsonsafe`); the error names the value's path, as for POST /runs."""

    @model_validator(mode="before")
    @classmethod
    def _representable(cls, value: Any) -> Any:
        found = json_problem(value)
        if found is not None:
            path, problem = found
            raise PydanticCustomError(
                "json_value", "{path}: {problem}", {"path": path, "problem": problem}
            )
        return value


class MessageIn(_Representable):
    """POST /runs/{id}/messages: what a person tells a live run."""

    model_config = ConfigDict(
        extra="forbid", strict=True, json_schema_extra={"examples": [{"content": "Use SI units."}]}
    )
    content: str = Field(
        min_length=1,
        description="Joins the conversation as a user message (server cap: FINISHLINE_MAX_MESSAGE_CHARS).",
    )


class DecisionIn(BaseModel):
    """A person's decision on one call the run waits on."""

    model_config = ConfigDict(extra="forbid", strict=True)
    call_id: str = Field(max_length=200, description="The call, as in `pending_approvals`.")
    run_id: str | None = Field(
        None,
        pattern=r"^run_[0-9A-Z]{26}$",
        description="The run whose call it is, as in `pending_approvals` (a sub-agent's child "
        "run, DESIGN §15); needed only when several runs of the tree wait on the same call id "
        "(409 ambiguous_call otherwise).",
    )
    approve: bool = Field(description="true: the call runs; false: the model is told it did not.")
    message: str | None = Field(
        None,
        max_length=10_000,
        description="For the model: why it was rejected (or a note with an approval).",
    )
    arguments: dict[str, Any] | None = Field(
        None,
        description="Approve with these arguments instead of the model's; checked against the "
        "tool's schema and held to a model's caps: finite numbers, text, at most "
        "FINISHLINE_MAX_REPLY_CHARS characters of JSON (422).",
    )
    result: str | None = Field(
        None,
        max_length=1_000_000,
        description="A client tool's result (`client_tools`), with approve: true: the call is "
        "not run, the model sees this as its result. Required for a client tool's approval; "
        "refused (422) on any other call.",
    )

    _shallow_arguments = field_validator("arguments", mode="before")(shallow)


class ApprovalsIn(_Representable):
    """POST /runs/{id}/approvals: decisions on some or all of the calls a run waits on."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            "examples": [
                {"decisions": [{"call_id": "call_0_0", "approve": True}]},
                {
                    "decisions": [
                        {"call_id": "call_0_0", "approve": False, "message": "Not on a Friday."}
                    ]
                },
            ]
        },
    )
    decisions: list[DecisionIn] = Field(
        min_length=1,
        max_length=256,
        description="One per call decided now; the rest stay pending (partial decisions).",
    )


class RunList(BaseModel):
    """A page of runs, newest first."""

    runs: list[RunView] = Field(description="The runs of this page.")
    next_cursor: str | None = Field(
        None, description="Pass as ?cursor= for the next (older) page; null on the last page."
    )
    unreadable: list[str] = Field(
        default_factory=list,
        description="Runs of this page left out of `runs` because their stored record does "
        "not read back (GET /runs/{id} on one answers 409 run_unreadable); usually empty.",
    )


class EventOut(BaseModel):
    """One event: the envelope, then the type's payload fields."""

    model_config = ConfigDict(extra="allow")
    run_id: str = Field(description="The run it belongs to.")
    seq: int = Field(description="1, 2, 3 … with no gaps; the SSE id.")
    type: str = Field(description=", ".join(EventType) + ".")
    ts: str = Field(description="When it was appended (ISO 8601, UTC).")
    step: int = Field(description="The step it happened in; 0 before the first.")


class EventPage(BaseModel):
    """Stored events of a run, in order."""

    events: list[EventOut] = Field(description="The events of this page.")
    next_after: int = Field(description="Pass as ?after= for the next page.")
    done: bool = Field(description="True when the page ends with the terminal event.")


class ToolInfo(BaseModel):
    """A registered tool."""

    name: str = Field(description="What a request lists in `tools`, and the model calls.")
    description: str = Field(description="What the model is told the tool does.")
    parameters: dict[str, Any] = Field(description="JSON schema of the arguments.")
    idempotent: bool = Field(
        description="False: repeated identical calls run until past the repetition threshold."
    )
    source: str = Field(
        "builtin", description="'builtin', or 'mcp:NAME' for a tool of the MCP server NAME."
    )


class AgentToolInfo(BaseModel):
    """A tool of an agent profile."""

    name: str = Field(description="The name the model calls it by.")
    description: str = Field(description="What the model is told it does.")
    parameters: dict[str, Any] | None = Field(
        description="JSON schema of its arguments; null for an MCP tool its server has not "
        "listed yet."
    )
    idempotent: bool | None = Field(
        description="False: repeated identical calls run until past the repetition threshold; "
        "null while unknown (an MCP tool not listed yet)."
    )
    source: str = Field(
        description="'builtin', 'mcp:NAME' (a tool of the MCP server NAME) or 'http' (an HTTP "
        "tool the profile declares)."
    )


class AgentInfo(BaseModel):
    """An agent profile: what a run that names it (`"agent": NAME`) gets unless it says
    otherwise."""

    name: str = Field(description="What a run names in `agent`.")
    description: str = Field(description="What the agent is for.")
    model: str = Field(description="The model its runs get.")
    tools: list[AgentToolInfo] = Field(
        description="The tools its runs may call, with their schemas (task_finished aside)."
    )
    settings: dict[str, Any] = Field(
        description="Every per-run setting as its runs get it: the profile's, else the "
        "server's default."
    )
    output_schema: dict[str, Any] | None = Field(
        None, description="The JSON schema its answers must validate against, if any."
    )
    outcome: dict[str, Any] | None = Field(
        None, description="The rubric its answers are graded against and its grader, if any."
    )
    approval_tools: list[str] = Field(
        default_factory=list, description="Its tools whose calls wait for a person's approval."
    )


class AgentList(BaseModel):
    """The agent profiles this server offers (FINISHLINE_AGENTS), by name."""

    agents: list[AgentInfo] = Field(description="Each profile, by name.")


class McpServerInfo(BaseModel):
    """A configured MCP server and the state of its session."""

    name: str = Field(description="What a request lists in `mcp_servers`; its tools' prefix.")
    transport: Literal["http", "stdio"] = Field(description="Streamable HTTP, or a child process.")
    state: Literal["connecting", "connected", "reconnecting", "closed"] = Field(
        description="connecting (never connected yet), connected, reconnecting (down, retried "
        "with backoff), closed (shutting down)."
    )
    error: str | None = Field(None, description="Why the last attempt or session failed.")
    tools: int = Field(description="How many of its tools are offered (last listing).")


class StreamToken(BaseModel):
    """A short-lived token for one run's events."""

    token: str = Field(description="Use as ?token= on the run's events URL.")
    expires_at: int = Field(description="Epoch seconds.")
    events_url: str = Field(description="The run's events URL with the token, for EventSource.")


class SettingInfo(BaseModel):
    """One per-run setting on this server."""

    default: Any = Field(description="The value a run gets when its request omits it.")
    cap: Any = Field(None, description="The largest value a request may ask for; null = none.")
    description: str = Field(description="What the setting does.")
    kind: Literal["integer", "number", "boolean", "choice"] = Field(
        description="The value's type; a choice is one of `choices`."
    )
    choices: list[str] | None = Field(None, description="The allowed values of a choice.")
    minimum: float | None = Field(
        None, description="The lower bound (timeouts must be above it, others at least it)."
    )


class ServerInfo(BaseModel):
    """What this server offers a run."""

    settings: dict[str, SettingInfo] = Field(
        description="Every per-run setting with its default and cap."
    )
    default_model: str = Field(description="The model a run gets when it names none.")
    models: list[str] = Field(
        description="Model names this server offers by name (an endpoint accepts others too)."
    )
    auth: bool = Field(description="Whether requests need an API key or an access token.")


class Health(BaseModel):
    """A health probe's answer."""

    status: str = Field(description="ok, ready, draining or unavailable.")
    detail: str | None = Field(None, description="Why it is not ready.")


class QuotaUse(BaseModel):
    """One quota of the caller's key."""

    limit: float = Field(description="The quota (FINISHLINE_QUOTA_*).")
    used: float = Field(
        description="What the key holds or spent of it now: its unended runs, its runs of "
        "the last 60 s, or today's tokens or USD."
    )
    left: float = Field(description="limit - used, at least 0.")


class UsageView(BaseModel):
    """GET /usage: the caller's API key's figures for today (UTC) and its quotas."""

    day: str = Field(description="The UTC day the figures count, YYYY-MM-DD.")
    key_id: str = Field(
        description="The start of the key's id (a digest of the key, never the key; for an "
        "access token's owner, `oidc:` and a digest of who the token says it is): the "
        "`key` label of the per-key metrics when the server counts them; `none` with auth off."
    )
    runs: int = Field(description="Runs the key started today.")
    llm_calls: int = Field(description="LLM calls its runs made today.")
    prompt_tokens: int = Field(description="Prompt tokens of today's calls.")
    completion_tokens: int = Field(description="Completion tokens of today's calls.")
    total_tokens: int = Field(description="prompt_tokens + completion_tokens.")
    cost_usd: float = Field(
        description="USD of today's priced calls (calls of a model without a price are not in "
        "it: see unpriced_calls)."
    )
    unpriced_calls: int = Field(description="Today's calls of a model with no known price.")
    quotas: dict[str, QuotaUse] = Field(
        description="Each quota the server sets, by name (concurrent_runs, runs_per_minute, "
        "tokens_per_day, cost_usd_per_day); empty when it sets none."
    )


class ThreadList(BaseModel):
    """A page of threads, most recently changed first."""

    threads: list[ThreadView] = Field(description="The threads of this page.")
    next_cursor: str | None = Field(
        None, description="Pass as ?cursor= for the next page; null on the last page."
    )


class ThreadRunList(BaseModel):
    """A page of a thread's runs, oldest first."""

    runs: list[RunView] = Field(description="The runs of this page (those still stored).")
    next_cursor: str | None = Field(
        None, description="Pass as ?cursor= for the next page; null on the last page."
    )


class ThreadPatch(_Representable):
    """PATCH /threads/{id}: what changes."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={"examples": [{"metadata": {"topic": "tax"}}]},
    )
    metadata: dict[str, Any] = Field(description="Replaces the thread's metadata whole.")

    _shallow_metadata = field_validator("metadata", mode="before")(shallow)
