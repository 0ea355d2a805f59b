"""Records the regression set of replays (DESIGN §20): runs made against the fake LLM over
HTTP, each kept as its stored record and events in tests/replays/<name>.json. The suite
replays every one on today's engine (tests/replays/test_replays.py): a change to the engine
that makes any of them go another way fails it. Record them again only on purpose:

    .venv/bin/python -m tests.replays.record
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from tests.api.kit import app_with_state, settings
from tests.fakes.llm_server import FakeLLMServer, FakeReply

HERE = Path(__file__).resolve().parent


def calc(expression: str) -> FakeReply:
    return FakeReply.call("calculator", {"expression": expression}, content="Let me compute.")


SCENARIOS: dict[str, tuple[list[FakeReply], dict[str, Any]]] = {
    "tool_then_finish": ([calc("6*7"), FakeReply.finish("42")], {}),
    "stop_prompt_then_finish": (
        [FakeReply(content="It is 42."), FakeReply.finish("42")],
        {},
    ),
    "tool_error_then_finish": ([calc("1/0"), calc("6*7"), FakeReply.finish("42")], {}),
    "repetition_then_max_steps": (
        [calc("6*7"), calc("6*7"), calc("6*7"), FakeReply(content="42, I think")],
        {"settings": {"max_steps": 3}},
    ),
    "nudge_limit": (
        [FakeReply(content="hmm"), FakeReply(content="hmm"), FakeReply(content="hmm")],
        {"settings": {"max_nudges": 1}},
    ),
    "answered_without_stop_tool": (
        [calc("2+2"), FakeReply(content="4")],
        {"settings": {"stop_tool": False}},
    ),
    "parallel_calls": (
        [
            FakeReply(
                tool_calls=(
                    *FakeReply.call("calculator", {"expression": "1+1"}).tool_calls,
                    *FakeReply.call("calculator", {"expression": "2+2"}).tool_calls,
                )
            ),
            FakeReply.finish("2 and 4"),
        ],
        {},
    ),
}


async def record_one(name: str, replies: list[FakeReply], fields: dict[str, Any]) -> None:
    async with FakeLLMServer(replies) as llm:
        config = settings(llm_base_url=llm.base_url, llm_model="fake-model")
        async with app_with_state(config) as (client, state):
            body = {"task": "What is 6*7?", "tools": ["calculator"], **fields}
            run = (await client.post("/runs", json=body)).json()
            await client.get(f"/runs/{run['id']}/wait", params={"timeout_s": 10})
            store = state["manager"].store
            record = await store.get(run["id"])
            events = await store.read(run["id"])
    kept = {
        "record": json.loads(record.model_dump_json()),
        "events": [{"type": e.type.value, "step": e.step, "data": e.data} for e in events],
    }
    path = HERE / f"{name}.json"
    path.write_text(json.dumps(kept, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{path.name}: {record.status.value}, {record.result.reason.value}")


async def main() -> None:
    for name, (replies, fields) in SCENARIOS.items():
        await record_one(name, replies, fields)


if __name__ == "__main__":
    asyncio.run(main())
