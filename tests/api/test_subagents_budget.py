"""One budget for a tree of runs (DESIGN §15): a child's deadline is no later than its
parent's and the parent's wall-time bound holds for the tree, even over a child that would
run forever; the children's tokens count in the parent's usage and against its budget (a
child gets at most what is left, and one that spends it ends the parent with the same
reason); depth and runs per tree are capped with an error the model sees, never a hang; a
sub-agent call is not bounded by tool_timeout_s."""

from __future__ import annotations

import time
from datetime import datetime

from tests.api.kit import finish, run_to_end, scripted, settings, wait_ended
from tests.api.subagent_kit import call, calling, children, events, of_type, worker
from tests.fakes.service import api_client

SLACK_S = 3.0
"""What a loaded 2-core machine may add to a bound (never a tight wall-clock assertion)."""


def used(tokens: tuple[int, int], reply: dict) -> dict:
    """`reply`, reporting `tokens` (prompt, completion) as its usage."""
    return {**reply, "usage": {"prompt_tokens": tokens[0], "completion_tokens": tokens[1]}}


async def test_the_parents_deadline_bounds_a_tree_whose_child_would_run_forever() -> None:
    forever = worker({"content": "thinking it over", "delay_s": 600})
    body = scripted(
        call("w", "never ends"),
        {"content": "my best answer without it"},  # the parent's degraded final call
        agents={"w": forever},
        settings={"max_time_s": 1, "final_answer_timeout_s": 1},
    )
    async with api_client(settings()) as client:
        started = time.perf_counter()
        parent = await run_to_end(client, body)
        elapsed = time.perf_counter() - started
        assert (parent["status"], parent["result"]["reason"]) == ("incomplete", "timeout")
        assert parent["result"]["answer"] == "my best answer without it"
        assert elapsed < 1 + 1 + SLACK_S  # max_time_s + final_answer_timeout_s
        (child,) = await children(client, parent["id"])
        assert child["settings"]["max_time_s"] <= 1
        child = await wait_ended(client, child["id"])
        assert child["status"] in ("incomplete", "cancelled")
        child_end = datetime.fromisoformat(child["ended_at"])
        parent_end = datetime.fromisoformat(parent["ended_at"])
        assert (child_end - parent_end).total_seconds() < SLACK_S  # stopped with its parent
        (seen,) = list(of_type(await events(client, parent["id"]), "observation"))
        assert seen["is_error"]
        assert "interrupted" in seen["content"]


async def test_a_sub_agent_call_is_not_bounded_by_tool_timeout_s() -> None:
    slow = worker({"content": "slowly", "delay_s": 0.5}, finish("done slowly"))
    body = scripted(
        call("w", "take your time"),
        finish("ok"),
        agents={"w": slow},
        settings={"tool_timeout_s": 0.05},
    )
    async with api_client(settings()) as client:
        parent = await run_to_end(client, body)
        (seen,) = of_type(await events(client, parent["id"]), "observation")[:1]
        assert not seen["is_error"]
        assert not seen["timed_out"]
        assert seen["content"].startswith("done slowly")


async def test_children_spend_the_trees_tokens_and_count_in_its_usage() -> None:
    spender = worker(
        used((300, 20), {"content": "working on it"}),
        used((300, 20), finish("half")),
    )
    body = scripted(
        used((100, 10), calling(("w", "a"), ("w", "b"))),
        used((100, 10), finish("both done")),
        agents={"w": spender},
        settings={"max_total_tokens": 10_000},
    )
    async with api_client(settings()) as client:
        parent = await run_to_end(client, body)
        assert parent["status"] == "completed", parent
        kids = await children(client, parent["id"])
        assert len(kids) == 2
        share = (10_000 - 110) // 2
        assert [k["settings"]["max_total_tokens"] for k in kids] == [share, share]
        usage = parent["usage"]
        assert usage["children"]["total_tokens"] == 2 * 640
        assert usage["children"]["llm_calls"] == 4
        assert usage["children"]["steps"] == 2 * 2
        assert usage["total_tokens"] == 220 + 2 * 640
        assert usage["llm_calls"] == 2 + 4
        assert usage["steps"] == 2  # the parent's own turns
        ended = of_type(await events(client, parent["id"]), "run.completed")[0]
        assert ended["usage"] == usage


