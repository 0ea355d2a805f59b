"""Talking to runs over real HTTP with the fake LLM (DESIGN §10): steering messages land right
before the next LLM call, and follow-up runs start from the previous run's conversation."""

from __future__ import annotations

from typing import Any

import pytest

from app.engine.prompts import EN
from app.engine.specs import tool_specs
from app.engine.tokens import estimate_tokens
from tests.e2e.kit import e2e_settings, start_run, stored_events
from tests.fakes.llm_server import FakeLLMServer, FakeReply
from tests.fakes.service import api_client

pytestmark = pytest.mark.e2e


async def ended(client: Any, run_id: str) -> dict[str, Any]:
    response = await client.get(f"/runs/{run_id}/wait", params={"timeout_s": 10})
    assert response.status_code == 200, response.text
    run: dict[str, Any] = response.json()
    assert run["status"] not in ("queued", "running"), run
    return run


def tail(messages: list[dict[str, Any]], n: int) -> list[tuple[str, Any]]:
    return [(m["role"], m.get("content")) for m in messages[-n:]]


async def test_a_message_sent_during_an_llm_call_is_seen_by_the_next_call(store_url: str) -> None:
    replies = [
        FakeReply.call("calculator", {"expression": "6*7"}, hang=True),
        FakeReply.finish("42"),
    ]
    async with (
        FakeLLMServer(replies) as llm,
        api_client(e2e_settings(llm, store_url=store_url)) as client,
    ):
        run_id = await start_run(client, {"task": "compute", "tools": ["calculator"]})
        await llm.wait_for_requests(1)

        first = await client.post(f"/runs/{run_id}/messages", json={"content": "show your work"})
        second = await client.post(f"/runs/{run_id}/messages", json={"content": "in French"})
        llm.release()
        run = await ended(client, run_id)

        assert first.status_code == 202, first.text
        assert first.json()["id"] == run_id
        assert second.status_code == 202
        assert run["result"]["answer"] == "42"
        sent = llm.requests[1]["messages"]
        assert [m["role"] for m in sent[-4:]] == ["assistant", "tool", "user", "user"]
        assert tail(sent, 2) == [("user", "show your work"), ("user", "in French")]
        events = await stored_events(client, run_id)
        said = [e for e in events if e["type"] == "user.message"]
        assert [(e["content"], e["delivered"], e["step"]) for e in said] == [
            ("show your work", True, 2),
            ("in French", True, 2),
        ]
        types = [e["type"] for e in events]
        observation = types.index("observation")
        assert observation < events.index(said[0]) < types.index("llm.call", observation)


async def test_a_message_accepted_during_the_last_llm_call_is_logged_undelivered() -> None:
    async with (
        FakeLLMServer([FakeReply.finish("done", hang=True)]) as llm,
        api_client(e2e_settings(llm)) as client,
    ):
        run_id = await start_run(client, {"task": "t"})
        await llm.wait_for_requests(1)

        response = await client.post(f"/runs/{run_id}/messages", json={"content": "too late"})
        llm.release()
        run = await ended(client, run_id)

        assert response.status_code == 202
        assert run["status"] == "completed"
        events = await stored_events(client, run_id)
        assert [e["type"] for e in events[-2:]] == ["user.message", "run.completed"]
        assert (events[-2]["content"], events[-2]["delivered"]) == ("too late", False)
        after = await client.post(f"/runs/{run_id}/messages", json={"content": "later"})
        assert after.status_code == 409
        assert after.json()["error"]["type"] == "run_already_ended"


