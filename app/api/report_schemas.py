"""The shapes of GET /reports/termination (DESIGN §20; `app.runs.reports`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from app.runs.reports.groups import GroupBy
from app.runs.settingspec import RunSettingsIn


class Spread(BaseModel):
    """Nearest-rank percentiles of a per-run figure; null for a group of no runs."""

    p50: float | None = Field(description="The median: the value at rank ceil(n/2).")
    p90: float | None = Field(description="The value at rank ceil(0.9 n).")


class Usd(BaseModel):
    """What a group's runs cost, in USD."""

    total: float = Field(description="USD of the group's runs whose cost is known.")
    per_run: float | None = Field(description="`total` over the runs whose cost is known.")
    per_completed_run: float | None = Field(
        description="The completed runs' USD over the completed runs whose cost is known."
    )


class ReportGroup(BaseModel):
    """How one group's runs ended, and what it took."""

    group: str | None = Field(
        description="The model, agent profile (null: runs that named none), key id (the "
        "first characters of an API key's digest, as GET /usage's key_id) or UTC day (the "
        "day the run was made)."
    )
    runs: int = Field(description="Ended runs in the group.")
    by_status: dict[str, int] = Field(description="Runs by status; every ended status is named.")
    by_reason: dict[str, int] = Field(description="Runs by stop reason; every reason is named.")
    degraded: int = Field(description="Runs whose answer was degraded.")
    finish_tool: int = Field(description="Runs that ended through the finish tool.")
    interventions: dict[str, int] = Field(description="Interventions by kind, all runs summed.")
    totals: dict[str, int] = Field(
        description="nudges, repetition_hints, truncations, context_trims, output_retries, "
        "retries (LLM call retries) and takeovers, all runs summed."
    )
    per_run: dict[str, float] = Field(description="`totals` divided by `runs`.")
    steps: Spread = Field(description="LLM turns per run.")
    duration_s: Spread = Field(description="From a run's start to its end, in seconds.")
    tokens: Spread = Field(description="Tokens per run (prompt + completion).")
    usd: Usd = Field(description="What the runs cost.")
    unpriced_calls: int = Field(description="LLM calls whose model had no known price.")


class TerminationReport(BaseModel):
    """How the caller's runs ended, per group (DESIGN §20)."""

    group_by: GroupBy = Field(description="What the groups are.")
    since: datetime | None = Field(description="The window's start (UTC), as asked.")
    until: datetime | None = Field(description="The window's end (UTC, excluded), as asked.")
    model: str | None = Field(description="The model filter, as asked.")
    agent: str | None = Field(description="The agent profile filter, as asked.")
    all_keys: bool = Field(
        description="True when the report covers every key's runs (an admin key, or auth "
        "off); false: the caller's own."
    )
    runs: int = Field(description="Ended runs in the report: GET /runs' count for the filter.")
    groups: list[ReportGroup] = Field(description="The groups, by name (null first).")


class RunOutcome(BaseModel):
    """One compared run: how it ended and what it took."""

    id: str = Field(description="The run's id.")
    model: str = Field(description="The model it ran on.")
    agent: str | None = Field(description="The agent profile it named; null for none.")
    task: str = Field(description="Its task.")
    status: str = Field(description="Its status.")
    reason: str | None = Field(description="Why it ended; null while it has not.")
    degraded: bool | None = Field(description="Its answer was degraded; null while running.")
    answer: str | None = Field(description="Its answer; null for none.")
    steps: int = Field(description="LLM turns.")
    total_tokens: int = Field(description="Tokens spent.")
    cost_usd: float | None = Field(description="USD; null when a call had no known price.")
    duration_s: float | None = Field(description="Start to end; null while it has not ended.")


class ComparedStep(BaseModel):
    """What one run did at one step."""

    thought: str | None = Field(description="Its thought (the first 500 characters).")
    tools: list[str | None] = Field(description="The tools it called, in order.")
    errors: int = Field(description="Tool results that were errors.")
    interventions: list[str | None] = Field(description="Interventions it got, by kind.")


class AlignedStep(BaseModel):
    """One step number, across the compared runs."""

    step: int = Field(description="The step number (1 is the first).")
    runs: list[ComparedStep | None] = Field(
        description="Per run, in the order asked, its step; null where it had none."
    )


class CompareView(BaseModel):
    """Runs side by side (GET /runs/compare)."""

    runs: list[RunOutcome] = Field(description="The runs, in the order asked.")
    steps: list[AlignedStep] = Field(description="Their steps, aligned by number.")


class ReplayIn(BaseModel):
    """POST /runs/{id}/replay's body (optional)."""

    model_config = ConfigDict(extra="forbid")

    settings: RunSettingsIn | None = Field(
        None,
        description="Settings to replay with instead of the run's own (a lower max_steps, "
        "say): the replay shows where the run would have gone another way.",
    )


class Divergence(BaseModel):
    """Where the replay first made another event than the run recorded."""

    seq: int = Field(description="The place in the compared events (1: the first step.started).")
    recorded: dict[str, Any] | None = Field(description="The recorded event; null: none left.")
    replayed: dict[str, Any] | None = Field(description="The replayed one; null: none made.")


class ReplayView(BaseModel):
    """Whether today's engine makes the same events from the run's recorded replies."""

    identical: bool = Field(description="Every compared event is the same.")
    events: int = Field(description="Events the replay made (tokens excepted).")
    first_divergence: Divergence | None = Field(description="null when identical.")


class ForkIn(BaseModel):
    """POST /runs/{id}/fork's body: where to fork, and what the fork changes."""

    model_config = ConfigDict(extra="forbid")

    at_step: int = Field(
        ge=1,
        description="The step to fork at: the fork's conversation is the run's before it (1: "
        "the same task from the start). At most the run's steps.",
    )
    model: str | None = Field(None, description="Another model for the fork.")
    agent: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$",
        description="Another agent profile: its values are the fork's defaults (the run's "
        "request is not carried, its task excepted).",
    )
    settings: RunSettingsIn | None = Field(
        None, description="Settings changed for the fork, merged over the run's key by key."
    )
    system_prompt: str | None = Field(None, description="Another system prompt (at_step 1 only).")
    tools: list[str] | None = Field(None, description="Other tools, by name (GET /tools).")
    task: str | None = Field(None, min_length=1, description="Another task (at_step 1 only).")
