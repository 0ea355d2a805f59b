"""`agents` on a request or a profile (DESIGN §15): each is a tool `NAME(task)` of the run's
model, described as the agent is; what the server cannot run is refused at creation, naming
the agent's field: a name another tool has, an unknown profile, a host not allowed, agents
nested past FINISHLINE_MAX_AGENT_DEPTH, a model the run's cost budget cannot price."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.kit import create, error_of, finish, finishing, run_to_end, scripted, settings
from tests.api.subagent_kit import call, children, events, of_type, worker
from tests.fakes.service import api_client

PROFILES = {
    "researcher": {
        "description": "Finds things out.",
        "model": "scripted",
        "system_prompt": "You research.",
        "tools": ["current_time"],
    },
    "router": {
        "description": "Routes work to its workers.",
        "agents": {"helper": {"description": "Helps.", "tools": ["calculator"]}},
    },
}


async def test_agents_are_tools_of_the_run_listed_on_it_and_in_its_queued_event() -> None:
    body = finishing("ok", agents={"calc": worker(finish("4"), description="Computes.")})
    async with api_client(settings()) as client:
        run = await run_to_end(client, body)
        assert run["agents"] == ["calc"]
        assert run["parent_run_id"] is None
        queued = of_type(await events(client, run["id"]), "run.queued")[0]
        assert queued["tools"] == ["calc"]


async def test_the_model_is_offered_each_agent_as_a_tool_of_one_task_parameter() -> None:
    """The child's own events say what it was offered; the parent's tool shows in GET /tools
    of nothing: it is the run's own (the model's view is checked in tests/engine)."""
    body = scripted(
        call("calc", "2+2"),
        finish("4"),
        agents={"calc": worker(finish("4"), description="Computes arithmetic.")},
    )
    async with api_client(settings()) as client:
        run = await run_to_end(client, body)
        (child,) = await children(client, run["id"])
        assert child["task"] == "2+2"
        assert child["model"] == "scripted"


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"tools": ["calculator"], "agents": {"calculator": worker()}}, "agents.calculator"),
        ({"agents": {"task_finished": worker()}}, "agents.task_finished"),
        (
            {
                "http_tools": [
                    {"name": "look", "description": "d", "url": "https://api.example.com/x"}
                ],
                "agents": {"look": worker()},
            },
            "agents.look",
        ),
    ],
)
async def test_an_agent_named_as_another_tool_of_the_run_is_refused(
    fields: dict[str, Any], field: str
) -> None:
    async with api_client(settings(http_tool_allow_hosts=["api.example.com"])) as client:
        response = await client.post("/runs", json=finishing(**fields))
        error = error_of(response, 422, "validation_error")
        assert error["details"]["field"] == field
        assert "already a tool of this run" in error["message"]


@pytest.mark.parametrize(
    ("agent", "field", "words"),
    [
        ({"model": "scripted"}, "agents.w", "description"),
        ({"description": "d", "tools": ["no_such_tool"]}, "agents.w.tools", "no_such_tool"),
        ({"agent": "nobody"}, "agents.w.agent", "nobody"),
        ({"description": "d", "a2a_url": "https://evil.example.org/a2a"}, "agents.w.a2a_url", ""),
        (
            {"description": "d", "settings": {"max_steps": 1000}},
            "agents.w.settings.max_steps",
            "cap",
        ),
        ({"description": "d", "model": "scripted"}, "agents.w.model", "model_script"),
        ({"description": "d"}, "agents.w.model", "model_script"),  # a scripted parent's model
        (
            {"description": "d", "a2a_url": "https://x.example/a", "tools": ["a"]},
            "agents.w",
            "only",
        ),
    ],
)
async def test_what_the_server_cannot_run_for_an_agent_is_refused_naming_its_field(
    agent: dict[str, Any], field: str, words: str
) -> None:
    async with api_client(settings()) as client:
        response = await client.post("/runs", json=finishing(agents={"w": agent}))
        error = error_of(response, 422)
        assert field in (error["details"].get("field") or error["message"]), error
        assert words in error["message"], error


async def test_agents_nested_past_the_depth_cap_are_refused_and_up_to_it_taken() -> None:
    deep = {"a": worker(agents={"b": worker(agents={"c": worker()})})}
    async with api_client(settings(max_agent_depth=2)) as client:
        response = await client.post("/runs", json=finishing(agents=deep))
        error = error_of(response, 422, "validation_error")
        assert error["details"]["field"] == "agents.a.agents.b.agents.c"
        assert "FINISHLINE_MAX_AGENT_DEPTH=2" in error["message"]
        two_deep = {"a": worker(agents={"b": worker()})}
        await create(client, finishing(agents=two_deep))
    async with api_client(settings(max_agent_depth=0)) as client:
        response = await client.post("/runs", json=finishing(agents={"a": worker()}))
        assert error_of(response, 422)["details"]["field"] == "agents.a"


async def test_an_agent_names_a_profile_which_is_its_child_runs_defaults() -> None:
    body = scripted(
        call("research", "what time is it?"),
        finish("noon"),
        agents={"research": {"agent": "researcher", "model_script": [finish("noon")]}},
    )
    async with api_client(settings(agents=PROFILES)) as client:
        run = await run_to_end(client, body)
        assert run["status"] == "completed", run
        (child,) = await children(client, run["id"])
        assert child["agent"] == "researcher"
        assert child["system_prompt"] == "You research."
        assert child["tools"] == ["current_time"]


async def test_a_profile_may_have_agents_of_its_own() -> None:
    body = scripted(
        call("helper", "6*7"),
        finish("42"),
        agent="router",
        model="scripted",
        agents={"helper": worker(finish("42"))},
    )
    async with api_client(settings(agents=PROFILES)) as client:
        listed = (await client.get("/agents")).json()["agents"]
        assert {a["name"] for a in listed} >= {"router"}
        run = await create(client, {"task": "compute 6*7", "agent": "router"})
        assert run["agents"] == ["helper"]
        # the request's agents replace the profile's whole, as lists do
        run = await run_to_end(client, body)
        assert run["status"] == "completed", run
        (child,) = await children(client, run["id"])
        assert child["model"] == "scripted"


async def test_a_cost_budget_needs_every_agent_priced() -> None:
    prices = {"priced": {"input_per_mtok": 1.0, "output_per_mtok": 1.0}}
    body = {
        "task": "t",
        "settings": {"max_cost_usd": 1.0},
        "model": "priced",
        "agents": {"w": {"description": "d", "model": "unpriced-model"}},
    }
    config = settings(model_prices=prices, llm_base_url="http://127.0.0.1:9/v1")
    async with api_client(config) as client:
        response = await client.post("/runs", json=body)
        error = error_of(response, 422)
        assert error["details"]["field"] == "agents.w.model"
        assert "cost budget" in error["message"]
