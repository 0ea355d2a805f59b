"""Sub-agents (DESIGN §15): a tool `NAME(task)` whose call starts a child run and waits for
its end, its answer being the call's result.

The engine knows a child only through ports: `SubAgents` (the runs layer starts a real run,
or re-attaches to the one the same call started before an interruption) and, for a remote
A2A agent, the `ChildStarter` its `AgentTool` carries. Either gives a `ChildHandle`, whose
`outcome` is awaited under the run's deadline and cancel, never under `tool_timeout_s`.

One budget for the tree: a child is started with at most what its parent has left (time,
tokens, cost; the step's concurrent sub-agent calls share what is left equally); what it
spent counts in the parent's usage when it ends (`RunState.add_child`), and a child that
ended on the budget carved from its parent's makes its parent end with the same reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from app.engine.errors import FinishlineError, ToolError
from app.engine.pending import ChildApproval
from app.engine.ports import ToolContext
from app.engine.prompts import Prompts
from app.engine.steps import RunUsage
from app.engine.toolcalls import CallResult

TASK_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "task": {
            "type": "string",
            "description": "What the agent should do: a complete, self-contained request.",
        }
    },
    "required": ["task"],
    "additionalProperties": False,
}


@dataclass(frozen=True, slots=True)
class ChildCall:
    """One sub-agent call, as a child run is made of it."""

    call_id: str
    step: int
    """The parent's step: with `call_id`, what names the child (a re-attach finds it)."""
    agent: str
    task: str
    time_left_s: float
    """What is left of the parent's time: the child's deadline is no later than its own."""
    tokens_left: int | None = None
    """At most this many tokens for the child (its share of the parent's budget); None: no
    budget."""
    cost_left_usd: float | None = None


@dataclass(frozen=True, slots=True)
class ChildOutcome:
    """How a child run stands once the parent's wait on it is over: ended, or waiting for a
    person (`status` requires_action, the calls it waits on in `waits_on`)."""

    status: str
    reason: str | None = None
    answer: str | None = None
    degraded: bool = False
    error: str | None = None
    usage: RunUsage | None = None
    """What the child spent (its own children's included); None: nothing known (remote)."""
    waits_on: tuple[ChildApproval, ...] = ()
    tree_limit: str | None = None
    """`token_budget` or `cost_budget` when the child ended on a budget carved from its
    parent's: the parent then ends with the same reason."""

    @property
    def waiting(self) -> bool:
        return self.status == "requires_action"


class ChildRefusedError(FinishlineError):
    """A child could not be started; `kind` says why (`depth`, `runs`, `unavailable`) and the
    model gets an `is_error` observation saying so."""

    def __init__(self, kind: str, message: str, limit: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.limit = limit


class ChildHandle(Protocol):
    """A started (or re-attached) child: a run of this service, or a remote A2A task."""

    run_id: str | None
    """The child run's id; None for a remote agent's task."""

    async def outcome(self) -> ChildOutcome:
        """Wait until the child ended, or waits for a person."""
        ...

    def stop(self) -> None:
        """Ask the child to stop (cancel), without waiting: its parent stopped waiting."""


class ChildStarter(Protocol):
    async def start(self, call: ChildCall) -> ChildHandle:
        """Start the call's child, or re-attach to the one the same call started already;
        `ChildRefusedError` when it cannot be started."""
        ...


class SubAgents(ChildStarter, Protocol):
    """The runs layer's side: child runs, and the parent's execution slot while it waits."""

    def lend(self) -> None:
        """The run waits on its children alone: its execution slot may serve another run."""

    def reclaim(self) -> None:
        """The run goes on: it counts in the execution slots again."""


class AgentTool:
    """A sub-agent offered to the model: `NAME(task)`. Its calls never reach `call`: the run
    starts them through `remote` (a remote A2A agent) or its `SubAgents` port."""

    idempotent = True
    """A repeated identical call gets the repetition hint; a call redone after a takeover
    re-attaches to the child it started (never a second child)."""

    def __init__(self, name: str, description: str, remote: ChildStarter | None = None) -> None:
        self.name = name
        self.description = description
        self.parameters: Mapping[str, Any] = TASK_PARAMETERS
        self.remote = remote

    def validate(self, arguments: Mapping[str, Any]) -> str | None:
        extra = sorted(set(arguments) - {"task"})
        if extra:
            return f"unexpected arguments {extra}: {self.name} takes only 'task'"
        task = arguments.get("task")
        if not isinstance(task, str) or not task.strip():
            return "'task' is required: a non-empty string saying what the agent should do"
        return None

    async def call(self, arguments: dict[str, Any], ctx: ToolContext) -> str:
        raise ToolError(f"{self.name} is a sub-agent: the run starts its calls")


def shares(left: float | None, count: int) -> float | None:
    """An equal share of what is left for each of `count` concurrent children."""
    return None if left is None else max(left, 0) / count


def child_result(
    agent: str, run_id: str | None, outcome: ChildOutcome, prompts: Prompts
) -> CallResult:
    """The observation of an ended child: its answer verbatim and one status line; failed and
    cancelled children give an error. A child with an output schema answers its `output`'s
    JSON text (`result.answer`), so a typed child's answer is its value as JSON."""
    run = run_id or "remote"
    reason = outcome.reason or outcome.status
    if outcome.status == "failed":
        text = prompts.agent_failed.format(agent=agent, run=run, error=outcome.error or reason)
        return CallResult(text, True, 0)
    if outcome.status == "cancelled":
        return CallResult(prompts.agent_cancelled.format(agent=agent, run=run), True, 0)
    line = (prompts.agent_degraded if outcome.degraded else prompts.agent_status).format(
        agent=agent, run=run, status=outcome.status, reason=reason
    )
    if outcome.answer is None:
        return CallResult(
            prompts.agent_no_answer.format(agent=agent, run=run, reason=reason), False, 0
        )
    return CallResult(f"{outcome.answer}\n\n{line}", False, 0)


def refusal(agent: str, error: ChildRefusedError, prompts: Prompts) -> CallResult:
    """The `is_error` observation of a call whose child could not be started."""
    if error.kind == "depth":
        text = prompts.agent_depth_cap.format(agent=agent, limit=error.limit)
    elif error.kind == "runs":
        text = prompts.agent_runs_cap.format(agent=agent, limit=error.limit)
    else:
        text = prompts.agent_unavailable.format(agent=agent, error=error.message)
    return CallResult(text, True, 0)
