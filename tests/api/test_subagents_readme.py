"""The agents guide's router-and-two-workers example runs as it is written, on the demo model: the
router hands the task to both workers at once, each uses its tool, and the router answers
from what they said."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests.api.kit import run_to_end, settings
from tests.api.subagent_kit import children, events, of_type
from tests.fakes.service import api_client

ROOT = Path(__file__).resolve().parents[2]
SNIPPET = re.compile(r"<!-- subagents:start -->\n```sh\n(.*?)```\n<!-- subagents:end -->", re.S)


def readme_body() -> dict[str, Any]:
    found = SNIPPET.search((ROOT / "docs" / "guides" / "agents.md").read_text(encoding="utf-8"))
    assert found is not None, "the agents guide's sub-agents example is gone"
    body = found.group(1).split("-d '", 1)[1].rsplit("'", 1)[0]
    parsed: dict[str, Any] = json.loads(body)
    return parsed


async def test_the_readme_router_and_its_two_workers_run_on_the_demo_model() -> None:
    body = readme_body()
    assert set(body["agents"]) == {"mathematician", "clock"}
    async with api_client(settings()) as client:
        run = await run_to_end(client, body)
        assert (run["status"], run["model"]) == ("completed", "demo")
        assert run["result"]["answer"].startswith("[demo model] My sub-agents answered: 391; ")
        assert "UTC" in run["result"]["answer"]
        kids = await children(client, run["id"])
        assert sorted(k["task"] == body["task"] for k in kids) == [True, True]
        assert {k["model"] for k in kids} == {"demo"}  # the parent's model
        found = await events(client, run["id"])
        started = [e["step"] for e in of_type(found, "agent.started")]
        assert started == [1, 1]  # both in one step: they run at once
        assert run["usage"]["children"]["llm_calls"] == 4
