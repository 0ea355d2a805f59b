"""How the timeline shows what went wrong on the way: truncated results, interventions, model
retries, and a degraded answer at a limit."""

from __future__ import annotations

import pytest
from playwright.async_api import Browser, expect

from tests.browser.conftest import open_viewer
from tests.fakes.llm_server import FakeLLMServer, FakeReply, FakeUsage

pytestmark = pytest.mark.browser

BIG = {"expression": "2**3999"}  # a 1,204-digit result


async def test_truncation_interventions_retries_and_a_degraded_answer_are_shown(
    browser: Browser,
) -> None:
    replies = [
        FakeReply.call("calculator", BIG),  # step 1: a result over max_tool_result_chars
        FakeReply.http_error(503, "overloaded"),  # step 2: retried
        FakeReply(content="Let me think about it."),  # no tool call: a stop prompt next
        FakeReply.call("calculator", BIG),  # step 3: the same call again: a repetition hint
        FakeReply(content="2**3999 is a 1204-digit number."),  # the final call at max_steps
    ]
    body = {
        "task": "How long is 2**3999?",
        "tools": ["calculator"],
        "settings": {"max_steps": 3, "max_tool_result_chars": 500},
    }
    async with (
        FakeLLMServer(replies) as llm,
        open_viewer(browser, llm_base_url=llm.base_url) as v,
    ):
        run = (await v.client.post("/runs", json=body)).json()
        await v.open_run(run["id"])
        page = v.page
        await expect(page.locator("#run-status")).to_have_text("incomplete")
        events = await v.events(run["id"])
        first = next(e for e in events if e["type"] == "observation")
        assert first["truncated"]
        assert first["original_chars"] == 1204

        # truncated: what the model saw, the sizes, and the full result on demand
        observation = page.locator(".observation").first
        note = observation.locator(".truncation")
        await expect(note).to_contain_text(
            f"showing {first['shown_chars']:,} of {first['original_chars']:,} chars"
        )
        await expect(note).to_contain_text("of 1,204 chars")
        content = observation.locator(".content")
        await expect(content).to_have_text(first["model_content"])
        expand = observation.get_by_role("button", name="Show the full result")
        await expect(expand).to_have_attribute("aria-expanded", "false")
        await expand.click()
        await expect(content).to_have_text(first["content"])
        assert len(first["content"]) == 1204
        await expect(observation.locator(".truncation button")).to_have_attribute(
            "aria-expanded", "true"
        )

        # interventions, each highlighted by kind
        nudge = page.locator(".intervention[data-kind='stop_prompt']")
        await expect(nudge).to_be_visible()
        await expect(nudge).to_contain_text("Nudge: stop prompt")
        await expect(page.locator(".intervention[data-kind='repetition']")).to_contain_text(
            "Repetition hint"
        )
        await expect(page.locator(".intervention[data-kind='max_steps']")).to_contain_text(
            "Limit: steps"
        )
        thought_bg = await page.locator(".thought").first.evaluate(
            "n => getComputedStyle(n).backgroundColor"
        )
        for kind in ("stop_prompt", "repetition", "max_steps"):
            entry = page.locator(f".intervention[data-kind='{kind}']")
            background = await entry.evaluate("n => getComputedStyle(n).backgroundColor")
            border = await entry.evaluate("n => getComputedStyle(n).borderLeftWidth")
            assert background != thought_bg, kind
            assert border != "0px", kind

        # the model call that failed and was retried
        retry = page.locator(".retry")
        await expect(retry).to_contain_text("attempt 1")
        await expect(retry).to_contain_text("overloaded")

        # the degraded answer at the step limit
        await expect(page.locator("#answer-text")).to_have_text("2**3999 is a 1204-digit number.")
        await expect(page.locator("#degraded")).to_have_text("degraded")
        await expect(page.locator("#run-reason")).to_have_text("max_steps")
        await expect(page.locator("#steps-text")).to_have_text("3 of 3")
        await expect(page.locator("#steps-meter")).to_have_attribute("max", "3")
        assert await page.locator("#steps-meter").evaluate("n => n.value") == 3
        await expect(page.locator("#usage")).to_contain_text("LLM calls4")
        assert len(llm.requests) == 5


