"""An MCP `tools/call` result as the text observation the model reads.

Text parts are joined with blank lines; structured content is shown as JSON when the
result has no text part (the spec has servers repeat it as text, and the SDK's text of a
wrapped scalar, `"hi"` for `{"result": "hi"}`, reads better than the wrapper); images,
audio, resource links and binary resources get a one-line description. An
`isError` result becomes a `ToolError`, so the engine shows it as an `is_error` observation.
"""

from __future__ import annotations

import base64
import binascii
import json

from mcp.types import (
    AudioContent,
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
)

from app.tools.base import ToolError

__all__ = ["render_result"]


def render_result(tool: str, result: CallToolResult) -> str:
    """The observation text of `result`; raises `ToolError` when it is an error result."""
    parts = [
        block.text if isinstance(block, TextContent) else _describe(block)
        for block in result.content
    ]
    structured = result.structured_content
    if structured is not None and not any(isinstance(b, TextContent) for b in result.content):
        parts.insert(0, json.dumps(structured, ensure_ascii=False, indent=2))
    text = "\n\n".join(part for part in parts if part)
    if result.is_error:
        raise ToolError(text or f"{tool} reported an error without a message")
    return text or "(the tool returned no content)"


def _describe(block: object) -> str:
    if isinstance(block, ImageContent | AudioContent):
        kind = "image" if isinstance(block, ImageContent) else "audio"
        return f"[{kind} ({block.mime_type}), {_size(block.data)}; not shown]"
    if isinstance(block, ResourceLink):
        return f"[resource link {block.name!r}: {block.uri}]"
    if isinstance(block, EmbeddedResource):
        resource = block.resource
        if isinstance(resource, TextResourceContents):
            return f"[resource {resource.uri}]\n{resource.text}"
        if isinstance(resource, BlobResourceContents):
            kind = resource.mime_type or "unknown type"
            return f"[resource {resource.uri} ({kind}), {_size(resource.blob)}; not shown]"
    kind = getattr(block, "type", type(block).__name__)
    return f"[{kind} content; not shown]"


def _size(data: str) -> str:
    try:
        return f"{len(base64.b64decode(data, validate=True)):,} bytes"
    except (binascii.Error, ValueError):
        return f"{len(data):,} base64 characters"
