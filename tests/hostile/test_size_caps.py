"""Every part of POST /runs has a size cap (a server setting, docs/limits.md): past it, a
422 naming the field and the cap; a body past FINISHLINE_MAX_BODY_BYTES is a 413, refused
before it is read; a huge list of tools is refused without building one of them."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from app.main import create_app
from tests.api.kit import error_of, finish, finishing, run_to_end, scripted, settings
from tests.fakes.service import api_client
from tests.fakes.serving import Served


def http_tool(index: int, **fields: Any) -> dict[str, Any]:
    return {
        "name": f"tool_{index}",
        "description": "A tool.",
        "url": "https://api.example.com/tools/lookup",
        **fields,
    }


CAPPED = {
    "max_system_prompt_chars": 10,
    "max_model_name_chars": 10,
    "max_tools": 2,
    "max_tool_schema_bytes": 100,
    "max_tool_schemas_total_bytes": 150,
    "max_script_replies": 2,
    "max_script_reply_chars": 50,
    "http_tool_allow_hosts": ["api.example.com"],
}


@pytest.mark.parametrize(
    ("body", "field", "cap"),
    [
        (finishing(system_prompt="x" * 11), "system_prompt", 10),
        ({"task": "t", "model": "m" * 11}, "model", 10),
        ({"task": "t", "tools": ["calculator", "current_time", "update_plan"]}, "tools", 2),
        (finishing(tools=["calculator"], http_tools=[http_tool(0), http_tool(1)]), "tools", 2),
        (
            finishing(
                http_tools=[http_tool(0, parameters={"type": "object", "description": "d" * 100})]
            ),
            "http_tools[0].parameters",
            100,
        ),
        (
            finishing(
                http_tools=[
                    http_tool(i, parameters={"type": "object", "description": "d" * 60})
                    for i in range(2)
                ]
            ),
            "http_tools",
            150,
        ),
        (
            finishing(output_schema={"type": "object", "description": "d" * 100}),
            "output_schema",
            100,
        ),
        (
            finishing(
                http_tools=[http_tool(0, parameters={"type": "object", "description": "d" * 60})],
                output_schema={"type": "object", "description": "d" * 60},
            ),
            "output_schema",
            150,
        ),
        (scripted(finish(), finish(), finish()), "model_script", 2),
        (scripted({"content": "c" * 51}), "model_script[0]", 50),
        (scripted(finish("a" * 51)), "model_script[0]", 50),
    ],
    ids=[
        "system-prompt",
        "model",
        "tools",
        "tools-and-http-tools",
        "tool-schema",
        "tool-schemas-together",
        "output-schema",
        "output-schema-with-tool-schemas",
        "script-replies",
        "reply-content",
        "reply-arguments",
    ],
)
async def test_a_field_over_its_cap_is_422_naming_field_and_cap(
    body: dict[str, Any], field: str, cap: int
) -> None:
    async with api_client(settings(**CAPPED)) as client:
        response = await client.post("/runs", json=body)

        error = error_of(response, 422, "validation_error")
        assert error["details"]["field"] == field
        assert error["details"]["cap"] == cap
        assert str(cap) in error["message"]


async def test_values_at_the_caps_are_accepted() -> None:
    async with api_client(settings(**CAPPED)) as client:
        body = scripted(
            finish("a" * 10),
            system_prompt="x" * 10,
            tools=["calculator"],
            http_tools=[http_tool(0)],
        )

        assert (await run_to_end(client, body))["status"] == "completed"


async def test_a_long_answer_is_stored_cut_at_the_answer_cap() -> None:
    async with api_client(settings(max_answer_chars=1000)) as client:
        run = await run_to_end(client, finishing("a" * 5000))

        answer = run["result"]["answer"]
        assert answer.startswith("a" * 1000)
        assert len(answer) < 1100
        assert "[Answer cut at 1,000 characters of 5,000.]" in answer


# -- the whole body -----------------------------------------------------------------------


async def test_a_body_over_the_cap_with_its_length_declared_is_413() -> None:
    async with api_client(settings(max_body_bytes=2048)) as client:
        response = await client.post("/runs", json=finishing(system_prompt="x" * 4000))

        error = error_of(response, 413, "payload_too_large")
        assert error["details"]["cap"] == 2048


class _BytesRead:
    """ASGI wrapper: how many body bytes the app pulled from the server before it answered
    (the rest of a refused body is read and dropped after: app.api.bodylimit)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.count = 0
        self.answered = False

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        async def counted() -> Any:
            message = await receive()
            if not self.answered:
                self.count += len(message.get("body", b""))
            return message

        async def sent(message: Any) -> None:
            self.answered = self.answered or message["type"] == "http.response.start"
            await send(message)

        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self.app(scope, counted, sent)


async def test_a_streamed_body_over_the_cap_is_refused_before_it_is_all_read() -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"task": "'
        for _ in range(160):  # 10 MB in all, if it were read to the end
            yield b"x" * 65536
        yield b'"}'

    app = _BytesRead(create_app(settings(max_body_bytes=1_048_576)))
    async with (
        Served(app, lifespan="on") as server,
        httpx.AsyncClient(base_url=server.url(), timeout=30) as client,
    ):
        response = await client.post(
            "/runs", content=chunks(), headers={"Content-Type": "application/json"}
        )

        error = error_of(response, 413, "payload_too_large")
        assert error["details"]["cap"] == 1_048_576
        assert app.count <= 1_048_576 + 65536 * 2
        assert (await client.get("/healthz")).status_code == 200


async def test_ten_thousand_http_tools_are_refused_fast_without_stalling_the_server() -> None:
    body = finishing(http_tools=[http_tool(i) for i in range(10_000)])
    raw = json.dumps(body).encode()
    roomy = settings(max_body_bytes=len(raw) + 1, http_tool_allow_hosts=["api.example.com"])
    async with api_client(roomy) as client:
        started = time.perf_counter()
        response = await client.post(
            "/runs", content=raw, headers={"Content-Type": "application/json"}
        )
        elapsed = time.perf_counter() - started

        error = error_of(response, 422, "validation_error")
        assert "http_tools: has 10,000 items; at most 256" in error["message"]
        # the unfixed service took 6 s here, validating and building every tool
        assert elapsed < 1, elapsed


async def test_the_default_body_cap_refuses_ten_thousand_http_tools_with_413() -> None:
    async with api_client(settings()) as client:
        body = finishing(http_tools=[http_tool(i, description="d" * 100) for i in range(10_000)])
        assert len(json.dumps(body)) > 1_048_576

        error_of(await client.post("/runs", json=body), 413, "payload_too_large")
