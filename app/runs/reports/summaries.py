"""How one run ended, in a line (DESIGN §20): a `RunSummary` is made from a run's terminal
record and a tally of a few of its events, and stored by the run store in the same write as
that terminal record; termination reports (`app.runs.reports`) are sums over summaries,
never a scan of event logs.

The tally counts, per run: each intervention kind (`intervention.stop_prompt`, …), LLM call
retries (`retries`), takeovers by another replica or after a restart (`takeovers`), tool
results cut to `max_tool_result_chars` (`truncations`) and LLM calls whose model has no
price (`unpriced_calls`). `tally_key` says which counter an event adds one to; every store
counts with it (the Redis store's Lua script mirrors it: `redis_scripts.TALLY`).

`RunFilter` is what a report and `GET /runs` select runs by (the `matching=` of
`RunStore.list_runs` and `RunStore.termination_report`), so the two agree exactly.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from app.engine.events import EventType
from app.engine.policies import StopReason
from app.runs.records import RunRecord, RunStatus

TALLIED = frozenset(
    {
        EventType.INTERVENTION,
        EventType.LLM_RETRY,
        EventType.RUN_RECOVERED,
        EventType.OBSERVATION,
        EventType.LLM_CALL,
    }
)
"""The event types a tally may count; the others never change it."""


def tally_key(type: str, data: Mapping[str, Any]) -> str | None:
    """The tally counter this event adds one to, or None."""
    if type == EventType.INTERVENTION:
        return f"intervention.{data.get('kind')}"
    if type == EventType.LLM_RETRY:
        return "retries"
    if type == EventType.RUN_RECOVERED:
        return "takeovers"
    if type == EventType.OBSERVATION:
        return "truncations" if data.get("truncated") else None
    if type == EventType.LLM_CALL:
        return "unpriced_calls" if data.get("cost_usd", 0) is None else None
    return None


def tally_of(events: Iterable[tuple[str, Mapping[str, Any]]]) -> dict[str, int]:
    """The tally of a run's events, given as (type, data)."""
    tally: dict[str, int] = {}
    for type, data in events:
        key = tally_key(type, data)
        if key is not None:
            tally[key] = tally.get(key, 0) + 1
    return tally


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def micros(at: datetime) -> int:
    """`at` in microseconds since the epoch, exactly (a float of seconds is not)."""
    return (at - _EPOCH) // timedelta(microseconds=1)


@dataclass(frozen=True, slots=True)
class RunSummary:
    """One ended run, as reports count it."""

    run_id: str
    owner: str | None
    agent: str | None
    """The agent profile the run named (POST /runs `agent`); None for none."""
    model: str
    created_at: datetime
    """When the run was made: what `since`/`until` and `group_by=day` go by (as GET /runs)."""
    status: RunStatus
    reason: StopReason | None
    degraded: bool
    finish_tool: bool
    """It ended through the finish tool (`task_finished`): reason `finished`."""
    steps: int
    duration_s: float
    """From its start (its creation if it never started) to its end."""
    tokens: int
    cost_usd: float | None
    """None when a call's model has no price (then `unpriced_calls` counts them)."""
    tally: dict[str, int] = field(default_factory=dict)

    @property
    def day(self) -> str:
        return self.created_at.astimezone(UTC).date().isoformat()

    def to_json(self, *, tally: bool = True) -> str:
        """As JSON; without `tally` when the Redis store's script adds it (`redis_scripts`)."""
        data: dict[str, Any] = {
            "run_id": self.run_id,
            "owner": self.owner,
            "agent": self.agent,
            "model": self.model,
            "created_at": self.created_at.isoformat(),
            "status": self.status.value,
            "reason": self.reason.value if self.reason is not None else None,
            "degraded": self.degraded,
            "finish_tool": self.finish_tool,
            "steps": self.steps,
            "duration_s": self.duration_s,
            "tokens": self.tokens,
            "cost_usd": self.cost_usd,
        }
        if tally:
            data["tally"] = self.tally
        return json.dumps(data, separators=(",", ":"))

    @property
    def score(self) -> int:
        """Its creation time in microseconds since the epoch (exact)."""
        return micros(self.created_at)

    @classmethod
    def from_json(cls, raw: str | bytes) -> RunSummary:
        data = json.loads(raw)
        tally = data.get("tally") or {}  # (Lua's cjson writes an empty object as [])
        return cls(
            run_id=data["run_id"],
            owner=data["owner"],
            agent=data["agent"],
            model=data["model"],
            created_at=datetime.fromisoformat(data["created_at"]),
            status=RunStatus(data["status"]),
            reason=StopReason(data["reason"]) if data["reason"] is not None else None,
            degraded=data["degraded"],
            finish_tool=data["finish_tool"],
            steps=data["steps"],
            duration_s=data["duration_s"],
            tokens=data["tokens"],
            cost_usd=data["cost_usd"],
            tally={str(k): int(v) for k, v in dict(tally).items()},
        )


def summarize(record: RunRecord, tally: Mapping[str, int] | None = None) -> RunSummary:
    """The summary of a terminal record (ValueError for a run that has not ended)."""
    if not record.status.terminal:
        raise ValueError(f"run {record.id} has not ended ({record.status.value})")
    result = record.result
    ended = record.ended_at or record.started_at or record.created_at
    began = record.started_at or record.created_at
    reason = result.reason if result is not None else None
    return RunSummary(
        run_id=record.id,
        owner=record.owner,
        agent=record.request.agent,
        model=record.model,
        created_at=record.created_at,
        status=record.status,
        reason=reason,
        degraded=result.degraded if result is not None else False,
        finish_tool=reason == StopReason.FINISHED,
        steps=record.usage.steps,
        duration_s=max(0.0, (ended - began).total_seconds()),
        tokens=record.usage.total_tokens,
        cost_usd=record.usage.cost_usd,
        tally=dict(tally or {}),
    )


@dataclass(frozen=True, slots=True)
class RunFilter:
    """Which runs: made in [since, until) (either open), of this model and agent profile.
    The owner is the caller's, as list_runs' `owner`/`any_owner` say."""

    since: datetime | None = None
    until: datetime | None = None
    model: str | None = None
    agent: str | None = None

    @property
    def empty(self) -> bool:
        return self == RunFilter()

    def admits(self, created_at: datetime, model: str, agent: str | None) -> bool:
        return (
            (self.since is None or created_at >= self.since)
            and (self.until is None or created_at < self.until)
            and (self.model is None or model == self.model)
            and (self.agent is None or agent == self.agent)
        )

    def admits_record(self, record: RunRecord) -> bool:
        return self.admits(record.created_at, record.model, record.request.agent)
