"""What the loop takes for one run (`app.engine.loop.react`), assembled by the composition
root (`app.assembly`, through the runs layer's `RunAssembler`): the task, the model and tools,
the limits and prompts. The live handles (cancel, inbox, clock) and what a resume starts from
are passed beside it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypedDict

from app.engine.delegating import SubAgents
from app.engine.grading import Outcome
from app.engine.history import PreviousRun
from app.engine.pending import Decision
from app.engine.policies import Limits
from app.engine.ports import Allowances, ChatModel, Clock, OutputSchema, Tool
from app.engine.prompts import Prompts
from app.engine.state import RunState
from app.engine.toolcalls import CallResult


@dataclass(slots=True)
class RunInputs:
    """One run's inputs; `aclose()` once the run has ended."""

    model: ChatModel
    tools: list[Tool]
    limits: Limits
    prompts: Prompts
    approval: frozenset[str] = frozenset()
    """Tools whose calls wait for a person's approval."""
    closers: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    task: str = ""
    system_prompt: str | None = None
    output: OutputSchema | None = None
    """The run's `output_schema`, compiled (DESIGN §12); None: the answer is any text."""
    outcome: Outcome | None = None
    """The rubric the run's answer is graded against, and its grader (DESIGN §22)."""

    async def aclose(self) -> None:
        for closer in self.closers:
            await closer()


Inbox = Callable[[], list[str]]
"""Polled right before each LLM call: the steering messages that join the conversation."""


class RunHandles(TypedDict, total=False):
    """Beside `RunInputs`: the run's live handles and what a resume starts from (each has a
    default: no id, no cancel, no inbox, the system clock, a fresh state)."""

    run_id: str
    cancel: asyncio.Event | None
    inbox: Inbox | None
    clock: Clock
    jitter: Callable[[], float]
    state: RunState | None
    previous: PreviousRun | None
    """A follow-up: the run it continues."""
    decisions: Sequence[Decision]
    """A person's decisions on the calls `state` waits on (DESIGN §9)."""
    recorded: Mapping[str, CallResult] | None
    """Results logged before an interruption, by call id (`acting.ToolStep`)."""
    subagents: SubAgents | None
    """Where sub-agent calls start child runs (DESIGN §15); none: they are refused."""
    allowance: Allowances | None
    """What the run's API key may still spend today (its day quotas), read at the top of
    each step; None: the key has no day quota."""
