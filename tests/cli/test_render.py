"""What a person sees of each event, checked on a plain 100-column console."""

from __future__ import annotations

from typing import Any

from app.cli.lines import LineRenderer, event_summary
from app.cli.render import RunRenderer
from app.cli.tables import run_detail
from app.cli.text import compact_arguments, head, usd
from tests.cli.kit import console, text_of


def _event(type: str, **payload: Any) -> dict[str, Any]:
    return {
        "run_id": "run_X",
        "seq": 7,
        "type": type,
        "ts": "2025-01-01T12:00:00.000+00:00",
        "step": 2,
        **payload,
    }


def _shown(*events: dict[str, Any]) -> list[str]:
    out = console()
    renderer = RunRenderer(out)
    for event in events:
        renderer.show(event)
    return [line.rstrip() for line in text_of(out).splitlines()]


def _observation(content: str, **flags: Any) -> dict[str, Any]:
    return _event(
        "observation", call_id="c1", tool="http_get", content=content, duration_ms=12, **flags
    )


def test_a_long_observation_shows_its_first_lines_and_how_much_of_it() -> None:
    content = "\n".join(f"line {n}" for n in range(1, 101))
    lines = _shown(_observation(content))
    assert lines[0] == "observation  line 1"
    assert "line 8" in lines[7]
    assert not any("line 9" in line for line in lines)
    assert f"showing {len(head(content))} of {len(content)} chars · http_get, 12 ms" in lines[-1]


def test_a_truncated_result_says_how_much_the_model_saw() -> None:
    lines = _shown(_observation("short", truncated=True, shown_chars=2000, original_chars=9000))
    assert lines[-1].endswith("the model saw 2000 of 9000 chars · http_get, 12 ms")
    assert "showing" not in lines[-1]


def test_an_error_observation_is_labelled_error() -> None:
    lines = _shown(_observation("unknown tool 'nope'", is_error=True, timed_out=True))
    assert lines[0].startswith("error        unknown tool 'nope'")
    assert "timed out" in lines[-1]


def test_an_intervention_and_a_retry_are_their_own_blocks() -> None:
    lines = _shown(
        _event("intervention", kind="stop_prompt", message="Confirm the task is done."),
        _event("llm.retry", attempt=2, error="503 overloaded", delay_s=1.5),
    )
    assert lines == [
        "intervention stop_prompt: Confirm the task is done.",
        "llm retry    attempt 2 failed: 503 overloaded; retrying in 1.5 s",
    ]


def test_an_action_shows_its_tool_and_compact_arguments() -> None:
    lines = _shown(
        _event("action", call_id="c1", tool="calculator", arguments={"expression": "6*7"})
    )
    assert lines == ['action       calculator(expression="6*7")']
    assert compact_arguments({"q": "x" * 500}).endswith("…")
    assert compact_arguments("{not json") == "{not json"


def test_an_event_of_a_type_it_does_not_know_is_shown_anyway() -> None:
    lines = _shown(_event("tool.progress", percent=50))
    assert lines[0].startswith("event        tool.progress")
    assert '"percent": 50' in lines[0]


def test_a_failed_run_ends_with_its_reason_error_and_usage() -> None:
    usage = {
        "steps": 1,
        "llm_calls": 1,
        "tool_calls": 0,
        "prompt_tokens": 5,
        "completion_tokens": 2,
        "total_tokens": 7,
    }
    lines = _shown(
        _event(
            "run.failed", error={"type": "llm_status", "message": "401 from the model"}, usage=usage
        )
    )
    text = "\n".join(lines)
    assert "(no answer)" in text
    assert "reason       error" in text
    assert "status       failed" in text
    assert "error        llm_status: 401 from the model" in text
    assert (
        "usage        steps 1 · llm calls 1 · tool calls 0 · tokens 7 (5 prompt + 2 completion)"
        in text
    )


def test_the_status_line_counts_steps_time_and_tokens() -> None:
    out = console()
    renderer = RunRenderer(out, clock=lambda: 1735732810.0)  # 10 s after run.started
    renderer.show(_event("run.queued", task="t", settings={"max_steps": 5, "max_time_s": 60}))
    renderer.show({**_event("run.started"), "ts": "2025-01-01T12:00:00+00:00"})
    renderer.show({**_event("step.started", max_steps=5), "step": 2})
    renderer.show(_event("llm.call", prompt_tokens=100, completion_tokens=20, cost_usd=0.0002))
    renderer.show(_event("llm.call", prompt_tokens=10, completion_tokens=0, cost_usd=0.00005))
    status = console()
    status.print(renderer.status)
    line = text_of(status)
    assert "step 2/5" in line
    assert "time 10.0/60s" in line
    assert "tokens 130" in line
    assert "cost $0.00025" in line
    assert "step 2/5" in text_of(out)  # the step's rule
    renderer.show(_event("llm.call", prompt_tokens=1, completion_tokens=1, cost_usd=None))
    renderer.show(_event("llm.call", prompt_tokens=1, completion_tokens=1, cost_usd=0.1))
    status = console()
    status.print(renderer.status)
    assert "cost unknown" in text_of(status)  # once a call had no price, the sum is unknown


def test_costs_read_as_dollars_and_unknown_without_a_price() -> None:
    assert [usd(v) for v in (0.0, 0, 0.000165, 1.5, 12.0, 0.0075, 3e-9)] == [
        "$0",
        "$0",
        "$0.000165",
        "$1.5",
        "$12",
        "$0.0075",
        "$3.0e-09",
    ]
    assert [usd(v) for v in (None, "1", True)] == ["unknown"] * 3
    line = event_summary(
        _event(
            "llm.call",
            model="m",
            duration_ms=3,
            prompt_tokens=5,
            completion_tokens=2,
            cost_usd=None,
        )
    )
    assert line == "m 3 ms 5+2 tokens unknown"
    ended = event_summary(
        _event("run.completed", result={"reason": "finished"}, usage={"steps": 1, "cost_usd": 0.25})
    )
    assert ended.endswith("steps=1 tokens=0 cost=$0.25")


def test_event_lines_are_one_line_each_and_cut_to_the_width() -> None:
    out = console()
    renderer = LineRenderer(out)
    renderer.show(_event("thought", text="a long thought\nover lines " + "x" * 300))
    renderer.show(
        _event(
            "run.completed",
            result={"answer": "42", "reason": "finished", "degraded": False},
            usage={"steps": 2, "total_tokens": 9},
        )
    )
    lines = text_of(out).splitlines()
    assert len(lines) == 2
    assert all(len(line) <= 100 for line in lines)
    assert "thought         a long thought over lines x" in lines[0]
    assert lines[0].endswith("…")
    assert event_summary(_event("observation", tool="calculator", content="42", is_error=True)) == (
        "calculator [is_error] → 42"
    )


def test_the_detail_of_a_traced_run_shows_its_trace_id() -> None:
    run = {"id": "run_X", "status": "running", "model": "demo", "task": "t", "settings": {}}
    out = console()
    out.print(run_detail(run))
    assert "trace" not in text_of(out)

    out = console()
    out.print(run_detail({**run, "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736"}))
    lines = [line.split() for line in text_of(out).splitlines()]
    assert ["trace", "4bf92f3577b34da6a3ce929d0e0e4736"] in lines
