"""The guides' examples that run on the demo or scripted model run as they are written: each
shell session command by command (tests/api/sessions.py), each request body as it is shown."""

from __future__ import annotations

import json
import re

import pytest

from tests.api.kit import run_to_end, settings
from tests.api.sessions import ROOT, commands, run_session
from tests.fakes.service import api_client

pytestmark = pytest.mark.e2e

SH = r"```sh\n(.*?)```"


async def test_the_follow_up_and_steering_session() -> None:
    session = commands("docs/guides/conversations.md", SH, 0)
    first, follow_up, follow_ups, steer = await run_session(session)
    first_id = json.loads(first)["id"]
    assert json.loads(follow_up)["previous_run_id"] == first_id
    listed = json.loads(follow_ups)["runs"]
    assert [r["id"] for r in listed] == [json.loads(follow_up)["id"]]
    # the session steers RUN_ID, which has ended by then: 409, as the comment says
    assert json.loads(steer)["error"]["type"] == "run_already_ended"


async def test_the_approval_session() -> None:
    session = commands("docs/guides/approvals.md", SH, 0)

    def fill(command: str, outs: list[str]) -> str:
        if "call_abc" not in command:
            return command
        waited = json.loads(outs[1])  # the wait: the call the run waits on
        return command.replace("call_abc", waited["pending_approvals"][0]["call_id"])

    started, waited, waiting, approved, rejected = await run_session(session, fill)
    run_id = json.loads(started)["id"]
    assert json.loads(waited)["status"] == "requires_action"
    pending = json.loads(waited)["pending_approvals"]
    assert [(p["tool"], p["arguments"]) for p in pending] == [
        ("calculator", {"expression": "6 * 7"})
    ]
    assert [r["id"] for r in json.loads(waiting)["runs"]] == [run_id]
    assert json.loads(approved)["id"] == run_id
    # approved, the run went on and ended; the session's "... or reject" then finds it
    # waiting on nothing (409)
    assert json.loads(rejected)["error"]["type"] == "run_not_waiting"
    assert "is completed" in json.loads(rejected)["error"]["message"]


async def test_the_typed_answer_session() -> None:
    session = commands("docs/guides/typed-answers.md", SH, 0)
    started, ended = await run_session(session)
    result = json.loads(ended)["result"]
    shown = (ROOT / "docs/guides/typed-answers.md").read_text(encoding="utf-8")
    expected = re.search(r'#\s+"output": (\{.*?\}),\n', shown)
    assert expected is not None
    assert result["output"] == json.loads(expected.group(1))
    assert (result["reason"], result["degraded"], result["output_errors"]) == (
        "finished",
        False,
        None,
    )
    assert json.loads(started)["id"] == json.loads(ended)["id"]


async def test_the_scripted_model_body() -> None:
    text = (ROOT / "docs/guides/real-models.md").read_text(encoding="utf-8")
    found = re.search(r"```json\n(.*?)```", text, re.S)
    assert found is not None, "the scripted model's example is gone"
    async with api_client(settings()) as client:
        run = await run_to_end(client, json.loads(found.group(1)))
    assert (run["status"], run["result"]["reason"], run["result"]["answer"]) == (
        "completed",
        "finished",
        "42",
    )


async def test_the_agent_profiles_session() -> None:
    """The agents guide's session: the server as its first line starts it (the example
    profiles), then each curl and `finishline` command against it."""
    session = commands("docs/guides/agents.md", SH, 0, programs=("curl ", "finishline ", "FINISH"))
    start, *rest = session
    assert start.split("#")[0].split() == [
        "FINISHLINE_AGENTS=@deploy/agents.example.json",
        "make",
        "run",
    ]
    agents, researcher, planned, quick_one, table, quick_run = await run_session(
        rest, agents="@deploy/agents.example.json"
    )
    assert {a["name"] for a in json.loads(agents)["agents"]} == {"researcher", "quick"}
    assert json.loads(researcher)["name"] == "researcher"
    assert json.loads(planned)["agent"] == "researcher"
    assert json.loads(quick_one)["settings"]["max_steps"] == 3
    assert "researcher" in table
    assert "quick" in table
    assert "42" in quick_run


async def test_the_usage_example_shows_the_keys_day_and_quotas() -> None:
    """The budgets guide's GET /usage, with the quotas its example shows (KEY: a key of the
    server's), answers in the shape of the page's comment."""
    session = commands("docs/guides/budgets.md", SH, 1)
    key = "usage-key-0123456789"
    (usage,) = await run_session(
        session,
        lambda command, _: command.replace("$KEY", key),
        api_keys=[key],
        quota_concurrent_runs=3,
        quota_tokens_per_day=1_000_000,
    )
    shown = (ROOT / "docs/guides/budgets.md").read_text(encoding="utf-8")
    comment = shown[shown.index('# {"day"') :].split("\n```")[0]
    example = json.loads(" ".join(line.lstrip("# ") for line in comment.splitlines()))
    answered = json.loads(usage)
    assert set(answered) == set(example)
    assert answered["quotas"] == {
        "concurrent_runs": {"limit": 3, "used": 0, "left": 3},
        "tokens_per_day": {"limit": 1_000_000, "used": 0, "left": 1_000_000},
    }


def test_the_model_prices_example_is_a_setting_the_server_takes() -> None:
    shown = (ROOT / "docs/guides/budgets.md").read_text(encoding="utf-8")
    found = re.search(r"FINISHLINE_MODEL_PRICES='(.*?)'\n", shown)
    assert found is not None, "the prices example is gone"
    configured = settings(model_prices=found.group(1)).model_prices
    assert set(configured) == {"my-llama", "scripted"}


async def test_the_outcomes_demo_run() -> None:
    """The outcomes guide's try-it: on the demo model the first answer is judged unmet, the
    revision met, and the run completes (the CLI exits 0)."""
    block = r"## Try it without a model\n\n[^`]*```bash\n(.*?)```"
    start, *rest = commands("docs/guides/outcomes.md", block, programs=("make run", "finishline "))
    assert start.split("#")[0].split() == ["make", "run"]
    (out,) = await run_session(rest)
    assert "completed" in out
    assert "(revised after review)" in out
