"""The size caps of a run request (server settings; docs/limits.md), checked by the assembly:
each names the field and the cap. Checked first and cheaply (lengths and counts before anything
is built), so a huge request is refused in time linear in its size, which the body cap bounds."""

from __future__ import annotations

import json
from typing import Any

from app.runs.errors import InvalidRunError
from app.runs.spec import ClientToolIn, HttpToolIn, RunRequest
from app.settings import Settings


def _over(field: str, size: int, cap: int, unit: str) -> InvalidRunError:
    return InvalidRunError(field, f"{size:,} {unit} exceeds the server cap of {cap:,}", cap=cap)


def _json_chars(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False))


def check_sizes(request: RunRequest, server: Settings) -> None:
    """Refuse the first part of `request` over its cap (`InvalidRunError`)."""
    if len(request.task) > server.max_task_chars:
        raise _over("task", len(request.task), server.max_task_chars, "chars")
    metadata = len(json.dumps(request.metadata).encode())
    if metadata > server.max_metadata_bytes:
        raise _over("metadata", metadata, server.max_metadata_bytes, "bytes")
    if request.system_prompt is not None and (
        len(request.system_prompt) > server.max_system_prompt_chars
    ):
        raise _over(
            "system_prompt", len(request.system_prompt), server.max_system_prompt_chars, "chars"
        )
    if request.model is not None and len(request.model) > server.max_model_name_chars:
        raise _over("model", len(request.model), server.max_model_name_chars, "chars")
    tools = len(request.tools) + len(request.http_tools) + len(request.client_tools)
    tools += len(request.agents or ())
    if tools > server.max_tools:
        what = "tools (tools, http_tools, client_tools and agents)"
        raise _over("tools", tools, server.max_tools, what)
    total = 0
    declared: list[tuple[str, HttpToolIn | ClientToolIn]] = [
        ("http_tools", t) for t in request.http_tools
    ]
    declared += [("client_tools", t) for t in request.client_tools]
    counts = {"http_tools": 0, "client_tools": 0}
    for kind, tool in declared:
        index, counts[kind] = counts[kind], counts[kind] + 1
        size = _json_chars(tool.parameters)
        if size > server.max_tool_schema_bytes:
            raise _over(f"{kind}[{index}].parameters", size, server.max_tool_schema_bytes, "bytes")
        total += size
    if total > server.max_tool_schemas_total_bytes:
        # each schema is checked against the JSON Schema metaschema: milliseconds a property
        field = "client_tools" if request.client_tools else "http_tools"
        raise _over(field, total, server.max_tool_schemas_total_bytes, "bytes of schemas")
    if request.output_schema is not None:  # capped like a tool's, and counted with them
        size = _json_chars(request.output_schema)
        if size > server.max_tool_schema_bytes:
            raise _over("output_schema", size, server.max_tool_schema_bytes, "bytes")
        if total + size > server.max_tool_schemas_total_bytes:
            cap = server.max_tool_schemas_total_bytes
            raise _over("output_schema", total + size, cap, "bytes of schemas (with the tools')")
    script = request.model_script or []
    if len(script) > server.max_script_replies:
        raise _over("model_script", len(script), server.max_script_replies, "replies")
    for index, reply in enumerate(script):
        size = len(reply.content or "") + sum(
            _json_chars(call.arguments) + len(call.name) + len(call.id or "")
            for call in reply.tool_calls
        )
        if size > server.max_script_reply_chars:
            raise _over(f"model_script[{index}]", size, server.max_script_reply_chars, "chars")
