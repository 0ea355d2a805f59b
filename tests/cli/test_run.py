"""`finishline run`: what it sends, what it shows as the run goes, and how it exits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.cli.exits import ExitCode
from tests.cli.kit import calc, cli, cli_settings, finish, script
from tests.fakes.llm_server import FakeLLMServer, FakeReply
from tests.fakes.service import served_app


async def test_run_shows_each_thought_action_observation_intervention_and_the_end(
    tmp_path: Path,
) -> None:
    replies = [
        calc("6*7", content="Let me compute."),
        {"content": "It is 42, I think."},  # no tool call: the stop prompt follows
        {"tool_calls": [{"name": "nope", "arguments": {}}]},  # unknown tool: an error result
        finish("The answer is 42."),
    ]
    async with served_app(cli_settings()) as (server, _):
        result = await cli(
            server,
            "run",
            "What is 6*7?",
            "--tool",
            "calculator",
            "--script",
            script(tmp_path, *replies),
        )
    assert result.code == ExitCode.OK, result
    out = result.out
    lines = out.splitlines()
    assert any(line.startswith("run run_") and "model scripted" in line for line in lines)
    assert "step 1/10" in out
    assert any(line.startswith("thought") and "Let me compute." in line for line in lines)
    assert any(
        line.startswith("action") and 'calculator(expression="6*7")' in line for line in lines
    )
    assert any(line.startswith("observation") and "42" in line for line in lines)
    assert any(line.startswith("intervention") and "stop_prompt:" in line for line in lines)
    assert any(line.startswith("error") and "nope" in line for line in lines)
    assert "The answer is 42." in out
    assert any(line.startswith("reason") and "finished" in line for line in lines)
    assert "DEGRADED" not in out
    assert any(line.startswith("status") and "completed" in line for line in lines)
    assert any(line.startswith("usage") and "steps 4" in line for line in lines)
    # in the order they happened
    order = ["Let me compute.", "stop_prompt:", "The answer is 42.", "reason"]
    positions = [out.index(marker) for marker in order]
    assert positions == sorted(positions)


REASONS: list[tuple[str, list[dict[str, Any]], list[str], ExitCode]] = [
    ("finished", [finish("42")], [], ExitCode.OK),
    ("answered", [{"content": "42"}], ["stop_tool=false"], ExitCode.OK),
    ("max_steps", [calc()], ["max_steps=1", "final_answer_on_limit=false"], ExitCode.MAX_STEPS),
    (
        "timeout",
        [{"content": "slow", "delay_s": 30}],
        ["max_time_s=0.3", "final_answer_on_limit=false"],
        ExitCode.TIMEOUT,
    ),
    (
        "token_budget",
        [calc(usage={"prompt_tokens": 500, "completion_tokens": 500})],
        ["max_total_tokens=100", "final_answer_on_limit=false"],
        ExitCode.TOKEN_BUDGET,
    ),
    ("nudge_limit", [{"content": "maybe 42"}], ["max_nudges=0"], ExitCode.NUDGE_LIMIT),
    ("error", [calc()], [], ExitCode.FAILED),  # the script runs out at the second call
]


@pytest.mark.parametrize(
    ("reason", "replies", "settings", "code"), REASONS, ids=[r[0] for r in REASONS]
)
async def test_run_exits_with_the_code_of_its_reason(
    tmp_path: Path, reason: str, replies: list[dict[str, Any]], settings: list[str], code: ExitCode
) -> None:
    argv = ["run", "t", "--tool", "calculator", "--script", script(tmp_path, *replies)]
    for setting in settings:
        argv += ["--set", setting]
    async with served_app(cli_settings()) as (server, _):
        result = await cli(server, *argv)
    assert result.code == code, result
    assert any(line.startswith("reason") and reason in line for line in result.out.splitlines())
    if reason == "error":
        assert "script_exhausted" in result.out


async def test_an_answer_given_at_a_limit_is_marked_degraded(tmp_path: Path) -> None:
    replies = [calc(), {"content": "My best guess: 42."}]
    async with served_app(cli_settings()) as (server, _):
        result = await cli(
            server,
            "run",
            "t",
            "--tool",
            "calculator",
            "--set",
            "max_steps=1",
            "--script",
            script(tmp_path, *replies),
        )
    assert result.code == ExitCode.MAX_STEPS
    assert "answer (degraded)" in result.out
    assert "My best guess: 42." in result.out
    assert any(
        line.startswith("reason") and "max_steps" in line and "DEGRADED" in line
        for line in result.out.splitlines()
    )
    assert any(
        line.startswith("intervention") and "max_steps:" in line for line in result.out.splitlines()
    )


async def test_a_failing_model_shows_its_retries() -> None:
    async with (
        FakeLLMServer([FakeReply.http_error(503, "overloaded"), FakeReply.finish("ok")]) as llm,
        served_app(cli_settings(llm_base_url=llm.base_url)) as (server, _),
    ):
        result = await cli(server, "run", "t")
    assert result.code == ExitCode.OK, result
    retry = [line for line in result.out.splitlines() if line.startswith("llm retry")]
    assert len(retry) == 1
    assert "attempt 1" in retry[0]
    assert "503" in retry[0]


async def test_set_values_are_parsed_and_sent_with_tools_system_prompt_and_metadata(
    tmp_path: Path,
) -> None:
    async with served_app(cli_settings()) as (server, client):
        result = await cli(
            server,
            "run",
            "a task",
            "--no-follow",
            "--script",
            script(tmp_path, finish()),
            "--tool",
            "calculator",
            "--tool",
            "current_time",
            "--system",
            "Be brief.",
            "--set",
            "max_steps=3",
            "--set",
            "max_time_s=12.5",
            "--set",
            "stop_tool=false",
            "--set",
            "max_total_tokens=null",
            "--set",
            "prompt_language=zh",
            "--metadata",
            "ticket=42",
            "--metadata",
            "team=core",
        )
        assert result.code == ExitCode.OK, result
        run_id = result.out.strip()
        assert run_id.startswith("run_")
        run = (await client.get(f"/runs/{run_id}")).json()
    assert run["model"] == "scripted"
    assert run["tools"] == ["calculator", "current_time"]
    assert run["system_prompt"] == "Be brief."
    assert run["metadata"] == {"ticket": 42, "team": "core"}
    settings = run["settings"]
    assert settings["max_steps"] == 3
    assert settings["max_time_s"] == 12.5
    assert settings["stop_tool"] is False
    assert settings["max_total_tokens"] is None
    assert settings["prompt_language"] == "zh"


async def test_an_unknown_setting_is_refused_with_the_server_message() -> None:
    async with served_app(cli_settings()) as (server, client):
        result = await cli(server, "run", "t", "--model", "demo", "--set", "max_stepz=3")
        assert (await client.get("/runs")).json()["runs"] == []
    assert result.code == ExitCode.API_ERROR == 9
    assert "error: 422 validation_error: settings.max_stepz: unknown field" in result.err
    assert result.out == ""


async def test_a_setting_over_its_cap_is_refused_naming_the_cap() -> None:
    async with served_app(cli_settings(max_steps=5, max_steps_limit=5)) as (server, _):
        result = await cli(server, "run", "t", "--model", "demo", "--set", "max_steps=50")
    assert result.code == ExitCode.API_ERROR
    assert "422 validation_error: settings.max_steps: 50 exceeds the server cap of 5" in result.err


async def test_run_with_json_prints_every_event_as_a_json_line(tmp_path: Path) -> None:
    async with served_app(cli_settings()) as (server, _):
        result = await cli(server, "run", "t", "--json", "--script", script(tmp_path, finish("42")))
    assert result.code == ExitCode.OK
    events = result.json_lines()
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert events[0]["type"] == "run.queued"
    assert events[-1]["type"] == "run.completed"
    assert events[-1]["result"]["answer"] == "42"


def test_a_script_that_is_not_a_json_list_is_a_usage_error(tmp_path: Path) -> None:
    from app.cli import main
    from tests.cli.kit import console, text_of

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"content": "not a list"}), encoding="utf-8")
    err = console()
    code = main(["run", "t", "--script", str(bad)], console=console(), err_console=err, environ={})
    assert code == ExitCode.USAGE == 2
    assert "must hold a JSON list" in text_of(err)


PRICED = {"scripted": {"input_per_mtok": 2.0, "output_per_mtok": 10.0}}
"""The scripted model priced as a deployment would price a self-hosted model."""


async def test_run_shows_what_each_call_and_the_run_cost(tmp_path: Path) -> None:
    replies = [
        calc(usage={"prompt_tokens": 1000, "completion_tokens": 100}),  # $0.002 + $0.001
        {**finish("42"), "usage": {"prompt_tokens": 2000, "completion_tokens": 50}},  # + $0.0045
    ]
    argv = ["run", "t", "--tool", "calculator", "--script", script(tmp_path, *replies)]
    async with served_app(cli_settings(model_prices=PRICED)) as (server, _):
        result = await cli(server, *argv)
        lines = await cli(server, *argv[:-1], script(tmp_path, *replies), "--json")
    assert result.code == ExitCode.OK, result
    out = " ".join(result.out.split())  # the usage row wraps at 100 columns
    assert "(3000 prompt + 150 completion) · cost $0.0075" in out, result.out
    events = lines.json_lines()
    assert [e["cost_usd"] for e in events if e["type"] == "llm.call"] == [0.003, 0.0045]
    assert events[-1]["usage"]["cost_usd"] == 0.0075


async def test_run_exits_with_the_code_of_cost_budget(tmp_path: Path) -> None:
    replies = [calc(usage={"prompt_tokens": 1000, "completion_tokens": 100})]  # $0.003
    argv = ["run", "t", "--tool", "calculator", "--script", script(tmp_path, *replies)]
    argv += ["--set", "max_cost_usd=0.002", "--set", "final_answer_on_limit=false"]
    async with served_app(cli_settings(model_prices=PRICED)) as (server, _):
        result = await cli(server, *argv)
    assert result.code == ExitCode.COST_BUDGET, result
    assert any(
        line.startswith("reason") and "cost_budget" in line for line in result.out.splitlines()
    )


SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
    "required": ["city", "population"],
}


def answering(value: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": "task_finished", "arguments": {"answer": value}}]}


async def test_run_with_an_output_schema_shows_the_output_as_json(tmp_path: Path) -> None:
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(SCHEMA), encoding="utf-8")
    replies = [answering({"city": "Oslo", "population": 709_000})]
    argv = ["run", "t", "--output-schema", str(schema), "--script", script(tmp_path, *replies)]
    async with served_app(cli_settings()) as (server, _):
        result = await cli(server, *argv)
    assert result.code == ExitCode.OK, result
    assert "output" in result.out
    assert '"city": "Oslo",' in result.out  # indented JSON, a key a line
    assert '"population": 709000' in result.out


async def test_run_exits_with_the_code_of_invalid_output_and_lists_the_errors(
    tmp_path: Path,
) -> None:
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(SCHEMA), encoding="utf-8")
    replies = [answering({"city": "Oslo"})]
    argv = ["run", "t", "--output-schema", str(schema), "--script", script(tmp_path, *replies)]
    argv += ["--set", "max_output_retries=0"]
    async with served_app(cli_settings()) as (server, _):
        result = await cli(server, *argv)
    assert result.code == ExitCode.INVALID_OUTPUT == 12, result
    lines = result.out.splitlines()
    assert any(line.split()[:2] == ["reason", "invalid_output"] for line in lines)
    assert any("$" in line and "'population' is a required property" in line for line in lines)


async def test_run_with_an_unreadable_output_schema_is_a_usage_error(tmp_path: Path) -> None:
    schema = tmp_path / "schema.json"
    schema.write_text("{not json", encoding="utf-8")
    async with served_app(cli_settings()) as (server, _):
        result = await cli(server, "run", "t", "--output-schema", str(schema))
    assert result.code == ExitCode.USAGE, result
    assert "--output-schema" in result.err


async def test_run_with_a_rubric_shows_each_verdict_and_exits_13_when_never_met(
    tmp_path: Path,
) -> None:
    verdict = {"name": "submit_verdict", "arguments": {"satisfied": False, "feedback": "no"}}
    replies = [finish("a"), {"tool_calls": [verdict]}]
    argv = ["run", "t", "--rubric", "names a colour", "--max-revisions", "0"]
    argv += ["--script", script(tmp_path, *replies)]
    async with served_app(cli_settings()) as (server, _):
        result = await cli(server, *argv)
    assert result.code == ExitCode.OUTCOME_UNMET == 13, result
    lines = result.out.splitlines()
    assert any(line.split()[:2] == ["reason", "outcome_unmet"] for line in lines)
    assert any(line.startswith("grader") and "rubric not met: no" in line for line in lines)


async def test_run_with_a_rubric_on_the_demo_model_shows_the_loop() -> None:
    argv = ["run", "What is 6 * 7?", "--model", "demo", "--tool", "calculator"]
    async with served_app(cli_settings()) as (server, _):
        result = await cli(server, *argv, "--rubric", "Gives the product.")
    assert result.code == ExitCode.OK, result
    graded = [line for line in result.out.splitlines() if line.startswith("grader")]
    assert len(graded) == 2
    assert "rubric not met" in graded[0]
    assert "rubric met" in graded[1]
