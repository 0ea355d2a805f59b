"""Agent profiles through the API (DESIGN §14): GET /agents and /agents/{name}, a run that
names one (its values the run's defaults; the request's fields replace them, settings merge
key by key, caps hold), 422 for an unknown name, and profiles read once at start-up."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.engine.prompts import EN
from tests.api.kit import create, error_of, finish, json_events, run_to_end, scripted, settings
from tests.api.test_mcp_tools import FAKE, servers_until
from tests.fakes.service import api_client

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "deploy" / "agents.example.json"

RESEARCHER = {
    "description": "Researches a question step by step, planning first.",
    "system_prompt": "You are a careful researcher.",
    "tools": ["calculator", "current_time"],
    "settings": {"planning_interval": 2, "max_steps": 6, "progress": True},
}
QUICK = {
    "description": "Answers at once, no tools.",
    "settings": {"stop_tool": False, "max_steps": 2},
}
PROFILES = {"researcher": RESEARCHER, "quick": QUICK}


def update_plan(*steps: str) -> dict[str, Any]:
    plan = [
        {"step": s, "status": "in_progress" if i == 0 else "pending"} for i, s in enumerate(steps)
    ]
    return {"tool_calls": [{"name": "update_plan", "arguments": {"plan": plan}}]}


async def agent_run(client: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    return await run_to_end(client, body)


# -- GET /agents ------------------------------------------------------------------------------


async def test_agents_lists_each_profile_with_its_tools_schemas_model_and_settings() -> None:
    async with api_client(settings(agents=PROFILES, max_steps=8)) as client:
        response = await client.get("/agents")
        builtin = {t["name"]: t for t in (await client.get("/tools")).json()}
    assert response.status_code == 200, response.text
    agents = response.json()["agents"]
    assert [a["name"] for a in agents] == ["quick", "researcher"]
    quick, researcher = agents
    assert researcher["description"] == RESEARCHER["description"]
    assert researcher["model"] == "demo"  # the server's default: the profile names none
    # its tools with their schemas, as GET /tools shows them, and update_plan: it plans
    shown = {t["name"]: t for t in researcher["tools"]}
    assert list(shown) == ["calculator", "current_time", "update_plan"]
    for name in shown:
        want = {k: builtin[name][k] for k in ("description", "parameters", "idempotent", "source")}
        assert {k: shown[name][k] for k in want} == want
    # every setting as its runs get it: the profile's, else this server's default
    assert researcher["settings"]["planning_interval"] == 2
    assert researcher["settings"]["max_steps"] == 6
    assert researcher["settings"]["max_time_s"] == 60
    assert quick["settings"]["max_steps"] == 2
    assert quick["settings"]["stop_tool"] is False
    assert quick["settings"]["planning_interval"] is None
    assert quick["tools"] == []
    assert (quick["output_schema"], quick["approval_tools"]) == (None, [])


async def test_an_agent_by_name_and_an_unknown_name_is_404() -> None:
    async with api_client(settings(agents=PROFILES)) as client:
        one = await client.get("/agents/researcher")
        listed = (await client.get("/agents")).json()["agents"]
        missing = await client.get("/agents/nobody")
    assert one.status_code == 200, one.text
    assert one.json() == next(a for a in listed if a["name"] == "researcher")
    error = error_of(missing, 404, "not_found")
    assert "nobody" in error["message"]
    assert error["details"]["available"] == ["quick", "researcher"]


async def test_a_server_without_profiles_lists_none() -> None:
    async with api_client(settings()) as client:
        response = await client.get("/agents")
    assert response.json() == {"agents": []}


async def test_http_tools_of_a_profile_show_their_schema_but_never_their_url_or_headers() -> None:
    lookup = {
        "name": "lookup_order",
        "description": "Look up an order.",
        "parameters": {"type": "object", "properties": {"id": {"type": "string"}}},
        "url": "https://api.example.com/orders",
        "headers": {"Authorization": "Bearer secret-token"},
        "requires_approval": True,
    }
    profile = {"description": "Support.", "http_tools": [lookup]}
    config = settings(agents={"support": profile}, http_tool_allow_hosts=["api.example.com"])
    async with api_client(config) as client:
        response = await client.get("/agents/support")
    agent = response.json()
    assert agent["tools"] == [
        {
            "name": "lookup_order",
            "description": "Look up an order.",
            "parameters": lookup["parameters"],
            "idempotent": True,
            "source": "http",
        }
    ]
    assert agent["approval_tools"] == ["lookup_order"]
    assert "secret-token" not in response.text
    assert "api.example.com" not in response.text


async def test_mcp_tools_of_a_profile_show_with_their_schemas_once_their_server_lists_them() -> (
    None
):
    profile = {"description": "Adds.", "tools": ["fake__add"], "mcp_servers": ["fake"]}
    async with api_client(
        settings(mcp_servers={"fake": FAKE}, agents={"adder": profile})
    ) as client:
        await servers_until(client, "fake", "connected")
        agent = (await client.get("/agents/adder")).json()
        listed = {t["name"]: t for t in (await client.get("/tools")).json()}
    shown = {t["name"]: t for t in agent["tools"]}
    assert "fake__add" in shown
    assert set(shown) == {name for name in listed if name.startswith("fake__")}
    assert shown["fake__add"]["parameters"] == listed["fake__add"]["parameters"]
    assert {t["source"] for t in agent["tools"]} == {"mcp:fake"}


# -- POST /runs with an agent ---------------------------------------------------------------------


async def test_a_run_naming_an_agent_takes_the_profiles_values_and_shows_the_agent() -> None:
    body = scripted(update_plan("look it up", "answer"), finish("42"), agent="researcher")
    async with api_client(settings(agents=PROFILES)) as client:
        run = await agent_run(client, body)
        events = (await json_events(client, run["id"]))["events"]
    assert run["status"] == "completed", run
    assert run["agent"] == "researcher"
    assert run["system_prompt"] == "You are a careful researcher."
    assert run["tools"] == ["calculator", "current_time"]
    assert (run["settings"]["planning_interval"], run["settings"]["max_steps"]) == (2, 6)
    assert run["settings"]["progress"] is True
    queued = events[0]
    assert (queued["type"], queued["agent"]) == ("run.queued", "researcher")
    assert queued["tools"] == ["calculator", "current_time", "update_plan"]
    # the profile plans: the first call was a planning call
    (planning,) = [e for e in events if e["type"] == "intervention" and e["kind"] == "planning"]
    assert planning["message"] == EN.planning_prompt
    assert run["usage"]["llm_calls"] == 2
    assert run["usage"]["steps"] == 1


async def test_the_request_replaces_the_profiles_fields_and_lists_and_merges_its_settings() -> None:
    body = scripted(
        finish("done"),
        agent="researcher",
        system_prompt="Be brief.",
        tools=["calculator"],
        settings={"max_steps": 3, "planning_interval": None},
    )
    async with api_client(settings(agents=PROFILES)) as client:
        run = await agent_run(client, body)
    assert run["status"] == "completed", run
    assert run["system_prompt"] == "Be brief."
    assert run["tools"] == ["calculator"]  # the list replaced whole, not merged
    # key by key: the request's max_steps and planning_interval, the profile's progress
    assert run["settings"]["max_steps"] == 3
    assert run["settings"]["planning_interval"] is None
    assert run["settings"]["progress"] is True
    assert run["usage"]["llm_calls"] == 1  # planning off: no planning call


async def test_an_empty_list_in_the_request_replaces_the_profiles_tools() -> None:
    async with api_client(settings(agents=PROFILES)) as client:
        run = await agent_run(client, scripted(finish(), agent="researcher", tools=[]))
    assert run["tools"] == []


async def test_a_profiles_settings_with_a_request_over_a_cap_is_refused_naming_the_cap() -> None:
    config = settings(agents=PROFILES, max_steps=6, max_steps_limit=6)
    async with api_client(config) as client:
        response = await client.post(
            "/runs", json=scripted(finish(), agent="researcher", settings={"max_steps": 7})
        )
        runs = (await client.get("/runs")).json()["runs"]
    error = error_of(response, 422, "validation_error")
    assert error["details"]["field"] == "settings.max_steps"
    assert error["details"]["cap"] == 6
    assert runs == []


async def test_the_size_caps_count_the_profiles_tools_with_the_requests() -> None:
    tool = {"description": "x", "url": "https://api.example.com/t"}
    body = scripted(finish(), agent="researcher", http_tools=[{**tool, "name": "t1"}])
    config = settings(agents=PROFILES, max_tools=2, http_tool_allow_hosts=["api.example.com"])
    async with api_client(config) as client:
        response = await client.post("/runs", json=body)
    error = error_of(response, 422, "validation_error")
    assert (error["details"]["field"], error["details"]["cap"]) == ("tools", 2)


async def test_an_unknown_agent_is_a_422_naming_the_field_and_the_profiles() -> None:
    async with api_client(settings(agents=PROFILES)) as client:
        response = await client.post("/runs", json=scripted(finish(), agent="nobody"))
    error = error_of(response, 422, "validation_error")
    assert error["details"]["field"] == "agent"
    assert error["details"]["available"] == ["quick", "researcher"]
    assert "nobody" in error["message"]


async def test_a_profile_that_answers_at_once_ends_with_a_plain_answer() -> None:
    async with api_client(settings(agents=PROFILES)) as client:
        run = await agent_run(client, scripted({"content": "4"}, agent="quick"))
    assert (run["status"], run["result"]["reason"], run["result"]["answer"]) == (
        "completed",
        "answered",
        "4",
    )
    assert run["settings"]["max_steps"] == 2


async def test_a_profiles_approval_makes_its_tools_wait_for_a_person() -> None:
    profile = {"description": "Computes, with a person's approval.", "tools": ["calculator"]}
    profile["approval"] = {"tools": ["calculator"]}
    body = scripted(
        {"tool_calls": [{"name": "calculator", "arguments": {"expression": "6*7"}}]},
        finish(),
        agent="careful",
    )
    async with api_client(settings(agents={"careful": profile})) as client:
        created = await create(client, body)
        response = await client.get(f"/runs/{created['id']}/wait", params={"timeout_s": 10})
    run = response.json()
    assert run["status"] == "requires_action", run
    assert [p["tool"] for p in run["pending_approvals"]] == ["calculator"]


async def test_an_idempotent_replay_of_an_agent_run_is_the_same_run() -> None:
    body = scripted(finish(), agent="quick", settings={"stop_tool": True})
    key = {"Idempotency-Key": "agent-replay"}
    async with api_client(settings(agents=PROFILES)) as client:
        first = await client.post("/runs", json=body, headers=key)
        again = await client.post("/runs", json=body, headers=key)
    assert (first.status_code, again.status_code) == (202, 200)
    assert again.json()["id"] == first.json()["id"]


# -- planning_interval through the API ------------------------------------------------------------


async def test_planning_interval_null_is_off_and_within_any_cap() -> None:
    config = settings(planning_interval_limit=3)
    async with api_client(config) as client:
        run = await run_to_end(client, scripted(finish(), settings={"planning_interval": None}))
        over = await client.post(
            "/runs", json=scripted(finish(), settings={"planning_interval": 4})
        )
        zero = await client.post(
            "/runs", json=scripted(finish(), settings={"planning_interval": 0})
        )
    assert run["settings"]["planning_interval"] is None
    error = error_of(over, 422, "validation_error")
    assert (error["details"]["field"], error["details"]["cap"]) == ("settings.planning_interval", 3)
    assert error_of(zero, 422)["details"]["errors"][0]["field"] == "settings.planning_interval"


async def test_a_planned_run_gets_update_plan_even_when_its_request_names_no_tools() -> None:
    body = scripted(update_plan("think", "answer"), finish(), settings={"planning_interval": 1})
    async with api_client(settings()) as client:
        run = await run_to_end(client, body)
        events = (await json_events(client, run["id"]))["events"]
    assert run["status"] == "completed", run
    (observation,) = [e for e in events if e["type"] == "observation"]
    assert (observation["tool"], observation["is_error"]) == ("update_plan", False)
    assert observation["content"] == "Plan updated: 0/2 completed. Next: think"


async def test_an_http_tool_cannot_take_the_name_of_the_planning_tool() -> None:
    tool = {
        "name": "update_plan",
        "description": "Mine.",
        "url": "https://api.example.com/plan",
    }
    body = scripted(finish(), http_tools=[tool], settings={"planning_interval": 1})
    async with api_client(settings(http_tool_allow_hosts=["api.example.com"])) as client:
        response = await client.post("/runs", json=body)
    assert error_of(response, 422)["details"]["field"] == "http_tools[0].name"


# -- read once, at start-up -----------------------------------------------------------------------


async def test_a_profile_file_is_read_once_at_start_up_not_per_request(tmp_path: Path) -> None:
    path = tmp_path / "agents.json"
    path.write_text(json.dumps(PROFILES), encoding="utf-8")
    config = settings(agents=f"@{path}")
    path.unlink()  # read when the settings were made: nothing reads it again
    async with api_client(config) as client:
        run = await agent_run(client, scripted(finish("still here"), agent="quick"))
        listed = (await client.get("/agents")).json()["agents"]
    assert run["agent"] == "quick"
    assert [a["name"] for a in listed] == ["quick", "researcher"]


@pytest.mark.parametrize(
    ("profile", "server", "problem"),
    [
        (
            {"description": "d", "settings": {"max_steps": 500}},
            {},
            "profile 'bad': settings.max_steps: 500 exceeds the server cap of 100",
        ),
        (
            {"description": "d", "tools": ["calculator", "nope"]},
            {},
            "profile 'bad': tools: unknown tool 'nope'",
        ),
        (
            {"description": "d", "mcp_servers": ["docs"]},
            {},
            "profile 'bad': mcp_servers: not MCP servers of this server: docs",
        ),
        (
            {
                "description": "d",
                "http_tools": [{"name": "t", "description": "x", "url": "https://evil.test/x"}],
            },
            {"http_tool_allow_hosts": ["api.example.com"]},
            "profile 'bad': http_tools[0].url:",
        ),
        (
            {"description": "d", "model": "gpt-4o"},
            {},
            "profile 'bad': model: no LLM endpoint is configured",
        ),
        (
            {"description": "d", "approval": {"tools": ["calculator"]}},
            {},
            "profile 'bad': approval.tools: not tools of this run: calculator",
        ),
        (
            {"description": "d", "settings": {"planning_interval": 5}},
            {"planning_interval_limit": 4},
            "profile 'bad': settings.planning_interval: 5 exceeds the server cap of 4",
        ),
        (
            {"description": "d", "output_schema": {"type": "objekt"}},
            {},
            "profile 'bad': output_schema: is not a valid JSON Schema (draft 2020-12) at 'type'",
        ),
        (
            {"description": "d", "output_schema": {"description": "d" * 100}},
            {"max_tool_schema_bytes": 50},
            "profile 'bad': output_schema: 119 bytes exceeds the server cap of 50",
        ),
    ],
)
async def test_a_profile_this_server_cannot_run_stops_start_up_naming_profile_and_field(
    profile: dict[str, Any], server: dict[str, Any], problem: str
) -> None:
    config = settings(agents={"good": QUICK, "bad": profile}, **server)
    with pytest.raises(ValueError, match="FINISHLINE_AGENTS") as raised:
        async with api_client(config):
            pass
    assert problem in str(raised.value)
    assert "'good'" not in str(raised.value)


async def test_a_profile_may_name_tools_of_an_mcp_server_that_is_not_up_yet() -> None:
    down = {"url": "http://127.0.0.1:9/mcp", "retry_initial_s": 5}
    profile = {"description": "Searches docs.", "tools": ["docs__search"]}
    config = settings(
        agents={"docs": profile}, mcp_servers={"docs": down}, http_tool_allow_hosts=["127.0.0.1"]
    )
    async with api_client(config) as client:  # starts: the server may come up later
        agent = (await client.get("/agents/docs")).json()
        response = await client.post("/runs", json=scripted(finish(), agent="docs"))
    assert agent["tools"] == [
        {
            "name": "docs__search",
            "description": "",
            "parameters": None,
            "idempotent": None,
            "source": "mcp:docs",
        }
    ]
    # until it lists its tools, a run naming them is refused, as without a profile
    assert error_of(response, 422)["details"]["field"] == "tools"


async def test_the_example_profiles_start_and_the_researcher_plans_the_quick_one_not() -> None:
    guide = (ROOT / "docs" / "guides" / "agents.md").read_text(encoding="utf-8")
    section = guide[guide.index("## Agents a deployment offers") :]
    shown = section[section.index("```json") + len("```json") : section.index("```\n", 10)]
    assert json.loads(shown) == json.loads(EXAMPLE.read_text(encoding="utf-8"))
    async with api_client(settings(agents=f"@{EXAMPLE}")) as client:
        agents = {a["name"]: a for a in (await client.get("/agents")).json()["agents"]}
        researcher = await run_to_end(client, {"task": "What is 17 * 23?", "agent": "researcher"})
        quick = await run_to_end(client, {"task": "What is 17 * 23?", "agent": "quick"})
        events = (await json_events(client, researcher["id"]))["events"]
    assert agents["researcher"]["settings"]["planning_interval"] == 2
    assert agents["quick"]["settings"]["planning_interval"] is None
    planning = [
        e["step"] for e in events if e["type"] == "intervention" and e["kind"] == "planning"
    ]
    assert planning == [1, 3]  # the demo model plans when asked
    assert researcher["result"]["reason"] == "finished"
    assert (researcher["usage"]["steps"], researcher["usage"]["llm_calls"]) == (3, 5)
    assert quick["result"]["reason"] == "answered"
    assert quick["usage"]["llm_calls"] == quick["usage"]["steps"]


# -- a typed agent (DESIGN §12) -----------------------------------------------------------------

VERDICT = {
    "type": "object",
    "properties": {"verdict": {"enum": ["yes", "no"]}},
    "required": ["verdict"],
}
JUDGE = {"description": "Answers yes or no.", "output_schema": VERDICT}


def answering(value: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": "task_finished", "arguments": {"answer": value}}]}


async def test_a_profiles_output_schema_is_its_runs_default_and_a_request_may_replace_it() -> None:
    own = {"type": "integer"}
    async with api_client(settings(agents={"judge": JUDGE})) as client:
        agent = (await client.get("/agents/judge")).json()
        typed = await agent_run(client, scripted(answering({"verdict": "no"}), agent="judge"))
        replaced = await agent_run(client, scripted(answering(7), agent="judge", output_schema=own))
    assert agent["output_schema"] == VERDICT
    assert (typed["output_schema"], typed["result"]["output"]) == (VERDICT, {"verdict": "no"})
    assert (replaced["output_schema"], replaced["result"]["output"]) == (own, 7)


async def test_the_demo_model_answers_a_typed_agent_with_a_value_that_validates() -> None:
    async with api_client(settings(agents={"judge": JUDGE}, demo_delay_s=0)) as client:
        run = await agent_run(client, {"task": "Is 2 + 2 = 4?", "agent": "judge"})
    assert run["model"] == "demo"
    assert (run["status"], run["result"]["output"]) == ("completed", {"verdict": "yes"})
