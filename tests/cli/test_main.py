"""The command line itself: help and exit codes, value parsing, what it imports."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from app.cli import build_parser, main, parse_pair, parse_value
from app.cli.client import TERMINAL_EVENT_TYPES
from app.cli.commands import run_body
from app.cli.exits import EPILOG, REASON_EXIT_CODES, ExitCode, exit_code_for, reason_of
from app.engine.events import TERMINAL_EVENT_TYPES as SERVICE_TERMINAL_EVENT_TYPES
from app.engine.policies import StopReason

REPO = Path(__file__).resolve().parents[2]
SCRIPT = Path(sys.executable).parent / "finishline"


def test_the_console_script_prints_help_with_the_exit_codes() -> None:
    assert SCRIPT.exists(), "the console script is missing: run `.venv/bin/pip install -e .`"
    done = subprocess.run(
        [str(SCRIPT), "--help"], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr
    for command in ("run", "runs", "show", "events", "cancel", "serve"):
        assert command in done.stdout
    assert "exit codes:" in done.stdout
    assert "FINISHLINE_API_KEY" in done.stdout


def test_help_imports_neither_httpx_nor_rich_nor_the_service() -> None:
    code = (
        "import sys, contextlib, io\n"
        "from app.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert main(['--help']) == 0\n"
        "heavy = ('httpx', 'rich', 'pydantic', 'fastapi', 'app.runs', 'app.api', 'app.settings')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=30,
        check=True,
    )
    assert done.stdout.strip() == "[]"


def test_every_exit_code_is_in_the_help_and_every_reason_has_one() -> None:
    assert set(REASON_EXIT_CODES) == set(StopReason)
    for code in ExitCode:
        assert f"  {int(code)} " in EPILOG
    for reason in StopReason:
        assert reason.value in EPILOG
    codes = [
        c
        for r, c in REASON_EXIT_CODES.items()
        if r not in (StopReason.FINISHED, StopReason.ANSWERED)
    ]
    assert len(set(codes)) == len(codes)  # each other ending has its own code


def test_the_cli_knows_the_services_terminal_events() -> None:
    assert TERMINAL_EVENT_TYPES == SERVICE_TERMINAL_EVENT_TYPES


def test_a_terminal_event_gives_its_reason() -> None:
    assert (
        reason_of({"type": "run.incomplete", "result": {"reason": "timeout"}}) == StopReason.TIMEOUT
    )
    assert reason_of({"type": "run.cancelled", "usage": {}}) == StopReason.CANCELLED
    assert reason_of({"type": "run.failed", "error": {}}) == StopReason.ERROR
    assert reason_of({"type": "thought", "text": "hi"}) is None
    assert exit_code_for(None) == ExitCode.FAILED


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("3", 3),
        ("-2", -2),
        ("12.5", 12.5),
        ("1e3", 1000.0),
        ("true", True),
        ("False", False),
        ("null", None),
        ("none", None),
        ("en", "en"),
        ('"10"', "10"),
        ("[1, 2]", [1, 2]),
        ('{"a": 1}', {"a": 1}),
        ("NaN", "NaN"),
        ("Infinity", "Infinity"),
        ("", ""),
        ("a=b", "a=b"),
    ],
)
def test_set_values_are_json_or_else_strings(text: str, value: object) -> None:
    assert parse_value(text) == value
    assert type(parse_value(text)) is type(value)


def test_a_pair_splits_at_the_first_equals_sign() -> None:
    assert parse_pair("max_steps=5") == ("max_steps", 5)
    assert parse_pair(" note = a=b") == ("note", " a=b")


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "t", "--set", "max_steps"],
        ["run", "t", "--set", "=3"],
        ["events", "r", "--after", "-1"],
        ["nope"],
        [],
    ],
)
def test_a_bad_command_line_exits_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv, environ={}) == ExitCode.USAGE == 2
    assert "usage: finishline" in capsys.readouterr().err


def test_run_asks_for_tools_and_whole_mcp_servers() -> None:
    args = build_parser().parse_args(
        ["run", "t", "--tool", "docs__search", "--mcp-server", "files", "--mcp-server", "web"]
    )
    body = run_body(args)
    assert body["tools"] == ["docs__search"]
    assert body["mcp_servers"] == ["files", "web"]
    assert "mcp_servers" not in run_body(build_parser().parse_args(["run", "t"]))


def test_without_the_cli_extra_a_command_says_how_to_install_it() -> None:
    code = (
        "import sys\n"
        "sys.modules['rich'] = None  # an install without the cli extra\n"
        "from app.cli import main\n"
        "sys.exit(main(['runs']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=30
    )
    assert done.returncode == 2
    assert "pip install 'finishline[cli]'" in done.stderr
