"""`finishline report`: the termination report as a table, or its JSON, against a served
app."""

from __future__ import annotations

import json
from pathlib import Path

from app.cli.exits import ExitCode
from tests.cli.kit import cli, cli_settings, finish, script
from tests.fakes.service import served_app


async def test_report_shows_each_model_with_its_reasons_and_json_has_the_figures(
    tmp_path: Path,
) -> None:
    async with served_app(cli_settings()) as (server, _):
        for _ in range(2):
            done = await cli(server, "run", "t", "--script", script(tmp_path, finish("42")))
            assert done.code == ExitCode.OK, done
        plain = script(tmp_path, {"content": "hmm"}, {"content": "hmm"})
        await cli(server, "run", "t", "--script", plain, "--set", "max_steps=1")
        table = await cli(server, "report")
        raw = await cli(server, "report", "--json", "--group-by", "day")
        empty = await cli(server, "report", "--model", "nobody")
    assert table.code == ExitCode.OK, table
    header, row = table.out.splitlines()[:2]
    assert header.split()[:6] == ["group", "runs", "completed", "incomplete", "failed", "cancelled"]
    assert row.split()[:6] == ["scripted", "3", "2", "1", "0", "0"]
    assert "finished 2" in row
    assert "max_steps 1" in row
    report = json.loads(raw.out)
    assert report["group_by"] == "day"
    assert report["runs"] == 3
    assert "no ended runs" in empty.out


async def test_report_by_key_without_an_admin_key_is_refused() -> None:
    async with served_app(cli_settings(api_keys=["k" * 24])) as (server, _):
        result = await cli(
            server, "report", "--group-by", "key", env={"FINISHLINE_API_KEY": "k" * 24}
        )
    assert result.code == ExitCode.API_ERROR
    assert "admin" in result.err
