"""How a run is bounded: the reasons it can end, its limits, and the checks between steps.

Every check is a pure function called at a named point of the loop (`loop.py`) and returns
the `StopReason` that ends the run there, or None to go on.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from app.engine.declarations import setting
from app.engine.ports import Allowance


class StopReason(StrEnum):
    """Why a run ended. Exactly one per run."""

    FINISHED = "finished"  # the model called task_finished
    ANSWERED = "answered"  # a plain answer, with stop_tool off
    MAX_STEPS = "max_steps"  # max_steps LLM turns used up
    TIMEOUT = "timeout"  # the whole-run deadline passed
    TOKEN_BUDGET = "token_budget"  # max_total_tokens spent
    COST_BUDGET = "cost_budget"  # max_cost_usd spent, or the next call would pass it
    NUDGE_LIMIT = "nudge_limit"  # max_nudges stop prompts in a row went unheeded
    INVALID_OUTPUT = "invalid_output"  # answers kept failing output_schema (max_output_retries)
    OUTCOME_UNMET = "outcome_unmet"  # the answers kept failing the outcome's rubric (§22)
    CANCELLED = "cancelled"  # somebody cancelled the run
    ERROR = "error"  # the model was unreachable after retries, or a bug


class InterventionKind(StrEnum):
    """A message the runtime injected into the conversation, and why."""

    STOP_PROMPT = "stop_prompt"  # the model stopped without task_finished: asked to finish
    REPETITION = "repetition"  # the N-th identical tool call: a hint instead of running it
    PROGRESS = "progress"  # a progress message before a step (the `progress` setting)
    TIMEOUT = "timeout"  # the deadline passed: asked for a final answer
    MAX_STEPS = "max_steps"  # max_steps used up: asked for a final answer
    TOKEN_BUDGET = "token_budget"  # the token budget spent: asked for a final answer
    CONTEXT_TRIM = "context_trim"  # over max_context_tokens: the oldest tool results elided
    PLANNING = "planning"  # a planning call's prompt (plan-then-execute), or its nudge
    COST_BUDGET = "cost_budget"  # the cost budget spent: asked for a final answer
    INVALID_OUTPUT = "invalid_output"  # an answer that failed the run's output_schema
    OUTCOME_UNMET = "outcome_unmet"  # the grader's feedback on an answer that missed the rubric


LIMIT_INTERVENTIONS = {
    StopReason.TIMEOUT: InterventionKind.TIMEOUT,
    StopReason.MAX_STEPS: InterventionKind.MAX_STEPS,
    StopReason.TOKEN_BUDGET: InterventionKind.TOKEN_BUDGET,
    StopReason.COST_BUDGET: InterventionKind.COST_BUDGET,
}

PromptLanguage = Literal["en", "zh"]


@dataclass(frozen=True, slots=True)
class Limits:
    """Everything that bounds or shapes one run: each field is a per-run setting, declared
    here once (type, default, bounds, server cap, description; see `app.engine.declarations`)."""

    max_steps: int = setting(10, "LLM turns before the run ends with max_steps.", ge=1, cap=100)
    max_time_s: float = setting(
        60.0, "Whole-run deadline in seconds; interrupts in-flight calls.", gt=0, cap=3600.0
    )
    tool_timeout_s: float = setting(
        30.0,
        "Timeout of one tool call; the model is told and the run goes on.",
        gt=0,
        cap=600.0,
    )
    llm_timeout_s: float = setting(
        60.0,
        "Timeout of one LLM call attempt, also capped by the deadline.",
        gt=0,
        cap=600.0,
    )
    final_answer_timeout_s: float = setting(
        15.0, "Timeout of the degraded final-answer call.", gt=0, cap=120.0
    )
    stop_tool: bool = setting(
        True,
        "Require the task_finished tool to end the run; false: a plain answer ends it.",
    )
    max_nudges: int = setting(
        3, "Stop prompts in a row before the run ends with nudge_limit.", ge=0, cap=20
    )
    llm_retries: int = setting(
        3, "Retries on network errors, timeouts, 408/409/429/5xx.", ge=0, cap=10
    )
    llm_retry_delay_s: float = setting(
        10.0,
        "First retry delay, doubled each retry with jitter; Retry-After wins.",
        ge=0,
        cap=120.0,
    )
    repetition_threshold: int = setting(
        2,
        "The N-th identical tool call gets a hint instead of running; 0 = off.",
        ge=0,
        cap=100,
    )
    max_tool_result_chars: int = setting(
        2000,
        "What the model sees of one tool result; 0 = no truncation.",
        ge=0,
        cap=100_000,
        zero_is_unbounded=True,
    )
    progress: bool = setting(False, "Inject a progress message before each step after the first.")
    max_total_tokens: int | None = setting(
        None, "Token budget of the run; null = none.", ge=1, cap=None
    )
    max_cost_usd: float | None = setting(
        None,
        "Cost budget of the run in USD; null = none. Needs a model with a known price.",
        gt=0,
        cap=None,
    )
    max_context_tokens: int | None = setting(
        None,
        "Cap on one LLM call's prompt; over it the oldest tool results are elided, then a "
        "follow-up's oldest inherited turns dropped.",
        ge=1,
        cap=None,
    )
    final_answer_on_limit: bool = setting(
        True,
        "At a step, time, token or cost limit, ask once more for a best answer without tools.",
    )
    stream_tokens: bool = setting(False, "Stream LLM output as token events.")
    prompt_language: PromptLanguage = setting("en", "Language of the texts the runtime injects.")
    approval_timeout_s: float = setting(
        3600.0,
        "How long a run waits for a person's approval; undecided calls then count as rejected.",
        gt=0,
        cap=86400.0,
    )
    max_output_retries: int = setting(
        2,
        "With output_schema: further tries after an answer that fails the schema; the next "
        "invalid answer ends the run with invalid_output.",
        ge=0,
        cap=10,
    )
    max_revisions: int = setting(
        2,
        "With an outcome: answers after the first the grader may judge unmet before the run "
        "ends with outcome_unmet (outcome.max_revisions sets it too).",
        ge=0,
        cap=10,
    )
    planning_interval: int | None = setting(
        None,
        "Plan-then-execute: a planning call (update_plan) before step 1 and every N steps "
        "after; null = off.",
        ge=1,
        cap=100,
        null_is_off=True,
    )


def past_deadline(now: float, deadline: float) -> StopReason | None:
    """Top of a step: the whole-run deadline."""
    return StopReason.TIMEOUT if now >= deadline else None


def nudges_exhausted(nudges_in_row: int, limits: Limits) -> StopReason | None:
    """Before a stop prompt: the model already ignored max_nudges of them in a row."""
    return StopReason.NUDGE_LIMIT if nudges_in_row >= limits.max_nudges else None


def over_budget(
    total_tokens: int, cost_usd: float, limits: Limits, tree_stop: str | None = None
) -> StopReason | None:
    """After a step's tools: the run's token budget, then its cost budget. `cost_usd` is what
    the run's priced calls cost (all of them, unless a call's model had no known price); both
    include what its ended sub-agents spent. `tree_stop`: a sub-agent ended on the budget it
    was given from this run's, which ends this run with the same reason (DESIGN §15)."""
    if tree_stop is not None:
        return StopReason(tree_stop)
    if limits.max_total_tokens is not None and total_tokens >= limits.max_total_tokens:
        return StopReason.TOKEN_BUDGET
    if limits.max_cost_usd is not None and cost_usd >= limits.max_cost_usd:
        return StopReason.COST_BUDGET
    return None


