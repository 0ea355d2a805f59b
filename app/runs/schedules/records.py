"""What a schedule is and what its firings were (DESIGN §21), as the store keeps them.

A schedule is stored whole as JSON (`Schedule`), its `next_due_at` beside it where the store
can index it: the scheduler asks for the schedules due, and moves a schedule on from one due
time to the next by compare-and-set. A firing is one due time of one schedule, claimed once
(`Firing`, keyed by `(schedule_id, due_at)`), then settled with what came of it."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field

from app.runs.records import utcnow


class Overlap(StrEnum):
    """A due time while the schedule's previous run has not ended: skip it, or run anyway."""

    SKIP = "skip"
    ALLOW = "allow"


class Misfire(StrEnum):
    """Due times that passed while no scheduler ran: fire the latest once (within the grace,
    FINISHLINE_SCHEDULE_MISFIRE_GRACE_S), or none."""

    RUN_ONCE = "run_once"
    SKIP = "skip"


class FiringOutcome(StrEnum):
    """What came of a due time. `claimed`: a scheduler holds it and is starting its run (one
    that died there is taken over: the run is started once, by the idempotency key)."""

    CLAIMED = "claimed"
    FIRED = "fired"  # a run was started: `run_id`
    SKIPPED_OVERLAP = "skipped_overlap"  # the previous run had not ended (overlap skip)
    REFUSED = "refused"  # a quota, the queue or a busy thread refused the run (`reason`)
    INVALID = "invalid"  # the run body is no longer one POST /runs accepts (`reason`)
    DISABLED = "disabled"  # FINISHLINE_SCHEDULES_ENABLED=false on the replica that claimed it
    MISSED = "missed"  # passed while no scheduler ran, and the misfire policy fired none


def new_schedule_id() -> str:
    """`sch_` + 24 hex digits: milliseconds then random bits, so ids sort by creation."""
    millis = int(datetime.now(UTC).timestamp() * 1000)
    return f"sch_{millis:012x}{os.urandom(6).hex()}"


class Schedule(BaseModel):
    """A schedule as stored. `run` is the POST /runs body it starts, as the client sent it
    (checked like one when made or changed, and again at each firing). `next_due_at` is when
    it next comes due (epoch seconds); None when disabled, or past `ends_at`."""

    id: str
    owner: str | None = None
    cron: str
    timezone: str = "UTC"
    run: dict[str, Any]
    enabled: bool = True
    starts_at: datetime | None = None
    ends_at: datetime | None = None
    overlap: Overlap = Overlap.SKIP
    misfire: Misfire = Misfire.RUN_ONCE
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)
    next_due_at: float | None = None


@dataclass(frozen=True, slots=True)
class Firing:
    """One due time of one schedule. Claimed by one scheduler (`claimed_by`, until
    `lease_until`, epoch seconds) and then settled: `outcome`, the run it started or why none,
    when (`fired_at`). `missed`: earlier due times passed over with this one (a misfire);
    `manual`: POST /schedules/{id}/trigger made it; `attempt`: 1, plus one per takeover."""

    schedule_id: str
    due_at: float
    claimed_by: str
    lease_until: float
    outcome: FiringOutcome = FiringOutcome.CLAIMED
    run_id: str | None = None
    reason: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    fired_at: float | None = None
    missed: int = 0
    manual: bool = False
    attempt: int = 1

    @property
    def settled(self) -> bool:
        return self.outcome is not FiringOutcome.CLAIMED

    def settle(self, outcome: FiringOutcome, at: float, **values: Any) -> Firing:
        return replace(self, outcome=outcome, fired_at=at, **values)

    def to_json(self) -> dict[str, Any]:
        return {
            "schedule_id": self.schedule_id,
            "due_at": self.due_at,
            "claimed_by": self.claimed_by,
            "lease_until": self.lease_until,
            "outcome": self.outcome.value,
            "run_id": self.run_id,
            "reason": self.reason,
            "details": self.details,
            "fired_at": self.fired_at,
            "missed": self.missed,
            "manual": self.manual,
            "attempt": self.attempt,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Firing:
        return cls(**{**data, "outcome": FiringOutcome(data["outcome"])})


def idempotency_key(schedule_id: str, due_at: float) -> str:
    """The run of one due time: derived from the schedule and the due time alone, so a
    takeover of the firing finds the run a dead scheduler made, never makes a second."""
    return f"schedule:{schedule_id}:{round(due_at * 1000)}"
