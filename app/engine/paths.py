"""Where a field sits: the one formatter of the paths errors name (`http_tools[0].url`)."""

from __future__ import annotations

from collections.abc import Sequence


def field_path(parts: Sequence[str | int], root: str = "") -> str:
    """`http_tools[0].url`: where a field sits in a request (or a setting, a tool's arguments),
    as an error names it; `root`: where the parts start (`metadata` -> `metadata.x`). The
    one formatter of such paths (pydantic's `loc`, a JSON Schema error's, a face's)."""
    path = root
    for part in parts:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path
