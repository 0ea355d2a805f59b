"""Engine overhead: microseconds of orchestration per step, against a floor and a peer.

Three contestants run the same workload in one process and one event loop, interleaved round
by round (the order shuffled each round) so that drift (CPU frequency, other load) hits
them alike:

- **engine**: `run_react` with every guard on: the stop tool, repetition detection,
  truncation, progress messages, a context cap, a token budget and a cost budget (all too
  large to trigger, so their checks run every step; the scripted model is priced, at 0),
  the run-wide deadline and cancel guard; each step recorded into an in-memory sink that
  does what `RunManager` does per step minus storage (`step.payload()` into a dict with
  seq/type/step, appended to a list).
- **engine, output_schema**: the same, the run typed (DESIGN §12): an output schema as
  task_finished's answer, compiled once, the answer validated at the end (issue #23's
  target: within 10% of **engine** per step).
- **floor**: a minimal hand-written asyncio loop making the same calls (`complete` on the
  same `ScriptedModel`, the no-op tool) and appending the same assistant and tool messages,
  nothing else.
- **peer**: LangGraph's prebuilt ReAct agent with a zero-latency fake chat model
  (`bench/peer_langgraph.py`).

A run of N steps is N model turns: N - 1 calls of a no-op tool, then the finish
(`task_finished` for engine and floor, a plain answer for LangGraph). One sample is one
run's wall time divided by N.

    python -m bench.engine [--quick] [--rounds N] [--no-peer] [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from app.engine.loop import run_react, task_finished_spec
from app.engine.policies import Limits
from app.engine.ports import Reply, TokenUsage, ToolCall, ToolContext, ToolSpec
from app.engine.prompts import BUILTIN
from app.engine.steps import Checkpoint, Finished
from app.llm.scripted import ScriptedModel
from app.output import output_schema
from bench import peer_langgraph
from bench.common import fmt, machine, machine_line, say, summary, table, write_results

TASK = "Call the noop tool until you are done."
SYSTEM = "You are a benchmark agent."
STEPS = (10, 50)
TARGET_US = 30.0
TYPED_TARGET = 1.10
"""Engine time per step with an output schema, at most this × without (issue #23)."""

LIMITS = Limits(
    max_steps=100,
    stop_tool=True,
    repetition_threshold=2,
    max_tool_result_chars=2000,
    progress=True,
    max_context_tokens=10_000_000,
    max_total_tokens=10_000_000,
    max_cost_usd=1_000_000.0,
)
DEFAULT_LIMITS = Limits(max_steps=100)
"""The per-run defaults: stop tool, repetition and truncation on; no progress, no caps."""


class NoopTool:
    """A tool that does nothing: its validation and call cost next to nothing."""

    name = "noop"
    description = "Does nothing."
    parameters: dict[str, Any] = {  # noqa: RUF012
        "type": "object",
        "properties": {"i": {"type": "integer"}},
        "required": ["i"],
    }
    idempotent = True

    def validate(self, arguments: Any) -> str | None:
        return None

    async def call(self, arguments: dict[str, Any], ctx: ToolContext) -> str:
        return "ok"


NOOP = NoopTool()


def script(steps: int, answer: Any = "done") -> list[Reply]:
    """steps - 1 noop calls with distinct arguments (no repetition hint), then the finish."""
    usage = TokenUsage(120, 12)
    replies = [
        Reply(
            content=f"Step {i + 1}: calling the tool.",
            tool_calls=(ToolCall(f"call_{i}", "noop", json.dumps({"i": i})),),
            usage=usage,
            finish_reason="tool_calls",
        )
        for i in range(steps - 1)
    ]
    finish = ToolCall("call_end", "task_finished", json.dumps({"answer": answer}))
    replies.append(Reply(tool_calls=(finish,), usage=usage, finish_reason="tool_calls"))
    return replies


SCRIPTS = {steps: script(steps) for steps in STEPS}
OUTPUT = output_schema(
    {
        "type": "object",
        "properties": {
            "summary": {"type": "string", "minLength": 1},
            "calls": {"type": "integer", "minimum": 0},
            "tags": {"type": "array", "items": {"enum": ["bench", "noop"]}},
        },
        "required": ["summary", "calls"],
        "additionalProperties": False,
    }
)
"""A typical output schema, compiled once (as a run compiles its own once, off the loop)."""
TYPED_SCRIPTS = {
    steps: script(steps, {"summary": "done", "calls": steps - 1, "tags": ["bench"]})
    for steps in STEPS
}


class Sink:
    """What RunManager does with each step, minus storage."""

    __slots__ = ("checkpoint", "events")

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.checkpoint: dict[str, Any] | None = None

    def record(self, step: Any) -> None:
        if isinstance(step, Checkpoint):
            self.checkpoint = step.state
            return
        if isinstance(step, Finished):
            kind = "run.completed"
            data: dict[str, Any] = {"usage": step.usage.to_dict(), "reason": step.reason.value}
        else:
            kind = step.type
            data = step.payload()
        self.events.append(
            {"seq": len(self.events) + 1, "type": kind, "step": step.step, "data": data}
        )


async def engine_run(steps: int, limits: Limits = LIMITS, typed: bool = False) -> int:
    sink = Sink()
    async for step in run_react(
        task=TASK,
        model=ScriptedModel((TYPED_SCRIPTS if typed else SCRIPTS)[steps]),
        tools=[NOOP],
        limits=limits,
        system_prompt=SYSTEM,
        output=OUTPUT if typed else None,
        run_id="run_bench",
        cancel=asyncio.Event(),
    ):
        sink.record(step)
        if typed and isinstance(step, Finished):
            assert step.output is not None, step
    last = sink.events[-1]
    assert last["data"].get("reason") == "finished", last
    assert last["step"] == steps, last
    return steps


async def engine_typed_run(steps: int) -> int:
    return await engine_run(steps, typed=True)


async def engine_defaults_run(steps: int) -> int:
    return await engine_run(steps, DEFAULT_LIMITS)


FLOOR_SPECS = [
    ToolSpec(NOOP.name, NOOP.description, NOOP.parameters),
    task_finished_spec(BUILTIN["en"]),
]
FLOOR_SYSTEM = f"{SYSTEM}\n\n{BUILTIN['en'].stop_tool_prompt}"


async def floor_run(steps: int) -> int:
    """The least a ReAct loop can do: call the model, append, call the tool, append."""
    model = ScriptedModel(SCRIPTS[steps])
    ctx = ToolContext(run_id="run_floor")
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": FLOOR_SYSTEM},
        {"role": "user", "content": TASK},
    ]
    turns = 0
    while True:
        reply = await model.complete(messages, FLOOR_SPECS)
        turns += 1
        calls = reply.tool_calls
        messages.append(
            {
                "role": "assistant",
                "content": reply.content,
                "tool_calls": [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments},
                    }
                    for c in calls
                ],
            }
        )
        if calls[0].name == "task_finished":
            return turns
        for call in calls:
            result = await NOOP.call(json.loads(call.arguments), ctx)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})


