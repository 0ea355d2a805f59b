"""What this server offers: its tools, and the per-run settings with defaults and caps."""

from __future__ import annotations

from typing import Any, Literal, get_args, get_origin

from fastapi import APIRouter, Request
from pydantic.fields import FieldInfo

from app.api.deps import CallerDep, RegistryDep, SettingsDep
from app.api.errors import ErrorBody
from app.api.schemas import McpServerInfo, ServerInfo, SettingInfo, ToolInfo
from app.llm.models import DEMO, SCRIPTED
from app.runs.spec import RunSettingsIn

router = APIRouter(tags=["server"])


@router.get(
    "/tools",
    response_model=list[ToolInfo],
    summary="Tools: built-in, and those the MCP servers list",
    responses={401: {"model": ErrorBody}},
)
async def list_tools(registry: RegistryDep, caller: CallerDep) -> list[ToolInfo]:
    return [ToolInfo(**tool) for tool in registry.describe()]


@router.get(
    "/tools/mcp-servers",
    response_model=list[McpServerInfo],
    summary="Configured MCP servers and their state",
    responses={401: {"model": ErrorBody}},
)
async def list_mcp_servers(registry: RegistryDep, caller: CallerDep) -> list[McpServerInfo]:
    source = registry.mcp
    return [] if source is None else [McpServerInfo(**s) for s in source.describe_servers()]


def _value_type(field: FieldInfo) -> dict[str, Any]:
    """kind, choices and minimum of a per-run setting, so a form can type its input."""
    base = next(a for a in (*get_args(field.annotation), field.annotation) if a is not type(None))
    minimum = next(
        (getattr(m, n) for m in field.metadata for n in ("ge", "gt") if hasattr(m, n)), None
    )
    if get_origin(base) is Literal:
        return {"kind": "choice", "choices": [str(c) for c in get_args(base)]}
    kinds = {bool: "boolean", int: "integer", float: "number"}
    return {"kind": kinds[base], "minimum": minimum}


@router.get(
    "/settings",
    response_model=ServerInfo,
    summary="Per-run settings: defaults and caps; models",
    responses={401: {"model": ErrorBody}},
)
async def server_info(request: Request, settings: SettingsDep, caller: CallerDep) -> ServerInfo:
    info = {}
    for name, field in RunSettingsIn.model_fields.items():
        info[name] = SettingInfo(
            default=getattr(settings, name),
            cap=settings.cap(name),
            description=field.description or "",
            **_value_type(field),
        )
    models = request.state.models
    offered = [models.default_model, DEMO] + ([SCRIPTED] if settings.scripted_model_enabled else [])
    return ServerInfo(
        settings=info,
        default_model=models.default_model,
        models=list(dict.fromkeys(offered)),
        auth=settings.auth_enabled,
    )
