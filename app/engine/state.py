"""A run's mutable state: the conversation and the counters the limits are checked against.

`to_checkpoint()` / `from_checkpoint()` give a JSON-ready snapshot taken after each step, so a
run can later resume elsewhere from where it was.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import Any

from app.engine.pending import PendingCall
from app.engine.ports import Message, Plan, PlanItem, ResumableModel, TokenUsage
from app.engine.prompts import TASK_FINISHED
from app.engine.steps import RunUsage
from app.engine.tokens import estimate_message, estimate_tokens

CHECKPOINT_VERSION = 1


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), check_circular=False)
"""Arguments come from JSON text, so they cannot be circular: no check (~0.1 µs a call)."""


def canonical_call(tool: str, arguments: dict[str, Any]) -> str:
    """The identity of a call for repetition detection: tool name + canonical JSON."""
    return tool + "\x00" + _CANONICAL.encode(arguments)


@dataclass(slots=True)
class ChildSpend:
    """What a run's child runs spent (sub-agents, DESIGN §15), summed as each ended: their
    totals, their own children's included."""

    steps: int = 0
    llm_calls: int = 0
    tool_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    unpriced: int = 0
    """Children whose cost is unknown (a model without a price): the tree's cost is null."""

    def add(self, usage: RunUsage) -> None:
        self.steps += usage.steps
        self.llm_calls += usage.llm_calls
        self.tool_calls += usage.tool_calls
        self.prompt_tokens += usage.prompt_tokens
        self.completion_tokens += usage.completion_tokens
        if usage.cost_usd is None:
            self.unpriced += 1
        else:
            self.cost_usd += usage.cost_usd

    def usage(self) -> RunUsage:
        return RunUsage(
            steps=self.steps,
            llm_calls=self.llm_calls,
            tool_calls=self.tool_calls,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            cost_usd=None if self.unpriced else round(self.cost_usd, 12),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "llm_calls": self.llm_calls,
            "tool_calls": self.tool_calls,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cost_usd": self.cost_usd,
            "unpriced": self.unpriced,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ChildSpend:
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})


def with_children(own: RunUsage, children: ChildSpend | None) -> RunUsage:
    """`own` with what the children spent added to its totals, and shown as `children`."""
    if children is None:
        return own
    part = children.usage()
    cost = None if own.cost_usd is None or part.cost_usd is None else own.cost_usd + part.cost_usd
    return RunUsage(
        steps=own.steps,
        llm_calls=own.llm_calls + part.llm_calls,
        tool_calls=own.tool_calls + part.tool_calls,
        prompt_tokens=own.prompt_tokens + part.prompt_tokens,
        completion_tokens=own.completion_tokens + part.completion_tokens,
        cost_usd=None if cost is None else round(cost, 12),
        children=part,
    )


def checkpoint_usage(data: dict[str, Any]) -> RunUsage:
    """The usage a checkpoint (`RunState.to_checkpoint`) holds, without restoring the state."""
    own = RunUsage(
        steps=data["step"],
        llm_calls=data["llm_calls"],
        tool_calls=data["tool_calls"],
        prompt_tokens=data["prompt_tokens"],
        completion_tokens=data["completion_tokens"],
        cost_usd=None if data["unpriced_calls"] else round(data["cost_usd"], 12),
    )
    children = data.get("children")
    return with_children(own, ChildSpend.from_dict(children) if children else None)


