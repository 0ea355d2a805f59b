"""The browser suite: Debian's Chromium driven by Playwright, the app served on loopback.

    async def test_something(browser: Browser) -> None:
        async with FakeLLMServer([...]) as llm:
            async with open_viewer(browser, llm_base_url=llm.base_url) as v:
                await v.page.goto("/")
                await v.ready()

`open_viewer` serves the app (memory store, no shutdown grace) in the test's event loop and
opens a fresh browser context on it. On a clean exit it checks what every test here must
hold: no uncaught script error, and no request left the app's origin (the page works with
no network). Waits are Playwright's auto-waiting `expect(...)`, never sleeps.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import Browser, Page, Request, async_playwright, expect

from app.main import create_app
from tests.api.kit import _StateTap
from tests.fakes.service import service_settings
from tests.fakes.serving import Served

CHROMIUM = Path("/usr/bin/chromium")
HAVE_CHROMIUM = CHROMIUM.exists()
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
TIMEOUT_MS = 10_000

expect.set_options(timeout=TIMEOUT_MS)


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    if not HAVE_CHROMIUM:
        pytest.skip(f"no Chromium at {CHROMIUM}")
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, timeout=TIMEOUT_MS
        )
        try:
            yield browser
        finally:
            await browser.close()


@dataclass
class Viewer:
    page: Page
    client: httpx.AsyncClient
    origin: str
    state: Any = None
    """The app's lifespan state (its authenticator, manager, ...)."""
    requests: list[Request] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    async def ready(self) -> None:
        """The page has loaded what the server offers and listed the runs."""
        await expect(self.page.locator("body")).to_have_attribute("data-ready", "true")

    async def open_run(self, run_id: str) -> None:
        await self.page.goto(f"/#/runs/{run_id}")
        await self.ready()
        await expect(self.page.locator("#run-title")).to_contain_text(run_id)

    async def events(self, run_id: str, **headers: str) -> list[dict[str, Any]]:
        """The run's stored events, from the API."""
        response = await self.client.get(
            f"/runs/{run_id}/events", headers={"Accept": "application/json", **headers}
        )
        response.raise_for_status()
        return response.json()["events"]

    async def shown_seqs(self) -> list[int]:
        """The seq of every timeline entry, in document order (token deltas have none)."""
        return await self.page.eval_on_selector_all(
            "#timeline [data-seq]", "nodes => nodes.map(n => Number(n.dataset.seq))"
        )

    def assert_clean(self) -> None:
        assert self.errors == [], f"script errors on the page: {self.errors}"
        elsewhere = [r.url for r in self.requests if not r.url.startswith((self.origin, "data:"))]
        assert elsewhere == [], f"the page reached beyond the app: {elsewhere}"


@asynccontextmanager
async def open_viewer(
    browser: Browser,
    *,
    viewport: tuple[int, int] = (1280, 900),
    init_script: str | None = None,
    client_headers: dict[str, str] | None = None,
    **settings: Any,
) -> AsyncIterator[Viewer]:
    app = _StateTap(create_app(service_settings(shutdown_grace_s=0, **settings)))
    headers = client_headers or {}
    async with (
        Served(app, lifespan="on") as server,
        httpx.AsyncClient(base_url=server.url(), timeout=10, headers=headers) as client,
    ):
        origin = server.url()
        context = await browser.new_context(
            base_url=origin, viewport={"width": viewport[0], "height": viewport[1]}
        )
        if init_script:
            await context.add_init_script(init_script)
        page = await context.new_page()
        viewer = Viewer(page=page, client=client, origin=origin, state=app.state)
        page.on("request", lambda request: viewer.requests.append(request))
        page.on("pageerror", lambda error: viewer.errors.append(str(error)))
        try:
            yield viewer
        finally:
            await context.close()
        viewer.assert_clean()


def sse_frame(event: dict[str, Any]) -> str:
    """One stored event as the server frames it on an SSE stream."""
    return f"id: {event['seq']}\nevent: {event['type']}\ndata: {json.dumps(event)}\n\n"
