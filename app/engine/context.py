"""What one model call (`asking.ask`) and one reply's tool calls (`acting.ToolStep`) need of a
run: a small view the loop (`loop.ReactRun`) builds once, so neither reaches into the loop."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from app.engine.delegating import SubAgents
from app.engine.guard import Guard
from app.engine.policies import InterventionKind, Limits
from app.engine.ports import (
    Allowances,
    ChatModel,
    Clock,
    OutputSchema,
    Price,
    ResumableModel,
    Tool,
    ToolContext,
    resumable,
)
from app.engine.prompts import Prompts
from app.engine.state import RunState
from app.engine.steps import Intervention


@dataclass(slots=True, eq=False)
class RunContext:
    state: RunState
    limits: Limits
    prompts: Prompts
    model: ChatModel
    tools: Mapping[str, Tool]
    available_tools: str
    """The tool names the model may call, for the unknown-tool message."""
    spec_tokens: int
    """Estimated tokens of the tool specs sent with each call."""
    clock: Clock
    jitter: Callable[[], float]
    guard: Guard
    log: Any
    """The run's structlog logger, bound once."""
    tool_ctx: ToolContext
    approval: frozenset[str] = frozenset()
    """Names of the tools whose calls wait for a person's approval (DESIGN §9)."""
    deadline: float = 0.0
    """The whole-run deadline by `clock`, set when the run starts."""
    price: Price | None = None
    """The model's price, read once when the run starts; None: its calls are unpriced."""
    output: OutputSchema | None = None
    """The schema the run's answer must validate against (DESIGN §12); None: any text."""
    subagents: SubAgents | None = None
    """Where the run's sub-agent calls start their child runs (DESIGN §15); None: nowhere."""
    allowance: Allowances | None = None
    """What the run's API key may still spend today (its day quotas, DESIGN §13), read at the
    top of each step; None: no day quota."""
    resumable: ResumableModel | None = field(init=False, default=None)
    """`model`, when it has state of its own for the checkpoints to carry (else None)."""

    def __post_init__(self) -> None:
        self.resumable = resumable(self.model)

    def enter_step(self) -> None:
        """The run's step, where its tools (`tool_ctx`) and its log lines read it."""
        self.tool_ctx.step = self.state.step
        structlog.contextvars.bind_contextvars(step=self.state.step)

    def inject(self, kind: InterventionKind, text: str) -> Intervention:
        """`text` joins the conversation as a user message the runtime sent, logged."""
        self.state.append({"role": "user", "content": text})
        return self.intervention(kind, text)

    def intervention(self, kind: InterventionKind, text: str) -> Intervention:
        self.log.info("intervened", kind=kind.value)
        return Intervention(self.state.step, kind, text)