async def test_a_child_that_spends_the_trees_tokens_ends_its_parent_on_the_same_budget() -> None:
    spender = worker(
        used((600, 0), {"content": "still working"}),
        used((600, 0), {"content": "and more"}),
        {"content": "what I found so far"},  # its degraded final call
    )
    body = scripted(
        used((100, 0), call("w", "spend it all")),
        {"content": "the tree ran out of tokens: here is what I have"},  # the parent's final
        agents={"w": spender},
        settings={"max_total_tokens": 1000},
    )
    async with api_client(settings()) as client:
        parent = await run_to_end(client, body)
        (child,) = await children(client, parent["id"])
        assert child["settings"]["max_total_tokens"] == 900  # what the parent had left
        assert (child["status"], child["result"]["reason"]) == ("incomplete", "token_budget")
        assert child["result"]["degraded"]
        assert (parent["status"], parent["result"]["reason"]) == ("incomplete", "token_budget")
        assert parent["result"]["answer"].startswith("the tree ran out")
        assert parent["usage"]["total_tokens"] >= 1000
        (seen,) = of_type(await events(client, parent["id"]), "observation")
        assert seen["content"].startswith("what I found so far")
        assert "stopped at a limit (token_budget)" in seen["content"]


async def test_past_the_runs_per_tree_a_call_is_an_error_the_model_sees() -> None:
    body = scripted(
        calling(("w", "one"), ("w", "two"), ("w", "three")),
        finish("two of three"),
        agents={"w": worker(finish("done"))},
    )
    async with api_client(settings(max_agent_runs=2)) as client:
        parent = await run_to_end(client, body)
        assert parent["status"] == "completed"
        assert len(await children(client, parent["id"])) == 2
        seen = of_type(await events(client, parent["id"]), "observation")
        refused = [e for e in seen if e["is_error"]]
        assert len(refused) == 1
        assert "has started the 2 sub-agent runs it may" in refused[0]["content"]
        assert len(of_type(await events(client, parent["id"]), "agent.started")) == 2


async def test_past_the_depth_cap_a_call_through_a_profile_is_an_error_the_model_sees() -> None:
    looping = {
        "loop": {
            "description": "Delegates to itself.",
            "model": "scripted",
            "agents": {
                "again": {
                    "agent": "loop",
                    "model_script": [call("again", "deeper"), finish("as deep as I may go")],
                }
            },
        }
    }
    body = {
        "task": "go deep",
        "agent": "loop",
        "model_script": [call("again", "deeper"), finish("done")],
    }
    async with api_client(settings(agents=looping, max_agent_depth=1)) as client:
        parent = await run_to_end(client, body)
        assert parent["status"] == "completed", parent
        (child,) = await children(client, parent["id"])
        assert child["status"] == "completed"
        assert await children(client, child["id"]) == []
        (seen,) = of_type(await events(client, child["id"]), "observation")[:1]
        assert seen["is_error"]
        assert "no deeper than depth 1" in seen["content"]


async def test_one_execution_slot_runs_a_whole_tree_a_waiting_parent_holds_none() -> None:
    leaf = worker(finish("leaf done"))
    middle = worker(call("leaf", "go"), finish("middle done"), agents={"leaf": leaf})
    body = scripted(
        calling(("middle", "one"), ("plain", "two")),
        finish("all done"),
        agents={"middle": middle, "plain": worker(finish("plain done"))},
    )
    async with api_client(settings(max_concurrent_runs=1, max_queued_runs=5)) as client:
        parent = await run_to_end(client, body)
        assert parent["status"] == "completed", parent
        kids = await children(client, parent["id"])
        assert [k["status"] for k in kids] == ["completed", "completed"]
        (grandchild,) = await children(client, kids[0]["id"])
        assert grandchild["result"]["answer"] == "leaf done"
        assert parent["usage"]["children"]["llm_calls"] == 2 + 1 + 1