def quiet_logs() -> None:
    """Engine log calls are made but filtered (WARNING), as no sink is configured here; the
    service benchmark measures logging at INFO."""
    import logging

    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        cache_logger_on_first_use=False,
    )


Contestant = Callable[[int], Awaitable[int]]


async def measure(rounds: int, with_peer: bool) -> dict[str, dict[int, list[float]]]:
    runs_per_round = {10: 40, 50: 8}
    peer_runs = {10: 3, 50: 1}
    contestants: dict[str, Contestant] = {
        "engine": engine_run,
        "engine, default guards": engine_defaults_run,
        "engine, output_schema": engine_typed_run,
        "floor": floor_run,
    }
    if with_peer:
        graphs = {steps: peer_langgraph.build(steps) for steps in STEPS}

        async def peer_run(steps: int) -> int:
            return await peer_langgraph.run(graphs[steps], steps)

        contestants["langgraph"] = peer_run
    samples: dict[str, dict[int, list[float]]] = {n: {s: [] for s in STEPS} for n in contestants}
    # warm-up: imports, caches, first-call paths
    for name, contestant in contestants.items():
        for steps in STEPS:
            for _ in range(3):
                turns = await contestant(steps)
                assert turns == steps, (name, steps, turns)
    order = [(name, steps) for name in contestants for steps in STEPS]
    for number in range(rounds):
        random.shuffle(order)
        gc.collect()
        for name, steps in order:
            runs = peer_runs[steps] if name == "langgraph" else runs_per_round[steps]
            contestant = contestants[name]
            for _ in range(runs):
                started = time.perf_counter_ns()
                await contestant(steps)
                elapsed = time.perf_counter_ns() - started
                samples[name][steps].append(elapsed / 1000 / steps)
        if number % 10 == 9:
            say(f"  engine bench: round {number + 1}/{rounds}")
    return samples


