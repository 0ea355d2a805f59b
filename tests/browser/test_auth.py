"""With API keys on: the page asks for the key once, sends it as a bearer header on every
call, and follows the run's events with a run-scoped token, never the key in a URL."""

from __future__ import annotations

import time

import pytest
from playwright.async_api import Browser, expect

from tests.browser.conftest import open_viewer
from tests.fakes.llm_server import FakeLLMServer, FakeReply, FakeToolCall
from tests.fakes.oidc_issuer import AUDIENCE, FakeIssuer
from tests.identity.kit import keys_loaded

pytestmark = pytest.mark.browser

KEY = "browser-key-0123456789"


async def test_the_key_entered_once_opens_the_api_and_the_stream_uses_a_run_token(
    browser: Browser,
) -> None:
    replies = [
        FakeReply(
            content="Multiplying.", tool_calls=[FakeToolCall("calculator", {"expression": "6*7"})]
        ),
        FakeReply.finish("42"),
    ]
    async with (
        FakeLLMServer(replies) as llm,
        open_viewer(browser, llm_base_url=llm.base_url, api_keys=[KEY]) as v,
    ):
        # the page and its assets need no key
        for path in ("/", "/static/app.js", "/static/app.css", "/static/timeline.js"):
            assert (await v.client.get(path)).status_code == 200, path
        assert (await v.client.get("/settings")).status_code == 401

        page = v.page
        await page.goto("/")
        dialog = page.locator("#key-dialog")
        await expect(dialog).to_be_visible()
        await expect(dialog).to_contain_text("This server needs an API key.")
        await dialog.get_by_label("API key").fill("wrong-key")
        await dialog.get_by_label("API key").press("Enter")
        await expect(dialog).to_contain_text("That API key was refused.")
        await dialog.get_by_label("API key").fill(KEY)
        await dialog.get_by_role("button", name="Use this key").click()
        await expect(dialog).to_be_hidden()
        await v.ready()
        await expect(page.locator("#key-button")).to_be_visible()

        await page.get_by_label("Task", exact=True).fill("What is 6*7?")
        await page.get_by_role("button", name="Start run").click()
        await expect(page.locator("#answer-text")).to_have_text("42")
        await expect(page.locator("#timeline .observation .content")).to_have_text("42")
        await expect(dialog).to_be_hidden()

        # a reload keeps the key for this tab: no second prompt
        await page.reload()
        await v.ready()
        await expect(page.locator("#answer-text")).to_have_text("42")
        await expect(dialog).to_be_hidden()

        urls = [request.url for request in v.requests]
        assert not [url for url in urls if KEY in url or "wrong-key" in url]
        streams = [r for r in v.requests if "/events" in r.url]
        assert len(streams) == 2
        assert all("token=" in r.url for r in streams)
        assert all("authorization" not in r.headers for r in streams)
        calls = [r for r in v.requests if r.resource_type == "fetch"]
        sent = [r.headers.get("authorization") for r in calls]
        assert sent[:2] == [None, "Bearer wrong-key"]  # the two refused tries of GET /settings
        assert sent[2:] == [f"Bearer {KEY}"] * (len(calls) - 2)
        paths = {r.url.split("?")[0].removeprefix(v.origin) for r in calls[2:]}
        assert {"/settings", "/tools", "/runs"} <= paths


async def test_the_key_field_takes_an_access_token_and_says_why_one_was_refused(
    browser: Browser,
) -> None:
    """With FINISHLINE_OIDC_ISSUER set, the same dialog takes the provider's access token: an
    expired one is refused saying so, a current one opens the API, and the run's stream still
    goes with a run token, never the access token in a URL."""
    async with (
        FakeIssuer() as issuer,
        FakeLLMServer([FakeReply.finish("42")]) as llm,
        open_viewer(
            browser,
            llm_base_url=llm.base_url,
            oidc_issuer=issuer.issuer,
            oidc_audience=AUDIENCE,
        ) as v,
    ):
        await keys_loaded(v.state)
        expired = issuer.token(sub="alice", exp=int(time.time()) - 600)
        current = issuer.token(sub="alice", alg="ES256")
        page = v.page
        await page.goto("/")
        dialog = page.locator("#key-dialog")
        await expect(dialog).to_contain_text("An access token of its identity provider works")
        await dialog.get_by_label("API key or access token").fill(expired)
        await dialog.get_by_label("API key or access token").press("Enter")
        await expect(dialog).to_contain_text("That access token was refused: the token has expired")
        await dialog.get_by_label("API key or access token").fill(current)
        await dialog.get_by_role("button", name="Use this key").click()
        await expect(dialog).to_be_hidden()
        await v.ready()

        await page.get_by_label("Task", exact=True).fill("What is 6*7?")
        await page.get_by_role("button", name="Start run").click()
        await expect(page.locator("#answer-text")).to_have_text("42")
        mine = (await v.client.get("/runs", headers={"Authorization": f"Bearer {current}"})).json()

    assert len(mine["runs"]) == 1  # the run is the token's owner's
    urls = [request.url for request in v.requests]
    assert not [url for url in urls if current.split(".")[1] in url or expired in url]
    streams = [r for r in v.requests if "/events" in r.url]
    assert streams
    assert all("token=" in r.url for r in streams)
    calls = [r for r in v.requests if r.resource_type == "fetch"]
    assert calls[-1].headers.get("authorization") == f"Bearer {current}"
