"""What an outcome costs the server (DESIGN §22): a run whose answer is graded, next to the
same run without an outcome, in the same pass.

The claim (issue #39): a run with an outcome costs its extra LLM call (the grader's) and
nothing more measurable. The server is its own process (uvicorn, SQLite, INFO logs, the
scripted model, whose calls cost the server what a real model's replies cost it to read, less
the network); one client, sequential runs; three sides alternate block by block in shuffled
order, server CPU time (every thread, /proc schedstat) per run:

- **plain**: a 2-step run (a calculator call, then `task_finished`): 2 LLM calls;
- **plain, one more model call**: the same run with a reply of text alone between them (the
  nudge, then the finish): 3 LLM calls, the reference for "one extra call";
- **with an outcome**: the plain run with `outcome.rubric`, its answer graded met: 3 LLM
  calls (the grader's is the third).

    python -m bench.outcomes [--quick] [--rounds N] [--runs N] [--report]
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
MET = {
    "tool_calls": [
        {"name": "submit_verdict", "arguments": {"satisfied": True, "feedback": "the product"}}
    ]
}
RUN = {"task": "compute 6*7", "model": "scripted", "tools": ["calculator"]}
SIDES: dict[str, dict[str, Any]] = {
    "plain": {**RUN, "model_script": [CALC, FINISH]},
    "plain, one more model call": {
        **RUN,
        "model_script": [CALC, {"content": "the product is 42"}, FINISH],
    },
    "with an outcome": {
        **RUN,
        "model_script": [CALC, FINISH, MET],
        "outcome": {"rubric": "Gives the product."},
    },
}


def served(rounds: int, runs: int) -> dict[str, Any]:
    cpu = cpu_per_side(SIDES, rounds, runs)
    medians = {name: statistics.median(v) for name, v in cpu.items()}
    return {"server_cpu_ms_per_run": medians, "blocks": cpu, "runs": runs}


def report(raw: dict[str, Any], info: dict[str, Any]) -> str:
    ms = raw["server_cpu_ms_per_run"]
    plain = ms["plain"]
    rows = [
        [name, str(calls), fmt(ms[name], 2), fmt(ms[name] / plain, 2) + "x"]
        for name, calls in (("plain", 2), ("plain, one more model call", 3), ("with an outcome", 3))
    ]
    extra = ms["with an outcome"] - plain
    reference = ms["plain, one more model call"] - plain
    return "\n\n".join(
        [
            "# What an outcome costs (bench/outcomes.py)",
            table(["run", "LLM calls", "server CPU ms per run", "÷ plain"], rows),
            f"The outcome adds {fmt(extra, 2)} ms a run; one more model call of a plain run adds "
            f"{fmt(reference, 2)} ms. Scripted runs (a calculator call, then task_finished; the "
            "grader's verdict scripted too), started by POST /runs and waited for. Server CPU "
            "of every thread (/proc schedstat), SQLite, INFO logs, one client, sequential runs, "
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
    name = "outcomes-quick" if args.quick else "outcomes"
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
