"""The built docs site reads in Chromium with no network: its index and a guide open, their
navigation and search box are there, and no request leaves the site (no Google Fonts, no CDN:
`theme.font: false`)."""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Iterator

import pytest
from playwright.async_api import Browser, Route, expect

from tests.docs.site import build

pytestmark = pytest.mark.browser


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The site built as `make docs-build` does, served on a free loopback port."""
    root = tmp_path_factory.mktemp("docs") / "site"
    done = build(root)
    assert done.returncode == 0, done.stdout + done.stderr
    handler = functools.partial(_Quiet, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


async def test_the_index_and_a_guide_open_offline(browser: Browser, site: str) -> None:
    context = await browser.new_context(base_url=site)
    elsewhere: list[str] = []

    async def refuse(route: Route) -> None:
        elsewhere.append(route.request.url)
        await route.abort()

    await context.route(lambda url: not url.startswith(site), refuse)
    errors: list[str] = []
    page = await context.new_page()
    page.on("pageerror", lambda error: errors.append(str(error)))
    try:
        await page.goto("/index.html")
        await expect(page).to_have_title("finishline")
        await expect(page.locator("article h1")).to_contain_text("finishline")
        await expect(page.locator("input[data-md-component=search-query]")).to_be_attached()
        await page.locator("article").get_by_role("link", name="Approvals").click()
        await expect(page).to_have_url(f"{site}/guides/approvals.html")
        await expect(page.locator("article h1")).to_contain_text("Approvals")
        await expect(
            page.locator("nav").get_by_role("link", name="Real models").first
        ).to_be_attached()
        await page.goto("/guides/first-run.html")
        await expect(page.locator("article img")).to_have_js_property("complete", True)
        width = await page.locator("article img").evaluate("img => img.naturalWidth")
        assert width > 0  # the screenshot is part of the site
    finally:
        await context.close()
    assert elsewhere == []
    assert errors == []
