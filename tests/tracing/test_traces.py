"""OpenTelemetry traces of runs, exported over OTLP/HTTP to a real receiver on a loopback
socket and decoded with opentelemetry-proto: the GenAI span tree, its attributes, the caller's
`traceparent` as the parent, the trace id on the run and on outbound requests; and nothing at
all when tracing is off."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

import anyio
import pytest

from tests.api.kit import create, json_events, settings, wait_ended
from tests.e2e.kit import http_tool
from tests.fakes.llm_replies import FakeReply, FakeToolCall, FakeUsage
from tests.fakes.llm_server import FakeLLMServer
from tests.fakes.otlp import OtlpReceiver, ReceivedSpan
from tests.fakes.service import api_client

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
ERROR = 2  # StatusCode.ERROR in OTLP


@pytest.fixture
def otel_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No OTEL_* variable of the machine's; the batch processor exports at once."""
    for name in list(os.environ):
        if name.startswith("OTEL_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "10")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "finishline-test")
    return monkeypatch


def by_name(spans: list[ReceivedSpan], name: str) -> list[ReceivedSpan]:
    return [s for s in spans if s.name == name]


def agent_replies() -> list[FakeReply]:
    """A 503 (retried), an HTTP tool call, a failing calculator call, then the answer."""
    return [
        FakeReply.http_error(503, "overloaded"),
        FakeReply.call("lookup_order", {"key": "42"}),
        FakeReply(tool_calls=(FakeToolCall("calculator", {"expression": "1/0"}, id="call_c"),)),
        FakeReply.finish("order 42 ships today"),
    ]


async def test_a_run_is_one_trace_under_the_callers_span_with_genai_spans(
    otel_env: pytest.MonkeyPatch,
) -> None:
    async with OtlpReceiver() as otlp, FakeLLMServer(agent_replies()) as llm:
        otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.endpoint)
        app_settings = settings(
            llm_base_url=llm.base_url, llm_model="fake-model", http_tool_allow_hosts=["127.0.0.1"]
        )
        body = {
            "task": "when does order 42 ship?",
            "tools": ["calculator"],
            "http_tools": [http_tool("lookup_order", otlp.url("/tool"))],
            "webhook": otlp.url("/hook"),
        }
        async with api_client(app_settings) as client:
            created = await create(client, body, headers={"traceparent": TRACEPARENT})
            run = await wait_ended(client, created["id"])
            events = (await json_events(client, run["id"]))["events"]
            hook = await otlp.wait_for_call("/hook")
            spans = await otlp.wait_for_span("invoke_agent")

    assert created["trace_id"] == run["trace_id"] == CALLER_TRACE
    started = next(e for e in events if e["type"] == "run.started")
    assert started["trace_id"] == CALLER_TRACE

    (agent,) = by_name(spans, "invoke_agent")
    assert {s.trace_id for s in spans} == {CALLER_TRACE}
    assert agent.parent_span_id == CALLER_SPAN
    assert agent.resource["service.name"] == "finishline-test"
    assert agent.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert agent.attributes["gen_ai.request.model"] == "fake-model"
    assert agent.attributes["finishline.run.id"] == run["id"]
    assert agent.attributes["finishline.run.status"] == "completed"
    assert agent.attributes["finishline.run.reason"] == "finished"
    assert agent.attributes["finishline.run.degraded"] is False
    assert agent.attributes["gen_ai.usage.input_tokens"] == run["usage"]["prompt_tokens"]
    assert agent.attributes["gen_ai.usage.output_tokens"] == run["usage"]["completion_tokens"]
    assert "finishline.run.cost_usd" not in agent.attributes  # fake-model has no price
    assert agent.status_code != ERROR

    chats = by_name(spans, "chat fake-model")
    assert len(chats) == 3
    for chat in chats:
        assert chat.parent_span_id == agent.span_id
        assert chat.kind == 3  # SPAN_KIND_CLIENT
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.request.model"] == "fake-model"
        assert chat.attributes["gen_ai.usage.input_tokens"] > 0
        assert chat.attributes["gen_ai.usage.output_tokens"] > 0
        assert agent.start_ns <= chat.start_ns <= chat.end_ns <= agent.end_ns
    chats.sort(key=lambda s: s.start_ns)
    assert [c.attributes["gen_ai.response.finish_reasons"] for c in chats] == [["tool_calls"]] * 3
    retried = chats[0]
    assert retried.attributes["finishline.llm.attempts"] == 2
    ((event, attributes),) = retried.events
    assert event == "gen_ai.retry"
    assert attributes["finishline.llm.attempt"] == 1
    assert "503" in attributes["finishline.llm.error"]
    assert (
        sum(c.attributes["gen_ai.usage.input_tokens"] for c in chats)
        == (run["usage"]["prompt_tokens"])
    )

    (lookup,) = by_name(spans, "execute_tool lookup_order")
    (calc,) = by_name(spans, "execute_tool calculator")
    for tool in (lookup, calc):
        assert tool.parent_span_id == agent.span_id
        assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
    assert lookup.attributes["gen_ai.tool.name"] == "lookup_order"
    assert lookup.attributes["gen_ai.tool.call.id"]
    assert lookup.status_code != ERROR
    assert calc.attributes["gen_ai.tool.name"] == "calculator"
    assert calc.attributes["gen_ai.tool.call.id"] == "call_c"
    assert calc.status_code == ERROR
    assert calc.attributes["error.type"] == "tool_error"
    assert chats[0].end_ns <= lookup.start_ns <= lookup.end_ns <= chats[1].start_ns

    # no content unless the operator opts in
    for span in spans:
        assert not {k for k in span.attributes if k.endswith(("messages", "arguments", "result"))}

    # outbound requests carry the run's trace: the LLM endpoint, the HTTP tool, the webhook
    outbound = [r.headers.get("traceparent", "") for r in llm.received]
    outbound += [otlp.calls["/tool"][0].get("traceparent", ""), hook.get("traceparent", "")]
    assert all(value.startswith(f"00-{CALLER_TRACE}-{agent.span_id}-") for value in outbound)


