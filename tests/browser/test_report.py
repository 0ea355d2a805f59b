"""The termination report in the browser (DESIGN §20): a table and a stacked bar chart of stop
reasons per group, drawn in the page (no CDN: open_viewer fails a request off the origin)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from playwright.async_api import Browser, expect

from tests.browser.conftest import ARTIFACTS, open_viewer
from tests.fakes.llm_server import FakeLLMServer, FakeReply

pytestmark = pytest.mark.browser
SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "guides" / "report.png"


async def test_the_report_page_shows_each_models_reasons_as_a_table_and_a_chart(
    browser: Browser,
) -> None:
    replies = [
        FakeReply.finish("one"),
        FakeReply(content="thinking"),
        FakeReply(content="my best answer"),
        FakeReply.finish("two"),
        FakeReply.finish("three"),
    ]
    async with (
        FakeLLMServer(replies) as llm,
        open_viewer(browser, llm_base_url=llm.base_url) as v,
    ):
        for model, settings in (
            ("model-a", {}),
            ("model-a", {"max_steps": 1}),
            ("model-a", {}),
            ("model-b", {}),
        ):
            body = {"task": "t", "model": model, "settings": settings}
            run = (await v.client.post("/runs", json=body)).json()
            ended = await v.client.get(f"/runs/{run['id']}/wait", params={"timeout_s": 10})
            assert ended.json()["status"] in ("completed", "incomplete"), ended.text

        page = v.page
        await page.goto("/")
        await v.ready()
        await page.get_by_role("link", name="Report").click()
        await expect(page.locator("#report-title")).to_have_text("How runs ended")
        await expect(page.locator("#report-runs")).to_have_text("4 ended runs")
        rows = page.locator("#report-table tbody tr")
        await expect(rows).to_have_count(2)
        await expect(rows.nth(0).locator("th")).to_have_text("model-a")
        await expect(rows.nth(0).locator("td").nth(0)).to_have_text("3")
        await expect(rows.nth(0)).to_contain_text("finished 2, max_steps 1")
        bars = page.locator("#report-chart rect")
        await expect(bars).to_have_count(3)  # model-a: finished, max_steps; model-b: finished
        reasons = await bars.evaluate_all("nodes => nodes.map(n => n.dataset.reason)")
        assert reasons == ["finished", "max_steps", "finished"]

        await page.get_by_label("Group by").select_option("day")
        await expect(rows).to_have_count(1)
        await expect(rows.nth(0).locator("td").nth(0)).to_have_text("4")
        await page.get_by_label("Group by").select_option("model")
        await expect(rows).to_have_count(2)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        await page.locator("#report-view").screenshot(path=ARTIFACTS / "report.png")
        shutil.copyfile(ARTIFACTS / "report.png", SCREENSHOT)


async def test_the_compare_page_puts_two_runs_side_by_side_with_steps_aligned(
    browser: Browser,
) -> None:
    calc = FakeReply.call("calculator", {"expression": "6*7"})
    replies = [calc, FakeReply.finish("42"), FakeReply.finish("41")]
    async with (
        FakeLLMServer(replies) as llm,
        open_viewer(browser, llm_base_url=llm.base_url) as v,
    ):
        ids = []
        for model, tools in (("model-a", ["calculator"]), ("model-b", [])):
            body = {"task": "What is 6*7?", "model": model, "tools": tools}
            run = (await v.client.post("/runs", json=body)).json()
            await v.client.get(f"/runs/{run['id']}/wait", params={"timeout_s": 10})
            ids.append(run["id"])

        page = v.page
        await page.goto(f"/#/compare/{ids[0]},{ids[1]}")
        await v.ready()
        await expect(page.locator("#compare-title")).to_have_text("Runs side by side")
        table = page.locator("#compare-table")
        await expect(table.locator("thead th")).to_have_count(3)
        model = table.locator('tr[data-fact="model"] td')
        await expect(model).to_have_text(["model-a", "model-b"])
        await expect(table.locator('tr[data-fact="answer"] td')).to_have_text(["42", "41"])
        first = table.locator('tr[data-step="1"] td')
        await expect(first.nth(0)).to_contain_text("tools: calculator")
        second = table.locator('tr[data-step="2"] td')
        await expect(second.nth(1)).to_have_text("–")  # model-b ended at its first step
        await page.locator("#compare-view").screenshot(path=ARTIFACTS / "compare.png")
