"""bench/report_demo.py (`make report-demo`): the fixed tasks run through finishline against
an OpenAI-compatible endpoint (here the fake LLM over HTTP), then one line per task and the
termination report."""

from __future__ import annotations

from typing import Any

import pytest
from rich.console import Console

from bench.report_demo import TASKS, demo, main, runs_table
from tests.fakes.llm_server import FakeLLMServer, FakeReply


async def test_the_demo_runs_every_task_and_reports_how_they_ended() -> None:
    def answer(request: dict[str, Any]) -> FakeReply:
        if "the sea" in request["messages"][-1]["content"]:
            raise ValueError("the model cannot swim")
        return FakeReply.finish("done")

    async with FakeLLMServer(handler=answer) as llm:
        runs, report = await demo(llm.base_url, "tiny-model", timeout_s=10)
    assert [run["task"] for run in runs] == list(TASKS)
    ended = {run["task"]: (run["status"], run["result"]["reason"]) for run in runs}
    assert ended.pop("Write one sentence about the sea.") == ("failed", "error")
    assert set(ended.values()) == {("completed", "finished")}
    assert report["runs"] == len(TASKS)
    (group,) = report["groups"]
    assert group["group"] == "tiny-model"
    assert group["by_reason"]["finished"] == len(TASKS) - 1
    assert group["by_reason"]["error"] == 1

    console = Console(width=200, record=True)
    console.print(runs_table(runs))
    lines = console.export_text().splitlines()
    (sea,) = [line for line in lines if "the sea" in line]
    assert "failed" in sea
    assert "llm_status: HTTP 400" in sea
    (france,) = [line for line in lines if "France" in line]
    assert "completed" in france
    assert "finished" in france
    assert france.rstrip().endswith("done")


async def test_settings_given_apply_to_every_task() -> None:
    def calculate(request: dict[str, Any]) -> FakeReply:
        return FakeReply.call("calculator", {"expression": "6*7"})

    async with FakeLLMServer(handler=calculate) as llm:
        runs, report = await demo(
            llm.base_url,
            "tiny-model",
            timeout_s=10,
            run_settings={"max_steps": 1, "final_answer_on_limit": False},
        )
    assert {(run["result"]["reason"], run["usage"]["steps"]) for run in runs} == {("max_steps", 1)}
    assert report["groups"][0]["by_reason"]["max_steps"] == len(TASKS)


async def test_a_setting_finishline_refuses_stops_the_demo_with_its_error() -> None:
    async with FakeLLMServer(handler=lambda _: FakeReply.finish("done")) as llm:
        with pytest.raises(SystemExit, match="max_steps"):
            await demo(llm.base_url, "tiny-model", timeout_s=10, run_settings={"max_steps": 0})


@pytest.mark.parametrize("given", ["{not json", "[1, 2]"])
def test_settings_that_are_not_a_json_object_are_refused_before_anything_runs(
    given: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--settings", given])
    assert stopped.value.code == 2
    assert "--settings" in capsys.readouterr().err
