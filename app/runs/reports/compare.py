"""Runs side by side (DESIGN §20, `GET /runs/compare`): each run's outcome, and their steps
aligned by step number, what each run did at that step (its thought, the tools it called, the
interventions it got) or null where it had no such step."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.engine.events import EventType
from app.runs.records import Event, RunRecord

MIN_RUNS, MAX_RUNS = 2, 4
THOUGHT_CHARS = 500
"""What a compared step shows of a thought at most (the run's events hold it whole)."""


def outcome(record: RunRecord) -> dict[str, Any]:
    """A run's outcome in a line: who ran it on what, how it ended, what it took."""
    result = record.result
    began = record.started_at or record.created_at
    duration = (record.ended_at - began).total_seconds() if record.ended_at else None
    return {
        "id": record.id,
        "model": record.model,
        "agent": record.request.agent,
        "task": record.request.task,
        "status": record.status.value,
        "reason": result.reason.value if result is not None else None,
        "degraded": result.degraded if result is not None else None,
        "answer": result.answer if result is not None else None,
        "steps": record.usage.steps,
        "total_tokens": record.usage.total_tokens,
        "cost_usd": record.usage.cost_usd,
        "duration_s": duration,
    }


def step_of(events: Sequence[Event]) -> dict[int, dict[str, Any]]:
    """What a run did at each step, from its events."""
    steps: dict[int, dict[str, Any]] = {}
    for event in events:
        if event.step < 1 or event.type not in _SHOWN:
            continue
        at = steps.setdefault(
            event.step, {"thought": None, "tools": [], "errors": 0, "interventions": []}
        )
        if event.type == EventType.THOUGHT:
            text = str(event.data.get("text", ""))
            at["thought"] = (at["thought"] + "\n" if at["thought"] else "") + text
            at["thought"] = at["thought"][:THOUGHT_CHARS]
        elif event.type == EventType.ACTION:
            at["tools"].append(event.data.get("tool"))
        elif event.type == EventType.OBSERVATION:
            at["errors"] += bool(event.data.get("is_error"))
        elif event.type == EventType.INTERVENTION:
            at["interventions"].append(event.data.get("kind"))
    return steps


_SHOWN = frozenset(
    {EventType.THOUGHT, EventType.ACTION, EventType.OBSERVATION, EventType.INTERVENTION}
)


def compared(runs: Sequence[tuple[RunRecord, Sequence[Event]]]) -> dict[str, Any]:
    """The runs' outcomes, and their steps aligned: one row per step number any run reached."""
    per_run = [step_of(events) for _, events in runs]
    last = max((max(s, default=0) for s in per_run), default=0)
    last = max(last, *(record.usage.steps for record, _ in runs))
    return {
        "runs": [outcome(record) for record, _ in runs],
        "steps": [
            {"step": n, "runs": [steps.get(n) for steps in per_run]} for n in range(1, last + 1)
        ],
    }