async def test_message_content_only_with_the_opt_in(otel_env: pytest.MonkeyPatch) -> None:
    replies = [
        FakeReply(
            content="let me add", tool_calls=(FakeToolCall("calculator", {"expression": "2+3"}),)
        ),
        FakeReply.finish("5"),
    ]
    async with OtlpReceiver() as otlp, FakeLLMServer(replies) as llm:
        otel_env.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", otlp.url("/v1/traces"))
        otel_env.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
        app_settings = settings(llm_base_url=llm.base_url, llm_model="fake-model")
        async with api_client(app_settings) as client:
            created = await create(client, {"task": "add 2 and 3", "tools": ["calculator"]})
            run = await wait_ended(client, created["id"])
            spans = await otlp.wait_for_span("invoke_agent")

    (agent,) = by_name(spans, "invoke_agent")
    assert agent.trace_id == run["trace_id"]
    assert agent.parent_span_id == ""  # no traceparent: a trace of its own
    (user,) = json.loads(agent.attributes["gen_ai.input.messages"])
    assert user["parts"][0]["content"] == "add 2 and 3"
    (answer,) = json.loads(agent.attributes["gen_ai.output.messages"])
    assert answer["parts"][0]["content"] == "5"
    first = min(by_name(spans, "chat fake-model"), key=lambda s: s.start_ns)
    (thought,) = json.loads(first.attributes["gen_ai.output.messages"])
    assert thought["parts"][0]["content"] == "let me add"
    (calc,) = by_name(spans, "execute_tool calculator")
    assert json.loads(calc.attributes["gen_ai.tool.call.arguments"]) == {"expression": "2+3"}
    assert calc.attributes["gen_ai.tool.call.result"] == "5"


async def test_spans_carry_what_each_call_and_the_run_cost(otel_env: pytest.MonkeyPatch) -> None:
    replies = [
        FakeReply.call("calculator", {"expression": "2+3"}, usage=FakeUsage(1000, 100)),
        FakeReply.finish("5", usage=FakeUsage(2000, 50, cached_tokens=1000)),
    ]
    prices = {
        "fake-model": {"input_per_mtok": 2, "output_per_mtok": 10, "cached_input_per_mtok": 1}
    }
    async with OtlpReceiver() as otlp, FakeLLMServer(replies) as llm:
        otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.endpoint)
        app_settings = settings(
            llm_base_url=llm.base_url, llm_model="fake-model", model_prices=prices
        )
        async with api_client(app_settings) as client:
            created = await create(client, {"task": "add 2 and 3", "tools": ["calculator"]})
            run = await wait_ended(client, created["id"])
            spans = await otlp.wait_for_span("invoke_agent")

    (agent,) = by_name(spans, "invoke_agent")
    assert run["usage"]["cost_usd"] == 0.0065  # 3000 µ$, then 2000 + 1000 + 500 µ$
    assert agent.attributes["finishline.run.cost_usd"] == 0.0065
    chats = sorted(by_name(spans, "chat fake-model"), key=lambda s: s.start_ns)
    assert [c.attributes["finishline.llm.cost_usd"] for c in chats] == [0.003, 0.0035]


