"""The viewer shows an outcome's loop (DESIGN §22): each grader verdict as an entry with its
feedback, the `outcome_unmet` intervention labelled, and the run's reason."""

from __future__ import annotations

from playwright.async_api import Browser, expect

from tests.browser.conftest import open_viewer
from tests.fakes.llm_server import FakeLLMServer, FakeReply


def verdict(satisfied: bool, feedback: str) -> FakeReply:
    return FakeReply.call("submit_verdict", {"satisfied": satisfied, "feedback": feedback})


async def test_the_timeline_shows_each_verdict_and_the_feedback_given_back(
    browser: Browser,
) -> None:
    replies = [
        FakeReply.finish("a shape"),
        verdict(False, "name a colour"),
        FakeReply.finish("red"),
        verdict(True, "red is a colour"),
    ]
    body = {"task": "Name something.", "outcome": {"rubric": "The answer names a colour."}}
    async with (
        FakeLLMServer(replies) as llm,
        open_viewer(browser, llm_base_url=llm.base_url, llm_model="fake-model") as v,
    ):
        run = (await v.client.post("/runs", json=body)).json()
        await v.client.get(f"/runs/{run['id']}/wait", params={"timeout_s": 10})
        await v.page.goto("/")
        await v.ready()
        await v.open_run(run["id"])
        page = v.page
        await expect(page.locator("#run-reason")).to_have_text("finished")
        timeline = page.locator("#timeline")
        verdicts = timeline.locator('[data-type="outcome.graded"]')
        await expect(verdicts).to_have_count(2)
        await expect(verdicts.nth(0)).to_contain_text("Grader: rubric not met")
        await expect(verdicts.nth(0)).to_contain_text("name a colour")
        await expect(verdicts.nth(1)).to_contain_text("Grader: rubric met")
        unmet = timeline.locator('[data-kind="outcome_unmet"]')
        await expect(unmet).to_contain_text("Rubric not met")
