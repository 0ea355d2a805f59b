"""What a request holds that is costly to check: its tools' parameter schemas and its output
schema, checked against the metaschema and compiled (remembered by content, so a schema
many runs share is compiled once). Costly on a miss, so `app.assembly` runs these in a
worker thread, off the event loop."""

from __future__ import annotations

from collections.abc import Sequence

from app.offload import off_loop
from app.output import InvalidSchemaError, JsonOutputSchema, output_schema
from app.runs.errors import InvalidRunError
from app.runs.spec import ClientToolIn, HttpToolIn, RunRequest
from app.tools.base import CompiledSchema, compiled_schema
from app.tools.client import ClientTool


def checked_output(request: RunRequest) -> JsonOutputSchema | None:
    """The request's output schema, checked and compiled (costly: off the event loop);
    InvalidRunError naming `output_schema` when it is not a valid schema."""
    if request.output_schema is None:
        return None
    try:
        return output_schema(request.output_schema)
    except InvalidSchemaError as exc:
        raise InvalidRunError("output_schema", str(exc)) from exc


def client_tool_of(tool: ClientToolIn, schema: CompiledSchema) -> ClientTool:
    return ClientTool(name=tool.name, description=tool.description, parameters=schema)


def compile_schemas(tools: Sequence[HttpToolIn | ClientToolIn]) -> list[CompiledSchema]:
    """Each tool's `parameters` checked and compiled (remembered by content); costly on a miss,
    so called in a worker thread."""
    return [compiled_schema(tool.parameters) for tool in tools]


async def compiled_off_loop(tools: Sequence[HttpToolIn | ClientToolIn]) -> list[CompiledSchema]:
    if not tools:
        return []
    return await off_loop(compile_schemas, tools)
