"""GET /tools and GET /settings: what this server offers a run."""

from __future__ import annotations

from app.runs.spec import RunSettingsIn
from app.settings import CAPS
from tests.api.kit import settings
from tests.fakes.llm_server import FakeLLMServer
from tests.fakes.service import api_client

BUILTIN_TOOLS = ["calculator", "current_time", "http_get", "update_plan"]


async def test_tools_lists_the_builtins_with_their_schema_idempotence_and_source() -> None:
    async with api_client(settings()) as client:
        response = await client.get("/tools")

        assert response.status_code == 200
        tools = response.json()
        assert [t["name"] for t in tools] == BUILTIN_TOOLS
        for tool in tools:
            assert set(tool) == {"name", "description", "parameters", "idempotent", "source"}
            assert tool["source"] == "builtin"
            assert tool["description"]
            assert tool["parameters"]["type"] == "object"
            assert isinstance(tool["idempotent"], bool)
        calculator = next(t for t in tools if t["name"] == "calculator")
        assert calculator["parameters"]["required"] == ["expression"]
        assert calculator["idempotent"] is True
        assert "task_finished" not in {t["name"] for t in tools}


async def test_current_time_is_not_idempotent() -> None:
    async with api_client(settings()) as client:
        tools = {t["name"]: t for t in (await client.get("/tools")).json()}
        assert tools["current_time"]["idempotent"] is False


async def test_http_get_says_which_hosts_it_may_reach() -> None:
    async with api_client(settings(http_tool_allow_hosts=["docs.example.com"])) as client:
        tools = {t["name"]: t for t in (await client.get("/tools")).json()}
        assert "docs.example.com" in tools["http_get"]["description"]


async def test_settings_lists_every_per_run_setting_with_default_and_cap() -> None:
    server = settings()
    async with api_client(server) as client:
        response = await client.get("/settings")

        assert response.status_code == 200
        info = response.json()
        assert set(info["settings"]) == set(RunSettingsIn.model_fields)
        for name, setting in info["settings"].items():
            assert {"default", "cap", "description"} <= set(setting), name
            assert setting["description"], name
            assert setting["default"] == getattr(server, name), name
            assert setting["cap"] == (getattr(server, CAPS[name]) if name in CAPS else None), name
        assert (info["settings"]["max_steps"]["default"], info["settings"]["max_steps"]["cap"]) == (
            10,
            100,
        )
        assert info["settings"]["stop_tool"]["default"] is True
        assert info["settings"]["prompt_language"]["default"] == "en"
        assert info["settings"]["max_total_tokens"]["default"] is None
        assert info["settings"]["max_total_tokens"]["cap"] is None
        assert info["auth"] is False
        assert info["default_model"] == "demo"
        assert info["models"] == ["demo", "scripted"]


async def test_settings_reflect_the_servers_defaults_and_caps() -> None:
    app_settings = settings(
        max_steps=4,
        max_steps_limit=8,
        max_total_tokens=5000,
        max_total_tokens_limit=20000,
        scripted_model_enabled=False,
        api_keys=["k"],
    )
    async with api_client(app_settings, headers={"Authorization": "Bearer k"}) as client:
        info = (await client.get("/settings")).json()

        assert info["settings"]["max_steps"]["default"] == 4
        assert info["settings"]["max_steps"]["cap"] == 8
        assert info["settings"]["max_total_tokens"]["default"] == 5000
        assert info["settings"]["max_total_tokens"]["cap"] == 20000
        assert info["models"] == ["demo"]
        assert info["auth"] is True


async def test_settings_name_the_endpoints_default_model() -> None:
    async with FakeLLMServer() as llm:
        app_settings = settings(llm_base_url=llm.base_url, llm_model="my-model")
        async with api_client(app_settings) as client:
            info = (await client.get("/settings")).json()

    assert info["default_model"] == "my-model"
    assert info["models"] == ["my-model", "demo", "scripted"]
