"""Short text forms of what a run holds: tool arguments, one-line gists, the head of a tool
result, local times, usage."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

OBSERVATION_LINES = 8
"""Lines of a tool result shown inline; the rest is counted, not shown."""
OBSERVATION_CHARS = 800
ARGUMENTS_CHARS = 160


def compact_arguments(arguments: Any, limit: int = ARGUMENTS_CHARS) -> str:
    """`key=value, ...` with JSON values (a raw string as it came), cut with … at `limit`."""
    if isinstance(arguments, dict):
        text = ", ".join(
            f"{key}={json.dumps(value, ensure_ascii=False)}" for key, value in arguments.items()
        )
    elif isinstance(arguments, str):
        text = arguments
    else:
        text = json.dumps(arguments, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def one_line(text: str, limit: int = 200) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def head(text: str, lines: int = OBSERVATION_LINES, chars: int = OBSERVATION_CHARS) -> str:
    """The first `lines` lines of `text`, at most `chars` chars."""
    shown = "\n".join(text.splitlines()[:lines])
    return shown[:chars]


def local_time(stamp: str | None, fmt: str = "%Y-%m-%d %H:%M:%S") -> str:
    if not stamp:
        return "–"
    try:
        return datetime.fromisoformat(stamp).astimezone().strftime(fmt)
    except ValueError:
        return stamp


def usage_text(usage: dict[str, Any] | None) -> str:
    if not usage:
        return "–"
    return (
        f"steps {usage.get('steps', 0)} · llm calls {usage.get('llm_calls', 0)} · "
        f"tool calls {usage.get('tool_calls', 0)} · tokens {usage.get('total_tokens', 0)} "
        f"({usage.get('prompt_tokens', 0)} prompt + {usage.get('completion_tokens', 0)} completion)"
        f" · cost {usd(usage.get('cost_usd', 0.0))}"
    )


def usd(value: Any) -> str:
    """A cost as a person reads it: `$0.000165`, `$1.5`, `$0`; `unknown` for null (the model
    has no known price) and for anything else that is not a number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "unknown"
    if value and abs(value) < 0.000_001:
        return f"${value:.1e}"
    return "$" + (f"{value:.6f}".rstrip("0").rstrip(".") or "0")
