"""Talking to runs from the browser: Send a message to a live run, Continue an ended one."""

from __future__ import annotations

import pytest
from playwright.async_api import Browser, expect

from tests.browser.conftest import ARTIFACTS, open_viewer
from tests.fakes.llm_server import FakeLLMServer, FakeReply, FakeToolCall

pytestmark = pytest.mark.browser


async def test_send_reaches_the_next_model_call_and_continue_starts_a_follow_up(
    browser: Browser,
) -> None:
    replies = [
        FakeReply(tool_calls=[FakeToolCall("calculator", {"expression": "6*7"})], hang=True),
        FakeReply.finish("42"),
        FakeReply.finish("84"),
    ]
    async with (
        FakeLLMServer(replies) as llm,
        open_viewer(browser, llm_base_url=llm.base_url) as v,
    ):
        page = v.page
        await page.goto("/")
        await v.ready()
        await page.get_by_label("Task", exact=True).fill("What is 6*7?")
        await page.get_by_role("button", name="Start run").click()
        await llm.wait_for_requests(1)  # the first model call is held: the run is live

        await expect(page.locator("#continue-form")).to_be_hidden()
        await page.get_by_label("Message the agent").fill("Show your work.")
        await page.get_by_role("button", name="Send").click()
        await expect(page.get_by_label("Message the agent")).to_have_value("")  # 202: sent
        await expect(page.locator("#send-error")).to_have_text("")
        llm.release()

        timeline = page.locator("#timeline")
        said = timeline.locator(".user-message")
        await expect(said.locator(".text")).to_have_text("Show your work.")
        await expect(said).to_have_attribute("data-delivered", "true")
        await expect(page.locator("#answer-text")).to_have_text("42")
        await expect(page.locator("#send-form")).to_be_hidden()
        sent = llm.requests[1]["messages"]
        assert sent[-1] == {"role": "user", "content": "Show your work."}
        first_url = page.url

        await page.get_by_label("Continue the conversation").fill("Now double it.")
        await page.get_by_role("button", name="Continue").click()
        await expect(page).not_to_have_url(first_url)
        await expect(page.locator("#answer-text")).to_have_text("84")
        await expect(page.locator("#run-task")).to_have_text("Now double it.")
        first_id = first_url.split("/runs/")[1]
        await expect(page.locator("#run-previous")).to_have_text(f"Follow-up of {first_id}")
        follow_up = llm.requests[2]["messages"]
        assert follow_up[-2:] == [
            {"role": "assistant", "content": "42"},
            {"role": "user", "content": "Now double it."},
        ]
        names = [[t["function"]["name"] for t in r["tools"]] for r in llm.requests]
        assert names[2] == names[0]  # the same tools as the run it continues
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=ARTIFACTS / "follow-up-run.png", full_page=True)
