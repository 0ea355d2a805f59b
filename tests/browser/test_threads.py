"""Threads in the browser (DESIGN §19): a run started in a thread shows it, Continue goes on
in the thread, the sidebar lists the key's threads, and a thread shows its runs in order with
a composer that continues it."""

from __future__ import annotations

import pytest
from playwright.async_api import Browser, expect

from tests.browser.conftest import ARTIFACTS, open_viewer
from tests.fakes.llm_server import FakeLLMServer, FakeReply

pytestmark = pytest.mark.browser


async def test_a_thread_is_listed_shown_as_its_runs_in_order_and_continued(
    browser: Browser,
) -> None:
    replies = [FakeReply.finish("one"), FakeReply.finish("two"), FakeReply.finish("three")]
    async with (
        FakeLLMServer(replies) as llm,
        open_viewer(browser, llm_base_url=llm.base_url) as v,
    ):
        page = v.page
        await page.goto("/")
        await v.ready()
        await page.get_by_label("Task", exact=True).fill("first")
        await page.get_by_role("textbox", name="Thread (optional)").fill("trip-7")
        await page.get_by_role("button", name="Start run").click()
        await expect(page.locator("#answer-text")).to_have_text("one")
        await expect(page.locator("#run-thread")).to_have_text("trip-7")

        first_url = page.url
        await page.get_by_label("Continue the conversation").fill("second")
        await page.get_by_role("button", name="Continue").click()
        await expect(page).not_to_have_url(first_url)
        await expect(page.locator("#answer-text")).to_have_text("two")
        await expect(page.locator("#run-thread")).to_have_text("trip-7")

        listed = page.locator("#thread-list a")
        await expect(listed).to_have_count(1)
        await expect(listed.first).to_contain_text("trip-7")
        await expect(listed.first).to_contain_text("2 runs")
        await listed.first.click()
        await expect(page.locator("#thread-title")).to_contain_text("trip-7")
        await expect(page.locator("#thread-status")).to_have_text("idle")
        items = page.locator("#thread-run-list > li")
        await expect(items).to_have_count(2)
        await expect(items.nth(0).locator(".run-task")).to_have_text("first")
        await expect(items.nth(1).locator(".run-task")).to_have_text("second")
        await expect(items.nth(1).locator(".thread-answer")).to_have_text("two")

        await page.get_by_label("Continue the thread").fill("third")
        await page.get_by_role("button", name="Continue thread").click()
        await expect(items).to_have_count(3)
        await expect(items.nth(2).locator(".run-task")).to_have_text("third")
        third_id = await items.nth(2).get_attribute("data-run")
        ended = (await v.client.get(f"/runs/{third_id}/wait", params={"timeout_s": 10})).json()
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=ARTIFACTS / "thread.png", full_page=True)

    assert ended["result"]["answer"] == "three"
    assert ended["thread_id"] == "trip-7"
    assert ended["previous_run_id"] not in (None, third_id)  # the thread's second run
    said = llm.requests[2]["messages"]
    assert [m["content"] for m in said if m["role"] in ("user", "assistant")][-5:] == [
        "first",
        "one",
        "second",
        "two",
        "third",
    ]
