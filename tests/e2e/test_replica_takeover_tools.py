"""Takeover with tool calls in flight (DESIGN §8): two replicas on one redis-server; the one
executing a run is killed (SIGKILL) while the run's HTTP tools are being called. The other
takes the run over and redoes that step from its calls: the idempotent tool is called again,
the non-idempotent one is not (the model is told its outcome is unknown), and the run ends
normally."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from app.engine.prompts import EN
from tests.e2e.kit import assert_one_terminal_at_the_end, follow, http_tool, start_run
from tests.e2e.test_replicas import executor, replicas
from tests.fakes.llm_server import FakeLLMServer, FakeReply, FakeToolCall
from tests.fakes.serving import Served

pytestmark = pytest.mark.e2e


class Tools:
    """POST /{name}: the first call of each name hangs until its caller goes away (it is in
    flight when its replica dies); later calls answer `{name} done`."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.calls: Counter[str] = Counter()
        self.arrived = {name: anyio.Event() for name in names}
        self.served = Served(
            Starlette(routes=[Route("/{name}", self._call, methods=["POST"])]),
            timeout_graceful_shutdown=1,
        )

    async def _call(self, request: Request) -> Response:
        name = request.path_params["name"]
        await request.body()
        self.calls[name] += 1
        if self.calls[name] > 1:
            return PlainTextResponse(f"{name} done")
        self.arrived[name].set()
        while (await request.receive())["type"] != "http.disconnect":
            pass
        return PlainTextResponse("too late")


async def test_a_step_in_flight_at_a_takeover_reruns_only_its_idempotent_calls(
    tmp_path: Path, shared_url: str
) -> None:
    tools = Tools(("lookup", "send"))
    replies = [
        FakeReply(
            tool_calls=[
                FakeToolCall("lookup", {"key": "a"}, id="call_lookup"),
                FakeToolCall("send", {"key": "b"}, id="call_send"),
            ]
        ),
        FakeReply.finish("sent, maybe"),
    ]
    env = {"FINISHLINE_LEASE_S": "2", "FINISHLINE_HTTP_TOOL_ALLOW_HOSTS": "127.0.0.1"}
    async with (
        tools.served,
        FakeLLMServer(replies) as llm,
        replicas(tmp_path, shared_url, FINISHLINE_LLM_BASE_URL=llm.base_url, **env) as started,
    ):
        body: dict[str, Any] = {
            "task": "look a up, then send b",
            "http_tools": [
                http_tool("lookup", tools.served.url("/lookup")),
                http_tool("send", tools.served.url("/send"), idempotent=False),
            ],
            "settings": {"tool_timeout_s": 60},
        }
        run_id = await start_run(started[0][1], body)
        with anyio.fail_after(10):
            for arrived in tools.arrived.values():
                await arrived.wait()  # both calls are in flight
        apps = [app for app, _ in started]
        index = await executor(apps, run_id)
        apps[index].kill()
        survivor = started[1 - index][1]
        streamed = await follow(survivor, run_id, timeout_s=30)

        assert_one_terminal_at_the_end(streamed, "run.completed")
        assert streamed[-1].data["result"]["answer"] == "sent, maybe"
        assert tools.calls == {"lookup": 2, "send": 1}
        types = [e.event for e in streamed]
        recovered = types.index("run.recovered")
        redone = [e for e in streamed[recovered:] if e.event == "observation"]
        by_call = {e.data["call_id"]: e.data for e in redone}
        assert (by_call["call_lookup"]["content"], by_call["call_lookup"]["is_error"]) == (
            "lookup done",
            False,
        )
        assert by_call["call_send"]["is_error"] is True
        assert by_call["call_send"]["content"] == EN.outcome_unknown.format(tool="send")
        started_steps = [e.data["step"] for e in streamed[recovered:] if e.event == "step.started"]
        assert started_steps[:1] == [1]  # the step in flight, redone under its own number
        # what the model was sent after the takeover: both results, the unknown one an error
        sent = llm.requests[-1]["messages"]
        results = {m["tool_call_id"]: m["content"] for m in sent if m["role"] == "tool"}
        assert results == {
            "call_lookup": "lookup done",
            "call_send": EN.outcome_unknown.format(tool="send"),
        }
