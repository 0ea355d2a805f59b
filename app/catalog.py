"""The agent catalog: what GET /agents shows of each agent profile (DESIGN §14).

A profile is shown as what a run made from it alone would get: its description, the model,
its tools with their schemas (registered ones, its MCP servers' as they last listed them, its
HTTP tools', and `update_plan` when it plans), every per-run setting resolved against this
server, its output schema, and the tools whose calls wait for a person. Never an HTTP tool's
URL or headers. An MCP tool its server has not listed yet shows without a schema.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.agents import AgentProfile
from app.assembly import RunAssembly
from app.engine.ports import Tool
from app.engine.prompts import UPDATE_PLAN
from app.runs.view import settings_dict
from app.tools.plan import UpdatePlanTool


def describe_profile(profile: AgentProfile, assembly: RunAssembly) -> dict[str, Any]:
    request = profile.defaults
    limits = assembly.resolve_settings(request.settings)
    registry = assembly.registry
    tools = {tool.name: described(tool) for tool in registry if tool.name in request.tools}
    for name in request.tools:  # an MCP tool not listed (yet): its name and server alone
        tools.setdefault(name, tool_info(name, "", None, None, f"mcp:{name.partition('__')[0]}"))
    if request.mcp_servers and registry.mcp is not None:
        for tool in registry.mcp.server_tools(request.mcp_servers, lenient=True):
            tools.setdefault(tool.name, described(tool))
    for declared in request.http_tools:
        tools[declared.name] = tool_info(
            declared.name, declared.description, declared.parameters, declared.idempotent, "http"
        )
    if limits.planning_interval is not None:
        tools.setdefault(UPDATE_PLAN, described(UpdatePlanTool()))
    return {
        "name": profile.name,
        "description": profile.description,
        "model": request.model or assembly.models.default_model,
        "tools": list(tools.values()),
        "settings": settings_dict(limits),
        "output_schema": request.output_schema,
        "outcome": None if request.outcome is None else request.outcome.model_dump(mode="json"),
        "approval_tools": sorted(assembly.approval_tools(request)),
    }


def tool_info(
    name: str,
    description: str,
    parameters: Mapping[str, Any] | None,
    idempotent: bool | None,
    source: str,
) -> dict[str, Any]:
    return {
        "name": name,
        "description": description,
        "parameters": dict(parameters) if parameters is not None else None,
        "idempotent": idempotent,
        "source": source,
    }


def described(tool: Tool) -> dict[str, Any]:
    source = getattr(tool, "source", "builtin")
    return tool_info(tool.name, tool.description, tool.parameters, tool.idempotent, source)
