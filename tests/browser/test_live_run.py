"""A run watched live in the browser: started from the form, cancelled, reloaded mid-run,
followed token by token, and followed across dropped connections."""

from __future__ import annotations

import json
import re

import pytest
from playwright.async_api import Browser, Route, expect
from playwright.async_api import Request as PageRequest

from tests.browser.conftest import ARTIFACTS, open_viewer, sse_frame
from tests.fakes.llm_server import FakeLLMServer, FakeReply, FakeToolCall

pytestmark = pytest.mark.browser


# markup from the model must show as text: were it parsed, the image would load from
# elsewhere, which every browser test refuses
MARKUP = '<img src="http://example.invalid/x.png"><b>now</b>'


def multiply() -> FakeReply:
    return FakeReply(
        content=f"I will multiply with the calculator {MARKUP}.",
        tool_calls=[FakeToolCall("calculator", {"expression": "6*7"})],
    )


async def test_a_run_from_the_form_shows_thought_action_and_observation_before_it_ends(
    browser: Browser,
) -> None:
    held_finish = FakeReply.finish("The answer is 42.", hang=True)
    async with (
        FakeLLMServer([multiply(), held_finish]) as llm,
        open_viewer(browser, llm_base_url=llm.base_url) as v,
    ):
        page = v.page
        await page.goto("/")
        await v.ready()
        await page.get_by_label("Task", exact=True).fill("What is 6*7?")
        await page.get_by_role("button", name="Start run").click()

        timeline = page.locator("#timeline")
        await expect(timeline.locator(".observation .content")).to_have_text("42")
        await llm.wait_for_requests(2)  # the model's next reply is held: the run goes on
        await expect(page.locator("#run-status")).to_have_text("running")
        await expect(page.locator("#answer")).to_be_hidden()
        await expect(page.locator("#cancel")).to_be_enabled()
        kinds = await timeline.locator(".thought, .action, .observation").evaluate_all(
            "nodes => nodes.map(n => n.dataset.type)"
        )
        assert kinds == ["thought", "action", "observation"]
        await expect(timeline.locator(".thought .text")).to_have_text(
            f"I will multiply with the calculator {MARKUP}."
        )
        await expect(timeline.locator(".thought img, .thought b")).to_have_count(0)
        await expect(timeline.locator(".action .tool")).to_have_text("calculator")
        await expect(timeline.locator(".action .arguments")).to_have_text(
            json.dumps({"expression": "6*7"}, indent=2)
        )

        llm.release()
        await expect(page.locator("#answer-text")).to_have_text("The answer is 42.")
        await expect(page.locator("#run-reason")).to_have_text("finished")
        await expect(page.locator("#run-status")).to_have_text("completed")
        await expect(page.locator("#cancel")).to_be_hidden()  # nothing to cancel any more
        await expect(page.locator("#degraded")).to_have_count(0)
        await expect(page.locator("#usage")).to_contain_text("LLM calls2")
        await expect(page.locator("#steps-text")).to_have_text("2 of 10")
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=ARTIFACTS / "finished-run.png", full_page=True)

        # the recent runs list has it, with status and reason; clicking opens it again
        await page.get_by_role("link", name="New run").click()
        await expect(page.locator("#new-run")).to_be_visible()
        await page.get_by_role("button", name="Refresh").click()
        entry = page.locator("#run-list a")
        await expect(entry).to_have_count(1)
        await expect(entry).to_contain_text("completed")
        await expect(entry).to_contain_text("finished")
        await expect(entry).to_contain_text("What is 6*7?")
        await entry.click()
        await expect(page.locator("#answer-text")).to_have_text("The answer is 42.")
        await expect(entry).to_have_attribute("aria-current", "page")