def day_spent(allowance: Allowance) -> StopReason | None:
    """Top of a step: the run's API key has spent its day's tokens, then its day's cost (its
    quotas, across all its runs): the run ends as at its own budget."""
    if allowance.tokens is not None and allowance.tokens <= 0:
        return StopReason.TOKEN_BUDGET
    if allowance.cost_usd is not None and allowance.cost_usd <= 0:
        return StopReason.COST_BUDGET
    return None


def call_over_cost_budget(
    cost_usd: float, call_cost_usd: float, limits: Limits
) -> StopReason | None:
    """Before a call of the run's own: it is expected to take the spend past the budget."""
    budget = limits.max_cost_usd
    if budget is not None and cost_usd + call_cost_usd > budget:
        return StopReason.COST_BUDGET
    return None


def final_call_allowed(cost_usd: float, limits: Limits) -> bool:
    """At a limit: whether the run makes its final call (`final_answer_on_limit`), which it
    never does once the spend has passed the cost budget (a call of its own passed it, or a
    sub-agent's): so the spend passes the budget by one call at most (DESIGN §13)."""
    budget = limits.max_cost_usd
    return limits.final_answer_on_limit and (budget is None or cost_usd <= budget)


def output_retries_exhausted(invalid_answers: int, limits: Limits) -> StopReason | None:
    """After an answer that failed the output schema (`invalid_answers` of them so far): the
    model had its `max_output_retries` further tries already."""
    return StopReason.INVALID_OUTPUT if invalid_answers > limits.max_output_retries else None


def revisions_exhausted(revisions: int, limits: Limits) -> StopReason | None:
    """After the grader judged an answer unmet (`revisions` unmet verdicts so far, this one
    included): the model had its `max_revisions` revisions already (DESIGN §22)."""
    return StopReason.OUTCOME_UNMET if revisions > limits.max_revisions else None


def planning_due(step: int, limits: Limits) -> bool:
    """Top of step `step`, before its LLM call: whether a planning call comes first (steps 1,
    N+1, 2N+1 … with `planning_interval` N)."""
    interval = limits.planning_interval
    return interval is not None and (step - 1) % interval == 0


def repetition_due(count: int, idempotent: bool, limits: Limits) -> bool:
    """Whether the `count`-th identical call gets the hint instead of running."""
    if limits.repetition_threshold <= 0:
        return False
    if idempotent:
        return count >= limits.repetition_threshold
    return count > limits.repetition_threshold
