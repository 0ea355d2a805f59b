"""current_time: ISO 8601 plus the weekday, in UTC or an IANA zone; unknown zones refused."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from app.engine.ports import ToolContext
from app.tools.base import ToolError
from app.tools.current_time import CurrentTimeTool

# A Wednesday, 12:00 UTC; in summer time, so Paris is at +02:00.
NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)


def frozen_clock() -> CurrentTimeTool:
    return CurrentTimeTool(now=lambda: NOW)


async def test_current_time_defaults_to_utc(ctx: ToolContext) -> None:
    assert await frozen_clock().call({}, ctx) == "2024-05-01T12:00:00+00:00 (Wednesday, UTC)"


async def test_current_time_converts_to_the_given_zone(ctx: ToolContext) -> None:
    result = await frozen_clock().call({"timezone": "Europe/Paris"}, ctx)
    assert result == "2024-05-01T14:00:00+02:00 (Wednesday, Europe/Paris)"


async def test_current_time_names_the_local_weekday_across_midnight(ctx: ToolContext) -> None:
    result = await frozen_clock().call({"timezone": "Pacific/Kiritimati"}, ctx)
    assert result == "2024-05-02T02:00:00+14:00 (Thursday, Pacific/Kiritimati)"


async def test_current_time_accepts_zone_names_in_any_case(ctx: ToolContext) -> None:
    result = await frozen_clock().call({"timezone": "america/new_york"}, ctx)
    assert result == "2024-05-01T08:00:00-04:00 (Wednesday, America/New_York)"


@pytest.mark.parametrize("zone", ["Mars/Olympus_Mons", "../../etc/passwd", "Europe/Pariss"])
async def test_current_time_refuses_an_unknown_zone_with_an_example(
    zone: str, ctx: ToolContext
) -> None:
    with pytest.raises(ToolError, match=r"unknown time zone .* such as 'Europe/Paris'"):
        await frozen_clock().call({"timezone": zone}, ctx)


async def test_current_time_suggests_close_zone_names(ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match="Did you mean 'Europe/Paris'"):
        await frozen_clock().call({"timezone": "Europe/Pariss"}, ctx)


async def test_current_time_reads_the_real_clock_by_default(ctx: ToolContext) -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    result = await CurrentTimeTool().call({}, ctx)
    after = datetime.now(UTC)
    stamp = datetime.fromisoformat(result.split(" ")[0])
    assert before <= stamp <= after


def test_current_time_is_not_idempotent_and_validates_its_argument() -> None:
    tool = CurrentTimeTool()
    assert tool.idempotent is False
    assert tool.validate({"timezone": 1}) == "at 'timezone': 1 is not of type 'string'"
    assert tool.validate({"tz": "UTC"}) is not None
