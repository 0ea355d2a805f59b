"""The server settings of schedules (DESIGN §21). `app.settings.ServerSettings` inherits them,
so they are `FINISHLINE_*` variables like any other, declared once here."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings


class ScheduleSettings(BaseSettings):
    schedules_enabled: bool = Field(
        True,
        description="Fire schedules. false: every due time is recorded as a firing of outcome "
        "`disabled` and no run is made; the /schedules API still answers.",
    )
    schedule_misfire_grace_s: float = Field(
        3600.0,
        ge=0,
        description="A schedule with misfire run_once fires its latest missed due time (one "
        "that passed while no scheduler ran) when it is at most this old; older, or with "
        "misfire skip, it is recorded as missed.",
    )
    schedule_poll_s: float = Field(
        1.0,
        gt=0,
        le=60,
        description="How often the scheduler looks for due schedules when it knows of none "
        "due sooner (a schedule made on another replica is seen within this).",
    )
