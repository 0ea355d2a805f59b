"""A server setting given as JSON: the JSON text itself, or `@path` naming a JSON file
(`FINISHLINE_MCP_SERVERS`, `FINISHLINE_AGENTS`). Read once, when the settings are made."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def json_setting(value: Any, variable: str) -> tuple[Any, str]:
    """The decoded value of `variable` (JSON text, `@path`, or a value decoded already; empty
    text is an empty object) and how to name its source in an error: the variable, or the
    variable and its file. `ValueError` names the source when the file or the JSON is bad."""
    source = variable
    if not isinstance(value, str):
        return value, source
    text = value.strip()
    if text.startswith("@"):
        path = Path(text[1:]).expanduser()
        source = f"{variable} file {str(path)!r}"
        try:
            text = path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ValueError(f"{source}: cannot read it: {exc.strerror or exc}") from None
    if not text:
        return {}, source
    try:
        return json.loads(text), source
    except json.JSONDecodeError as exc:
        raise ValueError(f"{source}: invalid JSON: {exc}") from None
