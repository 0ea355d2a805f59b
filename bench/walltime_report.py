"""The tables of `bench/walltime.py`, and its targets (issue #42), for it and `bench/summary.py`."""

from __future__ import annotations

from typing import Any

from bench.common import fmt, machine_line, table

FIRST_TARGET = 2.0
"""First event p50 at 100 clients ÷ the floor's, at most."""
RUN_TARGET = 1.15
"""Run p50 at 10 clients (50 ms model) ÷ the floor's, at most."""
RATE_TARGET = 0.9
"""Runs/s at 10 clients ÷ the floor's, at least."""
FLOOR = "floor"
FINISHLINE = "finishline"


def ratios(result: dict[str, Any], side: str = FINISHLINE) -> dict[str, dict[str, float]]:
    """Per condition: first event p50 and p99, run p50 and p99, runs/s, each ÷ the floor's."""
    out: dict[str, dict[str, float]] = {}
    cells = result["cells"]
    for cell, figure, keys in (
        ("first@100", "first_ms", ("p50", "p99")),
        ("run@10", "run_ms", ("p50", "p99")),
    ):
        for condition, sides in cells.get(cell, {}).items():
            mine, floor = sides[side][figure], sides[FLOOR][figure]
            for k in keys:
                out.setdefault(condition, {})[f"{figure[:-3]}_{k}"] = mine[k] / floor[k]
            if cell == "run@10":
                rate = sides[side]["runs_per_s"] / sides[FLOOR]["runs_per_s"]
                out[condition]["runs_per_s"] = rate
    return out


def verdicts(result: dict[str, Any]) -> list[tuple[str, str, str, bool]]:
    """(figure, now, target, met) of issue #42's targets."""
    r = ratios(result)
    rows = []
    for condition, got in r.items():
        if "first_p50" in got:
            rows.append(
                (
                    f"first event p50 ÷ the floor's at 100 clients, 0 ms model ({condition})",
                    f"{got['first_p50']:.2f}x (p99 {got['first_p99']:.2f}x)",
                    f"≤ {FIRST_TARGET:g}x",
                    got["first_p50"] <= FIRST_TARGET,
                )
            )
        if "run_p50" in got:
            rows.append(
                (
                    f"run p50 ÷ the floor's at 10 clients, 50 ms model ({condition})",
                    f"{got['run_p50']:.2f}x (p99 {got['run_p99']:.2f}x)",
                    f"≤ {RUN_TARGET:g}x",
                    got["run_p50"] <= RUN_TARGET,
                )
            )
            rows.append(
                (
                    f"runs/s ÷ the floor's at 10 clients, 50 ms model ({condition})",
                    f"{got['runs_per_s']:.2f}x",
                    f"≥ {RATE_TARGET:g}x",
                    got["runs_per_s"] >= RATE_TARGET,
                )
            )
    return rows


PROBE_ROWS = (
    ("create_ms", "POST: `store.create` (run + first event, one commit)"),
    ("start_ms", "create committed → the run's first model call"),
    ("model_ms", "a model call (the fake LLM adds the latency)"),
    ("step_gap_ms", "step: model reply → next model call"),
    ("step_store_ms", "  of it awaiting the store (commits, fsync, queue)"),
    ("step_other_ms", "  of it engine work and loop turns"),
    ("settle_ms", "the end: the run's last writes and its terminal commit"),
    ("write_queue_ms", "a write's wait behind other writes"),
    ("batch_ms", "a transaction, all of it"),
    ("fsync_ms", "  of it the COMMIT (fsync)"),
    ("batch_writes", "writes per transaction"),
    ("handoff_ms", "commit → its outcome on the event loop"),
    ("loop_lag_ms", "event-loop lag (a 5 ms sleep's overshoot)"),
    ("publish_us", "fan-out: publishing an event, µs"),
)


def probe_table(result: dict[str, Any]) -> str:
    columns = [
        (cell, condition, name)
        for cell, conditions in result["cells"].items()
        for condition, sides in conditions.items()
        for name in sides
    ]
    headers = ["where (p50 / p99 ms)"] + [
        f"{cell.split('@')[1]} clients, {condition}" + ("" if name == FINISHLINE else f", {name}")
        for cell, condition, name in columns
    ]
    rows: list[list[str]] = []

    def fig(cell: str, condition: str, name: str) -> dict[str, Any]:
        figures: dict[str, Any] = result["cells"][cell][condition][name]
        return figures

    rows.append(
        ["first event (client)"]
        + [
            f"{fmt(f['first_ms']['p50'])} / {fmt(f['first_ms']['p99'])}"
            for f in (fig(*c) for c in columns)
        ]
    )
    rows.append(
        ["run end to end (client)"]
        + [
            f"{fmt(f['run_ms']['p50'])} / {fmt(f['run_ms']['p99'])}"
            for f in (fig(*c) for c in columns)
        ]
    )
    rows.append(
        ["commits per run"] + [fmt(fig(*c)["probe"]["commits_per_run"], 1) for c in columns]
    )
    for key, label in PROBE_ROWS:
        cells = []
        for c in columns:
            got = fig(*c)["probe"].get(key)
            cells.append(f"{fmt(got['p50'], 2)} / {fmt(got['p99'], 2)}" if got else "–")
        rows.append([label, *cells])
    rows.append(["load average (1 min)"] + [str(fig(*c)["load"]) for c in columns])
    return table(headers, rows)


def report(result: dict[str, Any], info: dict[str, Any], probe: bool) -> str:
    head = [
        "# Wall time (bench/walltime.py)" + (": where a run waits" if probe else ""),
        machine_line(info),
    ]
    if probe:
        return "\n\n".join([*head, probe_table(result)])
    rows = []
    for cell, conditions in result["cells"].items():
        for condition, sides in conditions.items():
            floor = sides[FLOOR]
            for name, s in sides.items():
                rows.append(
                    [
                        cell,
                        condition,
                        name,
                        f"{s['runs']:,}",
                        f"{fmt(s['first_ms']['p50'])} / {fmt(s['first_ms']['p99'])}",
                        f"{s['first_ms']['p50'] / floor['first_ms']['p50']:.2f}×",
                        f"{fmt(s['run_ms']['p50'])} / {fmt(s['run_ms']['p99'])}",
                        f"{s['run_ms']['p50'] / floor['run_ms']['p50']:.2f}×",
                        f"{s['runs_per_s']:.1f} ({s['runs_per_s'] / floor['runs_per_s']:.2f}×)",
                        fmt(s["cpu_ms_per_run"], 2),
                        str(s["load"]),
                    ]
                )
    headers = [
        "cell",
        "condition",
        "server",
        "runs",
        "first event p50 / p99 ms",
        "× floor",
        "run p50 / p99 ms",
        "× floor",
        "runs/s (× floor)",
        "server CPU ms/run",
        "load avg per block",
    ]
    lines = [
        f"- {figure}: {'met' if met else '**missed**'} ({now}; target {target})"
        for figure, now, target, met in verdicts(result)
    ]
    return "\n\n".join(
        [
            *head,
            "first@100: 100 clients, 0 ms model; run@10: 10 clients, 50 ms model; 5-step runs; "
            "finishline (SQLite, INFO logs) and the floor take turns block by block, "
            f"{result['rounds']} rounds; *neighbours*: a CPU and a disk neighbour started by "
            "the benchmark for the block.",
            table(headers, rows),
            "\n".join(lines),
        ]
    )