async def test_what_each_call_and_the_run_cost_is_shown_and_a_cost_budget_ends_it(
    browser: Browser,
) -> None:
    # gpt-4o-mini at genai-prices' rates: $0.15 / $0.60 per million tokens in / out
    replies = [
        FakeReply.call("calculator", {"expression": "6*7"}, usage=FakeUsage(100_000, 1000)),
        FakeReply(content="42, as far as I got.", usage=FakeUsage(101_000, 10)),
    ]
    body = {
        "task": "What is 6*7?",
        "model": "gpt-4o-mini",
        "tools": ["calculator"],
        # the first call costs $0.0156; a second like it would pass the budget: the final call
        "settings": {"max_cost_usd": 0.02},
    }
    async with (
        FakeLLMServer(replies) as llm,
        open_viewer(browser, llm_base_url=llm.base_url) as v,
    ):
        run = (await v.client.post("/runs", json=body)).json()
        await v.open_run(run["id"])
        page = v.page
        await expect(page.locator("#run-status")).to_have_text("incomplete")
        await expect(page.locator("#run-reason")).to_have_text("cost_budget")
        ended = (await v.client.get(f"/runs/{run['id']}")).json()
        calls = [e for e in await v.events(run["id"]) if e["type"] == "llm.call"]

        limit = page.locator(".intervention[data-kind='cost_budget']")
        await expect(limit).to_contain_text("Limit: cost budget")
        entries = page.locator(".llm")
        await expect(entries).to_have_count(2)
        await expect(entries.nth(0)).to_contain_text("$0.0156")
        await expect(entries.nth(1)).to_contain_text("Final-answer call")
        await expect(entries.nth(1)).to_contain_text(f"${calls[1]['cost_usd']:.6f}".rstrip("0"))
        total = ended["usage"]["cost_usd"]
        assert total == pytest.approx(0.0156 + calls[1]["cost_usd"])
        await expect(page.locator("#usage")).to_contain_text(f"Cost${total:.6f}".rstrip("0"))
        await expect(page.locator("#answer-text")).to_have_text("42, as far as I got.")


async def test_a_call_without_a_price_shows_its_cost_as_unknown(browser: Browser) -> None:
    replies = [FakeReply.finish("42", usage=FakeUsage(100, 10))]
    async with (
        FakeLLMServer(replies) as llm,
        open_viewer(browser, llm_base_url=llm.base_url) as v,
    ):
        body = {"task": "What is 6*7?", "model": "my-local-llama"}
        run = (await v.client.post("/runs", json=body)).json()
        await v.open_run(run["id"])
        page = v.page
        await expect(page.locator("#run-status")).to_have_text("completed")
        await expect(page.locator(".llm").first).to_contain_text("cost unknown")
        await expect(page.locator("#usage")).to_contain_text("Costunknown")


SCHEMA = {
    "type": "object",
    "properties": {
        "product": {"type": "string"},
        "prices": {"type": "array", "items": {"type": "number"}},
    },
    "required": ["product", "prices"],
}


async def test_a_typed_answer_is_a_collapsible_json_view_and_an_invalid_one_lists_its_errors(
    browser: Browser,
) -> None:
    valid = {"product": "kettle", "prices": [24.5, 19]}
    replies = [
        FakeReply.finish("a kettle"),  # not an object: rejected, shown its error
        FakeReply.call("task_finished", {"answer": valid}),
        FakeReply.call("task_finished", {"answer": {"product": 7}}),  # max_output_retries 0
    ]
    typed = {"task": "Extract it.", "output_schema": SCHEMA}
    async with (
        FakeLLMServer(replies) as llm,
        open_viewer(browser, llm_base_url=llm.base_url) as v,
    ):
        run = (await v.client.post("/runs", json=typed)).json()
        await v.open_run(run["id"])
        page = v.page
        await expect(page.locator("#run-status")).to_have_text("completed")
        rejected = page.locator(".intervention[data-kind='invalid_output']")
        await expect(rejected).to_contain_text("Answer not valid")
        await expect(page.locator("#answer-title")).to_have_text("Output")
        tree = page.locator("#output .json-view")
        top = tree.locator("details.json-node").first
        await expect(top.locator("> summary")).to_have_text("{2 keys}")
        await expect(tree).to_contain_text('product"kettle"')
        prices = tree.locator("details.json-node").nth(1)
        await expect(prices.locator("> summary")).to_contain_text("[2 items]")
        await expect(prices.locator(".json-number")).to_have_text(["24.5", "19"])
        await prices.locator("> summary").click()  # collapsed: its items are hidden
        await expect(prices).not_to_have_attribute("open", "")
        await expect(prices.locator(".json-number").first).to_be_hidden()

        body = {**typed, "settings": {"max_output_retries": 0}}
        failed = (await v.client.post("/runs", json=body)).json()
        await v.open_run(failed["id"])
        await expect(page.locator("#run-status")).to_have_text("incomplete")
        await expect(page.locator("#run-reason")).to_have_text("invalid_output")
        await expect(page.locator("#answer-title")).to_have_text("Answer")
        errors = page.locator("#output-errors li")
        await expect(errors).to_have_count(2)
        await expect(errors.nth(0)).to_contain_text("$.product")
        await expect(errors.nth(1)).to_contain_text("'prices' is a required property")
