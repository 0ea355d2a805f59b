"""`finishline schedules`: make, list, show with firings, trigger, pause, resume, delete."""

from __future__ import annotations

import json

from app.cli.exits import ExitCode
from tests.cli.kit import cli, cli_settings
from tests.fakes.service import served_app
from tests.fakes.serving import Served


async def _made(server: Served) -> str:
    made = await cli(
        server,
        "schedules",
        "create",
        "0 9 1 1 *",
        "the",
        "weekday",
        "report",
        "--model",
        "demo",
        "--timezone",
        "Europe/Paris",
        "--json",
    )
    assert made.code == ExitCode.OK, made.err
    body = json.loads(made.out)
    assert (body["cron"], body["timezone"], body["run"]["task"]) == (
        "0 9 1 1 *",
        "Europe/Paris",
        "the weekday report",
    )
    return str(body["id"])


async def test_schedules_are_made_listed_shown_triggered_paused_and_deleted() -> None:
    async with served_app(cli_settings()) as (server, _client):
        sid = await _made(server)
        listed = await cli(server, "schedules")
        fired = await cli(server, "schedules", "trigger", sid)
        shown = await cli(server, "schedules", sid)
        paused = await cli(server, "schedules", "pause", sid, "--json")
        resumed = await cli(server, "schedules", "resume", sid, "--json")
        bad = await cli(server, "schedules", "create", "61 * * * *", "x")
        deleted = await cli(server, "schedules", "delete", sid)
        gone = await cli(server, "schedules", sid)
        empty = await cli(server, "schedules")
    header = next(line for line in listed.out.splitlines() if "schedule" in line)
    assert header.split()[:2] == ["schedule", "cron"]
    assert any(line.startswith(sid) for line in listed.out.splitlines())
    assert fired.out.startswith("fired run_")
    run_id = fired.out.split()[1]
    assert run_id in shown.out
    assert "fired" in shown.out
    assert json.loads(paused.out)["next_due_at"] is None
    assert json.loads(resumed.out)["next_due_at"] is not None
    assert bad.code == ExitCode.API_ERROR
    assert "cron" in bad.err
    assert deleted.code == ExitCode.OK
    assert gone.code != ExitCode.OK
    assert "404" in gone.err
    assert "no schedules" in empty.out
