"""configure_logging: JSON lines for finishline's loggers and for other libraries' ones."""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import re
import threading
from collections.abc import Iterator

import pytest
import structlog

from app.logs import configure_logging


@pytest.fixture(autouse=True)
def _restore_root_logger() -> Iterator[None]:
    """configure_logging replaces the root handler with one on the captured stderr."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def lines(err: str) -> list[dict]:
    return [json.loads(line) for line in err.splitlines() if line.strip()]


def test_our_lines_are_json_with_context_and_logger_name(
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure_logging("json", "INFO")
    structlog.contextvars.bind_contextvars(run_id="run_1", step=2)
    try:
        structlog.get_logger("finishline.engine").info("tool_called", tool="calculator")
        structlog.get_logger("finishline.engine").debug("not at INFO")
    finally:
        structlog.contextvars.clear_contextvars()
    (line,) = lines(capsys.readouterr().err)
    assert line["event"] == "tool_called"
    assert (line["run_id"], line["step"], line["tool"]) == ("run_1", 2, "calculator")
    assert (line["level"], line["logger"]) == ("info", "finishline.engine")
    assert "timestamp" in line


def test_foreign_stdlib_lines_are_json_too(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("json", "INFO")
    logging.getLogger("uvicorn.error").warning("port %s busy", 8000)
    logging.getLogger("httpx").info("quiet below WARNING")
    (line,) = lines(capsys.readouterr().err)
    assert (line["event"], line["logger"], line["level"]) == (
        "port 8000 busy",
        "uvicorn.error",
        "warning",
    )


def test_exceptions_are_rendered_into_the_line(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("json", "INFO")
    try:
        raise ValueError("bad")
    except ValueError:
        structlog.get_logger("finishline").exception("request_failed")
    (line,) = lines(capsys.readouterr().err)
    assert "ValueError: bad" in line["exception"]


async def test_lines_of_one_loop_turn_are_written_together_in_order_at_its_end(
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure_logging("json", "INFO")
    loop = asyncio.get_running_loop()
    log = structlog.get_logger("finishline.engine")
    log.info("first")
    logging.getLogger("uvicorn.error").warning("second")
    log.info("third")
    assert capsys.readouterr().err == ""  # gathered: one write for the turn, not three

    turn_over = loop.create_future()
    loop.call_soon(turn_over.set_result, None)  # runs after the write the first line scheduled
    await turn_over

    assert [line["event"] for line in lines(capsys.readouterr().err)] == [
        "first",
        "second",
        "third",
    ]


def test_a_line_logged_in_a_thread_without_a_loop_is_written_at_once(
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure_logging("json", "INFO")
    thread = threading.Thread(target=structlog.get_logger("finishline").info, args=("row",))
    thread.start()
    thread.join()

    assert [line["event"] for line in lines(capsys.readouterr().err)] == ["row"]


def test_a_line_is_what_structlogs_own_processors_would_write(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The one-step processor (`_json_line` after `_merge_contextvars`) writes what
    merge_contextvars, add_log_level, add_logger_name, TimeStamper and JSONRenderer would:
    the same keys and values, the call's first; a key cleared from the context is left out;
    the timestamp is ISO 8601 in UTC with its microseconds."""
    configure_logging("json", "INFO")
    structlog.contextvars.bind_contextvars(run_id="run_1", step=2, gone="x")
    structlog.contextvars.unbind_contextvars("gone")
    try:
        structlog.get_logger("finishline.engine").info(
            "tool_returned", tool="calculator", is_error=False, text="é\u2028", obj=object
        )
    finally:
        structlog.contextvars.clear_contextvars()
    raw = capsys.readouterr().err.strip()
    line = json.loads(raw)
    stamp = line.pop("timestamp")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", stamp)
    taken = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    assert abs(datetime.datetime.now(datetime.UTC) - taken) < datetime.timedelta(minutes=1)
    expected = {
        "tool": "calculator",
        "is_error": False,
        "text": "é\u2028",
        "obj": repr(object),
        "event": "tool_returned",
        "run_id": "run_1",
        "step": 2,
        "level": "info",
        "logger": "finishline.engine",
    }
    assert line == expected
    assert list(line)[:5] == list(expected)[:5]  # the call's keys first, in its order
    assert raw == json.dumps(json.loads(raw))  # json.dumps' form: ensure_ascii, ", " and ": "
