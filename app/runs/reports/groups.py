"""Termination reports (DESIGN §20): per group of ended runs (by model, agent profile, API key
or UTC day), how they ended and what it took. Sums over `RunSummary`s, made by a store
(`RunStore.termination_report`): the memory and Redis stores feed `ReportBuilder` one
summary at a time, SQLite feeds it partial sums its own GROUP BY made (`add`) and the
per-run figures percentiles need (`sample`). Either way the figures are the same.

Percentiles are nearest-rank: p50 of n sorted values is the value at rank ceil(n/2), p90
at rank ceil(9n/10).
USD: the sum of the runs whose cost is known; `per_run` divides it by those runs,
`per_completed_run` the completed ones' sum by the completed runs whose cost is known;
`unpriced_calls` counts the LLM calls whose model had no price (their runs' cost is unknown).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from app.engine.policies import InterventionKind, StopReason
from app.runs.metrics import key_label
from app.runs.records import RunStatus
from app.runs.reports.summaries import RunSummary

ENDED = tuple(s for s in RunStatus if s.terminal)

PER_RUN = {
    "nudges": f"intervention.{InterventionKind.STOP_PROMPT.value}",
    "repetition_hints": f"intervention.{InterventionKind.REPETITION.value}",
    "truncations": "truncations",
    "context_trims": f"intervention.{InterventionKind.CONTEXT_TRIM.value}",
    "output_retries": f"intervention.{InterventionKind.INVALID_OUTPUT.value}",
    "retries": "retries",
    "takeovers": "takeovers",
}
"""The figures a report gives per run, and the tally counter each one is."""


FIGURES = ("steps", "duration_s", "tokens")
"""The per-run figures a report gives percentiles of."""


class GroupBy(StrEnum):
    """What a report's groups are."""

    MODEL = "model"
    AGENT = "agent"
    KEY = "key"  # admins only
    DAY = "day"  # the UTC day the run was made


def group_of(summary: RunSummary, group_by: GroupBy) -> str | None:
    """The group a run falls in (None: runs of no agent profile, or of no key)."""
    if group_by is GroupBy.MODEL:
        return summary.model
    if group_by is GroupBy.AGENT:
        return summary.agent
    if group_by is GroupBy.KEY:
        return summary.owner
    return summary.day


def percentiles(values: list[float]) -> dict[str, float | None]:
    """p50 and p90, nearest-rank; None for no values."""
    if not values:
        return {"p50": None, "p90": None}
    ordered = sorted(values)
    n = len(ordered)
    return {"p50": ordered[rank(n, 50) - 1], "p90": ordered[rank(n, 90) - 1]}


def rank(n: int, q: int) -> int:
    """The nearest rank of the q-th percentile of n values: ceil(q n / 100), in integers."""
    return max(1, (q * n + 99) // 100)


@dataclass(slots=True)
class _Group:
    runs: int = 0
    by_status: dict[str, int] = field(default_factory=lambda: {s.value: 0 for s in ENDED})
    by_reason: dict[str, int] = field(default_factory=lambda: {r.value: 0 for r in StopReason})
    degraded: int = 0
    finish_tool: int = 0
    tally: dict[str, int] = field(default_factory=dict)
    usd: float = 0.0
    priced_runs: int = 0
    completed_usd: float = 0.0
    completed_priced_runs: int = 0
    steps: list[float] = field(default_factory=list)
    duration_s: list[float] = field(default_factory=list)
    tokens: list[float] = field(default_factory=list)
    spreads: dict[str, dict[str, float | None]] = field(default_factory=dict)
    """Percentiles a store worked out itself (`spread`), by figure."""


class ReportBuilder:
    """Sums of runs by group, then `groups()`: the report's rows."""

    def __init__(self, group_by: GroupBy) -> None:
        self.group_by = group_by
        self._groups: dict[str | None, _Group] = {}

    def add(
        self,
        group: str | None,
        status: str,
        reason: str | None,
        *,
        runs: int = 1,
        degraded: int = 0,
        finish_tool: int = 0,
        tally: Mapping[str, int] | None = None,
        usd: float = 0.0,
        priced_runs: int = 0,
    ) -> None:
        """`runs` runs of one status and reason; `degraded`, `finish_tool` and `priced_runs`
        count among them, `tally` and `usd` are their sums."""
        into = self._groups.setdefault(group, _Group())
        into.runs += runs
        into.by_status[status] = into.by_status.get(status, 0) + runs
        if reason is not None:
            into.by_reason[reason] = into.by_reason.get(reason, 0) + runs
        into.degraded += degraded
        into.finish_tool += finish_tool
        for key, count in (tally or {}).items():
            into.tally[key] = into.tally.get(key, 0) + count
        into.usd += usd
        into.priced_runs += priced_runs
        if status == RunStatus.COMPLETED:
            into.completed_usd += usd
            into.completed_priced_runs += priced_runs

    def sample(self, group: str | None, steps: int, duration_s: float, tokens: int) -> None:
        """One run's figures, for the percentiles."""
        into = self._groups.setdefault(group, _Group())
        into.steps.append(steps)
        into.duration_s.append(duration_s)
        into.tokens.append(tokens)

    def spread(self, group: str | None, figure: str, spread: dict[str, float | None]) -> None:
        """A figure's percentiles over the group's runs (`percentiles`), as a store worked
        them out instead of a `sample` per run: one of `FIGURES`."""
        self._groups.setdefault(group, _Group()).spreads[figure] = spread

    def add_summary(self, summary: RunSummary) -> None:
        group = group_of(summary, self.group_by)
        priced = summary.cost_usd is not None
        self.add(
            group,
            summary.status.value,
            summary.reason.value if summary.reason is not None else None,
            degraded=int(summary.degraded),
            finish_tool=int(summary.finish_tool),
            tally=summary.tally,
            usd=summary.cost_usd or 0.0,
            priced_runs=int(priced),
        )
        self.sample(group, summary.steps, summary.duration_s, summary.tokens)

    def groups(self) -> list[dict[str, Any]]:
        """The report's rows, by group (runs of no group first)."""
        ordered = sorted(self._groups.items(), key=lambda item: (item[0] is not None, item[0]))
        return [self._row(group, g) for group, g in ordered]

    def _row(self, group: str | None, g: _Group) -> dict[str, Any]:
        shown = key_label(group) if self.group_by is GroupBy.KEY and group else group
        interventions = {
            k.value: g.tally.get(f"intervention.{k.value}", 0) for k in InterventionKind
        }
        totals = {name: g.tally.get(key, 0) for name, key in PER_RUN.items()}
        return {
            "group": shown,
            "runs": g.runs,
            "by_status": g.by_status,
            "by_reason": g.by_reason,
            "degraded": g.degraded,
            "finish_tool": g.finish_tool,
            "interventions": interventions,
            "totals": totals,
            "per_run": {k: (v / g.runs if g.runs else 0.0) for k, v in totals.items()},
            "steps": g.spreads.get("steps") or percentiles(g.steps),
            "duration_s": g.spreads.get("duration_s") or percentiles(g.duration_s),
            "tokens": g.spreads.get("tokens") or percentiles(g.tokens),
            "usd": {
                "total": round(g.usd, 12),
                "per_run": round(g.usd / g.priced_runs, 12) if g.priced_runs else None,
                "per_completed_run": (
                    round(g.completed_usd / g.completed_priced_runs, 12)
                    if g.completed_priced_runs
                    else None
                ),
            },
            "unpriced_calls": g.tally.get("unpriced_calls", 0),
        }
