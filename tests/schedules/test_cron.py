"""Cron expressions as cronsim reads them, in a zone; the @ forms; the due times passed."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from app.runs.schedules.cron import Cron, CronError


def at(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


@pytest.mark.parametrize(
    ("alias", "fields"),
    [("@hourly", "0 * * * *"), ("@daily", "0 0 * * *"), ("@WEEKLY", "0 0 * * 0")],
)
def test_the_at_forms_are_the_five_fields_debian_gives_them(alias: str, fields: str) -> None:
    assert Cron(alias).expression == fields


@pytest.mark.parametrize("bad", ["61 * * * *", "* * *", "@fortnightly", "0 0 30 2 *", "x" * 201])
def test_an_impossible_expression_is_refused(bad: str) -> None:
    with pytest.raises(CronError):
        Cron(bad)


def test_due_times_are_read_in_the_zone() -> None:
    cron = Cron("0 9 * * *", "America/New_York")
    assert cron.after(at("2031-01-06T00:00:00+00:00")) == at("2031-01-06T14:00:00+00:00")
    assert Cron("*/15 * * * * *").after(at("2031-01-06T00:00:01+00:00")) == at(
        "2031-01-06T00:00:15+00:00"
    )


def test_between_counts_the_due_times_passed_and_names_the_latest() -> None:
    minute = Cron("* * * * *")
    start = at("2031-01-06T00:00:00+00:00")
    assert minute.between(start, start + 59) == (None, 0)
    assert minute.between(start, start + 600.5) == (start + 600, 10)
    seconds = Cron("* * * * * *")
    assert seconds.between(start, start + 20_000.7, cap=1000) == (start + 20_000, 1000)


def test_a_daily_time_in_the_skipped_hour_runs_at_the_jump_and_once_in_the_repeated_one() -> None:
    cron = Cron("30 2 * * *", "Europe/Paris")
    spring = cron.after(at("2031-03-29T12:00:00+00:00"))
    assert datetime.fromtimestamp(spring, UTC).isoformat() == "2031-03-30T01:00:00+00:00"
    autumn = cron.after(at("2031-10-25T12:00:00+00:00"))
    assert autumn is not None
    assert datetime.fromtimestamp(autumn, UTC).isoformat() == "2031-10-26T00:30:00+00:00"
    following = cron.after(autumn)
    assert following is not None
    assert datetime.fromtimestamp(following, UTC).isoformat() == "2031-10-27T01:30:00+00:00"
