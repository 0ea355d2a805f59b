"""A run's record is typed (`RunRequest`, `Limits`) and stored as the same JSON as when both
were plain objects: records written before load, and write back unchanged."""

from __future__ import annotations

import json
from dataclasses import asdict

from app.engine.policies import Limits
from app.runs.records import RunRecord
from app.runs.spec import RunRequest
from app.runs.view import to_view

# a record as the service stored it when `request` and `settings` were dicts
STORED = {
    "id": "run_01JD0000000000000000000000",
    "owner": "k_abc",
    "status": "completed",
    "created_at": "2026-11-30T10:00:00Z",
    "started_at": "2026-11-30T10:00:01Z",
    "ended_at": "2026-11-30T10:00:02Z",
    "request": {
        "task": "look it up",
        "tools": ["calculator"],
        "http_tools": [
            {
                "name": "lookup",
                "description": "Look up.",
                "parameters": {"type": "object", "properties": {}},
                "url": "https://api.example.com/x",
                "method": "POST",
                "headers": {"Authorization": "Bearer secret"},
                "idempotent": True,
            }
        ],
        "settings": {"max_steps": 4},
        "metadata": {"who": None, "n": [1, 2]},
    },
    "model": "scripted",
    "settings": {**asdict(Limits()), "max_steps": 4},
    "result": {"answer": "42", "reason": "finished", "degraded": False},
    "error": None,
    "usage": {
        "steps": 1,
        "llm_calls": 1,
        "tool_calls": 0,
        "prompt_tokens": 10,
        "completion_tokens": 2,
        "total_tokens": 12,
    },
    "webhook": None,
    "idempotency_key": None,
    "request_hash": "ab" * 32,
}


def test_a_stored_record_loads_typed_and_writes_back_the_same_json() -> None:
    record = RunRecord.model_validate_json(json.dumps(STORED))
    assert isinstance(record.request, RunRequest)
    assert record.request.settings.max_steps == 4
    assert record.settings == Limits(max_steps=4)
    written = json.loads(record.model_dump_json())
    # fields added to the request since (MCP servers, client tools) are written with their
    # defaults
    assert written["request"] == {**STORED["request"], "mcp_servers": [], "client_tools": []}
    assert written["settings"] == STORED["settings"]
    # fields added since (follow-ups, traces, approvals, sub-agents, forks) are written as null
    added_since = {"previous_run_id", "inherited_system_prompt", "trace_id", "approval"}
    added_since |= {"parent_run_id", "parent_call_id", "tree", "thread_id", "schedule_id"}
    added_since |= {"forked_from"}
    assert written.keys() == STORED.keys() | added_since
    assert [written[key] for key in added_since] == [None] * len(added_since)
    assert written == RunRecord.model_validate(written).model_dump(mode="json")


def test_the_view_reads_the_typed_record() -> None:
    view = to_view(RunRecord.model_validate_json(json.dumps(STORED)))
    assert view.task == "look it up"
    assert view.tools == ["calculator"]
    assert view.settings == STORED["settings"]
    assert view.metadata == {"who": None, "n": [1, 2]}
    assert view.http_tools[0]["headers"] == {"Authorization": "***"}
    assert "timeout_s" not in view.http_tools[0]


def test_a_record_stored_before_a_setting_existed_loads_it_at_its_default() -> None:
    older = {**STORED, "settings": {"max_steps": 4}}
    assert RunRecord.model_validate_json(json.dumps(older)).settings == Limits(max_steps=4)


def test_a_record_stored_before_costs_were_kept_loads_its_cost_as_unknown() -> None:
    record = RunRecord.model_validate_json(json.dumps(STORED))
    assert record.usage.cost_usd is None  # its LLM call's cost was never recorded: not 0
    assert json.loads(record.model_dump_json())["usage"]["cost_usd"] is None
    queued = {**STORED, "usage": {"steps": 0, "llm_calls": 0}}
    assert RunRecord.model_validate_json(json.dumps(queued)).usage.cost_usd == 0.0  # none made
    priced = {**STORED, "usage": {**STORED["usage"], "cost_usd": 0.25}}
    assert RunRecord.model_validate_json(json.dumps(priced)).usage.cost_usd == 0.25
