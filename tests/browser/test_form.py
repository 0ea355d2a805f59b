"""The form that starts a run, and the page's layout at phone and desktop widths."""

from __future__ import annotations

import re

import pytest
from playwright.async_api import Browser, Page, expect

from tests.browser.conftest import open_viewer
from tests.fakes.llm_server import FakeLLMServer, FakeReply, FakeToolCall

pytestmark = pytest.mark.browser


async def test_the_form_shows_defaults_and_caps_and_the_servers_refusal_of_an_over_cap_value(
    browser: Browser,
) -> None:
    async with open_viewer(browser, max_steps=8, max_steps_limit=50) as v:
        page = v.page
        await page.goto("/")
        await v.ready()
        await expect(page.locator("#tool-list input[type=checkbox]")).to_have_count(
            len((await v.client.get("/tools")).json())
        )
        await page.locator("summary").click()

        max_steps = page.get_by_label("max_steps", exact=True)
        await expect(max_steps).to_have_value("8")
        await expect(max_steps).to_have_attribute("type", "number")
        await expect(max_steps).to_have_attribute("max", "50")
        await expect(max_steps).to_have_attribute("min", "1")
        await expect(max_steps).to_have_attribute("step", "1")
        await expect(page.locator("#setting-max_steps-hint")).to_contain_text("Default 8 · cap 50")
        max_time = page.get_by_label("max_time_s", exact=True)
        await expect(max_time).to_have_value("60")
        await expect(max_time).to_have_attribute("max", "3600")
        await expect(max_time).to_have_attribute("step", "any")
        await expect(page.locator("#setting-max_time_s-hint")).to_contain_text("cap 3,600")
        await expect(page.get_by_label("max_total_tokens", exact=True)).to_have_value("")
        await expect(page.locator("#setting-max_total_tokens-hint")).to_contain_text("Default none")
        await expect(page.get_by_label("stop_tool", exact=True)).to_be_checked()
        await expect(page.locator("#setting-stop_tool-hint")).to_contain_text(
            "the run ends only when the model calls task_finished"
        )
        await expect(page.get_by_label("progress", exact=True)).not_to_be_checked()
        language = page.get_by_label("prompt_language", exact=True)
        await expect(language).to_have_value("en")
        await expect(language.locator("option")).to_have_text(["en", "zh"])
        info = (await v.client.get("/settings")).json()["settings"]
        await expect(page.locator("#settings [data-setting]")).to_have_count(len(info))

        await page.get_by_label("Task", exact=True).fill("Count to three")
        await max_steps.fill("1000")
        await page.get_by_role("button", name="Start run").click()
        error = page.locator("#form-error")
        await expect(error).to_have_text("settings.max_steps: 1000 exceeds the server cap of 50")
        await expect(max_steps).to_have_attribute("aria-invalid", "true")
        assert (await v.client.get("/runs")).json()["runs"] == []

        # fixed, and started with Enter: only the changed setting is sent
        await max_steps.fill("2")
        async with page.expect_request(
            lambda r: r.method == "POST" and r.url.endswith("/runs")
        ) as sent:
            await page.get_by_label("Task", exact=True).press("Enter")
        body = (await sent.value).post_data_json
        assert body["settings"] == {"max_steps": 2}
        assert body["task"] == "Count to three"
        await expect(page).to_have_url(re.compile(r"#/runs/run_\w+$"))
        await expect(page.locator("#steps-text")).to_contain_text("of 2")
        await expect(error).to_be_empty()


LONG_WORD = "x" * 400  # no break opportunity: it must wrap, not widen the page


async def no_horizontal_scroll(page: Page) -> None:
    widths = await page.evaluate(
        "[document.documentElement.scrollWidth, document.documentElement.clientWidth,"
        " document.body.scrollWidth]"
    )
    assert widths[0] <= widths[1], widths
    assert widths[2] <= widths[1], widths


async def within_width(page: Page, selector: str, width: int) -> None:
    locator = page.locator(selector)
    await expect(locator).to_be_visible()
    box = await locator.bounding_box()
    assert box is not None, selector
    assert box["x"] >= 0, (selector, box)
    assert box["x"] + box["width"] <= width, (selector, box)


@pytest.mark.parametrize("width", [375, 1280])
async def test_the_page_fits_phone_and_desktop_widths(browser: Browser, width: int) -> None:
    replies = [
        FakeReply(
            content=f"Thinking {LONG_WORD}",
            tool_calls=[FakeToolCall("calculator", {"expression": "2**3999"})],
        ),
        FakeReply.finish(f"Done {LONG_WORD}"),
    ]
    body = {
        "task": f"Task {LONG_WORD}",
        "tools": ["calculator"],
        "settings": {"max_tool_result_chars": 100_000},
    }
    async with (
        FakeLLMServer(replies) as llm,
        open_viewer(browser, llm_base_url=llm.base_url, viewport=(width, 800)) as v,
    ):
        run = (await v.client.post("/runs", json=body)).json()
        page = v.page
        await v.open_run(run["id"])
        await expect(page.locator("#answer-text")).to_contain_text("Done")
        await no_horizontal_scroll(page)
        for selector in (
            "#run-status",
            "#continue-form",
            "#timeline",
            "#runs-refresh",
            "#run-list a",
        ):
            await within_width(page, selector, width)

        await page.get_by_role("link", name="New run").click()
        await page.locator("summary").click()
        await expect(page.get_by_label("max_steps", exact=True)).to_be_visible()
        await no_horizontal_scroll(page)
        for selector in (
            "#task",
            "#model",
            "#tool-list",
            "#run-form button[type=submit]",
            "#settings",
        ):
            await within_width(page, selector, width)

        # keyboard: from the task, Tab reaches the model, then the first tool
        await page.get_by_label("Task", exact=True).focus()
        await page.keyboard.press("Tab")
        await expect(page.get_by_label("Model", exact=True)).to_be_focused()
        await page.keyboard.press("Tab")
        await expect(page.locator("#tool-list input").first).to_be_focused()
        outline = await page.locator("#tool-list input").first.evaluate(
            "n => getComputedStyle(n).outlineStyle"
        )
        assert outline == "solid"  # focus is visible
