"""What a run produces, step by step: one value per fact, one union type.

Each step knows its event type (`type`) and renders its own payload; `Checkpoint` is not an
event but the state a run could resume from.

The values made every step (events, `Checkpoint`) are immutable by contract but not
`frozen=True`: a frozen dataclass sets each field through `object.__setattr__`, which made a
13-field `Observation` cost 1.1 µs to build instead of 0.4 (bench/README.md, "Engine, round
2"). Nothing may assign to them after construction; the per-run values stay frozen.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from app.engine.events import EventType
from app.engine.pending import PendingCall
from app.engine.policies import InterventionKind, StopReason
from app.engine.ports import OutputError


@dataclass(frozen=True, slots=True)
class RunUsage:
    """What a run has spent so far. With sub-agents (DESIGN §15) the totals include what its
    child runs spent, and `children` is that part (`steps` excepted: a run's own turns)."""

    steps: int = 0
    llm_calls: int = 0
    tool_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = 0.0
    """USD; None once a call's model had no known price (a partial sum would understate)."""
    children: RunUsage | None = None
    """The part of the totals the run's child runs spent (their steps summed); None: none."""

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def to_dict(self) -> dict[str, Any]:
        figures: dict[str, Any] = {
            "steps": self.steps,
            "llm_calls": self.llm_calls,
            "tool_calls": self.tool_calls,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
            "cost_usd": self.cost_usd,
        }
        if self.children is not None:
            figures["children"] = self.children.to_dict()
        return figures


@dataclass(frozen=True, slots=True)
class RunError:
    """Why a run failed: a stable `type` for programs, a `message` for people."""

    type: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"type": self.type, "message": self.message}


_PAYLOAD_FIELDS: dict[type, tuple[str, ...]] = {}
"""Per event class, the names of its payload fields (`dataclasses.fields` is slow per call)."""


class _Event:
    """Mixin: the payload of an event is every field but `step` (and but a field whose
    metadata says `event: False`, engine-only, as `Action.repeatable`). The events of every step
    spell theirs out (a dict display costs a third of the generic comprehension);
    tests/engine/test_steps.py holds each to its fields."""

    __slots__ = ()
    type: ClassVar[EventType]

    def payload(self) -> dict[str, Any]:
        names = _PAYLOAD_FIELDS.get(type(self))
        if names is None:
            # every subclass is a dataclass; the mixin itself cannot say so to the checker
            names = tuple(
                f.name
                for f in fields(self)  # type: ignore[arg-type]
                if f.name != "step" and f.metadata.get("event", True)
            )
            _PAYLOAD_FIELDS[type(self)] = names
        return {name: getattr(self, name) for name in names}


@dataclass(slots=True)
class StepStarted(_Event):
    type: ClassVar[EventType] = EventType.STEP_STARTED
    step: int
    max_steps: int

    def payload(self) -> dict[str, Any]:
        return {"max_steps": self.max_steps}


@dataclass(slots=True)
class Thought(_Event):
    type: ClassVar[EventType] = EventType.THOUGHT
    step: int
    text: str

    def payload(self) -> dict[str, Any]:
        return {"text": self.text}


@dataclass(slots=True)
class TokenDelta(_Event):
    type: ClassVar[EventType] = EventType.TOKEN
    step: int
    delta: str


@dataclass(slots=True)
class LLMCalled(_Event):
    """One model call that returned. `final` marks the degraded final-answer call;
    `cost_usd` is None when the model has no known price, `cached_tokens` part of the prompt."""

    type: ClassVar[EventType] = EventType.LLM_CALL
    step: int
    model: str
    duration_ms: int
    prompt_tokens: int
    completion_tokens: int
    estimated: bool
    tool_calls: int
    final: bool = False
    cached_tokens: int = 0
    cost_usd: float | None = 0.0

    def payload(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "duration_ms": self.duration_ms,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "estimated": self.estimated,
            "tool_calls": self.tool_calls,
            "final": self.final,
            "cached_tokens": self.cached_tokens,
            "cost_usd": self.cost_usd,
        }


@dataclass(slots=True)
class LLMRetry(_Event):
    type: ClassVar[EventType] = EventType.LLM_RETRY
    step: int
    attempt: int
    error: str
    delay_s: float


@dataclass(slots=True)
class Action(_Event):
    """A tool call. `arguments` is the parsed JSON object, or the raw text if it did not parse."""

    type: ClassVar[EventType] = EventType.ACTION
    step: int
    call_id: str
    tool: str
    arguments: Any
    repeatable: bool = field(default=False, metadata={"event": False})
    """The call may run again without harm (an idempotent tool; not a sub-agent), or will not
    run at all: nothing orders its event's commit before the call. Not in the event."""

    def payload(self) -> dict[str, Any]:
        return {"call_id": self.call_id, "tool": self.tool, "arguments": self.arguments}


