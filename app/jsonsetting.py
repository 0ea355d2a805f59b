"""Server settings whose value is JSON, or `@path` naming a JSON file:
`FINISHLINE_MCP_SERVERS` (app.tools.mcp.config), `FINISHLINE_MODEL_PRICES` (app.llm.pricing)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def json_setting(value: Any, source: str) -> tuple[Any, str]:
    """`value` decoded (JSON text, `@path`, or a value decoded already; empty text is None),
    and what to name in an error about it: `source`, with the file when it came from one.

    Raises `ValueError` naming `source` when the file cannot be read or the JSON is invalid."""
    if not isinstance(value, str):
        return value, source
    text = value.strip()
    if text.startswith("@"):
        path = Path(text[1:]).expanduser()
        source = f"{source} file {str(path)!r}"
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ValueError(f"{source}: cannot read it: {exc.strerror or exc}") from None
    if not text.strip():
        return None, source
    try:
        return json.loads(text), source
    except json.JSONDecodeError as exc:
        raise ValueError(f"{source}: invalid JSON: {exc}") from None
