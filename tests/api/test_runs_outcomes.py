"""Outcomes over HTTP (DESIGN §22), through the fake OpenAI-compatible LLM on every store: the
answer graded by one call in a context of its own, unmet then met, never met
(`outcome_unmet`), an invalid verdict, a hanging grader under the deadline, the schema checked
before the rubric, a sub-agent with an outcome of its own; and the 422s of `outcome`."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from app.engine.grading import Outcome
from app.engine.loop import run_react
from app.engine.steps import Checkpoint
from app.llm.demo import REVISED
from app.llm.scripted import ScriptedModel
from app.runs.records import RunRecord, RunStatus, new_run_id, utcnow
from app.runs.spec import RunSettingsIn
from tests.api.kit import app_with_state, error_of, json_events, run_to_end, settings, wait_ended
from tests.fakes.llm_server import FakeLLMServer, FakeReply, FakeUsage
from tests.fakes.service import api_client

RUBRIC = "The answer names a colour."


def verdict(satisfied: bool, feedback: str = "") -> FakeReply:
    return FakeReply.call("submit_verdict", {"satisfied": satisfied, "feedback": feedback})


def verdict_reply(satisfied: bool, feedback: str) -> dict[str, Any]:
    arguments = {"satisfied": satisfied, "feedback": feedback}
    return {"tool_calls": [{"name": "submit_verdict", "arguments": arguments}]}


def finish_reply(answer: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "task_finished", "arguments": {"answer": answer}}]}


def on(llm: FakeLLMServer, store_url: str = "memory://", **overrides: Any) -> Any:
    return settings(
        llm_base_url=llm.base_url, llm_model="fake-model", store_url=store_url, **overrides
    )


def graded(events: list[dict[str, Any]]) -> list[tuple[bool, str, int]]:
    return [
        (e["satisfied"], e["feedback"], e["revision"])
        for e in events
        if e["type"] == "outcome.graded"
    ]


@pytest.fixture(params=["memory", "sqlite", "redis"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "redis":
        url: str = request.getfixturevalue("redis_url")
        return url
    return "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'runs.db'}"


async def test_an_unmet_answer_is_revised_and_the_met_revision_completes_the_run(
    store_url: str,
) -> None:
    replies = [
        FakeReply.finish("a shape"),
        verdict(False, "name a colour"),
        FakeReply.finish("red"),
        verdict(True, "red is a colour"),
    ]
    body = {"task": "Name something.", "outcome": {"rubric": RUBRIC}}
    async with FakeLLMServer(replies) as llm, api_client(on(llm, store_url)) as client:
        run = await run_to_end(client, body)
        events = (await json_events(client, run["id"]))["events"]
        requests = llm.requests

    assert (run["status"], run["result"]["answer"]) == ("completed", "red")
    assert run["result"]["reason"] == "finished"
    assert run["outcome"]["rubric"] == RUBRIC
    assert graded(events) == [(False, "name a colour", 0), (True, "red is a colour", 1)]
    kinds = [e["kind"] for e in events if e["type"] == "intervention"]
    assert kinds == ["outcome_unmet"]
    assert run["usage"]["llm_calls"] == 4  # the grader's calls count
    grader = requests[1]
    assert [m["role"] for m in grader["messages"]] == ["system", "user"]  # its own context
    assert RUBRIC in grader["messages"][1]["content"]
    assert "a shape" in grader["messages"][1]["content"]
    assert grader["tool_choice"]["function"]["name"] == "submit_verdict"
    told = requests[2]["messages"][-1]
    assert told["role"] == "tool"
    assert "name a colour" in told["content"]


async def test_an_answer_never_met_ends_outcome_unmet_with_the_last_answer(
    store_url: str,
) -> None:
    replies = [
        FakeReply.finish("a shape"),
        verdict(False, "no colour"),
        FakeReply.finish("a circle"),
        verdict(False, "still no colour"),
    ]
    body = {"task": "Name something.", "outcome": {"rubric": RUBRIC, "max_revisions": 1}}
    async with FakeLLMServer(replies) as llm, api_client(on(llm, store_url)) as client:
        run = await run_to_end(client, body)
        events = (await json_events(client, run["id"]))["events"]

    assert run["status"] == "incomplete"
    result = run["result"]
    assert (result["reason"], result["answer"], result["degraded"]) == (
        "outcome_unmet",
        "a circle",
        True,
    )
    assert run["settings"]["max_revisions"] == 1
    assert graded(events)[-1] == (False, "still no colour", 1)
    assert events[-1]["type"] == "run.incomplete"


async def test_an_invalid_verdict_is_retried_then_counts_as_unmet(store_url: str) -> None:
    replies = [
        FakeReply.finish("a shape"),
        FakeReply(content="looks fine to me"),
        FakeReply.call("submit_verdict", {"satisfied": "yes"}),
    ]
    body = {
        "task": "Name something.",
        "outcome": {"rubric": RUBRIC, "max_revisions": 0},
        "settings": {"llm_retries": 1},
    }
    async with FakeLLMServer(replies) as llm, api_client(on(llm, store_url)) as client:
        run = await run_to_end(client, body)
        events = (await json_events(client, run["id"]))["events"]

    assert (run["status"], run["result"]["reason"]) == ("incomplete", "outcome_unmet")
    (verdict_event,) = [e for e in events if e["type"] == "outcome.graded"]
    assert (verdict_event["satisfied"], verdict_event["valid"]) == (False, False)
    retries = [e for e in events if e["type"] == "llm.retry"]
    assert len(retries) == 1
    assert "invalid verdict" in retries[0]["error"]


async def test_a_hanging_grader_cannot_keep_the_run_past_its_deadline(store_url: str) -> None:
    replies = [
        FakeReply.finish("a shape"),
        FakeReply(hang=True),  # the grader
        FakeReply(content="red, as best I can"),  # the final answer at the deadline
        FakeReply(hang=True),  # its grading, once, within the final call's time
    ]
    body = {
        "task": "Name something.",
        "outcome": {"rubric": RUBRIC},
        "settings": {"max_time_s": 1, "final_answer_timeout_s": 1, "llm_retries": 0},
    }
    async with FakeLLMServer(replies) as llm, api_client(on(llm, store_url)) as client:
        run = await run_to_end(client, body)
        events = (await json_events(client, run["id"]))["events"]
        asked = len(llm.requests)

    assert run["status"] == "incomplete"
    result = run["result"]
    assert (result["reason"], result["answer"], result["degraded"]) == (
        "timeout",
        "red, as best I can",
        True,
    )
    assert graded(events) == []  # neither hanging verdict came
    assert asked == 4


async def test_the_output_schema_is_checked_before_the_rubric(store_url: str) -> None:
    colour = {"colour": {"type": "string"}}
    schema = {"type": "object", "properties": colour, "required": ["colour"]}
    replies = [
        FakeReply.call("task_finished", {"answer": {"shape": "circle"}}),  # fails the schema
        FakeReply.call("task_finished", {"answer": {"colour": "red"}}),
        verdict(True, "a colour"),
    ]
    body = {"task": "Name a colour.", "output_schema": schema, "outcome": {"rubric": RUBRIC}}
    async with FakeLLMServer(replies) as llm, api_client(on(llm, store_url)) as client:
        run = await run_to_end(client, body)
        events = (await json_events(client, run["id"]))["events"]
        requests = llm.requests

    assert run["status"] == "completed"
    assert run["result"]["output"] == {"colour": "red"}
    kinds = [e["kind"] for e in events if e["type"] == "intervention"]
    assert kinds == ["invalid_output"]
    assert graded(events) == [(True, "a colour", 0)]
    assert len(requests) == 3  # no grader call for the answer that failed the schema
    assert '{"colour": "red"}' in requests[2]["messages"][1]["content"]


async def test_a_sub_agent_grades_its_own_answer_and_its_calls_count_in_the_tree(
    store_url: str,
) -> None:
    replies = [
        FakeReply.call("writer", {"task": "Name a colour."}),  # the parent
        FakeReply.finish("a shape"),  # the child
        verdict(False, "a colour, please"),  # the child's grader
        FakeReply.finish("blue"),
        verdict(True, "blue"),
        FakeReply.finish("The writer said blue."),  # the parent again
    ]
    body = {
        "task": "Ask the writer.",
        "agents": {"writer": {"description": "Writes.", "outcome": {"rubric": RUBRIC}}},
    }
    async with FakeLLMServer(replies) as llm, api_client(on(llm, store_url)) as client:
        run = await run_to_end(client, body)
        events = (await json_events(client, run["id"]))["events"]
        started = next(e for e in events if e["type"] == "agent.started")
        child = (await client.get(f"/runs/{started['child_run_id']}")).json()
        child_events = (await json_events(client, child["id"]))["events"]

    assert (run["status"], run["result"]["answer"]) == ("completed", "The writer said blue.")
    assert graded(events) == []  # the parent has no outcome
    assert (child["result"]["answer"], child["outcome"]["rubric"]) == ("blue", RUBRIC)
    assert graded(child_events) == [(False, "a colour, please", 0), (True, "blue", 1)]
    assert child["usage"]["llm_calls"] == 4
    assert run["usage"]["children"]["llm_calls"] == 4
    assert run["usage"]["llm_calls"] == 6


@pytest.mark.parametrize(
    ("outcome", "field", "problem"),
    [
        ({"rubric": ""}, "outcome.rubric", "at least 1 character"),
        ({"rubric": "r", "max_revisions": -1}, "outcome.max_revisions", "greater than or equal"),
        ({"rubric": "r", "max_revisions": 11}, "outcome.max_revisions", "server cap of 10"),
        ({"rubric": "r", "judge": "me"}, "outcome.judge", "unknown field"),
        ({"rubric": "r", "grader": {"model": "scripted"}}, "outcome.grader.model", "scripted"),
        ({"rubric": "x" * 21}, "outcome.rubric", "exceeds the server cap of 20"),
        ({"rubric": "r", "grader": {"model": "gpt-nowhere"}}, "outcome.grader.model", "endpoint"),
    ],
    ids=[
        "empty-rubric",
        "negative",
        "over-cap",
        "unknown-field",
        "scripted-grader",
        "long",
        "unavailable-grader",
    ],
)
async def test_a_bad_outcome_is_422_naming_the_field(
    outcome: dict[str, Any], field: str, problem: str
) -> None:
    body = {"task": "t", "model": "demo", "outcome": outcome}
    async with api_client(settings(max_rubric_chars=20)) as client:
        response = await client.post("/runs", json=body)
    error = error_of(response, 422, "validation_error")
    assert error["message"].startswith(f"{field}: "), error
    assert problem in error["message"], error


async def test_max_revisions_given_twice_differently_is_422() -> None:
    body = {
        "task": "t",
        "model": "demo",
        "outcome": {"rubric": "r", "max_revisions": 1},
        "settings": {"max_revisions": 2},
    }
    async with api_client(settings()) as client:
        response = await client.post("/runs", json=body)
    error = error_of(response, 422, "validation_error")
    assert error["message"].startswith("outcome.max_revisions: ")
    assert "settings.max_revisions" in error["message"]


async def test_a_run_taken_over_after_a_verdict_does_not_ask_for_it_again(redis_url: str) -> None:
    # its replica had the first answer graded unmet (the checkpoint after the verdict holds
    # it and the feedback) when it died: the replica taking over goes on from the next step
    outcome = Outcome(RUBRIC, model=ScriptedModel([verdict_reply(False, "name a colour")]))
    steps = run_react(
        task="Name something.", model=ScriptedModel([finish_reply("a shape")]), outcome=outcome
    )
    checkpoint = None
    async for step in steps:
        if isinstance(step, Checkpoint):
            checkpoint = step
            break
    await steps.aclose()
    assert checkpoint is not None
    assert checkpoint.state["revisions"] == 1

    replies = [FakeReply.finish("red"), verdict(True, "red is a colour")]
    async with (
        FakeLLMServer(replies) as llm,
        app_with_state(on(llm, redis_url, lease_s=1)) as (client, state),
    ):
        manager = state["manager"]
        record = RunRecord(
            id=new_run_id(),
            request={"task": "Name something.", "outcome": {"rubric": RUBRIC}},
            model="fake-model",
            settings=manager.assembler.resolve_settings(RunSettingsIn()),
            status=RunStatus.RUNNING,
            started_at=utcnow() - timedelta(seconds=1),
        )
        await manager.store.create(record)
        await manager.store.append(record.id, "run.queued", 0, {})
        await manager.store.append(record.id, "run.started", 0, {})
        await manager.store.save_checkpoint(record.id, checkpoint.step, checkpoint.state)

        run = await wait_ended(client, record.id)
        events = (await json_events(client, record.id))["events"]
        requests = llm.requests

    assert (run["status"], run["result"]["answer"]) == ("completed", "red")
    assert "run.recovered" in [e["type"] for e in events]
    assert graded(events) == [(True, "red is a colour", 1)]  # the new answer's only
    assert len(requests) == 2  # the revision and its verdict; the first verdict not again
    assert "name a colour" in requests[0]["messages"][-1]["content"]


async def test_a_degraded_final_answer_at_a_limit_is_graded_once(store_url: str) -> None:
    replies = [
        FakeReply(content="thinking it over"),  # no finish: step 1 is the last
        FakeReply(content="red, as far as I got"),  # the final call at max_steps
        verdict(False, "fine, but say why"),  # graded once; the run ends with its limit
    ]
    body = {"task": "Name a colour.", "outcome": {"rubric": RUBRIC}, "settings": {"max_steps": 1}}
    async with FakeLLMServer(replies) as llm, api_client(on(llm, store_url)) as client:
        run = await run_to_end(client, body)
        events = (await json_events(client, run["id"]))["events"]
        asked = len(llm.requests)

    result = run["result"]
    assert (result["reason"], result["answer"], result["degraded"]) == (
        "max_steps",
        "red, as far as I got",
        True,
    )
    (final,) = [e for e in events if e["type"] == "outcome.graded"]
    assert (final["satisfied"], final["final"], final["feedback"]) == (
        False,
        True,
        "fine, but say why",
    )
    assert asked == 3


async def test_the_graders_calls_count_in_the_token_budget_and_the_cost(store_url: str) -> None:
    prices = {"fake-model": {"input_per_mtok": 1.0, "output_per_mtok": 10.0}}
    small, big = FakeUsage(100, 10), FakeUsage(1000, 100)
    replies = [
        FakeReply.finish("a shape", usage=small),
        FakeReply.call("submit_verdict", {"satisfied": False, "feedback": "no"}, usage=big),
        FakeReply(content="red", usage=small),  # the final call: the budget is spent
        FakeReply.call("submit_verdict", {"satisfied": True, "feedback": "ok"}, usage=small),
    ]
    body = {
        "task": "Name a colour.",
        "outcome": {"rubric": RUBRIC},
        "settings": {"max_total_tokens": 1000},
    }
    async with (
        FakeLLMServer(replies) as llm,
        api_client(on(llm, store_url, model_prices=prices)) as client,
    ):
        run = await run_to_end(client, body)
        events = (await json_events(client, run["id"]))["events"]

    assert (run["result"]["reason"], run["result"]["answer"]) == ("token_budget", "red")
    usage = run["usage"]
    assert (usage["llm_calls"], usage["total_tokens"]) == (4, 3 * 110 + 1100)
    assert usage["cost_usd"] == pytest.approx((3 * 200 + 2000) / 1_000_000)
    assert [(e["satisfied"], e["final"]) for e in events if e["type"] == "outcome.graded"] == [
        (False, False),
        (True, True),
    ]


async def test_a_profiles_outcome_grades_its_runs_and_shows_on_the_agent() -> None:
    profile = {"description": "Names colours.", "outcome": {"rubric": RUBRIC, "max_revisions": 0}}
    replies = [FakeReply.finish("a shape"), verdict(False, "no colour")]
    async with (
        FakeLLMServer(replies) as llm,
        api_client(on(llm, agents={"namer": profile})) as client,
    ):
        agent = (await client.get("/agents/namer")).json()
        run = await run_to_end(client, {"task": "Name something.", "agent": "namer"})

    assert agent["outcome"]["rubric"] == RUBRIC
    assert (run["status"], run["result"]["reason"]) == ("incomplete", "outcome_unmet")
    assert run["settings"]["max_revisions"] == 0


async def test_a_profiles_outcome_over_a_cap_stops_start_up_naming_it() -> None:
    profile = {"description": "d", "outcome": {"rubric": "r", "max_revisions": 9}}
    config = settings(agents={"p": profile}, max_revisions_limit=3)
    with pytest.raises(ValueError, match="FINISHLINE_AGENTS") as raised:
        async with api_client(config):
            pass
    assert "profile 'p': outcome.max_revisions: 9 exceeds the server cap of 3" in str(raised.value)


@pytest.mark.parametrize("stop_tool", [True, False])
async def test_the_demo_model_grades_and_revises_once_so_the_loop_shows(stop_tool: bool) -> None:
    body = {
        "task": "What is 6 * 7?",
        "model": "demo",
        "tools": ["calculator"],
        "outcome": {"rubric": "Gives the product."},
        "settings": {"stop_tool": stop_tool},
    }
    async with api_client(settings(demo_delay_s=0)) as client:
        run = await run_to_end(client, body)
        events = (await json_events(client, run["id"]))["events"]

    assert (run["status"], run["result"]["reason"]) == (
        "completed",
        "finished" if stop_tool else "answered",
    )
    assert run["result"]["answer"].endswith(REVISED)
    assert [g[0] for g in graded(events)] == [False, True]
    assert "42" in run["result"]["answer"]


async def test_a_grader_of_another_model_grades_a_scripted_run() -> None:
    body = {
        "task": "Name a colour.",
        "model": "scripted",
        "model_script": [finish_reply("red")],
        "outcome": {"rubric": RUBRIC, "grader": {"model": "fake-model", "system_prompt": "Judge."}},
    }
    async with (
        FakeLLMServer([verdict(True, "red")]) as llm,
        api_client(on(llm)) as client,
    ):
        run = await run_to_end(client, body)
        events = (await json_events(client, run["id"]))["events"]
        (request,) = llm.requests

    assert (run["status"], run["result"]["answer"]) == ("completed", "red")
    assert [e["model"] for e in events if e["type"] == "llm.call"] == ["scripted", "fake-model"]
    assert request["messages"][0] == {"role": "system", "content": "Judge."}
    assert graded(events) == [(True, "red", 0)]


async def test_an_answer_given_past_the_cost_budget_ends_the_run_without_a_grader_call() -> None:
    prices = {"fake-model": {"input_per_mtok": 1.0, "output_per_mtok": 10.0}}
    dollar = FakeUsage(500_000, 50_000)  # $1 a call
    body = {
        "task": "Name a colour.",
        "outcome": {"rubric": RUBRIC},
        "settings": {"max_cost_usd": 0.5},
    }
    replies = [FakeReply.finish("red", usage=dollar), verdict(True, "never asked")]
    async with (
        FakeLLMServer(replies) as llm,
        api_client(on(llm, model_prices=prices)) as client,
    ):
        run = await run_to_end(client, body)
        events = (await json_events(client, run["id"]))["events"]
        asked = len(llm.requests)

    result = run["result"]
    assert (result["reason"], result["answer"], result["degraded"]) == ("cost_budget", "red", True)
    assert asked == 1
    assert graded(events) == []


async def test_the_revisions_count_across_a_wait_for_a_person(store_url: str) -> None:
    # the run's state goes through its store while it waits: the unmet verdict before the
    # wait still counts after it
    replies = [
        FakeReply.finish("a shape"),
        verdict(False, "check with a calculation"),
        FakeReply.call("calculator", {"expression": "6*7"}),  # waits for a person
        FakeReply.finish("42 is not a colour either"),
        verdict(False, "still no colour"),
    ]
    body = {
        "task": "Name something.",
        "tools": ["calculator"],
        "approval": {"tools": ["calculator"]},
        "outcome": {"rubric": RUBRIC, "max_revisions": 1},
    }
    async with FakeLLMServer(replies) as llm, api_client(on(llm, store_url)) as client:
        created = (await client.post("/runs", json=body)).json()
        waiting = await wait_ended_or_waiting(client, created["id"])
        assert waiting["status"] == "requires_action", waiting
        (pending,) = waiting["pending_approvals"]
        decision = {"decisions": [{"call_id": pending["call_id"], "approve": True}]}
        assert (await client.post(f"/runs/{created['id']}/approvals", json=decision)).is_success
        run = await wait_ended(client, created["id"])
        events = (await json_events(client, run["id"]))["events"]

    assert (run["status"], run["result"]["reason"]) == ("incomplete", "outcome_unmet")
    assert [g[2] for g in graded(events)] == [0, 1]


async def wait_ended_or_waiting(client: Any, run_id: str) -> dict[str, Any]:
    response = await client.get(f"/runs/{run_id}/wait", params={"timeout_s": 10})
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result