async def test_a_follow_up_starts_from_the_previous_conversation(store_url: str) -> None:
    replies = [
        FakeReply.call("calculator", {"expression": "6*7"}),
        FakeReply.finish("42"),
        FakeReply.finish("84"),
    ]
    async with (
        FakeLLMServer(replies) as llm,
        api_client(e2e_settings(llm, store_url=store_url)) as client,
    ):
        first_id = await start_run(
            client,
            {"task": "what is 6*7?", "system_prompt": "Be exact.", "tools": ["calculator"]},
        )
        await ended(client, first_id)

        second_id = await start_run(client, {"task": "now double it", "previous_run_id": first_id})
        second = await ended(client, second_id)

        assert second["result"]["answer"] == "84"
        assert second["previous_run_id"] == first_id
        assert second["system_prompt"] == "Be exact."
        sent = llm.requests[2]["messages"]
        assert sent[0]["role"] == "system"
        assert sent[0]["content"].startswith("Be exact.")
        assert [m["role"] for m in sent[1:]] == ["user", "assistant", "tool", "assistant", "user"]
        assert tail(sent, 2) == [("assistant", "42"), ("user", "now double it")]
        assert "task_finished" not in str(sent[1:-1])
        assert [t["function"]["name"] for t in llm.requests[2]["tools"]] == ["task_finished"]
        events = await stored_events(client, second_id)
        assert events[0]["type"] == "run.queued"
        assert events[0]["previous_run_id"] == first_id
        # the inherited conversation is not re-emitted: the only action is the run's own
        assert [e["tool"] for e in events if e["type"] == "action"] == ["task_finished"]
        listed = await client.get("/runs", params={"previous_run_id": first_id})
        assert [r["id"] for r in listed.json()["runs"]] == [second_id]


async def test_a_follow_up_of_a_run_that_hit_a_limit_without_an_answer_gets_a_note() -> None:
    replies = [FakeReply.call("calculator", {"expression": "1+1"}), FakeReply.finish("ok")]
    async with FakeLLMServer(replies) as llm, api_client(e2e_settings(llm)) as client:
        first_id = await start_run(
            client,
            {
                "task": "t",
                "tools": ["calculator"],
                "settings": {"max_steps": 1, "final_answer_on_limit": False},
            },
        )
        first = await ended(client, first_id)
        second_id = await start_run(client, {"task": "go on", "previous_run_id": first_id})
        await ended(client, second_id)

        assert first["result"] == {"answer": None, "reason": "max_steps", "degraded": False}
        sent = llm.requests[1]["messages"]
        assert tail(sent, 2) == [
            ("assistant", "(The previous run ended without an answer: max_steps.)"),
            ("user", "go on"),
        ]
        assert sent[-3]["role"] == "tool"


async def test_a_long_chain_of_follow_ups_keeps_each_prompt_under_max_context_tokens() -> None:
    """Each follow-up inherits its whole chain; past `max_context_tokens` its oldest
    inherited turns are dropped whole (here, a turn is a run's task and answer), the newest
    kept, and the run's `context_trim` intervention says how many."""
    cap = 1000
    spec_tokens = tool_specs([], True, EN)[1]  # task_finished's, as the engine estimates it

    def answer(request: dict[str, Any]) -> FakeReply:
        task = request["messages"][-1]["content"]
        return FakeReply.finish(f"the answer to {task[:12]}: " + "a" * 300)

    async with (
        FakeLLMServer(handler=answer) as llm,
        api_client(e2e_settings(llm)) as client,
    ):
        run_id: str | None = None
        tasks: list[str] = []
        kept_before = 0  # inherited turns the previous run kept
        for index in range(30):
            tasks.append(f"task {index:02}: " + "t" * 300)
            body: dict[str, Any] = {
                "task": tasks[-1],
                "system_prompt": "You are terse.",
                "settings": {"max_context_tokens": cap},
            }
            if run_id is not None:
                body["previous_run_id"] = run_id
            run_id = await start_run(client, body)
            run = await ended(client, run_id)
            assert run["status"] == "completed", run

            sent = llm.requests[-1]["messages"]
            assert estimate_tokens(sent) + spec_tokens <= cap
            assert sent[0]["role"] == "system"
            assert sent[0]["content"].startswith("You are terse.")
            assert sent[-1] == {"role": "user", "content": tasks[-1]}
            history = sent[1:-1]
            kept = len(history) // 2
            assert [m["role"] for m in history] == ["user", "assistant"] * kept
            assert [m["content"] for m in history[::2]] == tasks[index - kept : index]

            dropped = (kept_before + 1 if index else 0) - kept
            events = await stored_events(client, run_id)
            trims = [e["message"] for e in events if e.get("kind") == "context_trim"]
            if dropped:
                notice = EN.context_drop_notice.format(
                    limit=cap, turns=dropped, messages=2 * dropped
                )
                assert trims == [notice]
            else:
                assert trims == []
            kept_before = kept
        assert kept_before < index  # the chain outgrew the cap: turns were dropped
