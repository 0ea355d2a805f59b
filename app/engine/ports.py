"""What the engine needs from the outside world, as Protocols and plain values.

The engine speaks the OpenAI Chat Completions message format (`Message`), the lingua franca
of tool-calling models; adapters in `app.llm` translate anything else at their boundary.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, cast, runtime_checkable

Message = dict[str, Any]
"""One chat message: {"role": "system"|"user"|"assistant"|"tool", "content": ..., ...}."""

DeltaSink = Callable[[str], None]
"""Receives text fragments as a streaming model produces them."""


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call as the model wrote it. `arguments` is the raw JSON text, maybe invalid."""

    id: str
    name: str
    arguments: str
    oversize: int = 0
    """The length of arguments over the run's cap, dropped (`arguments` then only says so):
    the call does not run (app.engine.replycap). 0: the arguments are whole."""


@dataclass(frozen=True, slots=True)
class TokenUsage:
    """Tokens of one model call; `estimated` when the provider reported none."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    estimated: bool = False
    cached_tokens: int = 0
    """Of `prompt_tokens`, those the provider served from its prompt cache (billed lower)."""

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True, slots=True)
class Rates:
    """USD per million tokens (and per call), in one tier of a `Price`."""

    input: float
    output: float
    cached_input: float
    per_call: float = 0.0
    """USD per request, on top of the tokens (a few providers charge one)."""


@dataclass(frozen=True, slots=True)
class Price:
    """What one model's calls cost. Resolved once per run (`app.llm.pricing`), so pricing a
    call is a few multiplications, in the engine, with no price data at hand.

    `tiers` are (prompt tokens, rates), ascending: a call whose prompt has more tokens than a
    tier's start pays that tier's rates on all its tokens (the providers' cliff pricing)."""

    rates: Rates
    tiers: tuple[tuple[int, Rates], ...] = ()

    def rates_for(self, prompt_tokens: int) -> Rates:
        for start, rates in reversed(self.tiers):
            if prompt_tokens > start:
                return rates
        return self.rates

    def cost(self, usage: TokenUsage) -> float:
        """USD of one call: uncached and cached input, output, and the per-call fee."""
        prompt, cached = usage.prompt_tokens, usage.cached_tokens
        r = self.rates_for(prompt) if self.tiers else self.rates
        tokens = (prompt - cached) * r.input + cached * r.cached_input
        return (tokens + usage.completion_tokens * r.output) / 1_000_000 + r.per_call

    def prompt_cost(self, prompt_tokens: int) -> float:
        """USD of a prompt of `prompt_tokens` at the input rate (the cost budget's look-ahead)."""
        r = self.rates_for(prompt_tokens) if self.tiers else self.rates
        return prompt_tokens * r.input / 1_000_000


FREE = Price(Rates(0.0, 0.0, 0.0))
"""The price of a model that costs nothing: the scripted and demo models, unless priced."""


@dataclass(frozen=True, slots=True)
class Allowance:
    """What the run's API key may still spend today across all its runs: what its day
    quotas leave (DESIGN §13). None where the key has no such quota; at 0 or below, the day
    is spent and the run ends as at its own budget."""

    tokens: int | None = None
    cost_usd: float | None = None


Allowances = Callable[[], Allowance]
"""Read at each budget check of a run: what its key may still spend today, as the runs layer
knows it then (its store's day counters; `app.runs.quotas`)."""


@dataclass(frozen=True, slots=True)
class Reply:
    """What one model call returned."""

    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    usage: TokenUsage | None = None
    finish_reason: str | None = None


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """What the model is told about a tool: rendered as an OpenAI `function` tool."""

    name: str
    description: str
    parameters: Mapping[str, Any]

    def to_openai(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": dict(self.parameters),
            },
        }


