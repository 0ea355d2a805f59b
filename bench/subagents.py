"""What a sub-agent's child run costs next to a run a request starts (DESIGN §15).

The claim (issue #26): a child costs about what a top-level run costs. The server is its own
process (uvicorn, SQLite, INFO logs, the scripted model), one client, sequential runs; three
sides alternate block by block in shuffled order, server CPU time (every thread, /proc
schedstat) per run:

- **top-level**: the work, `W` (a 2-step run: a calculator call, then `task_finished`),
  started by `POST /runs` and waited for (`GET /runs/{id}/wait`);
- **parent, tool**: a 2-step run whose first step calls the calculator;
- **parent, sub-agent**: the same run, its first step calling a sub-agent whose child is `W`.

A child's cost is the difference of the two parents (the tree, less its parent doing the same
step with a tool), to set beside the top-level run's.

    python -m bench.subagents [--quick] [--rounds N] [--runs N] [--report]
"""

from __future__ import annotations

import argparse
import json
import statistics
from typing import Any

from bench.common import RESULTS, fmt, machine, machine_line, say, table, write_results
from bench.procs import cpu_per_side

FINISH = {"tool_calls": [{"name": "task_finished", "arguments": {"answer": "42"}}]}
CALC = {
    "content": "let me compute",
    "tool_calls": [{"name": "calculator", "arguments": {"expression": "6*7"}}],
}
WORK = [CALC, FINISH]
"""The work: what the top-level run and the child each do."""

SIDES: dict[str, dict[str, Any]] = {
    "top-level": {
        "task": "compute 6*7",
        "model": "scripted",
        "tools": ["calculator"],
        "model_script": WORK,
    },
    "parent, tool": {
        "task": "route",
        "model": "scripted",
        "tools": ["calculator"],
        "model_script": WORK,
    },
    "parent, sub-agent": {
        "task": "route",
        "model": "scripted",
        "model_script": [
            {
                "content": "let me ask",
                "tool_calls": [{"name": "w", "arguments": {"task": "compute 6*7"}}],
            },
            FINISH,
        ],
        "agents": {
            "w": {
                "description": "Computes.",
                "model": "scripted",
                "tools": ["calculator"],
                "model_script": WORK,
            }
        },
    },
}


def served(rounds: int, runs: int) -> dict[str, Any]:
    cpu = cpu_per_side(SIDES, rounds, runs)
    medians = {name: statistics.median(v) for name, v in cpu.items()}
    child = medians["parent, sub-agent"] - medians["parent, tool"]
    return {"server_cpu_ms_per_run": medians, "child_ms": child, "blocks": cpu, "runs": runs}


def report(raw: dict[str, Any], info: dict[str, Any]) -> str:
    ms = raw["server_cpu_ms_per_run"]
    top, child = ms["top-level"], raw["child_ms"]
    rows = [
        ["a run a request starts (top-level)", fmt(top, 2), "1.00x"],
        [
            "a parent whose step calls a tool",
            fmt(ms["parent, tool"], 2),
            fmt(ms["parent, tool"] / top, 2) + "x",
        ],
        [
            "the same parent calling a sub-agent (its child included)",
            fmt(ms["parent, sub-agent"], 2),
            fmt(ms["parent, sub-agent"] / top, 2) + "x",
        ],
        [
            "**a child run** (the difference of the two parents)",
            fmt(child, 2),
            fmt(child / top, 2) + "x",
        ],
    ]
    return "\n\n".join(
        [
            "# What a child run costs (bench/subagents.py)",
            table(["run", "server CPU ms per run", "÷ top-level"], rows),
            "The work is a 2-step scripted run (a calculator call, then task_finished), started "
            "by POST /runs and waited for, or as the child of a sub-agent call. Server CPU of "
            "every thread (/proc schedstat), SQLite, INFO logs, one client, sequential runs, "
            f"{raw['runs']} runs a block; medians of interleaved blocks.",
            machine_line(info),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--runs", type=int, default=None, help="runs per block")
    parser.add_argument("--report", action="store_true", help="rewrite the .md from the .json")
    args = parser.parse_args()
    name = "subagents-quick" if args.quick else "subagents"
    if args.report:
        raw = json.loads((RESULTS / f"{name}.json").read_text(encoding="utf-8"))
        markdown = report(raw["served"], raw["machine"])
        write_results(name, markdown, raw)
        print(markdown)
        return
    rounds = args.rounds or (5 if args.quick else 15)
    runs = args.runs or (10 if args.quick else 30)
    say("served, one client, sequential runs")
    raw = served(rounds, runs)
    info = machine()
    markdown = report(raw, info)
    write_results(name, markdown, {"served": raw, "machine": info})
    print(markdown)


if __name__ == "__main__":
    main()
