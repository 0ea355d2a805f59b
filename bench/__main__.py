"""`python -m bench [--quick]`: every benchmark in turn, results in bench/results/."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

from bench.common import ROOT, say

STEPS = (
    ("engine overhead (bench/engine.py)", ["bench.engine"]),
    ("event log (bench/store.py)", ["bench.store"]),
    ("tracing cost (bench/tracing.py)", ["bench.tracing"]),
    ("event-loop stall of the heaviest request (bench/loop_stall.py)", ["bench.loop_stall"]),
    ("service (bench/service.py)", ["bench.service", "--extra"]),
    ("uvicorn --workers N on Redis vs SQLite (bench/workers.py)", ["bench.workers"]),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer rounds and runs")
    args = parser.parse_args()
    started = time.monotonic()
    for title, command in STEPS:
        say(f"\n=== {title}")
        extra = ["--quick"] if args.quick else []
        subprocess.run(
            [sys.executable, "-m", *command, *extra], cwd=ROOT, check=True, stdout=sys.stderr
        )
    say(f"\nall benchmarks done in {time.monotonic() - started:.0f} s: bench/results/*.md")


if __name__ == "__main__":
    main()
