"""What a run costs the server through each way of following it, as a ratio to the plain run
in the same pass (issue #29 item 4).

One server process (uvicorn, as the service benchmark serves it: SQLite, INFO logs), with one
agent profile (`calc`: the calculator) so its A2A endpoint exists. The same 5-step scripted
run (4 calculator calls, then task_finished) is followed, one run at a time by one client:

- **plain run**: `POST /runs`, then `GET /runs/{id}/events` as SSE to the terminal event (what
  the service benchmark does);
- **AG-UI stream**: `POST /ag-ui` with the run's fields in `forwardedProps.finishline`, read
  to its end;
- **A2A stream**: JSON-RPC `SendStreamingMessage` to `/a2a/calc` (A2A 1.0), the run's fields in
  the message's `metadata.finishline`, read to its end.

Two more rows change the run, not the way it is followed (each still a plain `POST /runs` and its
SSE events):

- **typed answer**: the same run with an `output_schema` (an object with a string `answer` and
  a number `steps`), its `task_finished` answer that object, validated at the end (issue #23);
- **run with one sub-agent**: the same run whose first step calls a sub-agent (`helper(task)`)
  instead of the calculator; the child is a 2-step run (a calculator call, then
  `task_finished`), so the tree makes 7 model calls where the plain run makes 5 (issue #26).
  Its ratio is the whole tree's CPU against the plain run's.

The sides take turns block by block in shuffled order; server CPU (every thread, /proc
schedstat) per run, median of the blocks.

    python -m bench.streams [--quick] [--rounds N] [--runs N]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from bench.common import fmt, machine, machine_line, say, table, write_results
from bench.procs import Server, run_seconds
from bench.service_client import scripted_body

AGENT = {"calc": {"description": "Computes with the calculator.", "tools": ["calculator"]}}
TYPED_SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string"}, "steps": {"type": "number"}},
    "required": ["answer", "steps"],
    "additionalProperties": False,
}
CHILD_SCRIPT = [
    {
        "content": "computing",
        "tool_calls": [{"name": "calculator", "arguments": {"expression": "6*7"}}],
    },
    {"tool_calls": [{"name": "task_finished", "arguments": {"answer": "42"}}]},
]


def _read_stream(response: httpx.Response) -> int:
    response.raise_for_status()
    return sum(line.startswith("data:") for line in response.iter_lines())


def plain_run(client: httpx.Client, body: dict[str, Any]) -> int:
    run_id = client.post("/runs", json=body).raise_for_status().json()["id"]
    with client.stream("GET", f"/runs/{run_id}/events") as response:
        events, ended = 0, False
        response.raise_for_status()
        for line in response.iter_lines():
            ended = ended or line in ("event: run.completed", "event: run.failed")
            events += line.startswith("data:")
            if ended and line.startswith("data:"):
                break
        return events


def agui_run(client: httpx.Client, body: dict[str, Any]) -> int:
    config = {k: v for k, v in body.items() if k != "task"}
    agent_input = {
        "threadId": str(uuid.uuid4()),
        "runId": "r",
        "messages": [{"id": "u", "role": "user", "content": body["task"]}],
        "forwardedProps": {"finishline": config},
    }
    with client.stream("POST", "/ag-ui", json=agent_input) as response:
        return _read_stream(response)


def a2a_run(client: httpx.Client, body: dict[str, Any]) -> int:
    config = {k: v for k, v in body.items() if k not in ("task", "tools")}
    rpc = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendStreamingMessage",
        "params": {
            "message": {
                "messageId": str(uuid.uuid4()),
                "role": "ROLE_USER",
                "parts": [{"text": body["task"]}],
            },
            "metadata": {"finishline": config},
        },
    }
    headers = {"A2A-Version": "1.0", "Accept": "text/event-stream"}
    with client.stream("POST", "/a2a/calc", json=rpc, headers=headers) as response:
        frames = _read_stream(response)
    if frames < 3:
        raise RuntimeError(f"the A2A stream sent {frames} frames")
    return frames


def typed_run(client: httpx.Client, body: dict[str, Any]) -> int:
    script = [*body["model_script"][:-1]]
    answer = {"answer": "done", "steps": len(script) + 1}
    script.append({"tool_calls": [{"name": "task_finished", "arguments": {"answer": answer}}]})
    return plain_run(client, {**body, "model_script": script, "output_schema": TYPED_SCHEMA})


def subagent_run(client: httpx.Client, body: dict[str, Any]) -> int:
    script = [*body["model_script"]]
    script[0] = {
        "content": "Step 1: asking the helper.",
        "tool_calls": [{"name": "helper", "arguments": {"task": "compute 6*7"}}],
    }
    helper = {
        "description": "Computes with the calculator.",
        "model": "scripted",
        "tools": ["calculator"],
        "model_script": CHILD_SCRIPT,
    }
    return plain_run(client, {**body, "model_script": script, "agents": {"helper": helper}})


SIDES: dict[str, Callable[[httpx.Client, dict[str, Any]], int]] = {
    "plain run": plain_run,
    "AG-UI stream": agui_run,
    "A2A stream": a2a_run,
    "typed answer": typed_run,
    "run with one sub-agent": subagent_run,
}


def measure(rounds: int, runs: int) -> dict[str, Any]:
    body = scripted_body(5)
    with tempfile.TemporaryDirectory() as tmp:
        server = Server(
            Path(tmp),
            {
                "FINISHLINE_STORE_URL": f"sqlite:///{Path(tmp) / 'finishline.db'}",
                "FINISHLINE_LOG_LEVEL": "INFO",
                "FINISHLINE_LOG_FORMAT": "json",
                "FINISHLINE_AGENTS": json.dumps(AGENT),
            },
        )
        server.start()
        try:
            cpu: dict[str, list[float]] = {name: [] for name in SIDES}
            frames: dict[str, int] = {}
            with httpx.Client(base_url=server.url, timeout=60) as client:
                for name, side in SIDES.items():  # warm every path (imports, caches)
                    for _ in range(2):
                        frames[name] = side(client, body)
                order = list(SIDES)
                for number in range(rounds):
                    random.shuffle(order)
                    for name in order:
                        before = run_seconds(server.pid)
                        for _ in range(runs):
                            SIDES[name](client, body)
                        cpu[name].append((run_seconds(server.pid) - before) / runs * 1000)
                    say(f"  streams: round {number + 1}/{rounds}")
        finally:
            server.stop()
    medians = {name: statistics.median(v) for name, v in cpu.items()}
    return {
        "rounds": rounds,
        "runs_per_block": runs,
        "frames_per_run": frames,
        "cpu_ms_per_run": medians,
        "ratio": {name: medians[name] / medians["plain run"] for name in SIDES},
        "blocks": cpu,
    }


def report(result: dict[str, Any], info: dict[str, Any]) -> str:
    rows = [
        [
            name,
            str(result["frames_per_run"][name]),
            fmt(result["cpu_ms_per_run"][name], 2),
            f"{result['ratio'][name]:.2f}×",
        ]
        for name in SIDES
    ]
    return "\n\n".join(
        [
            "# A run through each stream (bench/streams.py)",
            machine_line(info),
            "The same 5-step scripted run (4 calculator calls, then task_finished), followed one "
            "at a time by one client: `POST /runs` then its SSE events (the plain run), "
            "`POST /ag-ui`, and A2A `SendStreamingMessage`; then, followed as the plain run, "
            "the same run with an `output_schema` (typed answer) and with its first step "
            "calling a sub-agent whose child makes 2 steps (the whole tree's CPU). One server "
            "(SQLite, INFO logs, one agent profile); server CPU of every thread per run, median "
            f"of {result['rounds']} interleaved blocks of {result['runs_per_block']} runs each.",
            table(["run", "frames sent", "server CPU ms/run", "× plain run"], rows),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, help="blocks per side (9; quick 4)")
    parser.add_argument("--runs", type=int, help="runs per block (20; quick 10)")
    args = parser.parse_args()
    result = measure(
        args.rounds or (4 if args.quick else 9), args.runs or (10 if args.quick else 20)
    )
    info = machine()
    markdown = report(result, info)
    write_results(
        "streams-quick" if args.quick else "streams", markdown, {"machine": info, **result}
    )
    print(markdown)


if __name__ == "__main__":
    main()