async def test_a_failed_run_is_an_error_span_with_its_retries(otel_env: pytest.MonkeyPatch) -> None:
    replies = [FakeReply.http_error(503, "overloaded")] * 2
    async with OtlpReceiver() as otlp, FakeLLMServer(replies) as llm:
        otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.endpoint)
        app_settings = settings(llm_base_url=llm.base_url, llm_model="fake-model")
        async with api_client(app_settings) as client:
            body = {"task": "fail", "settings": {"llm_retries": 1}}
            run = await wait_ended(client, (await create(client, body))["id"])
            spans = await otlp.wait_for_span("invoke_agent")

    assert run["status"] == "failed"
    (agent,) = spans
    assert agent.status_code == ERROR
    assert agent.attributes["error.type"] == run["error"]["type"]
    assert agent.attributes["finishline.run.status"] == "failed"
    assert [name for name, _ in agent.events] == ["run.started", "gen_ai.retry"]


async def test_an_invalid_traceparent_starts_a_trace_of_the_runs_own(
    otel_env: pytest.MonkeyPatch,
) -> None:
    async with OtlpReceiver() as otlp:
        otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.endpoint)
        async with api_client(settings()) as client:
            headers = {"traceparent": "00-not-a-trace-01"}
            created = await create(client, {"task": "hello", "model": "demo"}, headers)
            run = await wait_ended(client, created["id"])
            spans = await otlp.wait_for_span("invoke_agent")

    (agent,) = by_name(spans, "invoke_agent")
    assert agent.parent_span_id == ""
    assert agent.trace_id == run["trace_id"]
    assert len(run["trace_id"]) == 32
    assert agent.attributes["gen_ai.provider.name"] == "finishline"  # the demo model


async def test_a_caller_that_does_not_sample_gets_its_trace_id_and_no_spans(
    otel_env: pytest.MonkeyPatch,
) -> None:
    async with OtlpReceiver() as otlp:
        otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.endpoint)
        async with api_client(settings()) as client:
            headers = {"traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-00"}
            created = await create(client, {"task": "hello", "model": "demo"}, headers)
            run = await wait_ended(client, created["id"])
        # the app has stopped, and its tracer with it: every span it had was exported

    assert run["trace_id"] == CALLER_TRACE
    assert otlp.spans == []


async def test_nothing_is_traced_or_exported_when_off(otel_env: pytest.MonkeyPatch) -> None:
    async with OtlpReceiver() as otlp, FakeLLMServer([FakeReply.finish("done")]) as llm:
        # an endpoint, switched off by OTEL_SDK_DISABLED: the standard off switch
        otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.endpoint)
        otel_env.setenv("OTEL_SDK_DISABLED", "true")
        app_settings = settings(llm_base_url=llm.base_url, llm_model="fake-model")
        async with api_client(app_settings) as client:
            created = await create(client, {"task": "untraced"}, {"traceparent": TRACEPARENT})
            run = await wait_ended(client, created["id"])
            events = (await json_events(client, run["id"]))["events"]
        # the app has stopped: a tracer would have flushed every span by now

    assert run["trace_id"] is None
    started = next(e for e in events if e["type"] == "run.started")
    assert "trace_id" not in started
    assert "traceparent" not in llm.received[0].headers
    assert otlp.exports == 0


def test_with_tracing_off_the_sdk_is_never_imported() -> None:
    code = (
        "import sys\n"
        "from app.main import create_app\n"
        "from app.tracing import start_tracing\n"
        "create_app()\n"
        "assert start_tracing() is None\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry.sdk')))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FINISHLINE_"))}
    env["FINISHLINE_STORE_URL"] = "memory://"
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("environ", "on"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318", "OTEL_SDK_DISABLED": "true"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318", "OTEL_TRACES_EXPORTER": "none"}, False),
        ({"OTEL_SERVICE_NAME": "finishline"}, False),
    ],
)
def test_tracing_is_on_only_with_an_otlp_endpoint(environ: dict[str, str], on: bool) -> None:
    from app.tracing import tracing_config

    config = tracing_config(environ)
    assert (config is not None) is on
    if config is not None:
        assert config.capture_content is False


def test_content_capture_is_read_from_the_standard_variable() -> None:
    from app.tracing import tracing_config

    environ: dict[str, Any] = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "TRUE",
    }
    config = tracing_config(environ)
    assert config is not None
    assert config.capture_content is True


async def test_a_collector_that_is_down_does_not_hold_the_shutdown(
    otel_env: pytest.MonkeyPatch,
) -> None:
    """The exporter would retry for OTEL_EXPORTER_OTLP_TIMEOUT (30 s here); the shutdown gives
    the spans still batched `flush_s`, then stops it."""
    from app.tracing.provider import Tracing
    from tests.fakes.serving import loopback_socket

    with loopback_socket() as sock:  # a port nobody answers on once closed
        port = sock.getsockname()[1]
    otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{port}")
    otel_env.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "30")
    otel_env.setenv("OTEL_BSP_SCHEDULE_DELAY", "600000")
    tracing = Tracing(capture_content=False)
    tracing.tracer.start_span("invoke_agent").end()

    started = time.monotonic()
    await anyio.to_thread.run_sync(lambda: tracing.shutdown(flush_s=0.5))

    assert time.monotonic() - started < 10


