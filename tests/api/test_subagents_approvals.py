"""A child that waits for a person makes its parent wait too (DESIGN §15): the parent is
`requires_action` with the child's calls in its `pending_approvals` (with the child's
`run_id`); a decision on either run reaches the child, and both go on; a call id several runs
of the tree wait on needs `run_id` (409 otherwise); cancel reaches a waiting tree; a child
that ends while its parent waits on it lets the parent go on."""

from __future__ import annotations

from typing import Any

import httpx

from tests.api.kit import (
    cancel,
    error_of,
    finish,
    scripted,
    settings,
    wait_ended,
    wait_for_status,
)
from tests.api.subagent_kit import call, children, events, of_type, started_children, worker
from tests.fakes.service import api_client

ADD = {"name": "calculator", "arguments": {"expression": "2+2"}}


def approving_worker() -> dict[str, Any]:
    """A worker whose calculator call waits for a person, then finishes with its result."""
    return worker(
        {"tool_calls": [ADD]},
        finish("the sum is 4"),
        tools=["calculator"],
        approval={"tools": ["calculator"]},
    )


def tree(*parent_script: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return scripted(*parent_script, agents={"w": approving_worker()}, **fields)


async def waiting_tree(client: httpx.AsyncClient, body: dict[str, Any]) -> tuple[dict, dict]:
    """The parent and its child, both waiting for a person."""
    parent = (await client.post("/runs", json=body)).json()
    (child,) = await started_children(client, parent["id"])
    child = await wait_for_status(client, child["id"], "requires_action")
    parent = await wait_for_status(client, parent["id"], "requires_action")
    return parent, child


async def decide(client: httpx.AsyncClient, run_id: str, *decisions: dict) -> httpx.Response:
    return await client.post(f"/runs/{run_id}/approvals", json={"decisions": list(decisions)})


async def test_a_childs_approval_makes_its_parent_wait_listing_the_childs_call() -> None:
    async with api_client(settings()) as client:
        parent, child = await waiting_tree(client, tree(call("w", "add"), finish("done")))
        (listed,) = parent["pending_approvals"]
        assert (listed["call_id"], listed["tool"], listed["arguments"]) == (
            child["pending_approvals"][0]["call_id"],
            "calculator",
            {"expression": "2+2"},
        )
        assert listed["run_id"] == child["id"]
        assert listed["agent_call_id"] == "call_0_0"
        assert child["pending_approvals"][0]["run_id"] is None  # its own


async def test_a_decision_on_the_parent_reaches_the_child_and_both_go_on() -> None:
    async with api_client(settings()) as client:
        parent, child = await waiting_tree(client, tree(call("w", "add"), finish("done")))
        answer = await decide(client, parent["id"], {"call_id": "call_0_0", "approve": True})
        assert answer.status_code == 202, answer.text
        child = await wait_ended(client, child["id"])
        parent = await wait_ended(client, parent["id"])
        assert (child["status"], child["result"]["answer"]) == ("completed", "the sum is 4")
        assert parent["status"] == "completed"
        decided = of_type(await events(client, child["id"]), "approval.decided")
        assert [(e["call_id"], e["approved"]) for e in decided] == [("call_0_0", True)]
        mirrored = of_type(await events(client, parent["id"]), "approval.decided")
        assert [(e["call_id"], e["run_id"]) for e in mirrored] == [("call_0_0", child["id"])]
        (seen,) = list(of_type(await events(client, parent["id"]), "observation"))[:1]
        assert seen["content"].startswith("the sum is 4")
        calc = next(iter(of_type(await events(client, child["id"]), "observation")))
        assert calc["content"] == "4"


async def test_a_decision_on_the_child_lets_the_parent_go_on_too() -> None:
    async with api_client(settings()) as client:
        parent, child = await waiting_tree(client, tree(call("w", "add"), finish("done")))
        reject = {"call_id": "call_0_0", "approve": False, "message": "not today"}
        assert (await decide(client, child["id"], reject)).status_code == 202
        parent = await wait_ended(client, parent["id"])
        assert parent["status"] == "completed"
        child = await wait_ended(client, child["id"])
        rejected = of_type(await events(client, child["id"]), "observation")[0]
        assert rejected["is_error"]
        assert "not today" in rejected["content"]
        assert (await client.get(f"/runs/{parent['id']}")).json()["pending_approvals"] == []


async def test_a_call_id_two_runs_of_the_tree_wait_on_needs_the_run_id() -> None:
    both = {
        "tool_calls": [ADD, {"name": "w", "arguments": {"task": "add"}}],
    }  # the parent's own calculator call is call_0_0, as the child's is
    body = tree(both, finish("done"), tools=["calculator"], approval={"tools": ["calculator"]})
    async with api_client(settings()) as client:
        parent, child = await waiting_tree(client, body)
        assert {(p["call_id"], p["run_id"]) for p in parent["pending_approvals"]} == {
            ("call_0_0", None),
            ("call_0_0", child["id"]),
        }
        answer = await decide(client, parent["id"], {"call_id": "call_0_0", "approve": True})
        error = error_of(answer, 409, "ambiguous_call")
        assert "run_id" in error["message"]
        child_only = {"call_id": "call_0_0", "run_id": child["id"], "approve": True}
        assert (await decide(client, parent["id"], child_only)).status_code == 202
        child = await wait_ended(client, child["id"])
        assert child["status"] == "completed"
        parent = await wait_for_status(client, parent["id"], "requires_action")
        assert [(p["call_id"], p["run_id"]) for p in parent["pending_approvals"]] == [
            ("call_0_0", None)
        ]
        own = {"call_id": "call_0_0", "run_id": parent["id"], "approve": True}
        assert (await decide(client, parent["id"], own)).status_code == 202
        assert (await wait_ended(client, parent["id"]))["status"] == "completed"


async def test_cancelling_a_parent_that_waits_on_its_childs_approval_cancels_both() -> None:
    async with api_client(settings()) as client:
        parent, child = await waiting_tree(client, tree(call("w", "add"), finish("done")))
        assert (await cancel(client, parent["id"]))["status"] == "cancelled"
        await wait_for_status(client, child["id"], "cancelled")  # (a wait answers at once:
        # the child waits for a person until the cascade reaches it)


async def test_a_child_cancelled_while_its_parent_waits_on_it_lets_the_parent_go_on() -> None:
    async with api_client(settings()) as client:
        parent, child = await waiting_tree(client, tree(call("w", "add"), finish("went on")))
        await cancel(client, child["id"])
        parent = await wait_for_status(client, parent["id"], "completed")  # (it goes on)
        assert (parent["status"], parent["result"]["answer"]) == ("completed", "went on")
        (seen,) = of_type(await events(client, parent["id"]), "observation")
        assert seen["is_error"]
        assert "was cancelled" in seen["content"]
        assert len(await children(client, parent["id"])) == 1  # not started again


async def test_a_childs_approval_timeout_rejects_its_call_and_the_tree_goes_on() -> None:
    hasty = approving_worker()
    hasty["settings"] = {"approval_timeout_s": 0.2}
    body = scripted(
        call("w", "add"),
        finish("went on"),
        agents={"w": hasty},
        settings={"approval_timeout_s": 0.1},  # the parent's own: its child's calls are not its
    )
    async with api_client(settings()) as client:
        parent = (await client.post("/runs", json=body)).json()
        (child,) = await started_children(client, parent["id"])
        child = await wait_for_status(client, child["id"], "completed")
        parent = await wait_for_status(client, parent["id"], "completed")
        rejected = of_type(await events(client, child["id"]), "approval.decided")
        assert [(e["approved"], e["message"]) for e in rejected] == [
            (False, "no decision within 0.2 s")
        ]
        mirrored = of_type(await events(client, parent["id"]), "approval.decided")
        assert [(e["approved"], e["run_id"]) for e in mirrored] == [(False, child["id"])]
