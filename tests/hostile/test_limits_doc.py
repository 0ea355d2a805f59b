"""docs/limits.md lists every cap a client can meet, with its setting."""

from __future__ import annotations

from pathlib import Path

from app.settings import CAPS

ROOT = Path(__file__).resolve().parent.parent.parent
CAP_SETTINGS = [
    "max_body_bytes",
    "max_body_json_values",
    "max_concurrent_runs",
    "max_queued_runs",
    "max_task_chars",
    "max_system_prompt_chars",
    "max_model_name_chars",
    "max_tools",
    "max_tool_schema_bytes",
    "max_tool_schemas_total_bytes",
    "max_metadata_bytes",
    "max_script_replies",
    "max_script_reply_chars",
    "max_answer_chars",
    "max_event_content_chars",
    "max_wait_s",
    "http_tool_max_bytes",
    "http_tool_connections_per_run",
    "http_tool_connections_per_key",
    "mcp_max_result_bytes",
    "header_timeout_s",
    "body_timeout_s",
    "token_secret",
]


def test_every_cap_is_in_the_limits_table() -> None:
    text = (ROOT / "docs" / "limits.md").read_text(encoding="utf-8")

    assert [s for s in CAP_SETTINGS if f"FINISHLINE_{s.upper()}" not in text] == []
    assert "FINISHLINE_<SETTING>_LIMIT" in text
    assert set(CAPS.values()) >= {"tool_timeout_limit_s"}
    assert "FINISHLINE_TOOL_TIMEOUT_LIMIT_S" in text