async def test_the_cancel_button_cancels_a_running_run(browser: Browser) -> None:
    async with (
        FakeLLMServer([FakeReply(hang=True)]) as llm,
        open_viewer(browser, llm_base_url=llm.base_url) as v,
    ):
        run = (await v.client.post("/runs", json={"task": "wait for ever", "tools": []})).json()
        await v.open_run(run["id"])
        await llm.wait_for_requests(1)
        page = v.page
        await expect(page.locator("#run-status")).to_have_text("running")

        await page.get_by_role("button", name="Cancel run").click()

        await expect(page.locator("#run-status")).to_have_text("cancelled")
        await expect(page.locator("#run-reason")).to_have_text("cancelled")
        await expect(page.locator("#cancel")).to_be_hidden()
        await expect(page.locator("#timeline [data-type='run.cancelled']")).to_have_count(1)
        assert (await v.client.get(f"/runs/{run['id']}")).json()["status"] == "cancelled"


async def test_an_ended_run_offers_no_cancel_button(browser: Browser) -> None:
    async with (
        FakeLLMServer([FakeReply.finish("done")]) as llm,
        open_viewer(browser, llm_base_url=llm.base_url) as v,
    ):
        run = (await v.client.post("/runs", json={"task": "be quick", "tools": []})).json()
        ended = await v.client.get(f"/runs/{run['id']}/wait", params={"timeout_s": 10})
        assert ended.json()["status"] == "completed"

        await v.open_run(run["id"])

        page = v.page
        await expect(page.locator("#run-status")).to_have_text("completed")
        await expect(page.locator("#answer-text")).to_have_text("done")
        await expect(page.locator("#cancel")).to_be_hidden()
        await expect(page.get_by_role("button", name="Cancel run")).to_have_count(0)
        await expect(page.locator("#continue-form")).to_be_visible()


async def test_a_reload_mid_run_restores_the_whole_timeline_and_goes_on_live(
    browser: Browser,
) -> None:
    held_finish = FakeReply.finish("42", hang=True)
    async with (
        FakeLLMServer([multiply(), held_finish]) as llm,
        open_viewer(browser, llm_base_url=llm.base_url) as v,
    ):
        run = (await v.client.post("/runs", json={"task": "6*7?", "tools": ["calculator"]})).json()
        await v.open_run(run["id"])
        page = v.page
        await expect(page.locator("#timeline .observation")).to_have_count(1)
        await llm.wait_for_requests(2)
        stored = [e["seq"] for e in await v.events(run["id"])]
        assert await v.shown_seqs() == stored

        await page.reload()
        await v.ready()
        await expect(page.locator("#timeline .observation")).to_have_count(1)
        await expect(page.locator("#timeline [data-seq]")).to_have_count(len(stored))
        assert await v.shown_seqs() == stored  # the same events, once each, in order
        await expect(page.locator("#run-status")).to_have_text("running")

        llm.release()
        await expect(page.locator("#answer-text")).to_have_text("42")
        every = [e["seq"] for e in await v.events(run["id"])]
        await expect(page.locator("#timeline [data-seq]")).to_have_count(len(every))
        assert await v.shown_seqs() == every
        await expect(page.locator("#timeline .thought")).to_have_count(1)
        await expect(page.locator("#timeline .action")).to_have_count(2)


# Records the text of the first thought each time the DOM changes: one record per event,
# since the page handles each SSE event in its own callback.
RECORD_THOUGHTS = """
window.__thoughts = [];
new MutationObserver(() => {
  const entry = document.querySelector("#timeline .thought");
  if (!entry) return;
  const live = entry.classList.contains("live");
  const text = entry.querySelector(".text").textContent;
  const last = window.__thoughts.at(-1);
  if (!last || last.live !== live || last.text !== text) window.__thoughts.push({ live, text });
}).observe(document, { subtree: true, childList: true, characterData: true });
"""