async def test_a_run_whose_answers_fail_its_schema_says_so_on_its_span(
    otel_env: pytest.MonkeyPatch,
) -> None:
    replies = [FakeReply.finish("not an object")]
    async with OtlpReceiver() as otlp, FakeLLMServer(replies) as llm:
        otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.endpoint)
        app_settings = settings(llm_base_url=llm.base_url, llm_model="fake-model")
        async with api_client(app_settings) as client:
            body = {
                "task": "typed",
                "output_schema": {"type": "object"},
                "settings": {"max_output_retries": 0},
            }
            run = await wait_ended(client, (await create(client, body))["id"])
            spans = await otlp.wait_for_span("invoke_agent")

    assert run["result"]["reason"] == "invalid_output"
    (agent,) = by_name(spans, "invoke_agent")
    assert agent.attributes["finishline.run.reason"] == "invalid_output"
    assert agent.attributes["finishline.run.status"] == "incomplete"
    assert agent.attributes["finishline.run.output_errors"] == 1


async def test_an_outcome_unmet_run_shows_each_verdict_on_its_span(
    otel_env: pytest.MonkeyPatch,
) -> None:
    verdict = {"satisfied": False, "feedback": "no colour"}
    replies = [FakeReply.finish("a shape"), FakeReply.call("submit_verdict", verdict)]
    async with OtlpReceiver() as otlp, FakeLLMServer(replies) as llm:
        otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.endpoint)
        app_settings = settings(llm_base_url=llm.base_url, llm_model="fake-model")
        async with api_client(app_settings) as client:
            body = {"task": "graded", "outcome": {"rubric": "a colour", "max_revisions": 0}}
            run = await wait_ended(client, (await create(client, body))["id"])
            spans = await otlp.wait_for_span("invoke_agent")

    assert run["result"]["reason"] == "outcome_unmet"
    (agent,) = by_name(spans, "invoke_agent")
    assert agent.attributes["finishline.run.reason"] == "outcome_unmet"
    graded = [attrs for name, attrs in agent.events if name == "finishline.outcome.graded"]
    assert graded == [
        {
            "finishline.outcome.satisfied": False,
            "finishline.outcome.revision": 0,
            "finishline.outcome.final": False,
            "finishline.outcome.valid": True,
        }
    ]
    assert len(by_name(spans, "chat fake-model")) == 2  # the answer's call and the grader's


async def test_a_child_runs_trace_is_under_its_parents_sub_agent_call(
    otel_env: pytest.MonkeyPatch,
) -> None:
    """DESIGN §15: one trace for a tree; the child's invoke_agent span is a child of the
    parent's execute_tool span of the call that started it, which lasts the child's time."""
    worker = {
        "description": "Adds.",
        "model": "scripted",
        "model_script": [{"tool_calls": [{"name": "task_finished", "arguments": {"answer": "4"}}]}],
    }
    body = {
        "task": "route it",
        "model": "scripted",
        "model_script": [
            {"tool_calls": [{"name": "calc", "arguments": {"task": "2+2"}, "id": "call_calc"}]},
            {"tool_calls": [{"name": "task_finished", "arguments": {"answer": "4"}}]},
        ],
        "agents": {"calc": worker},
    }
    async with OtlpReceiver() as otlp:
        otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.endpoint)
        async with api_client(settings()) as client:
            created = await create(client, body, headers={"traceparent": TRACEPARENT})
            run = await wait_ended(client, created["id"])
            children = (await client.get("/runs", params={"parent_run_id": run["id"]})).json()
            (child,) = children["runs"]
            await otlp.wait_until(
                lambda: len(by_name(otlp.spans, "invoke_agent")) == 2, timeout_s=10
            )
            spans = list(otlp.spans)

    assert child["trace_id"] == run["trace_id"] == CALLER_TRACE
    agents = {s.attributes["finishline.run.id"]: s for s in by_name(spans, "invoke_agent")}
    parent_span, child_span = agents[run["id"]], agents[child["id"]]
    (call,) = by_name(spans, "execute_tool calc")
    assert call.parent_span_id == parent_span.span_id
    assert call.attributes["gen_ai.tool.call.id"] == "call_calc"
    assert child_span.parent_span_id == call.span_id
    assert call.start_ns <= child_span.start_ns
    assert child_span.end_ns <= call.end_ns