def report(samples: dict[str, dict[int, list[float]]], info: dict[str, Any], note: str) -> str:
    rows = []
    stats: dict[str, dict[int, dict[str, float]]] = {
        name: {steps: summary(values) for steps, values in by_steps.items()}
        for name, by_steps in samples.items()
    }
    for steps in STEPS:
        floor = stats["floor"][steps]["median"]
        for name in samples:
            s = stats[name][steps]
            rows.append(
                [
                    f"{steps}",
                    name,
                    s["n"],
                    fmt(s["median"]),
                    fmt(s["p90"]),
                    f"{fmt(s['min'])}–{fmt(s['max'])}",
                    f"{s['median'] / floor:.1f}×",
                    fmt(s["median"] - floor),
                ]
            )
    engine = [stats["engine"][steps]["median"] for steps in STEPS]
    verdict = " and ".join(
        f"{fmt(v)} µs/step at {steps} steps" for v, steps in zip(engine, STEPS, strict=True)
    )
    met = all(v <= TARGET_US for v in engine)
    lines = [
        "# Engine overhead per step",
        "",
        machine_line(info),
        "",
        "µs of wall time per step (a run's time / its steps), a zero-latency scripted model "
        "and a no-op tool; all contestants interleaved round by round in one process. "
        "**engine**: every guard on (stop tool, repetition, truncation, progress messages, "
        "a context cap and a token budget, deadline and cancel), each step recorded into an "
        "in-memory sink as RunManager records it (minus storage). **engine, default "
        "guards**: the per-run defaults (no progress messages, no caps). **engine, "
        "output_schema**: every guard on and the run typed (an output schema as "
        "task_finished's answer, the answer validated). **floor**: a "
        "hand-written loop making the same model and tool calls and appending the same "
        "messages. Engine logs are filtered at WARNING (the service benchmark measures INFO). "
        "Ratio and overhead are against the floor's median.",
        "",
        table(
            [
                "steps/run",
                "contestant",
                "runs",
                "median µs/step",
                "p90",
                "min–max",
                "× floor",
                "µs/step over floor",
            ],
            rows,
        ),
        "",
        f"Target: engine median ≤ {TARGET_US:g} µs/step — {'met' if met else 'MISSED'}: {verdict}.",
    ]
    typed = [
        stats["engine, output_schema"][steps]["median"] / stats["engine"][steps]["median"]
        for steps in STEPS
    ]
    typed_met = all(r <= TYPED_TARGET for r in typed)
    lines.append(
        f"With an output schema (issue #23, target ≤ {TYPED_TARGET:g}× the engine's time "
        f"per step) — {'met' if typed_met else 'MISSED'}: "
        + " and ".join(f"{r:.3f}× at {steps} steps" for r, steps in zip(typed, STEPS, strict=True))
        + "."
    )
    if "langgraph" in stats:
        ratios = [
            stats["langgraph"][steps]["median"] / stats["engine"][steps]["median"]
            for steps in STEPS
        ]
        lines.append(
            "LangGraph's prebuilt ReAct agent takes "
            + " and ".join(
                f"{r:.0f}× the engine's time per step at {steps} steps"
                for r, steps in zip(ratios, STEPS, strict=True)
            )
            + "."
        )
    if note:
        lines += ["", note]
    return "\n".join(lines)


async def profile(steps: int = 10, runs: int = 3000) -> str:
    from pyinstrument import Profiler

    for _ in range(50):
        await engine_run(steps)
    profiler = Profiler(interval=0.0001, async_mode="disabled")
    profiler.start()
    for _ in range(runs):
        await engine_run(steps)
    profiler.stop()
    return str(profiler.output_text(unicode=True, color=False, show_all=False))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--no-peer", action="store_true", help="skip LangGraph")
    parser.add_argument("--profile", action="store_true", help="pyinstrument the engine")
    args = parser.parse_args()
    quiet_logs()
    if args.profile:
        text = asyncio.run(profile())
        from bench.common import RESULTS

        (RESULTS / "profile-engine.txt").write_text(text, encoding="utf-8")
        print(text)
        return
    rounds = args.rounds or (10 if args.quick else 40)
    why_not = None if args.no_peer else peer_langgraph.available()
    with_peer = not args.no_peer and why_not is None
    note = f"LangGraph skipped: {why_not}." if why_not else ""
    info = machine()
    say(f"engine bench: {rounds} rounds{' with LangGraph' if with_peer else ''}")
    samples = asyncio.run(measure(rounds, with_peer))
    markdown = report(samples, info, note)
    stats = {
        name: {str(steps): summary(values) for steps, values in by_steps.items()}
        for name, by_steps in samples.items()
    }
    write_results(
        "engine-quick" if args.quick else "engine",
        markdown,
        {"machine": info, "rounds": rounds, "limits": repr(LIMITS), "stats": stats},
    )
    print(markdown)


if __name__ == "__main__":
    main()
