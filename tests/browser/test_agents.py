"""The form's agent picker in real Chromium: the server's profiles to pick from, the form
showing what a run of one gets, and a run that names it and sends only what was changed."""

from __future__ import annotations

import re

import pytest
from playwright.async_api import Browser, expect

from tests.browser.conftest import open_viewer

pytestmark = pytest.mark.browser

AGENTS = {
    "researcher": {
        "description": "Plans, then computes.",
        "tools": ["calculator"],
        "settings": {"planning_interval": 2, "max_steps": 6},
    },
    "quick": {"description": "Answers at once.", "settings": {"stop_tool": False}},
}


async def test_picking_an_agent_shows_its_tools_and_settings_and_the_run_names_it(
    browser: Browser,
) -> None:
    async with open_viewer(browser, agents=AGENTS) as v:
        page = v.page
        await page.goto("/")
        await v.ready()
        picker = page.get_by_label("Agent", exact=True)
        await expect(picker.locator("option")).to_have_text(
            ["None: configure the run below", "quick", "researcher"]
        )
        await page.locator("summary").click()
        max_steps = page.get_by_label("max_steps", exact=True)
        planning = page.get_by_label("planning_interval", exact=True)
        await expect(planning).to_have_value("")

        await picker.select_option("researcher")
        await expect(page.locator("#agent-hint")).to_contain_text("Plans, then computes.")
        await expect(page.locator("#tool-calculator")).to_be_checked()
        await expect(page.locator("#tool-update_plan")).to_be_checked()  # it plans
        await expect(page.locator("#tool-current_time")).not_to_be_checked()
        await expect(max_steps).to_have_value("6")
        await expect(planning).to_have_value("2")

        # nothing changed: the run names the agent and sends nothing else of it
        await page.get_by_label("Task", exact=True).fill("What is 6 * 7?")
        async with page.expect_request(
            lambda r: r.method == "POST" and r.url.endswith("/runs")
        ) as sent:
            await page.get_by_role("button", name="Start run").click()
        assert (await sent.value).post_data_json == {
            "task": "What is 6 * 7?",
            "agent": "researcher",
        }
        await expect(page).to_have_url(re.compile(r"#/runs/run_\w+$"))
        await expect(page.locator("#run-model")).to_contain_text("agent researcher")
        await expect(page.locator("#steps-text")).to_contain_text("of 6")

        # a change on top of the agent is sent, and only it
        await page.goto("/")
        await v.ready()
        await picker.select_option("researcher")
        await page.locator("summary").click()
        await max_steps.fill("3")
        await page.locator("#tool-current_time").check()
        await page.get_by_label("Task", exact=True).fill("And the time?")
        async with page.expect_request(
            lambda r: r.method == "POST" and r.url.endswith("/runs")
        ) as sent:
            await page.get_by_role("button", name="Start run").click()
        body = (await sent.value).post_data_json
        assert body["agent"] == "researcher"
        assert body["settings"] == {"max_steps": 3}
        # the agent's tools as the form showed them (update_plan: it plans), and the new one
        assert sorted(body["tools"]) == ["calculator", "current_time", "update_plan"]

        # back to no agent: the server's defaults again, every tool
        await page.goto("/")
        await v.ready()
        await picker.select_option("quick")
        await expect(page.get_by_label("stop_tool", exact=True)).not_to_be_checked()
        await picker.select_option("")
        await expect(page.get_by_label("stop_tool", exact=True)).to_be_checked()
        await expect(page.locator("#tool-current_time")).to_be_checked()


async def test_without_profiles_the_picker_is_hidden(browser: Browser) -> None:
    async with open_viewer(browser) as v:
        await v.page.goto("/")
        await v.ready()
        await expect(v.page.locator("#agent-field")).to_be_hidden()