async def test_with_token_streaming_the_thought_grows_token_by_token(browser: Browser) -> None:
    deltas = ["Let ", "me ", "count ", "to ", "three."]
    reply = FakeReply(content=deltas, tool_calls=[FakeToolCall("task_finished", {"answer": "3"})])
    async with (
        FakeLLMServer([reply]) as llm,
        open_viewer(browser, llm_base_url=llm.base_url, init_script=RECORD_THOUGHTS) as v,
    ):
        page = v.page
        await page.goto("/")
        await v.ready()
        await page.get_by_label("Task", exact=True).fill("Count to three")
        await page.locator("summary").click()
        await page.get_by_label("stream_tokens", exact=True).check()
        await page.get_by_label("Task", exact=True).press("Enter")

        await expect(page.locator("#answer-text")).to_have_text("3")
        assert (await llm.wait_for_requests(1))[0]["stream"] is True
        thought = page.locator("#timeline .thought")
        await expect(thought).to_have_count(1)
        await expect(thought.locator(".text")).to_have_text("".join(deltas))
        await expect(thought).not_to_have_class(re.compile(r"\blive\b"))

        history = await page.evaluate("window.__thoughts")
        live = [record["text"] for record in history if record["live"]]
        prefixes = ["".join(deltas[: n + 1]) for n in range(len(deltas))]
        assert live == prefixes  # it grew a delta at a time before the thought event landed
        assert history[-1] == {"live": False, "text": "".join(deltas)}


async def test_the_stream_reconnects_after_drops_without_losing_or_repeating_events(
    browser: Browser,
) -> None:
    """A dropped stream: the browser reconnects with Last-Event-ID; a refused reconnection
    (an expired stream token): the page opens a fresh stream with ?after and a new token."""
    key = "reconnect-key-0123456789"
    auth = {"Authorization": f"Bearer {key}"}
    held_finish = FakeReply.finish("42", hang=True)
    keep_key = f"sessionStorage.setItem('finishline.apiKey', {json.dumps(key)});"
    async with (
        FakeLLMServer([multiply(), held_finish]) as llm,
        open_viewer(
            browser,
            llm_base_url=llm.base_url,
            api_keys=[key],
            client_headers=auth,
            init_script=keep_key,
        ) as v,
    ):
        run = (await v.client.post("/runs", json={"task": "6*7?", "tools": ["calculator"]})).json()
        await llm.wait_for_requests(2)
        stored = await v.events(run["id"])
        page = v.page
        streams: list[PageRequest] = []

        async def flaky_stream(route: Route, request: PageRequest) -> None:
            streams.append(request)
            if len(streams) == 1:  # three events (one twice), then the connection ends
                frames = "retry: 100\n\n" + "".join(
                    sse_frame(e) for e in [stored[0], stored[1], stored[1], stored[2]]
                )
                await route.fulfill(
                    status=200, headers={"Content-Type": "text/event-stream"}, body=frames
                )
            elif len(streams) == 2:  # the browser's own retry: refused
                await expect(page.locator("#connection")).to_have_text("reconnecting…")
                await route.fulfill(
                    status=401,
                    headers={"Content-Type": "application/json"},
                    body=json.dumps({"error": {"type": "unauthorized", "message": "expired"}}),
                )
            else:
                await route.continue_()

        await page.route(re.compile(r"/runs/[^/?]+/events(\?|$)"), flaky_stream)
        await v.open_run(run["id"])

        await expect(page.locator("#connection")).to_have_text("reconnected")
        await expect(page.locator("#timeline [data-seq]")).to_have_count(len(stored))
        assert await v.shown_seqs() == [e["seq"] for e in stored]
        assert len(streams) == 3
        # the browser's own retry reuses its URL (and sends Last-Event-ID, which Playwright's
        # interception does not report); the page's fresh stream says where to resume
        assert streams[1].url == streams[0].url
        assert "after=3" in streams[2].url
        assert all("token=" in s.url and key not in s.url for s in streams)
        tokens = [r for r in v.requests if r.url.endswith("/stream-token")]
        assert len(tokens) == 2  # a fresh token for the fresh stream

        llm.release()
        await expect(page.locator("#answer-text")).to_have_text("42")
        every = [e["seq"] for e in await v.events(run["id"])]
        assert await v.shown_seqs() == every
