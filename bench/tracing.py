"""Tracing cost: what OpenTelemetry tracing adds to a run, off and on.

A 10-step run of the engine (`bench.engine`'s workload: 9 calls of a no-op tool, then the
finish, a zero-latency scripted model) is fed step by step to what `RunManager` does per
step (`bench.engine.Sink`) and, when traced, to the run's trace (`app.tracing`), as the
manager does: `open` at creation, `started`, `step` for each step, `ended`. Three
contestants, interleaved in shuffled order, block by block, in one process and event loop:

- **off**: no observer (what the service does with no `OTEL_EXPORTER_OTLP_ENDPOINT`);
- **on**: the real SDK set-up of the service (`app.tracing.provider.Tracing`): a batch span
  processor exporting over OTLP/HTTP to a sink in another process on loopback (so the sink's
  own work is not counted);
- **on, content**: the same with `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`.

Measured per run: wall time on the event loop (the latency a run's steps see), and CPU time
of the whole process (`time.process_time`, every thread: the exporter's batching and
protobuf encoding included; each block ends with a flush so its spans are paid for in it).
A traced 10-step run makes 20 spans: `invoke_agent`, 10 `chat`, 9 `execute_tool` (the
`task_finished` call is the run's end, not a tool span), and 9 intervention events.

    python -m bench.tracing [--quick] [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import random
import subprocess
import sys
import time
from typing import Any

from app.engine.loop import run_react
from app.engine.policies import StopReason
from app.engine.steps import Finished
from app.llm.scripted import ScriptedModel
from app.runs.records import RunRecord, RunResult, RunStatus, Usage, new_run_id
from bench.common import fmt, machine, machine_line, say, summary, table, write_results
from bench.engine import LIMITS, NOOP, SCRIPTS, SYSTEM, TASK, Sink, quiet_logs

STEPS = 10
SPANS = 2 * STEPS  # invoke_agent, a chat per step, a tool call per step but the last
RUNS_PER_BLOCK = 50

SINK = """
import http.server, sys
class Sink(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Sink)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


async def traced_run(tracing: Any) -> None:
    record = RunRecord(id=new_run_id(), request={"task": TASK}, model="scripted", settings={})
    trace = tracing.open(record, None) if tracing is not None else None
    sink = Sink()
    if trace is not None:
        trace.started()
    async for step in run_react(
        task=TASK,
        model=ScriptedModel(SCRIPTS[STEPS]),
        tools=[NOOP],
        limits=LIMITS,
        system_prompt=SYSTEM,
        run_id=record.id,
        cancel=asyncio.Event(),
    ):
        sink.record(step)
        if trace is not None:
            trace.step(step)
        if isinstance(step, Finished):
            record.status = RunStatus.COMPLETED
            record.result = RunResult(answer=step.answer, reason=step.reason, degraded=False)
            record.usage = Usage(**step.usage.to_dict())
    assert record.result is not None
    assert record.result.reason == StopReason.FINISHED
    if trace is not None:
        trace.ended(record)


async def measure(rounds: int, contestants: dict[str, Any]) -> dict[str, dict[str, list[float]]]:
    samples: dict[str, dict[str, list[float]]] = {
        name: {"wall_us": [], "cpu_us": []} for name in contestants
    }
    for tracing in contestants.values():  # warm-up
        for _ in range(20):
            await traced_run(tracing)
        if tracing is not None:
            tracing.force_flush()
    order = list(contestants)
    for number in range(rounds):
        random.shuffle(order)
        gc.collect()
        for name in order:
            tracing = contestants[name]
            cpu = time.process_time()
            for _ in range(RUNS_PER_BLOCK):
                started = time.perf_counter_ns()
                await traced_run(tracing)
                samples[name]["wall_us"].append((time.perf_counter_ns() - started) / 1000)
            if tracing is not None:
                tracing.force_flush()
            samples[name]["cpu_us"].append((time.process_time() - cpu) * 1e6 / RUNS_PER_BLOCK)
        if number % 10 == 9:
            say(f"  tracing bench: round {number + 1}/{rounds}")
    return samples


def report(samples: dict[str, dict[str, list[float]]], info: dict[str, Any]) -> str:
    off_wall = summary(samples["off"]["wall_us"])["median"]
    off_cpu = summary(samples["off"]["cpu_us"])["median"]
    rows = []
    for name, data in samples.items():
        wall, cpu = summary(data["wall_us"]), summary(data["cpu_us"])
        rows.append(
            [
                name,
                wall["n"],
                fmt(wall["median"]),
                fmt(wall["p90"]),
                fmt(wall["median"] - off_wall),
                fmt(cpu["median"]),
                fmt(cpu["median"] - off_cpu),
                fmt((cpu["median"] - off_cpu) / SPANS, 1),
            ]
        )
    headers = [
        "tracing",
        "runs",
        "wall µs/run (median)",
        "p90",
        "wall µs over off",
        "CPU µs/run (median)",
        "CPU µs over off",
        "CPU µs per span",
    ]
    return "\n\n".join(
        [
            f"### Tracing cost, {STEPS}-step runs",
            machine_line(info),
            table(headers, rows),
            "Wall: one run on the event loop (the engine, the per-step recording, the trace's "
            "span building). CPU: the whole process per run, export thread included (blocks of "
            f"{RUNS_PER_BLOCK} runs, each ending with a flush). A traced run here makes "
            f"{SPANS} spans: `invoke_agent`, {STEPS} `chat` and {STEPS - 1} `execute_tool` (the "
            "`task_finished` call ends the run, it is no tool span), exported over OTLP/HTTP to a "
            "sink in another process. Storage and HTTP are not in this loop: the service adds "
            "its SQLite appends, SSE and HTTP around the same per-step work (bench/service.py: "
            "~9-14 ms of server CPU per 5-step run).",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--rounds", type=int, default=None)
    args = parser.parse_args()
    rounds = args.rounds or (5 if args.quick else 30)
    quiet_logs()
    sink = subprocess.Popen([sys.executable, "-c", SINK], stdout=subprocess.PIPE, text=True)
    try:
        assert sink.stdout is not None
        port = int(sink.stdout.readline())
        os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{port}"
        from app.tracing.provider import Tracing

        contestants: dict[str, Any] = {
            "off": None,
            "on": Tracing(capture_content=False),
            "on, content": Tracing(capture_content=True),
        }
        info = machine()
        say(f"tracing bench: {rounds} rounds of {RUNS_PER_BLOCK} runs each, sink on :{port}")
        samples = asyncio.run(measure(rounds, contestants))
        for tracing in contestants.values():
            if tracing is not None:
                tracing.shutdown()
    finally:
        sink.terminate()
        sink.wait(timeout=10)
    markdown = report(samples, info)
    stats = {name: {k: summary(v) for k, v in data.items()} for name, data in samples.items()}
    write_results(
        "tracing-quick" if args.quick else "tracing",
        markdown,
        {"machine": info, "rounds": rounds, "runs_per_block": RUNS_PER_BLOCK, "stats": stats},
    )
    print(markdown)


if __name__ == "__main__":
    main()
