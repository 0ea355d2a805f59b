"""Schedules in the browser (DESIGN §21): the sidebar lists the key's schedules with their
cron, next due time and last firings, a fired one linking its run."""

from __future__ import annotations

import pytest
from playwright.async_api import Browser, expect

from tests.browser.conftest import open_viewer
from tests.fakes.llm_server import FakeLLMServer, FakeReply

pytestmark = pytest.mark.browser


async def test_the_sidebar_lists_schedules_with_next_due_time_and_last_firings(
    browser: Browser,
) -> None:
    async with (
        FakeLLMServer([FakeReply.finish("fired")]) as llm,
        open_viewer(browser, llm_base_url=llm.base_url) as v,
    ):
        made = await v.client.post(
            "/schedules", json={"cron": "0 9 1 1 *", "run": {"task": "the morning report"}}
        )
        paused = await v.client.post(
            "/schedules",
            json={"cron": "@hourly", "enabled": False, "run": {"task": "paused one"}},
        )
        firing = (await v.client.post(f"/schedules/{made.json()['id']}/trigger")).json()
        page = v.page
        await page.goto("/")
        await v.ready()
        item = page.locator(f'li[data-schedule="{made.json()["id"]}"]')
        await expect(item.locator("code")).to_have_text("0 9 1 1 *")
        await expect(item).to_contain_text("the morning report")
        await expect(item.locator("time").first).to_contain_text("next ")
        await expect(item.locator(".firing .badge")).to_have_text("fired")
        await item.get_by_role("link", name=firing["run_id"]).click()
        await expect(page.locator("#answer-text")).to_have_text("fired")
        other = page.locator(f'li[data-schedule="{paused.json()["id"]}"]')
        await expect(other).to_contain_text("paused")
        await expect(other.locator(".firings")).to_contain_text("no firings yet")
