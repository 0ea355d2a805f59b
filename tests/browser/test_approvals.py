"""Approving from the browser: a run waiting for a person shows the pending call with its
arguments; Approve resumes it and the run finishes; Reject sends the person's message."""

from __future__ import annotations

import pytest
from playwright.async_api import Browser, expect

from tests.browser.conftest import ARTIFACTS, open_viewer
from tests.fakes.llm_server import FakeLLMServer, FakeReply, FakeToolCall

pytestmark = pytest.mark.browser

BODY = {
    "task": "What is 6*7?",
    "tools": ["calculator"],
    "approval": {"tools": ["calculator"]},
}


async def test_approve_in_the_viewer_resumes_the_run_to_its_end(browser: Browser) -> None:
    replies = [
        FakeReply(tool_calls=[FakeToolCall("calculator", {"expression": "6*7"}, id="c1")]),
        FakeReply.finish("42"),
    ]
    async with (
        FakeLLMServer(replies) as llm,
        open_viewer(browser, llm_base_url=llm.base_url) as v,
    ):
        created = await v.client.post("/runs", json=BODY)
        run_id = created.json()["id"]
        page = v.page
        await v.open_run(run_id)

        pending = page.locator("#approvals .approval")
        await expect(pending).to_have_count(1)
        await expect(pending).to_have_attribute("data-call-id", "c1")
        await expect(pending.locator(".tool")).to_have_text("calculator")
        await expect(pending.locator(".arguments")).to_contain_text('"expression": "6*7"')
        await expect(page.locator("#run-status")).to_have_text("requires_action")
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=ARTIFACTS / "approval-pending.png", full_page=True)

        await pending.get_by_role("button", name="Approve").click()

        await expect(page.locator("#answer-text")).to_have_text("42")
        await expect(page.locator("#run-status")).to_have_text("completed")
        await expect(page.locator("#approvals")).to_be_hidden()
        await expect(page.locator("#timeline .approval.decided.approved")).to_have_count(1)
        assert llm.requests[1]["messages"][-1] == {
            "role": "tool",
            "tool_call_id": "c1",
            "content": "42",
        }


async def test_reject_in_the_viewer_tells_the_model_why(browser: Browser) -> None:
    replies = [
        FakeReply(tool_calls=[FakeToolCall("calculator", {"expression": "6*7"}, id="c1")]),
        FakeReply.finish("I was told not to"),
    ]
    async with (
        FakeLLMServer(replies) as llm,
        open_viewer(browser, llm_base_url=llm.base_url) as v,
    ):
        run_id = (await v.client.post("/runs", json=BODY)).json()["id"]
        page = v.page
        await v.open_run(run_id)
        pending = page.locator("#approvals .approval")
        await expect(pending).to_have_count(1)

        await pending.get_by_label("Message for the agent (calculator)").fill("Do it by hand.")
        await pending.get_by_role("button", name="Reject").click()

        await expect(page.locator("#answer-text")).to_have_text("I was told not to")
        rejected = page.locator("#timeline .approval.decided.rejected")
        await expect(rejected.locator(".text")).to_have_text("Do it by hand.")
        told = llm.requests[1]["messages"][-1]
        assert told["tool_call_id"] == "c1"
        assert "Do it by hand." in told["content"]
