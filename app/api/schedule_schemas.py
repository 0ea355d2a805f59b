"""Request and response bodies of /schedules (DESIGN §21)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator

from app.api.schemas import _Representable
from app.runs.errors import InvalidRunError
from app.runs.jsonsafe import shallow
from app.runs.schedules.records import Firing, FiringOutcome, Misfire, Overlap, Schedule

CRON = (
    "Five fields (minute hour day-of-month month day-of-week, Debian cron's syntax, as the "
    "cronsim library reads it), six with seconds first (`*/10 * * * * *`), or @yearly, "
    "@monthly, @weekly, @daily, @midnight, @hourly."
)
RUN = (
    "The run each firing starts: a POST /runs body (`thread_id` to continue a thread), checked "
    "as POST /runs checks one (422 naming `run.FIELD`), and again at each firing. Not "
    "`stream`."
)


ZONE = "IANA time zone the cron is read in (Europe/Paris); DST as cronsim (Debian cron) does."
ENABLED = "false: it does not fire (its next due time is null)."
STARTS = "No due time before this (with its UTC offset)."
ENDS = "No due time after this (with its UTC offset); after starts_at."
OVERLAP = (
    "While its previous run has not ended: `skip` the due time (recorded skipped_overlap) or "
    "`allow` another run."
)
MISFIRE = (
    "Due times passed while no scheduler ran: `run_once` fires the latest once (within "
    "FINISHLINE_SCHEDULE_MISFIRE_GRACE_S), `skip` none (recorded missed)."
)
METADATA = "Your own data, kept as sent."


class ScheduleFields(_Representable):
    model_config = ConfigDict(extra="forbid")

    timezone: str = Field("UTC", max_length=100, description=ZONE)
    enabled: bool = Field(True, description=ENABLED)
    starts_at: AwareDatetime | None = Field(None, description=STARTS)
    ends_at: AwareDatetime | None = Field(None, description=ENDS)
    overlap: Overlap = Field(Overlap.SKIP, description=OVERLAP)
    misfire: Misfire = Field(Misfire.RUN_ONCE, description=MISFIRE)
    metadata: dict[str, Any] = Field(default_factory=dict, description=METADATA)

    _shallow_metadata = field_validator("metadata", mode="before")(shallow)


class ScheduleCreate(ScheduleFields):
    """POST /schedules."""

    cron: str = Field(max_length=200, description=CRON)
    run: dict[str, Any] = Field(description=RUN)

    _shallow_run = field_validator("run", mode="before")(shallow)


class SchedulePatch(_Representable):
    """PATCH /schedules/{id}: the fields given replace the schedule's (checked whole again)."""

    model_config = ConfigDict(extra="forbid")

    cron: str | None = Field(None, max_length=200, description=CRON)
    timezone: str | None = Field(None, max_length=100, description=ZONE)
    run: dict[str, Any] | None = Field(None, description=RUN)
    enabled: bool | None = Field(None, description=ENABLED)
    starts_at: AwareDatetime | None = Field(None, description=STARTS + " null: none.")
    ends_at: AwareDatetime | None = Field(None, description=ENDS + " null: none.")
    overlap: Overlap | None = Field(None, description=OVERLAP)
    misfire: Misfire | None = Field(None, description=MISFIRE)
    metadata: dict[str, Any] | None = Field(None, description=METADATA)

    _shallow = field_validator("run", "metadata", mode="before")(shallow)

    def changes(self) -> dict[str, Any]:
        """The fields sent (a null `starts_at`/`ends_at` clears it; another null is refused,
        InvalidRunError naming it)."""
        for name in sorted(self.model_fields_set - {"starts_at", "ends_at"}):
            if getattr(self, name) is None:
                raise InvalidRunError(name, "only starts_at and ends_at may be null")
        return {k: getattr(self, k) for k in self.model_fields_set}


def _at(t: float | None) -> datetime | None:
    return datetime.fromtimestamp(t, UTC) if t is not None else None


class ScheduleView(BaseModel):
    """A schedule: the run it starts, when, and what it does when a run overlaps or a due
    time was missed."""

    id: str = Field(description="The schedule's id.")
    cron: str = Field(description=CRON)
    timezone: str = Field(description=ZONE)
    run: dict[str, Any] = Field(description=RUN)
    enabled: bool = Field(description=ENABLED)
    starts_at: datetime | None = Field(description=STARTS)
    ends_at: datetime | None = Field(description=ENDS)
    overlap: Overlap = Field(description=OVERLAP)
    misfire: Misfire = Field(description=MISFIRE)
    metadata: dict[str, Any] = Field(description=METADATA)
    created_at: datetime = Field(description="When it was made.")
    updated_at: datetime = Field(description="When it was last changed.")
    next_due_at: datetime | None = Field(
        description="When it next comes due; null when disabled or past ends_at."
    )


def to_schedule_view(schedule: Schedule) -> ScheduleView:
    data = schedule.model_dump(exclude={"owner", "next_due_at"})
    return ScheduleView(**data, next_due_at=_at(schedule.next_due_at))


class FiringView(BaseModel):
    """One due time and what came of it."""

    schedule_id: str = Field(description="The schedule.")
    due_at: datetime = Field(description="The due time (now, for a trigger).")
    fired_at: datetime | None = Field(description="When it was settled; null while claimed.")
    outcome: FiringOutcome = Field(
        description="fired (run_id), skipped_overlap, refused (a quota, the queue, a busy "
        "thread), invalid (the run body is no longer accepted), disabled "
        "(FINISHLINE_SCHEDULES_ENABLED=false), missed (misfire), or claimed (being fired)."
    )
    run_id: str | None = Field(description="The run it started, when it did.")
    reason: str | None = Field(description="Why no run, when none.")
    details: dict[str, Any] = Field(
        description="What refused the run (a quota's name, limit and use), or the previous run "
        "still active (previous_run_id)."
    )
    missed: int = Field(description="Earlier due times passed over with this one (a misfire).")
    manual: bool = Field(description="Made by POST /schedules/{id}/trigger.")
    attempt: int = Field(description="1, plus one per takeover of a claimant that died.")


def to_firing_view(firing: Firing) -> FiringView:
    return FiringView(
        schedule_id=firing.schedule_id,
        due_at=datetime.fromtimestamp(firing.due_at, UTC),
        fired_at=_at(firing.fired_at),
        outcome=firing.outcome,
        run_id=firing.run_id,
        reason=firing.reason,
        details=firing.details,
        missed=firing.missed,
        manual=firing.manual,
        attempt=firing.attempt,
    )


class ScheduleList(BaseModel):
    """A page of your schedules."""

    schedules: list[ScheduleView] = Field(description="Oldest first.")
    next_cursor: str | None = Field(description="Pass back as ?cursor= for the next page.")


class FiringList(BaseModel):
    """A page of a schedule's firings."""

    firings: list[FiringView] = Field(description="Newest due time first.")
    next_cursor: str | None = Field(description="Pass back as ?before= for older firings.")
