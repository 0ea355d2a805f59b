"""ToolRegistry: register, describe, resolve; builtin_registry and its HTTP client."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from app.engine.ports import Tool, ToolContext
from app.engine.prompts import TASK_FINISHED, UPDATE_PLAN
from app.tools.base import SchemaTool
from app.tools.calculator import CalculatorTool
from app.tools.registry import (
    DuplicateToolError,
    ToolRegistry,
    UnknownToolError,
    builtin_registry,
)

BUILTIN_NAMES = ["calculator", "current_time", "http_get", UPDATE_PLAN]


class NamedTool(SchemaTool):
    def __init__(self, name: str) -> None:
        super().__init__(name=name, description=f"The {name} tool.", parameters={"type": "object"})

    async def call(self, arguments: dict[str, Any], ctx: ToolContext) -> str:
        return self.name


async def test_builtin_registry_registers_the_four_builtins() -> None:
    async with builtin_registry() as registry:
        assert registry.names() == BUILTIN_NAMES
        assert all(isinstance(tool, Tool) for tool in registry)


async def test_describe_lists_name_description_parameters_idempotent_source_by_name() -> None:
    async with builtin_registry() as registry:
        described = registry.describe()
    assert [entry["name"] for entry in described] == BUILTIN_NAMES
    assert all(
        set(entry) == {"name", "description", "parameters", "idempotent", "source"}
        for entry in described
    )
    assert {entry["source"] for entry in described} == {"builtin"}
    by_name = {entry["name"]: entry for entry in described}
    assert by_name["calculator"]["parameters"]["required"] == ["expression"]
    assert by_name["calculator"]["idempotent"] is True
    assert by_name["current_time"]["idempotent"] is False
    assert by_name[UPDATE_PLAN]["idempotent"] is False


def test_resolve_returns_tools_in_the_requested_order_once_each() -> None:
    registry = ToolRegistry([NamedTool("b"), NamedTool("a"), NamedTool("c")])
    assert [tool.name for tool in registry.resolve(["c", "a", "c"])] == ["c", "a"]


def test_resolve_names_every_unknown_tool_and_the_available_ones() -> None:
    registry = ToolRegistry([NamedTool("b"), NamedTool("a")])
    with pytest.raises(UnknownToolError) as caught:
        registry.resolve(["a", "nope", "zilch"])
    assert caught.value.unknown == ["nope", "zilch"]
    assert caught.value.available == ["a", "b"]
    assert str(caught.value) == "unknown tools 'nope', 'zilch'; available tools: a, b"


def test_get_returns_a_tool_or_raises_unknown_tool_error() -> None:
    tool = NamedTool("a")
    registry = ToolRegistry([tool])
    assert registry.get("a") is tool
    assert "a" in registry
    with pytest.raises(UnknownToolError, match="unknown tool 'b'; available tools: a"):
        registry.get("b")


def test_registering_a_name_twice_is_an_error() -> None:
    registry = ToolRegistry([CalculatorTool()])
    with pytest.raises(DuplicateToolError, match="'calculator' is already registered"):
        registry.register(CalculatorTool())
    assert len(registry) == 1


def test_the_engine_finish_tool_name_is_reserved() -> None:
    with pytest.raises(DuplicateToolError, match="reserved"):
        ToolRegistry([NamedTool(TASK_FINISHED)])


async def test_registry_closes_the_http_client_it_made() -> None:
    registry = builtin_registry(http_allow_hosts=["127.0.0.1"])
    assert registry.http is not None
    client = await registry.http.client()
    await registry.aclose()
    assert client.is_closed


async def test_registry_leaves_a_client_passed_in_open_for_its_owner() -> None:
    async with httpx.AsyncClient() as client:
        registry = builtin_registry(client=client)
        await registry.aclose()
        assert not client.is_closed


def test_builtin_registry_refuses_a_malformed_allow_list_entry() -> None:
    with pytest.raises(ValueError, match=re.escape("invalid HTTP allow-list entry 'http://x.com'")):
        builtin_registry(http_allow_hosts=["http://x.com"])


async def test_http_get_description_tells_the_model_which_hosts_it_may_fetch() -> None:
    async with builtin_registry(http_allow_hosts=["api.example.com", "*.docs.io"]) as registry:
        assert "api.example.com, *.docs.io" in registry.get("http_get").description
    async with builtin_registry() as registry:
        assert "No host is allowed" in registry.get("http_get").description
