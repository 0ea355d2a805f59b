"""What a real model says cannot blow up a run: a reply's text and a call's arguments are
capped before they enter the events and the conversation (FINISHLINE_MAX_REPLY_CHARS), and
an LLM response over FINISHLINE_LLM_MAX_RESPONSE_BYTES fails the run with a clear error
instead of being read into memory. The model is the fake OpenAI-compatible server over real
loopback HTTP."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.api.kit import create, json_events, settings, wait_ended
from tests.fakes.llm_replies import FakeReply, FakeToolCall
from tests.fakes.llm_server import FakeLLMServer
from tests.fakes.service import api_client

TEN_MB = 10_000_000
BIGGEST_EVENT = 110_000
"""No event may hold more than the 100,000-character caps and its envelope."""


async def run_with(
    llm: FakeLLMServer, body: dict[str, Any], **overrides: Any
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    app_settings = settings(llm_base_url=llm.base_url, llm_model="fake-model", **overrides)
    async with api_client(app_settings) as client:
        created = await create(client, body)
        run = await wait_ended(client, created["id"])
        events = (await json_events(client, run["id"], limit=1000))["events"]
    return run, events


def largest(events: list[dict[str, Any]]) -> int:
    return max(len(json.dumps(event, ensure_ascii=False)) for event in events)


@pytest.mark.parametrize("stream_tokens", [False, True])
async def test_a_ten_megabyte_reply_fails_the_run_unretried_with_no_big_event(
    stream_tokens: bool,
) -> None:
    huge = FakeReply(content=["x" * 1_000_000] * 10)  # ten 1 MB deltas when streamed
    async with FakeLLMServer([huge, FakeReply.finish("never asked")]) as llm:
        body = {"task": "Say a lot.", "settings": {"stream_tokens": stream_tokens}}
        run, events = await run_with(llm, body)
        asked = len(llm.requests)

    assert run["status"] == "failed"
    assert run["error"]["type"] == "llm_response_too_large"
    assert "8,388,608 bytes" in run["error"]["message"]
    assert asked == 1  # not retried
    assert largest(events) < BIGGEST_EVENT
    streamed = "".join(e["delta"] for e in events if e["type"] == "token")
    assert len(streamed) <= 100_000


async def test_ten_megabytes_of_tool_call_arguments_fail_the_run_unread() -> None:
    call = FakeToolCall("calculator", {"expression": "1+" * (TEN_MB // 2)})
    async with FakeLLMServer([FakeReply(tool_calls=[call])]) as llm:
        run, events = await run_with(llm, {"task": "Add.", "tools": ["calculator"]})

    assert run["error"]["type"] == "llm_response_too_large"
    assert largest(events) < BIGGEST_EVENT


@pytest.mark.parametrize("stream_tokens", [False, True])
async def test_a_long_reply_is_cut_in_the_thought_the_tokens_and_the_conversation(
    stream_tokens: bool,
) -> None:
    paragraph = "The model goes on and on about the task. " * 20 + "\n\n"
    text = paragraph * 500  # ~420,000 characters: under the response cap, over the reply cap
    replies = [FakeReply(content=[text] if stream_tokens else text), FakeReply.finish("done")]
    async with FakeLLMServer(replies) as llm:
        body = {"task": "Think aloud.", "settings": {"stream_tokens": stream_tokens}}
        run, events = await run_with(llm, body, max_reply_chars=5000)
        second = llm.requests[1]["messages"]

    assert run["status"] == "completed"
    (thought,) = [e for e in events if e["type"] == "thought"]
    assert thought["text"].endswith(f" of {len(text):,} characters.]")
    kept = thought["text"][: thought["text"].index("\n\n[Reply cut at")]
    assert len(kept) <= 5000
    assert text.startswith(kept)
    assert kept.endswith("task.")  # cut at a boundary
    (assistant,) = [m for m in second if m["role"] == "assistant"]
    assert assistant["content"] == thought["text"]
    streamed = "".join(e["delta"] for e in events if e["type"] == "token" and e["step"] == 1)
    assert streamed == (text[:5000] if stream_tokens else "")


async def test_tool_call_arguments_over_the_cap_do_not_run_and_the_model_is_told() -> None:
    arguments = {"expression": "1+" * 50_000 + "1"}
    size = len(json.dumps(arguments))  # as the fake sends them
    call = FakeToolCall("calculator", arguments, id="call_big")
    replies = [FakeReply(tool_calls=[call]), FakeReply.finish("done")]
    async with FakeLLMServer(replies) as llm:
        run, events = await run_with(llm, {"task": "Add.", "tools": ["calculator"]})
        second = llm.requests[1]["messages"]

    assert run["status"] == "completed"
    (action,) = [e for e in events if e["type"] == "action" and e["tool"] == "calculator"]
    assert action["arguments"] == f"[{size:,} characters of arguments, over the cap: not kept]"
    (observation,) = [e for e in events if e["type"] == "observation" and e["step"] == 1]
    assert observation["is_error"] is True
    assert f"{size:,} characters long, more than this server accepts" in observation["content"]
    assert "did not run" in observation["content"]
    (assistant,) = [m for m in second if m["role"] == "assistant"]
    kept = json.loads(assistant["tool_calls"][0]["function"]["arguments"])
    assert kept == {"_arguments_dropped_chars": size}
    tool_message = next(m for m in second if m["role"] == "tool")
    assert tool_message["tool_call_id"] == "call_big"
    assert largest(events) < BIGGEST_EVENT
