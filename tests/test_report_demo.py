"""bench/report_demo.py (`make report-demo`): the fixed tasks run through finishline against
an OpenAI-compatible endpoint (here the fake LLM over HTTP), then the termination report."""

from __future__ import annotations

from bench.report_demo import TASKS, demo
from tests.fakes.llm_server import FakeLLMServer, FakeReply


async def test_the_demo_runs_every_task_and_reports_how_they_ended() -> None:
    def answer(request: object) -> FakeReply:
        return FakeReply.finish("done")

    async with FakeLLMServer(handler=answer) as llm:
        report = await demo(llm.base_url, "tiny-model", timeout_s=10)
    assert report["runs"] == len(TASKS)
    (group,) = report["groups"]
    assert group["group"] == "tiny-model"
    assert group["by_reason"]["finished"] == len(TASKS)
