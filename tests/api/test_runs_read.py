"""GET /runs/{id}: the run's status, result, error, usage, timestamps, settings, metadata."""

from __future__ import annotations

from datetime import datetime

from tests.api.kit import (
    cancel,
    create,
    error_of,
    finish,
    finishing,
    hanging,
    run_to_end,
    scripted,
    settings,
    wait_ended,
    wait_for_status,
)
from tests.fakes.service import api_client

USAGE_FIELDS = {
    "steps",
    "llm_calls",
    "tool_calls",
    "prompt_tokens",
    "completion_tokens",
    "total_tokens",
    "cost_usd",
    "children",  # the part its sub-agents' child runs spent (DESIGN §15); null: none
}


async def test_finished_run_is_completed_with_answer_usage_timestamps_settings_metadata() -> None:
    async with api_client(settings()) as client:
        body = scripted(
            {
                "content": "Let me compute.",
                "tool_calls": [{"name": "calculator", "arguments": {"expression": "6*7"}}],
                "usage": {"prompt_tokens": 100, "completion_tokens": 10},
            },
            {**finish("42"), "usage": {"prompt_tokens": 120, "completion_tokens": 5}},
            task="What is 6*7?",
            system_prompt="Be brief.",
            tools=["calculator"],
            settings={"max_steps": 4, "progress": True},
            metadata={"ticket": "T-1", "tags": ["a", "b"]},
        )
        created = await create(client, body)
        await wait_ended(client, created["id"])
        await run_to_end(client, finishing())  # another run, newer: the read is by id

        response = await client.get(f"/runs/{created['id']}")

        assert response.status_code == 200
        run = response.json()
        assert run["id"] == created["id"]
        assert run["status"] == "completed"
        assert run["result"] == {"answer": "42", "reason": "finished", "degraded": False}
        assert run["error"] is None
        assert run["usage"] == {
            "steps": 2,
            "llm_calls": 2,
            "tool_calls": 1,
            "prompt_tokens": 220,
            "completion_tokens": 15,
            "total_tokens": 235,
            "cost_usd": 0.0,  # the scripted model costs nothing unless priced
            "children": None,  # no sub-agent run (DESIGN §15)
        }
        created_at, started_at, ended_at = (
            datetime.fromisoformat(run[key]) for key in ("created_at", "started_at", "ended_at")
        )
        assert created_at <= started_at <= ended_at
        assert created_at.utcoffset() is not None
        assert (run["task"], run["system_prompt"]) == ("What is 6*7?", "Be brief.")
        assert run["tools"] == ["calculator"]
        assert run["metadata"] == {"ticket": "T-1", "tags": ["a", "b"]}
        # every per-run setting, resolved: the request's values, then the server's defaults
        assert run["settings"]["max_steps"] == 4
        assert run["settings"]["progress"] is True
        assert run["settings"]["max_nudges"] == 3
        assert run["settings"]["stop_tool"] is True
        assert set(run["settings"]) == set((await client.get("/settings")).json()["settings"])
        assert run["links"]["self"] == f"/runs/{run['id']}"


async def test_plain_answer_with_stop_tool_off_is_completed_with_reason_answered() -> None:
    async with api_client(settings()) as client:
        body = scripted({"content": "Paris."}, settings={"stop_tool": False})

        run = await run_to_end(client, body)

        assert run["status"] == "completed"
        assert run["result"] == {"answer": "Paris.", "reason": "answered", "degraded": False}


async def test_max_steps_run_is_incomplete_with_a_degraded_best_answer() -> None:
    async with api_client(settings()) as client:
        body = scripted(
            {"tool_calls": [{"name": "calculator", "arguments": {"expression": "1+1"}}]},
            {"content": "My best answer: 2."},
            tools=["calculator"],
            settings={"max_steps": 1},
        )

        run = await run_to_end(client, body)

        assert run["status"] == "incomplete"
        assert run["result"] == {
            "answer": "My best answer: 2.",
            "reason": "max_steps",
            "degraded": True,
        }
        assert run["usage"]["steps"] == 1
        assert run["usage"]["llm_calls"] == 2  # the degraded final call counts here only


