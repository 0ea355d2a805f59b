"""The viewer shows a tree of runs (DESIGN §15): a sub-agent's child run is followed live in a
timeline nested under the call that started it (and its own child under its call); a child's
call that waits for a person is offered for approval on the parent's page, and deciding it
there lets the whole tree go on."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.async_api import Browser, expect

from tests.browser.conftest import open_viewer

pytestmark = pytest.mark.browser


def finish(answer: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "task_finished", "arguments": {"answer": answer}}]}


def call(agent: str, task: str) -> dict[str, Any]:
    return {
        "content": f"asking {agent}",
        "tool_calls": [{"name": agent, "arguments": {"task": task}}],
    }


ADD = {"tool_calls": [{"name": "calculator", "arguments": {"expression": "2+2"}}]}


async def test_a_childs_timeline_is_nested_under_its_call_and_its_approval_decided_here(
    browser: Browser,
) -> None:
    leaf = {
        "description": "Adds, with approval.",
        "model": "scripted",
        "model_script": [ADD, finish("4, approved")],
        "tools": ["calculator"],
        "approval": {"tools": ["calculator"]},
    }
    middle = {
        "description": "Asks the adder.",
        "model": "scripted",
        "model_script": [call("adder", "2+2"), finish("the adder says 4")],
        "agents": {"adder": leaf},
    }
    body = {
        "task": "route it",
        "model": "scripted",
        "model_script": [call("middle", "find 2+2"), finish("done: 4")],
        "agents": {"middle": middle},
    }
    async with open_viewer(browser) as v:
        run = (await v.client.post("/runs", json=body)).json()
        await v.open_run(run["id"])
        page = v.page
        await expect(page.locator("#run-status")).to_have_text("requires_action")

        outer = page.locator("#timeline > li .child-run")
        await expect(outer.first).to_be_visible()
        await expect(outer.first.locator(":scope > summary")).to_contain_text("Sub-agent middle")
        inner = outer.first.locator(".child-timeline .child-run")
        await expect(inner.first.locator(":scope > summary")).to_contain_text("Sub-agent adder")
        await expect(inner.first.locator("[data-type='approval.requested']")).to_be_visible()

        offered = page.locator("#approvals-list .approval")
        await expect(offered).to_have_count(1)
        await expect(offered).to_contain_text("A sub-agent (run")
        await offered.get_by_role("button", name="Approve").click()

        await expect(page.locator("#run-status")).to_have_text("completed")
        await expect(page.locator("#answer")).to_contain_text("done: 4")
        await expect(inner.first.locator(":scope > summary .child-status")).to_have_text(
            "completed"
        )
        await expect(outer.first.locator(":scope > summary .child-status")).to_have_text(
            "completed"
        )
        leaf_observation = inner.first.locator(".child-timeline .observation").first
        await expect(leaf_observation.locator(".content")).to_have_text("4")
        await expect(page.locator("#approvals-list .approval")).to_have_count(0)
