"""The regression set (DESIGN §20): every recorded run in tests/replays/*.json (made by
`python -m tests.replays.record` against the fake LLM) replays identically on today's
engine. A change to the engine that would make one of them go another way fails here, with
the first event where it does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.engine.events import EventType
from app.runs.records import RunRecord
from tests.api.kit import app_with_state, settings

RECORDED = {
    path.stem: json.loads(path.read_text(encoding="utf-8"))
    for path in sorted(Path(__file__).resolve().parent.glob("*.json"))
}
NOWHERE = "http://127.0.0.1:9/v1"  # no model is called: a replay never reaches it


def test_the_set_covers_every_ending_it_was_recorded_for() -> None:
    reasons = {kept["record"]["result"]["reason"] for kept in RECORDED.values()}
    assert reasons >= {"finished", "answered", "max_steps", "nudge_limit"}
    assert len(RECORDED) >= 7


@pytest.mark.parametrize("name", sorted(RECORDED))
async def test_a_recorded_run_replays_identically(name: str) -> None:
    kept = RECORDED[name]
    record = RunRecord.model_validate(kept["record"])
    async with app_with_state(settings(llm_base_url=NOWHERE, llm_model="fake-model")) as (
        client,
        state,
    ):
        store = state["manager"].store
        await store.create(record)
        for event in kept["events"]:
            await store.append(record.id, EventType(event["type"]), event["step"], event["data"])
        response = await client.post(f"/runs/{record.id}/replay")
        assert response.status_code == 200, response.text
        view = response.json()
        assert view["first_divergence"] is None, view
        assert view["identical"] is True
        assert view["events"] >= 4
