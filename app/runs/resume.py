"""Resuming a run another process executed until it stopped (DESIGN §8, takeover): what the
event log says of the step that was in flight. The engine redoes that step's calls
(`app.engine.acting`); a call whose observation was logged before the interruption is given
back its logged result instead of running again. Any store: this reads only the event log."""

from __future__ import annotations

from app.engine.events import EventType
from app.engine.state import RunState
from app.engine.toolcalls import CallResult
from app.runs.follow.log import stored_pages
from app.runs.store import RunStore


async def recorded_results(store: RunStore, run_id: str, state: RunState) -> dict[str, CallResult]:
    """The logged results of the calls `state` has in flight (its `acting` step), by call
    id; empty when no step was in flight. An observation cut by the event content cap gives
    the text the model saw when the engine truncated it, else the capped content."""
    if not state.acting or not state.messages:
        return {}
    in_flight = {c["id"]: c["function"]["name"] for c in state.messages[-1].get("tool_calls") or ()}
    found: dict[str, CallResult] = {}
    async for page in stored_pages(store, run_id):
        for event in page:
            data = event.data
            if event.type != EventType.OBSERVATION or event.step != state.step:
                continue
            call_id = str(data.get("call_id"))
            if call_id not in in_flight or data.get("tool") != in_flight[call_id]:
                continue
            text = data.get("content", "")
            if data.get("content_capped") and data.get("model_content"):
                text = data["model_content"]
            found[call_id] = CallResult(
                text,
                bool(data.get("is_error")),
                int(data.get("duration_ms", 0)),
                timed_out=bool(data.get("timed_out")),
            )
    return found
