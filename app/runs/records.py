"""What is stored: a run's record and its events."""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, no_type_check

from pydantic import (
    BaseModel,
    Field,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    ValidatorFunctionWrapHandler,
    field_serializer,
    model_serializer,
    model_validator,
)

from app.engine.events import TERMINAL_EVENT_TYPES, EventType
from app.engine.policies import Limits, StopReason
from app.runs.follow.wiretime import wire_ts
from app.runs.spec import RunRequest

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_last_id = 0
_id_lock = threading.Lock()


def request_hash(request: RunRequest) -> str:
    """The digest of a request's body, kept on its run (`request_hash`): an Idempotency-Key
    replayed with another body is refused. In proportion to the request's size."""
    body = json.dumps(request.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(body.encode()).hexdigest()


def new_run_id() -> str:
    """`run_` + a ULID: 48 bits of milliseconds then 80 random bits, so ids sort by time.

    Monotonic within the process (ULID's monotonic mode): an id made in the same millisecond
    as the previous one is that one plus one, so runs list in creation order."""
    global _last_id
    value = (time.time_ns() // 1_000_000) << 80 | int.from_bytes(os.urandom(10), "big")
    with _id_lock:
        value = _last_id = max(value, _last_id + 1)
    return _run_id(value)


def run_id_at(seconds: float) -> str:
    """The least run id of the millisecond `seconds` (epoch) falls in: every id made before
    it sorts before it."""
    return _run_id(int(seconds * 1000) << 80)


def _run_id(value: int) -> str:
    chars = []
    for _ in range(26):
        value, digit = divmod(value, 32)
        chars.append(_CROCKFORD[digit])
    return "run_" + "".join(reversed(chars))


def utcnow() -> datetime:
    return datetime.now(UTC)


class RunStatus(StrEnum):
    """Where a run is: queued, running, waiting for a person, or how it ended."""

    QUEUED = "queued"
    RUNNING = "running"
    REQUIRES_ACTION = "requires_action"  # waiting for a person's approval (DESIGN §9)
    COMPLETED = "completed"  # finished or answered
    INCOMPLETE = "incomplete"  # a limit ended it; the result may hold a degraded answer
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self not in (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.REQUIRES_ACTION)


ACTIVE_STATUSES = (RunStatus.QUEUED, RunStatus.RUNNING)
"""Runs a task executes or will: a crash interrupts them. A waiting run holds no task."""


def status_for(reason: StopReason) -> RunStatus:
    if reason in (StopReason.FINISHED, StopReason.ANSWERED):
        return RunStatus.COMPLETED
    if reason == StopReason.CANCELLED:
        return RunStatus.CANCELLED
    if reason == StopReason.ERROR:
        return RunStatus.FAILED
    return RunStatus.INCOMPLETE


TERMINAL_EVENTS = {
    RunStatus.COMPLETED: EventType.RUN_COMPLETED,
    RunStatus.INCOMPLETE: EventType.RUN_INCOMPLETE,
    RunStatus.FAILED: EventType.RUN_FAILED,
    RunStatus.CANCELLED: EventType.RUN_CANCELLED,
}


class OutputErrorInfo(BaseModel):
    """One way an answer failed the run's output_schema."""

    path: str = Field(description="Where, as a JSON path: `$` is the answer, `$.items[0]` in it.")
    message: str = Field(description="What is wrong there.")


class RunResult(BaseModel):
    """How a run ended: its answer, if any, and the one reason. `output` and `output_errors`
    are there for a run with an output_schema only (both, null where there is none): without
    one, the result is what it always was."""

    answer: str | None = Field(
        description="The final answer; null when the run produced none. With output_schema: "
        "the JSON text of `output` (or of the answer that failed the schema)."
    )
    output: Any = Field(
        None,
        description="With output_schema: the answer's value, validated against the schema; "
        "null when the run has no schema, no answer, or one that did not validate.",
    )
    output_errors: list[OutputErrorInfo] | None = Field(
        None,
        description="With output_schema: why the answer did not validate (each error's JSON "
        "path and message; at most 50); null when it did or there was none.",
    )
    reason: StopReason = Field(description="Why the run ended.")
    degraded: bool = Field(
        description="True when the answer did not come through the normal ending: a best "
        "answer asked for at a limit, the last reply when the model ignored the stop prompts, "
        "or the last answer that failed the output schema (invalid_output)."
    )
    _typed: bool = PrivateAttr(False)
    """The run has an output schema: `output` and `output_errors` are shown (and stored)."""

    @model_validator(mode="wrap")
    @classmethod
    def _typed_when_given(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> RunResult:
        result: RunResult = handler(data)
        if isinstance(data, dict) and ("output" in data or "output_errors" in data):
            result._typed = True
        return result

    @model_serializer(mode="wrap")
    @no_type_check  # no return annotation: the schema of what is answered is then the fields'
    def _output_when_typed(self, handler: SerializerFunctionWrapHandler):
        data = handler(self)
        if not self._typed and isinstance(data, dict):
            data.pop("output", None)
            data.pop("output_errors", None)
        return data


class RunErrorInfo(BaseModel):
    """Why a run failed."""

    type: str = Field(description="Stable error type, e.g. llm_status, interrupted, internal.")
    message: str = Field(description="What went wrong, for people.")


class UsageFigures(BaseModel):
    """What runs spent: the figures of `Usage`, and of its `children` part."""

    steps: int = Field(0, description="Loop turns (LLM calls, the degraded final call excepted).")
    llm_calls: int = Field(0, description="LLM calls that returned, the final call included.")
    tool_calls: int = Field(0, description="Tool calls the model made (task_finished excepted).")
    prompt_tokens: int = Field(0, description="Prompt tokens (the provider's, else estimated).")
    completion_tokens: int = Field(
        0, description="Completion tokens (the provider's, else estimated)."
    )
    total_tokens: int = Field(0, description="prompt_tokens + completion_tokens.")
    cost_usd: float | None = Field(
        0.0,
        description="What the LLM calls cost in USD, the final call included; null when a "
        "call's model has no known price (see docs/guides/budgets.md, What a run costs).",
    )

    @model_validator(mode="before")
    @classmethod
    def _stored_before_costs(cls, data: Any) -> Any:
        """A run stored before costs were kept: the cost of its calls is unknown."""
        if isinstance(data, dict) and "cost_usd" not in data and data.get("llm_calls"):
            return {**data, "cost_usd": None}
        return data


class Usage(UsageFigures):
    """What a run spent. With sub-agents, every figure but `steps` (the run's own turns)
    includes what its child runs spent, and `children` is that part."""

    children: UsageFigures | None = Field(
        None,
        description="The part of these figures spent by the run's sub-agents' child runs "
        "(their own children's included; `steps`: theirs summed); null when it started none "
        "that ended.",
    )


class WebhookAttempt(BaseModel):
    """One delivery attempt of a run's webhook."""

    at: datetime = Field(description="When the attempt was made.")
    status_code: int | None = Field(None, description="HTTP status, or null when no answer.")
    error: str | None = Field(None, description="Why the attempt failed; null when delivered.")


class WebhookState(BaseModel):
    """Delivery of the run, as JSON, to the webhook once it ends."""

    url: str = Field(description="Where the run is POSTed.")
    delivered: bool = Field(False, description="True once an attempt got a 2xx answer.")
    attempts: list[WebhookAttempt] = Field(
        default_factory=list, description="Every attempt, oldest first."
    )


class PendingApproval(BaseModel):
    """A tool call waiting for a person's decision."""

    call_id: str = Field(description="The call's id, as in its action event.")
    tool: str = Field(description="The tool the model called.")
    arguments: dict[str, Any] = Field(description="The arguments the model gave.")
    requested_at: datetime = Field(description="When the run began waiting on it.")
    run_id: str | None = Field(
        None,
        description="The run whose call it is when not this one: a sub-agent's child run "
        "(or its own child), which this run waits on (DESIGN §15). A decision on either run "
        "reaches it.",
    )
    agent_call_id: str | None = Field(
        None, description="With run_id: this run's sub-agent call that waits on it."
    )

    @property
    def key(self) -> tuple[str | None, str]:
        """What names the call within a tree of runs: its run (None: this one) and id."""
        return self.run_id, self.call_id


class ApprovalDecision(BaseModel):
    """A person's decision on a pending call, kept until the run resumes."""

    call_id: str
    approved: bool
    message: str | None = None
    arguments: dict[str, Any] | None = None
    result: str | None = None
    """A client tool's result, sent by the client (`client_tools`): the call's observation."""
    run_id: str | None = None
    """The run whose call it is, when not the one decided on (a sub-agent's, DESIGN §15)."""

    @property
    def key(self) -> tuple[str | None, str]:
        return self.run_id, self.call_id


class ApprovalState(BaseModel):
    """What a run waiting for a person holds (DESIGN §9); null on a run that waits on none."""

    pending: list[PendingApproval] = Field(default_factory=list)
    """Every call the run waits on, decided or not, in call order."""
    decided: list[ApprovalDecision] = Field(default_factory=list)
    waiting_since: datetime
    held_messages: list[str] = Field(default_factory=list)
    """Steering messages sent while it waits: delivered when it resumes."""
    requeued_at: datetime | None = None
    """When the last decision queued it again: from then on its time counts (max_time_s)."""
    elapsed_s: float = 0.0
    """Running time the run had used when it began to wait (its checkpoint's)."""

    def undecided(self) -> list[PendingApproval]:
        done = {d.key for d in self.decided}
        return [p for p in self.pending if p.key not in done]


class TreeLink(BaseModel):
    """Where a child run sits in its tree (DESIGN §15)."""

    root_run_id: str
    """The tree's root: the run a request started. Its runs count against
    FINISHLINE_MAX_AGENT_RUNS together."""
    depth: int
    """1 for the root's children, 2 for theirs …"""
    step: int
    """The parent's step of the call: with the call's id, what names the child."""
    carved: list[str] = Field(default_factory=list)
    """The settings the parent's budget bounded below the child's own (max_time_s,
    max_total_tokens, max_cost_usd): a child that ends on one of those budgets ends its
    parent with the same reason."""


class ForkedFrom(BaseModel):
    """The run a fork (DESIGN §20, POST /runs/{id}/fork) started from, and the step."""

    run_id: str = Field(description="The run forked.")
    step: int = Field(description="Its step the fork started at (the conversation before it).")


class RunRecord(BaseModel):
    """A run as stored. `request` is what the client asked for (with its agent profile's values
    where it named one and gave none: what the run is made of); `settings` what it resolved to
    (every per-run setting, the server's default where the request named none).

    Stored as JSON: `request` without its null fields, as sent; `settings` as an object of
    every setting (see `app.engine.policies.Limits`). On load, a stored setting the engine no
    longer knows is ignored, and one it added since takes its default."""

    id: str
    owner: str | None = None
    status: RunStatus = RunStatus.QUEUED
    created_at: datetime = Field(default_factory=utcnow)
    started_at: datetime | None = None
    ended_at: datetime | None = None
    request: RunRequest
    model: str
    settings: Limits
    result: RunResult | None = None
    error: RunErrorInfo | None = None
    usage: Usage = Field(default_factory=Usage)
    webhook: WebhookState | None = None
    idempotency_key: str | None = None
    request_hash: str | None = None
    previous_run_id: str | None = None
    """The run this one follows up on (its conversation is where this one starts)."""
    inherited_system_prompt: str | None = None
    """A follow-up without a system prompt of its own runs with its previous run's."""
    approval: ApprovalState | None = None
    """Set while the run waits for a person, and until it resumes with the decisions."""
    parent_run_id: str | None = None
    """A sub-agent's child run: the run whose call started it (DESIGN §15)."""
    parent_call_id: str | None = None
    """That run's call (a call of the sub-agent's tool)."""
    tree: TreeLink | None = None
    """A child run's place in its tree of runs; None for a run started by a request."""
    thread_id: str | None = None
    """The thread (DESIGN §19) whose run it is: POST /runs' `thread_id`, `ag-ui:THREAD` for
    an AG-UI turn's, `a2a:AGENT:CONTEXT` for an A2A task's; None for a run of no thread."""
    schedule_id: str | None = None
    """The schedule whose firing started it (DESIGN §21); None for a run a request started."""

    @property
    def system_prompt(self) -> str | None:
        """The system prompt the run runs with: its request's, else the inherited one."""
        return self.request.system_prompt or self.inherited_system_prompt

    @field_serializer("request")
    def _request_as_sent(self, request: RunRequest) -> dict[str, Any]:
        return request.model_dump(mode="json", exclude_none=True)

    trace_id: str | None = None
    forked_from: ForkedFrom | None = None
    """A fork's origin: the run and step whose conversation it started from."""


@dataclass(frozen=True, slots=True)
class Event:
    """One entry of a run's append-only event log. `seq` is 1, 2, 3 … with no gaps."""

    run_id: str
    seq: int
    type: EventType
    ts: float
    step: int
    data: dict[str, Any] = field(default_factory=dict)
    raw: str | None = field(default=None, compare=False, repr=False)
    """`data` as the store keeps it (compact JSON), when the event was read from it: the SSE
    frame is made from it (`app.api.routes.events.sse_frames`) instead of a second encoding."""

    @property
    def terminal(self) -> bool:
        return self.type in TERMINAL_EVENT_TYPES

    def to_dict(self) -> dict[str, Any]:
        """The wire form: envelope fields, then the payload."""
        return {
            "run_id": self.run_id,
            "seq": self.seq,
            "type": self.type,
            "ts": wire_ts(self.ts),
            "step": self.step,
            **self.data,
        }
