"""How a run is bounded: the reasons it can end, its limits, and the checks between steps.

Every check is a pure function called at a named point of the loop (`loop.py`) and returns
the `StopReason` that ends the run there, or None to go on.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Literal


class StopReason(StrEnum):
    """Why a run ended. Exactly one per run."""

    FINISHED = "finished"  # the model called task_finished
    ANSWERED = "answered"  # a plain answer, with stop_tool off
    MAX_STEPS = "max_steps"  # max_steps LLM turns used up
    TIMEOUT = "timeout"  # the whole-run deadline passed
    TOKEN_BUDGET = "token_budget"  # max_total_tokens spent
    NUDGE_LIMIT = "nudge_limit"  # max_nudges stop prompts in a row went unheeded
    CANCELLED = "cancelled"  # somebody cancelled the run
    ERROR = "error"  # the model was unreachable after retries, or a bug


class InterventionKind(StrEnum):
    """A message the runtime injected into the conversation, and why."""

    STOP_PROMPT = "stop_prompt"
    REPETITION = "repetition"
    PROGRESS = "progress"
    TIMEOUT = "timeout"
    MAX_STEPS = "max_steps"
    TOKEN_BUDGET = "token_budget"
    CONTEXT_TRIM = "context_trim"


LIMIT_INTERVENTIONS = {
    StopReason.TIMEOUT: InterventionKind.TIMEOUT,
    StopReason.MAX_STEPS: InterventionKind.MAX_STEPS,
    StopReason.TOKEN_BUDGET: InterventionKind.TOKEN_BUDGET,
}

PromptLanguage = Literal["en", "zh"]


@dataclass(frozen=True, slots=True)
class Limits:
    """Everything that bounds or shapes one run. Defaults are the seeds' defaults."""

    max_steps: int = 10
    """LLM turns before the run ends with max_steps (after a degraded final answer)."""
    max_time_s: float = 60.0
    """Whole-run deadline, measured from the first step; interrupts in-flight calls."""
    tool_timeout_s: float = 30.0
    """One tool call; past it the model is told the tool timed out and the run goes on."""
    llm_timeout_s: float = 60.0
    """One LLM call attempt (also capped by the deadline); a timeout is retried."""
    final_answer_timeout_s: float = 15.0
    """The degraded final LLM call made when a limit is reached."""
    stop_tool: bool = True
    """Require `task_finished` to end; when false, a reply without tool calls ends the run."""
    max_nudges: int = 3
    """Stop prompts in a row (replies without tool calls) before the run ends with nudge_limit."""
    llm_retries: int = 3
    """Retries of a failed LLM call (network errors, timeouts, 408/409/429/5xx)."""
    llm_retry_delay_s: float = 10.0
    """First retry delay; doubles each retry, with jitter. Retry-After wins. Never past the
    deadline."""
    repetition_threshold: int = 2
    """The N-th identical call (same tool, same canonical JSON arguments) gets a hint instead
    of running; 0 turns detection off. Non-idempotent tools run until past N."""
    max_tool_result_chars: int = 2000
    """What the model sees of one tool result (a note is appended); 0 = no truncation."""
    progress: bool = False
    """Inject a progress message (step i/N, time, tool calls, plan) before each step but the
    first."""
    max_total_tokens: int | None = None
    """Token budget for the run (provider usage, else an estimate); None = unbounded."""
    max_context_tokens: int | None = None
    """Cap on the prompt of one LLM call: over it, the oldest tool results are elided."""
    final_answer_on_limit: bool = True
    """At a step, time or token limit, ask once more for an answer without tools (degraded)."""
    stream_tokens: bool = False
    """Stream LLM calls and yield token deltas as the text arrives."""
    prompt_language: PromptLanguage = "en"
    """Language of the texts the runtime injects."""


def past_deadline(now: float, deadline: float) -> StopReason | None:
    """Top of a step: the whole-run deadline."""
    return StopReason.TIMEOUT if now >= deadline else None


def nudges_exhausted(nudges_in_row: int, limits: Limits) -> StopReason | None:
    """Before a stop prompt: the model already ignored max_nudges of them in a row."""
    return StopReason.NUDGE_LIMIT if nudges_in_row >= limits.max_nudges else None


def over_token_budget(total_tokens: int, limits: Limits) -> StopReason | None:
    """After a step's tools: the run's token budget."""
    if limits.max_total_tokens is not None and total_tokens >= limits.max_total_tokens:
        return StopReason.TOKEN_BUDGET
    return None


def repetition_due(count: int, idempotent: bool, limits: Limits) -> bool:
    """Whether the `count`-th identical call gets the hint instead of running."""
    if limits.repetition_threshold <= 0:
        return False
    if idempotent:
        return count >= limits.repetition_threshold
    return count > limits.repetition_threshold
