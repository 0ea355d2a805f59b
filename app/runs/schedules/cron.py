"""Cron expressions, parsed and evaluated by `cronsim` (Debian cron's semantics, DST included),
in an IANA time zone. Five fields (minute hour day month weekday), or six with seconds first
(`*/10 * * * * *`), and the usual `@hourly` forms, which cronsim does not read: they are
spelled out here as the five fields Debian's cron gives them.

DST, as cronsim documents it (Debian's cron): an expression naming a specific minute and hour
(both fields without a leading `*`, five fields) that falls in the hour a spring-forward
skips fires once, right at the jump; one in the hour an autumn fall-back repeats fires once,
on its first pass. More frequent expressions (`*/15 * * * *`, every hour) follow the wall
clock: nothing in the skipped hour, and both passes of the repeated one."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from app.engine.errors import FinishlineError

ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
MAX_CHARS = 200


class CronError(FinishlineError, ValueError):
    """The expression or the time zone cannot be used; the message says why."""


def zone(name: str) -> ZoneInfo:
    """The IANA time zone `name` (`Europe/Paris`, `UTC`), or CronError."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise CronError(f"{name[:100]!r} is not an IANA time zone (such as Europe/Paris)") from None


class Cron:
    """One expression in one zone: `after(t)` gives its next due time (epoch seconds)."""

    def __init__(self, expression: str, timezone: str = "UTC") -> None:
        text = " ".join(expression.split())
        if len(text) > MAX_CHARS:
            raise CronError(f"longer than {MAX_CHARS} characters")
        self.expression = ALIASES.get(text.lower(), text)
        if self.expression.startswith("@"):
            raise CronError(f"{text!r}: the @ forms are {', '.join(ALIASES)}")
        if len(self.expression.split()) not in (5, 6):
            raise CronError(f"{text!r}: five fields (minute hour day month weekday), or six")
        self.zone = zone(timezone)
        try:
            probe = CronSim(self.expression, datetime(2000, 1, 1, tzinfo=self.zone))
            next(probe)
        except CronSimError as exc:
            raise CronError(f"{text!r}: {exc}") from None
        except StopIteration:
            raise CronError(f"{text!r} never comes due") from None

    def after(self, t: float) -> float | None:
        """The first due time strictly after `t` (epoch seconds); None if none within 50 years."""
        start = datetime.fromtimestamp(t, self.zone)
        try:
            due = next(CronSim(self.expression, start))
        except StopIteration:
            return None
        return due.astimezone(UTC).timestamp()

    def between(self, start: float, end: float, cap: int = 10_000) -> tuple[float | None, int]:
        """The latest due time in (`start`, `end`] and how many there are (counting at most
        `cap`: past it the latest is searched backwards from `end`)."""
        count, latest = 0, None
        for due in CronSim(self.expression, datetime.fromtimestamp(start, self.zone)):
            at = due.astimezone(UTC).timestamp()
            if at > end:
                return latest, count
            latest, count = at, count + 1
            if count >= cap:
                after_end = datetime.fromtimestamp(int(end) + 1, self.zone)  # whole seconds
                back = CronSim(self.expression, after_end, reverse=True)
                return next(back).astimezone(UTC).timestamp(), count
        return latest, count