@runtime_checkable
class ChatModel(Protocol):
    """A chat model with native tool calls.

    `complete` raises only `app.engine.errors.LLMError` subclasses for failures the caller
    may retry or report; anything else is a bug. With `on_delta`, a model that can stream
    calls it with each text fragment as it arrives, then still returns the whole `Reply`.
    `force_tool` names one of `tools` the reply must call (a planning call's `update_plan`):
    a model that can be forced is (OpenAI's `tool_choice`); one that cannot answers as it
    likes, and the engine, which asks in the prompt too, copes with a reply without it.
    `answer_schema` is a JSON Schema the reply's text must match when the reply is an answer
    (a run's `output_schema`, DESIGN §12): a model that can be asked is (OpenAI's
    `response_format: json_schema`); one that cannot answers as it likes, and the engine, which
    gives the schema in the prompt too, validates what it gets.
    `price` is what its calls cost; None when unknown (their cost is then null, never a guess).
    """

    name: str
    price: Price | None

    async def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        *,
        on_delta: DeltaSink | None = None,
        force_tool: str | None = None,
        answer_schema: Mapping[str, Any] | None = None,
    ) -> Reply: ...


@runtime_checkable
class ResumableModel(Protocol):
    """A chat model with state of its own that a resumed run must continue from (the scripted
    model: its place in its script); a model whose replies depend only on what it is sent
    needs none. The run's checkpoint carries `saved_state()` (JSON-ready; None: nothing to
    keep), and a run resumed from that checkpoint (after an approval, or taken over by another
    replica) hands it to its new model's `restore` before its first call, so a step redone
    gets the reply it got the first time."""

    def saved_state(self) -> dict[str, Any] | None: ...

    def restore(self, saved: Mapping[str, Any]) -> None: ...


def resumable(model: object) -> ResumableModel | None:
    """`model` when it is a `ResumableModel`, else None: the check `isinstance` makes of a
    runtime protocol (both methods there), without its cost (tens of µs a check)."""
    if all(getattr(model, name, None) is not None for name in ("saved_state", "restore")):
        return cast(ResumableModel, model)
    return None


PlanStatus = Literal["pending", "in_progress", "completed"]


@dataclass(slots=True)
class PlanItem:
    step: str
    status: PlanStatus = "pending"


@dataclass(slots=True)
class Plan:
    """The agent's own plan, kept by the built-in `update_plan` tool; progress reads it."""

    items: list[PlanItem] = field(default_factory=list)

    @property
    def completed(self) -> int:
        return sum(1 for item in self.items if item.status == "completed")

    @property
    def next_item(self) -> str | None:
        for wanted in ("in_progress", "pending"):
            for item in self.items:
                if item.status == wanted:
                    return item.step
        return None


@dataclass(slots=True)
class ToolContext:
    """Per-run state a tool may read or write. One per run, never shared between runs."""

    run_id: str
    step: int = 0
    plan: Plan = field(default_factory=Plan)


@runtime_checkable
class Tool(Protocol):
    """Something the model can call.

    `validate` returns a precise, model-readable message when the arguments do not fit
    `parameters` (a JSON schema), else None; the engine calls it before `call`.
    `call` returns the result as text (JSON text for structured results). Raising is allowed:
    the engine shows the error to the model. A non-idempotent tool (polling a job) may give a
    different result for the same arguments, so repeating it is not a loop by itself.
    """

    name: str
    description: str
    parameters: Mapping[str, Any]
    idempotent: bool

    def validate(self, arguments: Mapping[str, Any]) -> str | None: ...

    async def call(self, arguments: dict[str, Any], ctx: ToolContext) -> str: ...


@dataclass(frozen=True, slots=True)
class OutputError:
    """One way an answer fails a run's output schema: where (a JSON path, `$` the answer
    itself, `$.items[0].price` inside it) and what."""

    path: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"path": self.path, "message": self.message}


@runtime_checkable
class OutputSchema(Protocol):
    """The JSON Schema a run's answer must validate against (`output_schema`, DESIGN §12),
    compiled once per run. `errors` lists every way `value` (parsed JSON) fails it, in
    document order; an empty list: it validates."""

    schema: Mapping[str, Any]

    def errors(self, value: Any) -> list[OutputError]: ...


class Clock(Protocol):
    """Monotonic seconds, for deadlines and elapsed time."""

    def __call__(self) -> float: ...


system_clock: Clock = time.monotonic
