"""What every benchmark shares: the machine it ran on, summary statistics, Markdown tables
and the results folder."""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
PACKAGES = (
    *("fastapi", "starlette", "uvicorn", "uvloop", "httptools", "httpx", "aiohttp"),
    *("structlog", "pydantic", "langgraph", "langchain-core", "opentelemetry-sdk"),
)


def machine() -> dict[str, Any]:
    """Cores, CPU model, Python and the packages that matter, for every table."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        model = platform.processor()
    memory_mb = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory_mb = int(line.split()[1]) // 1024
    except OSError:
        pass
    return {
        "cores": os.cpu_count(),
        "cpu": model,
        "memory_mb": memory_mb,
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "packages": _versions(PACKAGES),
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def _versions(names: Iterable[str]) -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in names:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "-"
    return found


def machine_line(info: dict[str, Any]) -> str:
    return (
        f"Machine: {info['cores']} cores, {info['cpu']}, {info['memory_mb']} MB RAM; "
        f"{info['implementation']} {info['python']} on {info['platform']}; {info['when']}."
    )


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), linear between closest ranks; nan for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summary(values: Sequence[float]) -> dict[str, float]:
    if not values:
        nan = float("nan")
        return {"n": 0, "median": nan, "p90": nan, "p99": nan, "min": nan, "max": nan}
    return {
        "n": len(values),
        "median": statistics.median(values),
        "p90": percentile(values, 90),
        "p99": percentile(values, 99),
        "min": min(values),
        "max": max(values),
    }


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def fmt(value: float, digits: int = 1) -> str:
    if value != value:  # nan
        return "–"
    return f"{value:,.{digits}f}"


def write_results(name: str, markdown: str, raw: dict[str, Any]) -> Path:
    """bench/results/<name>.md and <name>.json; returns the Markdown file."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    md = RESULTS / f"{name}.md"
    md.write_text(markdown.rstrip() + "\n", encoding="utf-8")
    (RESULTS / f"{name}.json").write_text(
        json.dumps(raw, indent=1, default=str) + "\n", encoding="utf-8"
    )
    return md


def say(*parts: object) -> None:
    print(*parts, file=sys.stderr, flush=True)
