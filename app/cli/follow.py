"""Following a run to its end, and what Ctrl-C does meanwhile.

When `decide` is given (a terminal to answer on), a run that waits for a person's approval
(DESIGN §9; its `run.waiting` event, §19) is asked about: each call it waits on, approve y/N,
then the run goes on.

Ctrl-C asks whether to cancel the run. Yes: POST its cancel, then keep following to show the
end (exit code of that end, normally 7). No (or a second Ctrl-C, or no terminal to answer
on): detach, print how to resume, exit 130; the run goes on.

With a renderer that nests (`finishline events --follow`), a sub-agent's child run (DESIGN
§15) is followed when its `agent.started` arrives, to its end, with a renderer one level
deeper (its own children likewise), then the parent is followed on from where it was;
children started together are shown one after the other. Ctrl-C in a child is about the run
followed at the top.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import Any

from rich.console import Console

from app.cli.client import Api, Event, Reconnect, follow_events
from app.cli.errors import ServiceError
from app.cli.exits import ExitCode, exit_code_for, reason_of
from app.cli.render import Renderer
from app.engine.events import TERMINAL_EVENT_TYPES

Confirm = Callable[[str], bool]
"""Asks the user a yes/no question; True for yes."""

EventHook = Callable[[Event], None]
"""Called after each event is shown (tests raise KeyboardInterrupt from it)."""


def ask_on(console: Console) -> Confirm:
    """A y/N question on `console`; no answer (EOF, another Ctrl-C) counts as no."""

    def confirm(question: str) -> bool:
        try:
            answer = console.input(f"{question} [y/N] ")
        except (EOFError, KeyboardInterrupt):
            console.print()
            return False
        return answer.strip().lower() in ("y", "yes")

    return confirm


def follow_run(
    api: Api,
    run_id: str,
    renderer: Renderer,
    *,
    err: Console,
    confirm: Confirm,
    after: int = 0,
    reconnect: Reconnect | None = None,
    on_event: EventHook | None = None,
    decide: Confirm | None = None,
    depth: int = 0,
) -> ExitCode:
    """Show the run's events after seq `after` through its terminal event; the exit code
    of how it ended, or DETACHED when the user leaves it going. `decide`: ask about the
    calls the run waits on (approve or not). `depth` > 0: a child run followed for its
    parent (a Ctrl-C is the parent's)."""
    last, ended = after, None
    followed: set[str] = set()
    while True:
        waiting: list[dict[str, object]] | None = None
        child: str | None = None
        try:
            with (
                renderer.live(),
                contextlib.closing(
                    follow_events(api, run_id, after=last, reconnect=reconnect)
                ) as events,
            ):
                for event in events:
                    renderer.show(event)
                    last = int(event["seq"])
                    if event.get("type") in TERMINAL_EVENT_TYPES:
                        ended = exit_code_for(reason_of(event))
                    if on_event is not None:
                        on_event(event)
                    if ended is not None:
                        return ended
                    if decide is not None and event.get("type") == "run.waiting":
                        waiting = list(event.get("pending") or [])
                        break  # leave the live display to ask
                    child = _child_of(event, renderer, followed)
                    if child is not None:  # follow it first, then this run on
                        break
            if child is not None:
                nested = renderer.nested()  # type: ignore[attr-defined]
                follow_run(
                    api,
                    child,
                    nested,
                    err=err,
                    confirm=confirm,
                    reconnect=reconnect,
                    decide=decide,
                    depth=depth + 1,
                )
                continue
            if waiting is None:
                raise AssertionError(
                    "follow_events ended without a terminal event"
                )  # pragma: no cover
            assert decide is not None
            unasked = [p for p in waiting if p.get("run_id") not in followed]
            _ask_approvals(api, run_id, unasked, decide, err)
        except KeyboardInterrupt:
            if depth > 0:  # a child followed for its parent: the parent's Ctrl-C
                raise
            if ended is not None:  # too late to cancel: its end is already shown
                return ended
            err.print()
            if not confirm(f"Cancel run {run_id}?"):
                err.print(
                    f"Detached from {run_id} after event {last}; the run goes on. Resume with:\n"
                    f"  finishline events {run_id} --after {last} --follow",
                    markup=False,
                    highlight=False,
                )
                return ExitCode.DETACHED
            _cancel(api, run_id, err)


def _child_of(event: Event, renderer: Renderer, followed: set[str]) -> str | None:
    """The child run to follow now: one an `agent.started` names, not followed yet, when the
    renderer nests."""
    child = event.get("child_run_id")
    if event.get("type") != "agent.started" or not child or not hasattr(renderer, "nested"):
        return None
    if child in followed:  # (a call redone after a takeover names its child again)
        return None
    followed.add(child)
    return str(child)


def _ask_approvals(
    api: Api, run_id: str, pending: list[dict[str, Any]], decide: Confirm, err: Console
) -> None:
    """The run waited on `pending` (its `run.waiting`; a replay may show a wait that is
    over): ask about each call it still waits on and send the decisions (a call of a
    sub-agent's child run is decided through this run)."""
    still = {(p.get("run_id"), p["call_id"]) for p in api.get_run(run_id)["pending_approvals"]}
    decisions = []
    for call in pending:
        if (call.get("run_id"), call["call_id"]) not in still:
            continue
        arguments = json.dumps(call["arguments"], ensure_ascii=False)
        approve = decide(f"Approve {call['tool']} {arguments} (call {call['call_id']})?")
        decision: dict[str, Any] = {"call_id": call["call_id"], "approve": approve}
        if call.get("run_id"):
            decision["run_id"] = call["run_id"]
        if not approve:
            decision["message"] = "rejected at the terminal"
        decisions.append(decision)
    if not decisions:
        return
    try:
        api.decide(run_id, decisions)
    except ServiceError as exc:
        if exc.status != 409:  # 409: decided elsewhere meanwhile; following shows how
            raise
    verdicts = ", ".join(
        f"{d['call_id']} {'approved' if d['approve'] else 'rejected'}" for d in decisions
    )
    err.print(verdicts, markup=False, highlight=False)


def _cancel(api: Api, run_id: str, err: Console) -> None:
    try:
        api.cancel_run(run_id)
    except ServiceError as exc:
        if exc.status != 409:  # 409: it ended meanwhile; following shows how
            raise
    err.print(f"Cancelling {run_id}…", highlight=False)
