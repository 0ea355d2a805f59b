"""The `current_time` tool: the date and time now, in UTC or an IANA time zone.

Zones come from the system's tz database, else from the `tzdata` package (a dependency, so
slim containers work). A zone name is matched exactly first, then case-insensitively
("europe/paris"); an unknown one is refused with examples and the closest known names.
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Callable
from datetime import UTC, datetime, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from app.engine.ports import ToolContext
from app.tools.base import SchemaTool, ToolError

Now = Callable[[], datetime]
"""Returns the current instant as an aware datetime; injectable for tests."""

_UTC_NAMES = frozenset({"utc", "z", "etc/utc", "gmt", "etc/gmt"})

PARAMETERS = {
    "type": "object",
    "properties": {
        "timezone": {
            "type": "string",
            "description": "An IANA time zone such as 'Europe/Paris'. Default: UTC.",
        }
    },
    "additionalProperties": False,
}


def _utc_now() -> datetime:
    return datetime.now(UTC)


class CurrentTimeTool(SchemaTool):
    """Tells the current time; not idempotent, since the answer changes with every call."""

    def __init__(self, now: Now = _utc_now) -> None:
        super().__init__(
            name="current_time",
            description=(
                "Get the current date and time (ISO 8601) and the day of the week, in UTC "
                "or in the given IANA time zone."
            ),
            parameters=PARAMETERS,
            builtin=True,
            idempotent=False,
        )
        self._now = now

    async def call(self, arguments: dict[str, Any], ctx: ToolContext) -> str:
        name = (arguments.get("timezone") or "UTC").strip() or "UTC"
        zone, label = resolve_zone(name)
        moment = self._now().astimezone(zone)
        return f"{moment.isoformat(timespec='seconds')} ({moment:%A}, {label})"


def resolve_zone(name: str) -> tuple[tzinfo, str]:
    """The zone called `name` and its canonical spelling, or `ToolError` with suggestions."""
    if name.lower() in _UTC_NAMES:
        return UTC, "UTC"
    try:
        return ZoneInfo(name), name
    except (ZoneInfoNotFoundError, ValueError):
        pass
    canonical = _zones_by_lower_name().get(name.lower())
    if canonical is not None:
        return ZoneInfo(canonical), canonical
    close = difflib.get_close_matches(name, sorted(_zones_by_lower_name().values()), n=3)
    hint = f" Did you mean {', '.join(repr(zone) for zone in close)}?" if close else ""
    raise ToolError(
        f"unknown time zone {name!r}: use an IANA name such as 'Europe/Paris', "
        f"'America/New_York' or 'UTC'.{hint}"
    )


@functools.cache
def _zones_by_lower_name() -> dict[str, str]:
    return {zone.lower(): zone for zone in available_timezones()}