@dataclass(slots=True)
class RunState:
    messages: list[Message] = field(default_factory=list)
    step: int = 0
    llm_calls: int = 0
    tool_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    """What the priced calls cost, in USD."""
    last_call_cost_usd: float = 0.0
    """What the last priced call cost: the cost budget's look-ahead expects no less of the
    next (`app.engine.asking.next_call_cost`)."""
    unpriced_calls: int = 0
    """Calls whose model had no known price: while there is one, the run's cost is null."""
    nudges_in_row: int = 0
    invalid_answers: int = 0
    """Answers that failed the run's output schema so far (`max_output_retries`)."""
    revisions: int = 0
    """Answers the grader judged unmet so far (an outcome's `max_revisions`, DESIGN §22)."""
    verdict: dict[str, Any] | None = None
    """The grader's verdict on the conversation's last answer, once given and until the model
    answers again: a run resumed from a checkpoint holding it does not ask again."""
    elapsed_s: float = 0.0
    """Time the run had used when this state was restored (0 for a fresh run)."""
    call_counts: dict[str, int] = field(default_factory=dict)
    earlier_results: dict[str, str] = field(default_factory=dict)
    elided: set[int] = field(default_factory=set)
    """Indexes of tool messages whose content was elided to fit the context."""
    inherited: int = 0
    """How many messages after the system prompt a follow-up inherited from its previous runs
    (before its own task): the part whose oldest turns may be dropped to fit the context."""
    plan: Plan = field(default_factory=Plan)
    pending: list[PendingCall] = field(default_factory=list)
    """Calls waiting for a person's decision: their tool messages are not in `messages` yet."""
    acting: bool = False
    """True between the model's reply with tool calls (the last message) and their results:
    a run resumed from a checkpoint taken then redoes those calls (`acting.ToolStep`, redo)."""
    model_state: dict[str, Any] | None = None
    """What the run's model saved of itself at the last checkpoint (`ResumableModel`: the
    scripted model's place in its script), handed back to it when the run resumes."""
    children: ChildSpend | None = None
    """What its sub-agents' child runs spent (None: it started none that ended)."""
    tree_stop: str | None = None
    """A child ended on the budget it was carved from this run's (`token_budget`,
    `cost_budget`): this run ends with that reason after the step (DESIGN §15)."""
    _estimate: int = field(init=False, default=0)
    _estimated: int = field(init=False, default=0)
    """How many leading messages `_estimate` counts: the rest are estimated when asked."""

    @property
    def prompt_estimate(self) -> int:
        """Estimated tokens of `messages`. Each message is estimated once, when first asked
        for after it was appended: a run with no context cap and a provider that reports
        usage never pays for it."""
        messages = self.messages
        if self._estimated < len(messages):
            self._estimate += estimate_tokens(messages[self._estimated :])
            self._estimated = len(messages)
        return self._estimate

    def append(self, message: Message) -> None:
        self.messages.append(message)

    def replace(self, index: int, message: Message) -> None:
        old = self.messages[index]
        self.messages[index] = message
        if index < self._estimated:
            self._estimate += estimate_message(message) - estimate_message(old)

    def drop_inherited(self, count: int) -> None:
        """Drop the `count` oldest inherited messages (whole turns, `app.engine.trim`)."""
        start = 1 if self.messages and self.messages[0]["role"] == "system" else 0
        stop = start + count
        counted = self.messages[start : max(start, min(stop, self._estimated))]
        del self.messages[start:stop]
        self._estimate -= estimate_tokens(counted)
        self._estimated -= len(counted)
        if self.elided:
            kept = (i for i in self.elided if not start <= i < stop)
            self.elided = {i - count if i >= stop else i for i in kept}
        self.inherited -= count

    def usage(self) -> RunUsage:
        """What the run spent, its children's included (`RunUsage.children`)."""
        own = RunUsage(
            steps=self.step,
            llm_calls=self.llm_calls,
            tool_calls=self.tool_calls,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            cost_usd=None if self.unpriced_calls else round(self.cost_usd, 12),
        )
        return with_children(own, self.children)

    def add_child(self, usage: RunUsage) -> None:
        """A child run ended: what it spent (its totals) counts in this run's."""
        if self.children is None:
            self.children = ChildSpend()
        self.children.add(usage)

    @property
    def tree_tokens(self) -> int:
        """Tokens of the run and its ended children: what its token budget is held to."""
        children = self.children
        extra = children.prompt_tokens + children.completion_tokens if children else 0
        return self.prompt_tokens + self.completion_tokens + extra

    @property
    def tree_cost_usd(self) -> float:
        """The priced cost of the run and its ended children: what its cost budget is held to."""
        return self.cost_usd + (self.children.cost_usd if self.children else 0.0)

    def add_tokens(self, usage: TokenUsage) -> None:
        self.prompt_tokens += usage.prompt_tokens
        self.completion_tokens += usage.completion_tokens

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def mid_step(self, stop_tool: bool) -> bool:
        """Whether a run resumed from this state redoes its last step from the reply it holds:
        its calls were in flight (`acting`), or the reply was a lone `task_finished` call whose
        run stored its final conversation and stopped before its end was stored (redone, the
        run ends with that answer again instead of asking the model on past its end)."""
        if self.acting:
            return True
        last = self.messages[-1] if self.messages else None
        if not stop_tool or last is None or last["role"] != "assistant":
            return False
        calls = last.get("tool_calls") or ()
        return bool(calls) and all(c["function"]["name"] == TASK_FINISHED for c in calls)

    def resume_model(self, model: ResumableModel | None) -> None:
        """Give a resumed run's model the state it saved (nothing for a fresh run)."""
        if model is not None and self.model_state is not None:
            model.restore(self.model_state)

    def to_checkpoint(
        self, elapsed_s: float, model: ResumableModel | None = None
    ) -> dict[str, Any]:
        """The snapshot, with what `model` (the run's, if it is resumable) saves of itself."""
        if model is not None:
            self.model_state = model.saved_state()
        # taken twice a step: the empty collections (the usual case) skip their comprehension
        plan, pending = self.plan.items, self.pending
        return {
            "version": CHECKPOINT_VERSION,
            "messages": list(self.messages),
            "step": self.step,
            "llm_calls": self.llm_calls,
            "tool_calls": self.tool_calls,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cost_usd": self.cost_usd,
            "last_call_cost_usd": self.last_call_cost_usd,
            "unpriced_calls": self.unpriced_calls,
            "nudges_in_row": self.nudges_in_row,
            "invalid_answers": self.invalid_answers,
            "elapsed_s": elapsed_s,
            "call_counts": self.call_counts.copy(),
            "earlier_results": self.earlier_results.copy(),
            "elided": sorted(self.elided) if self.elided else [],
            "inherited": self.inherited,
            "plan": [{"step": i.step, "status": i.status} for i in plan] if plan else [],
            "pending": [call.to_dict() for call in pending] if pending else [],
            "acting": self.acting,
            "model": self.model_state,
            **self._tree_fields(),
        }

    def _tree_fields(self) -> dict[str, Any]:
        graded = (
            {"revisions": self.revisions, "verdict": self.verdict}
            if self.revisions or self.verdict is not None
            else {}
        )
        if self.children is None and self.tree_stop is None:
            return graded  # a run without sub-agents: nothing of theirs to keep
        children = self.children.to_dict() if self.children else None
        return {"children": children, "tree_stop": self.tree_stop, **graded}

    @classmethod
    def from_checkpoint(cls, data: dict[str, Any]) -> RunState:
        if data.get("version") != CHECKPOINT_VERSION:
            raise ValueError(f"unsupported checkpoint version {data.get('version')!r}")
        return cls(
            messages=list(data["messages"]),
            step=data["step"],
            llm_calls=data["llm_calls"],
            tool_calls=data["tool_calls"],
            prompt_tokens=data["prompt_tokens"],
            completion_tokens=data["completion_tokens"],
            # a checkpoint from before costs were kept: its calls' cost is unknown
            cost_usd=data.get("cost_usd", 0.0),
            last_call_cost_usd=data.get("last_call_cost_usd", 0.0),
            unpriced_calls=data.get("unpriced_calls", data["llm_calls"]),
            nudges_in_row=data["nudges_in_row"],
            invalid_answers=int(data.get("invalid_answers", 0)),
            elapsed_s=data["elapsed_s"],
            call_counts=dict(data["call_counts"]),
            earlier_results=dict(data["earlier_results"]),
            elided=set(data["elided"]),
            inherited=int(data.get("inherited", 0)),
            plan=Plan([PlanItem(i["step"], i["status"]) for i in data["plan"]]),
            pending=[PendingCall.from_dict(c) for c in data.get("pending", ())],
            acting=bool(data.get("acting", False)),
            model_state=data.get("model"),
            children=ChildSpend.from_dict(data["children"]) if data.get("children") else None,
            tree_stop=data.get("tree_stop"),
            revisions=int(data.get("revisions", 0)),
            verdict=data.get("verdict"),
        )
