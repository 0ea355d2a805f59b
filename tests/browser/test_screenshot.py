"""The README's picture of the viewer is taken here, not by hand: the README tour's run on the
demo model, shown in the viewer once it has ended. `make docs-screenshot` writes it to
docs/img/viewer.png (DOCS_SCREENSHOT names the file); otherwise the test takes it
into a temporary directory, so the picture can always be taken again."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from playwright.async_api import Browser, expect

from tests.browser.conftest import open_viewer

pytestmark = pytest.mark.browser

TOUR = {"task": "What is 17 * 23? Then tell me the time.", "tools": ["calculator", "current_time"]}


async def test_the_viewer_screenshot_shows_the_tour_run_ended(
    browser: Browser, tmp_path: Path
) -> None:
    target = Path(os.environ.get("DOCS_SCREENSHOT") or tmp_path / "viewer.png")
    async with open_viewer(browser, viewport=(1280, 1000)) as v:
        run_id = (await v.client.post("/runs", json=TOUR)).json()["id"]
        ended = await v.client.get(f"/runs/{run_id}/wait", params={"timeout_s": 30})
        assert ended.json()["status"] == "completed"
        await v.open_run(run_id)
        await expect(v.page.locator("#run-status")).to_have_text("completed")
        await expect(v.page.locator("#run-reason")).to_have_text("finished")
        await expect(v.page.locator("#answer-text")).to_contain_text("391")
        picture = await v.page.screenshot(path=str(target))
    assert len(picture) > 10_000
