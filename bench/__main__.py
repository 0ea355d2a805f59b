"""`python -m bench [--quick]`: every benchmark in turn, results in bench/results/, then the
table of issues #10's and #29's targets. `python -m bench --summary [--quick] [--readme]`: that
table alone, from the results already there (`--readme` also rewrites it in docs/performance.md)."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

from bench import summary
from bench.common import ROOT, say

STEPS = (
    ("start-up and idle memory (bench/startup.py)", ["bench.startup"]),
    ("engine overhead (bench/engine.py)", ["bench.engine"]),
    ("event log (bench/store.py)", ["bench.store"]),
    ("tracing cost (bench/tracing.py)", ["bench.tracing"]),
    ("event-loop stall of the heaviest request (bench/loop_stall.py)", ["bench.loop_stall"]),
    ("client CPU per outbound HTTP call (bench/http_client.py)", ["bench.http_client"]),
    ("service, floors and LangGraph's server (bench/service.py)", ["bench.service", "--extra"]),
    ("first event at 100 clients next to the floor (bench/first_event.py)", ["bench.first_event"]),
    ("AG-UI stream cost next to the native stream (bench/agui.py)", ["bench.agui"]),
    ("a sub-agent's child run next to a top-level run (bench/subagents.py)", ["bench.subagents"]),
    ("a run through each stream, next to the plain run (bench/streams.py)", ["bench.streams"]),
    ("a run with an outcome next to a plain run (bench/outcomes.py)", ["bench.outcomes"]),
    ("uvicorn --workers N on Redis vs SQLite (bench/workers.py)", ["bench.workers"]),
    ("the Postgres store vs SQLite (bench/postgres.py)", ["bench.postgres"]),
    ("bearer credential checks: API key and token (bench/auth.py)", ["bench.auth"]),
    (
        "wall time next to the floor, quiet and with neighbours (bench/walltime.py)",
        ["bench.walltime"],
    ),
    ("where a run waits: the breakdown (bench/walltime.py --probe)", ["bench.walltime", "--probe"]),
    ("a termination report over 100,000 runs on SQLite (bench/reports.py)", ["bench.reports"]),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer rounds and runs")
    parser.add_argument("--summary", action="store_true", help="print the targets table only")
    parser.add_argument(
        "--readme", action="store_true", help="with --summary: update the READMEs' tables"
    )
    args = parser.parse_args()
    if args.summary:
        text = summary.write(args.quick)
        if args.readme:
            summary.update_readmes(args.quick)
        print(text)
        return
    started = time.monotonic()
    for title, command in STEPS:
        say(f"\n=== {title}")
        extra = ["--quick"] if args.quick else []
        subprocess.run(
            [sys.executable, "-m", *command, *extra], cwd=ROOT, check=True, stdout=sys.stderr
        )
    say(f"\nall benchmarks done in {time.monotonic() - started:.0f} s: bench/results/*.md\n")
    print(summary.write(args.quick))


if __name__ == "__main__":
    main()