@dataclass(slots=True)
class Observation(_Event):
    """A tool result. `content` is the whole result (what a person sees); `model_content` is
    what the model was shown when that differs (truncated, with the note)."""

    type: ClassVar[EventType] = EventType.OBSERVATION
    step: int
    call_id: str
    tool: str
    content: str
    is_error: bool = False
    truncated: bool = False
    original_chars: int = 0
    shown_chars: int = 0
    duration_ms: int = 0
    repeated: bool = False
    timed_out: bool = False
    model_content: str | None = None

    def payload(self) -> dict[str, Any]:
        return {
            "call_id": self.call_id,
            "tool": self.tool,
            "content": self.content,
            "is_error": self.is_error,
            "truncated": self.truncated,
            "original_chars": self.original_chars,
            "shown_chars": self.shown_chars,
            "duration_ms": self.duration_ms,
            "repeated": self.repeated,
            "timed_out": self.timed_out,
            "model_content": self.model_content,
        }


@dataclass(slots=True)
class AgentStarted(_Event):
    """A sub-agent call started its child run (DESIGN §15), or re-attached to the one it
    started before an interruption. `child_run_id` is None for a remote A2A agent."""

    type: ClassVar[EventType] = EventType.AGENT_STARTED
    step: int
    call_id: str
    agent: str
    child_run_id: str | None


@dataclass(slots=True)
class AgentFinished(_Event):
    """A sub-agent call's child run ended: its status and reason (the observation follows)."""

    type: ClassVar[EventType] = EventType.AGENT_FINISHED
    step: int
    call_id: str
    agent: str
    child_run_id: str | None
    status: str
    reason: str | None


@dataclass(slots=True)
class Intervention(_Event):
    type: ClassVar[EventType] = EventType.INTERVENTION
    step: int
    kind: InterventionKind
    message: str

    def payload(self) -> dict[str, Any]:
        return {"kind": self.kind, "message": self.message}


@dataclass(slots=True)
class OutcomeGraded(_Event):
    """The grader's verdict on an answer (DESIGN §22). `revision`: the answer's number after
    the first (0: the first answer); `final`: the degraded final answer at a limit, graded
    once for the record (the run ends either way); `valid`: False when the grader gave no
    valid verdict after its retries (counted unmet)."""

    type: ClassVar[EventType] = EventType.OUTCOME_GRADED
    step: int
    satisfied: bool
    feedback: str
    revision: int
    final: bool = False
    valid: bool = True


@dataclass(slots=True)
class UserMessage(_Event):
    """A person's message (steering) joined the conversation, right before an LLM call.
    `delivered` is False for one that came after the run's last LLM call (logged, not seen)."""

    type: ClassVar[EventType] = EventType.USER_MESSAGE
    step: int
    content: str
    delivered: bool = True


@dataclass(slots=True)
class ApprovalRequested(_Event):
    """A call of a tool that needs a person's approval: not executed; the run will wait."""

    type: ClassVar[EventType] = EventType.APPROVAL_REQUESTED
    step: int
    call_id: str
    tool: str
    arguments: Any


@dataclass(frozen=True, slots=True)
class Suspended:
    """The run waits for a person to decide `pending` (DESIGN §9). Not an event and not an
    end: the generator stops here, after a checkpoint; `run_react(state=…, decisions=…)`
    resumes it."""

    step: int
    pending: tuple[PendingCall, ...]


@dataclass(slots=True)
class Checkpoint:
    """The run's resumable state after a step (messages, usage, counters). Not an event."""

    step: int
    state: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Finished:
    """The one way a run ends. With an output schema (DESIGN §12): `output` is the answer's
    validated value (`answer` its JSON text); `output_errors` why the answer did not validate
    (None when it did, or when there is no schema or no answer)."""

    step: int
    reason: StopReason
    answer: str | None
    degraded: bool
    usage: RunUsage
    error: RunError | None = None
    output: Any = None
    output_errors: tuple[OutputError, ...] | None = None


Step = (
    StepStarted
    | Thought
    | TokenDelta
    | LLMCalled
    | LLMRetry
    | Action
    | Observation
    | AgentStarted
    | AgentFinished
    | Intervention
    | OutcomeGraded
    | UserMessage
    | ApprovalRequested
    | Suspended
    | Checkpoint
    | Finished
)
