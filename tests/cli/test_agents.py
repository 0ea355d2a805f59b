"""`finishline agents` (the profiles a service offers, or one in full) and `finishline run
--agent NAME`, against a served app."""

from __future__ import annotations

import json
from pathlib import Path

from app.cli.exits import ExitCode
from tests.cli.kit import cli, cli_settings, finish, script
from tests.fakes.service import served_app

AGENTS = {
    "researcher": {
        "description": "Plans, then computes.",
        "tools": ["calculator"],
        "settings": {"planning_interval": 2, "max_steps": 6},
    },
    "quick": {"description": "Answers at once.", "settings": {"stop_tool": False}},
}


async def test_agents_lists_each_profile_with_its_model_tools_and_description() -> None:
    async with served_app(cli_settings(agents=AGENTS)) as (server, _):
        result = await cli(server, "agents")
        raw = await cli(server, "agents", "--json")
    assert result.code == ExitCode.OK, result
    lines = result.out.splitlines()
    assert lines[0].split() == ["agent", "model", "tools", "description"]
    quick, researcher = lines[1:3]
    assert quick.split()[:3] == ["quick", "demo", "none"]
    assert researcher.split()[:2] == ["researcher", "demo"]
    assert "calculator, update_plan" in researcher
    assert "Plans, then computes." in researcher
    assert [a["name"] for a in json.loads(raw.out)["agents"]] == ["quick", "researcher"]


async def test_agents_name_shows_one_in_full_and_an_unknown_one_is_not_found() -> None:
    async with served_app(cli_settings(agents=AGENTS)) as (server, _):
        one = await cli(server, "agents", "researcher")
        missing = await cli(server, "agents", "nobody")
    assert one.code == ExitCode.OK, one
    assert "calculator (builtin), update_plan (builtin)" in one.out
    lines = one.out.splitlines()
    rows = [line.split() for line in lines[lines.index("settings") + 1 :] if line.strip()]
    settings = dict(rows)
    assert (settings["planning_interval"], settings["max_steps"]) == ("2", "6")
    assert missing.code == ExitCode.API_ERROR
    assert "no agent profile 'nobody'" in missing.err


async def test_a_service_without_profiles_says_so() -> None:
    async with served_app(cli_settings()) as (server, _):
        result = await cli(server, "agents")
    assert result.code == ExitCode.OK
    assert "no agents" in result.out


async def test_run_with_an_agent_names_it_and_shows_it(tmp_path: Path) -> None:
    async with served_app(cli_settings(agents=AGENTS)) as (server, client):
        result = await cli(
            server,
            "run",
            "What is 6 * 7?",
            "--agent",
            "researcher",
            "--set",
            "planning_interval=null",
            "--script",
            script(tmp_path, finish("42")),
        )
        runs = (await client.get("/runs")).json()["runs"]
    assert result.code == ExitCode.OK, result
    assert "agent researcher" in result.out.splitlines()[0]
    (run,) = runs
    assert (run["agent"], run["tools"]) == ("researcher", ["calculator"])
    # the profile's settings, with the command line's on top
    assert (run["settings"]["max_steps"], run["settings"]["planning_interval"]) == (6, None)


async def test_run_with_an_unknown_agent_prints_the_servers_refusal() -> None:
    async with served_app(cli_settings(agents=AGENTS)) as (server, _):
        result = await cli(server, "run", "t", "--agent", "nobody")
    assert result.code == ExitCode.API_ERROR
    assert "agent: no agent profile 'nobody'" in result.err
    assert "profiles: quick, researcher" in result.err
