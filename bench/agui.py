"""AG-UI stream cost: what POST /ag-ui costs per event next to the native run stream.

The claim (issue #27): the AG-UI stream costs no more than the native stream per event. Three
measures, the first two interleaved (the two sides alternate, block by block, in shuffled
order):

- **encoding, in process**: the frames of one run's events (a 10-step scripted run: queued,
  started, then per step `step.started`, `llm.call`, `thought`, `action`, `observation`, and
  the terminal event) made the native way (`app.api.routes.events.sse_frames`) and the AG-UI
  way (`FrameMapper.frames`: the protocol's events as the bytes its models and encoder
  write), µs per finishline event;
- **served**: the server as its own process (uvicorn, memory store, the scripted model), the
  same 10-step run streamed sequentially by one client as `POST /runs {"stream": true}` and as
  `POST /ag-ui` (a thread of its own each), server CPU time (every thread, /proc schedstat)
  per finishline event of the run, everything the server does for it included; each round on
  a fresh server (see `served`);
- **served, callgrind**: the same served runs with the server under valgrind's callgrind,
  instructions of every thread per finishline event: a count that does not move with the load
  of a shared machine, as CPU time does.

    python -m bench.agui [--quick] [--rounds N] [--runs N] [--callgrind N] [--callgrind-only]
    python -m bench.agui --report
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from app.api.agui.mapping import FrameMapper, frame
from app.api.routes.events import sse_frames
from app.engine.events import EventType
from app.runs.records import Event
from bench.common import RESULTS, fmt, machine, machine_line, say, table, write_results
from bench.procs import Server, run_seconds

STEPS = 10
RUN = "run_01BENCHBENCHBENCHBENCHBEN"


def script(steps: int = STEPS) -> list[dict[str, Any]]:
    call = {"name": "calculator", "arguments": {"expression": "6*7"}}
    replies: list[dict[str, Any]] = [
        {"content": f"step {i}: let me compute that once more.", "tool_calls": [call]}
        for i in range(steps - 1)
    ]
    replies.append({"tool_calls": [{"name": "task_finished", "arguments": {"answer": "42"}}]})
    return replies


def run_events(steps: int = STEPS) -> list[Event]:
    """The events of a `script()` run, as the store holds them."""
    out: list[Event] = []

    def add(kind: EventType, step: int, **data: Any) -> None:
        out.append(Event(RUN, len(out) + 1, kind, time.time(), step, data))

    add(EventType.RUN_QUEUED, 0, task="compute", model="scripted", tools=["calculator"])
    add(EventType.RUN_STARTED, 0)
    for step in range(1, steps + 1):
        add(EventType.STEP_STARTED, step, max_steps=steps)
        llm = {"model": "scripted", "duration_ms": 0, "prompt_tokens": 50 * step}
        add(EventType.LLM_CALL, step, **llm, completion_tokens=12, estimated=True, tool_calls=1)
        if step < steps:
            add(EventType.THOUGHT, step, text=f"step {step}: let me compute that once more.")
            call = {"call_id": f"call_{step}_0", "tool": "calculator"}
            add(EventType.ACTION, step, **call, arguments={"expression": "6*7"})
            observed = {"content": "42", "is_error": False, "truncated": False}
            add(EventType.OBSERVATION, step, **call, **observed, duration_ms=0, repeated=False)
        else:
            add(
                EventType.ACTION,
                step,
                call_id="f",
                tool="task_finished",
                arguments={"answer": "42"},
            )
    result = {"answer": "42", "reason": "finished", "degraded": False}
    add(EventType.RUN_COMPLETED, steps, result=result, usage={"steps": steps})
    return out


def encode_native(events: list[Event]) -> int:
    return len(sse_frames(events))


def encode_agui(events: list[Event]) -> int:
    mapper = FrameMapper(thread_id="t", run_id="r", finishline_run_id=RUN)
    return len(frame(0, mapper.started()) + mapper.frames(events))


def encoding(rounds: int, per_block: int) -> dict[str, Any]:
    events = run_events()
    sides = {"native": encode_native, "ag-ui": encode_agui}
    timings: dict[str, list[float]] = {name: [] for name in sides}
    sizes = {name: encode(events) for name, encode in sides.items()}
    mapper = FrameMapper(thread_id="t", run_id="r", finishline_run_id=RUN)
    made = len(mapper.started()) + sum(len(mapper.map(e)) for e in events)
    order = list(sides)
    for _ in range(rounds):
        random.shuffle(order)
        for name in order:
            started = time.perf_counter()
            for _ in range(per_block):
                sides[name](events)
            elapsed = time.perf_counter() - started
            timings[name].append(elapsed / per_block / len(events) * 1e6)
    return {
        "events": len(events),
        "frames": made,
        "us_per_event": {name: statistics.median(v) for name, v in timings.items()},
        "bytes_per_run": sizes,
    }


def native_run(client: httpx.Client, body: dict[str, Any]) -> int:
    events = 0
    with client.stream("POST", "/runs", json={**body, "stream": True}) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            events += line.startswith("data:")
    return events


def agui_run(client: httpx.Client, body: dict[str, Any]) -> int:
    config = {k: v for k, v in body.items() if k != "task"}
    agent_input = {
        "threadId": str(uuid.uuid4()),
        "runId": "r",
        "messages": [{"id": "u", "role": "user", "content": body["task"]}],
        "forwardedProps": {"finishline": config},
    }
    frames = 0
    with client.stream("POST", "/ag-ui", json=agent_input) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            frames += line.startswith("data:")
    return frames


SERVER_ENV = {
    "FINISHLINE_STORE_URL": "memory://",
    "FINISHLINE_LOG_LEVEL": "WARNING",
    "FINISHLINE_MAX_SCRIPT_REPLIES": "1000",
}


def run_body() -> dict[str, Any]:
    return {
        "task": "compute",
        "model": "scripted",
        "tools": ["calculator"],
        "model_script": script(),
    }


def served(rounds: int, runs: int) -> dict[str, Any]:
    """Server CPU per finishline event, each round on a fresh server (both sides, shuffled,
    after a warm-up of two runs each). Fresh, because the memory store finds an idempotency
    key by reading every run it holds (`MemoryRunStore._keyed`), and every AG-UI turn carries
    one: a server that kept the runs of all rounds would make the AG-UI side dearer round by
    round for the store's sake, not the stream's."""
    body = run_body()
    sides = {"native": native_run, "ag-ui": agui_run}
    cpu: dict[str, list[float]] = {name: [] for name in sides}
    frames: dict[str, int] = {}
    order = list(sides)
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(rounds):
            workdir = Path(tmp) / str(round_)
            workdir.mkdir()
            server = Server(workdir, SERVER_ENV)
            server.start()
            try:
                with httpx.Client(base_url=server.url, timeout=60) as client:
                    for name, side in sides.items():  # warm both paths (imports, caches)
                        side(client, body)
                        frames[name] = side(client, body)
                    random.shuffle(order)
                    for name in order:
                        before = run_seconds(server.pid)
                        for _ in range(runs):
                            sides[name](client, body)
                        spent = run_seconds(server.pid) - before
                        cpu[name].append(spent / runs / frames["native"] * 1e6)
            finally:
                server.stop()
    return {
        "events_per_run": frames["native"],  # the run's events: one native frame each
        "frames_per_run": frames,
        "server_cpu_us_per_event": {name: statistics.median(v) for name, v in cpu.items()},
        "blocks": cpu,
    }


def instructions(runs: int) -> dict[str, Any]:
    """The served runs again with the server under callgrind: instructions of every thread of
    the server per finishline event, for `runs` runs of each side after a warm-up of two each.
    Unlike CPU time, the count does not move with what else the machine runs; it counts
    instructions, not cycles, and leaves out the kernel's share (the socket's writes)."""
    body = run_body()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        grind = ("valgrind", "--tool=callgrind", f"--callgrind-out-file={work}/callgrind.%p")
        server = Server(work, SERVER_ENV, wrapper=grind)
        server.start(timeout_s=600)
        try:
            sides = {"native": native_run, "ag-ui": agui_run}
            counts: dict[str, float] = {}
            events = 0
            with httpx.Client(base_url=server.url, timeout=600) as client:
                for side in sides.values():
                    side(client, body)
                    side(client, body)
                events = native_run(client, body)
                for name, side in sides.items():
                    _callgrind("--zero", server.pid)
                    for _ in range(runs):
                        side(client, body)
                    dumped = set(work.glob("callgrind.*"))
                    _callgrind("--dump", server.pid)
                    total = sum(_total(path) for path in set(work.glob("callgrind.*")) - dumped)
                    counts[name] = total / runs / events
        finally:
            server.stop()
    return {"runs": runs, "events_per_run": events, "instructions_per_event": counts}


def _callgrind(action: str, pid: int) -> None:
    subprocess.run(["callgrind_control", action, str(pid)], check=True, capture_output=True)


def _total(path: Path) -> int:
    with path.open(errors="replace") as handle:
        for line in handle:
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    raise ValueError(f"no totals in {path}")


def report(
    enc: dict[str, Any],
    srv: dict[str, Any],
    info: dict[str, Any],
    grind: dict[str, Any] | None = None,
) -> str:
    e, s = enc["us_per_event"], srv["server_cpu_us_per_event"]
    enc_frames = enc["frames"] / enc["events"]  # AG-UI frames per finishline event
    srv_frames = srv["frames_per_run"]["ag-ui"] / srv["events_per_run"]

    def row(what: str, native: float, agui: float, digits: int) -> list[str]:
        return [what, fmt(native, digits), fmt(agui, digits), fmt(agui / native, 2) + "x"]

    rows = [
        row("encoding, in process: µs per finishline event", e["native"], e["ag-ui"], 2),
        row("encoding, in process: µs per frame sent", e["native"], e["ag-ui"] / enc_frames, 2),
        row("served: server CPU µs per finishline event", s["native"], s["ag-ui"], 1),
        row("served: server CPU µs per frame sent", s["native"], s["ag-ui"] / srv_frames, 1),
    ]
    counted = ""
    if grind is not None:
        i = {name: n / 1000 for name, n in grind["instructions_per_event"].items()}
        what = "served, callgrind: k instructions per finishline event"
        rows.append(row(what, i["native"], i["ag-ui"], 1))
        counted = (
            f" Callgrind: {grind['runs']} runs of each side after a warm-up, every thread of "
            "the server, C code included (the kernel not)."
        )
    sizes = enc["bytes_per_run"]
    return "\n\n".join(
        [
            "# AG-UI stream cost (bench/agui.py)",
            table(["figure", "native stream", "AG-UI stream", "AG-UI ÷ native"], rows),
            f"A {STEPS}-step scripted run. Encoding: its {enc['events']} events, one native frame "
            f"each ({sizes['native']:,} bytes) or {enc['frames']} AG-UI frames "
            f"({sizes['ag-ui']:,} bytes). Served: the run as the server makes it, "
            f"{srv['events_per_run']} events, {srv['frames_per_run']['ag-ui']} AG-UI frames; "
            "server CPU of every thread (/proc schedstat), one client, sequential runs, each "
            "round of the two sides on a fresh server. Medians of interleaved blocks." + counted,
            machine_line(info),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--runs", type=int, default=None, help="runs per served block")
    parser.add_argument(
        "--callgrind", type=int, default=10, help="runs per side under callgrind (0: none)"
    )
    parser.add_argument(
        "--callgrind-only", action="store_true", help="only count instructions, and print them"
    )
    parser.add_argument("--report", action="store_true", help="rewrite the .md from the .json")
    args = parser.parse_args()
    name = "agui-quick" if args.quick else "agui"
    if args.report:
        raw = json.loads((RESULTS / f"{name}.json").read_text(encoding="utf-8"))
        markdown = report(raw["encoding"], raw["served"], raw["machine"], raw.get("callgrind"))
        write_results(name, markdown, raw)
        print(markdown)
        return
    grind = None
    if args.callgrind and shutil.which("valgrind") is None:
        say("valgrind is missing: no instruction counts")
    elif args.callgrind:
        say(f"served under callgrind, {args.callgrind} runs a side")
        grind = instructions(args.callgrind)
        per = grind["instructions_per_event"]
        say(
            f"  k instructions per event: native {per['native'] / 1000:.1f}, "
            f"AG-UI {per['ag-ui'] / 1000:.1f}, ratio {per['ag-ui'] / per['native']:.3f}x"
        )
    if args.callgrind_only:
        return
    rounds = args.rounds or (5 if args.quick else 15)
    runs = args.runs or (10 if args.quick else 30)
    say("encoding, in process")
    enc = encoding(rounds * 4, 50)
    say("served, one client, sequential runs")
    srv = served(rounds, runs)
    info = machine()
    markdown = report(enc, srv, info, grind)
    raw = {"encoding": enc, "served": srv, "callgrind": grind, "machine": info}
    write_results(name, markdown, raw)
    print(markdown)


if __name__ == "__main__":
    main()