async def test_max_steps_run_without_final_answer_has_no_answer() -> None:
    async with api_client(settings()) as client:
        body = scripted(
            {"tool_calls": [{"name": "calculator", "arguments": {"expression": "1+1"}}]},
            tools=["calculator"],
            settings={"max_steps": 1, "final_answer_on_limit": False},
        )

        run = await run_to_end(client, body)

        assert run["status"] == "incomplete"
        assert run["result"] == {"answer": None, "reason": "max_steps", "degraded": False}


async def test_model_that_never_calls_finish_is_incomplete_with_nudge_limit() -> None:
    async with api_client(settings()) as client:
        body = scripted(
            {"content": "I think it is 4."},
            {"content": "Yes, 4."},
            settings={"max_nudges": 1, "max_steps": 5},
        )

        run = await run_to_end(client, body)

        assert run["status"] == "incomplete"
        assert run["result"] == {"answer": "Yes, 4.", "reason": "nudge_limit", "degraded": True}


async def test_run_outlasting_its_script_is_failed_with_script_exhausted() -> None:
    async with api_client(settings()) as client:
        body = scripted({"content": "Still thinking."}, settings={"max_steps": 5})

        run = await run_to_end(client, body)

        assert run["status"] == "failed"
        assert run["error"]["type"] == "script_exhausted"
        assert "model script has 1 replies" in run["error"]["message"]
        assert run["result"]["reason"] == "error"
        assert run["usage"]["llm_calls"] == 1


async def test_cancelled_run_reads_cancelled_with_reason_cancelled() -> None:
    async with api_client(settings()) as client:
        created = await create(client, hanging())
        await wait_for_status(client, created["id"], "running")
        await cancel(client, created["id"])

        run = (await client.get(f"/runs/{created['id']}")).json()

        assert run["status"] == "cancelled"
        assert run["result"] == {"answer": None, "reason": "cancelled", "degraded": False}
        assert run["ended_at"] is not None


async def test_running_run_reads_running_with_no_result_yet() -> None:
    async with api_client(settings()) as client:
        created = await create(client, hanging())

        run = await wait_for_status(client, created["id"], "running")

        assert run["result"] is None
        assert run["started_at"] is not None
        assert run["ended_at"] is None
        await cancel(client, created["id"])


async def test_http_tool_header_values_are_masked() -> None:
    async with api_client(settings(http_tool_allow_hosts=["tools.example.com"])) as client:
        secret = "Bearer s3cr3t-token"
        tool = {
            "name": "lookup_order",
            "description": "Look up an order.",
            "url": "https://tools.example.com/orders",
            "headers": {"Authorization": secret, "X-Tenant": "acme"},
        }
        created = await create(client, finishing(http_tools=[tool]))
        assert created["http_tools"][0]["headers"] == {"Authorization": "***", "X-Tenant": "***"}
        await run_to_end(client, finishing())

        response = await client.get(f"/runs/{created['id']}")

        assert response.json()["http_tools"][0]["headers"] == {
            "Authorization": "***",
            "X-Tenant": "***",
        }
        assert response.json()["http_tools"][0]["url"] == "https://tools.example.com/orders"
        events = await client.get(
            f"/runs/{created['id']}/events", headers={"Accept": "application/json"}
        )
        listed = await client.get("/runs")
        for text in (response.text, events.text, listed.text):
            assert "s3cr3t" not in text


async def test_unknown_run_is_404() -> None:
    async with api_client(settings()) as client:
        response = await client.get("/runs/run_00000000000000000000000000")

        error = error_of(response, 404, "not_found")
        assert error["details"] == {"run_id": "run_00000000000000000000000000"}


async def test_usage_has_every_counter() -> None:
    async with api_client(settings()) as client:
        run = await run_to_end(client, finishing())
        assert set(run["usage"]) == USAGE_FIELDS
