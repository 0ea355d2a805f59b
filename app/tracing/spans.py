"""One run's spans, after the OpenTelemetry GenAI semantic conventions, built from the
engine's typed steps as they are recorded:

    invoke_agent               the run, from its creation to its end (reason, status, degraded;
                               interventions and the grader's verdicts as span events)
      chat {model}             one per LLM call that returned (tokens, finish reasons; the
                               retries before it as `gen_ai.retry` events)
      execute_tool {name}      one per tool call (error status when it failed or timed out)

A step arrives when its work is done, so each child span is given its start and end times:
an LLM call ends when its `llm.call` step arrives and started `duration_ms` before (or at the
step before its first retry); a tool call likewise with its observation's `duration_ms`.
Text (the task, thoughts, the answer, tool arguments and results) is recorded only when the
operator opted in to message content.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec

import structlog
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from app.engine.steps import (
    Action,
    Intervention,
    LLMCalled,
    LLMRetry,
    Observation,
    OutcomeGraded,
    Step,
    Thought,
    TokenDelta,
)
from app.propagation import TRACEPARENT
from app.runs.records import RunRecord

log = structlog.get_logger("finishline.tracing")

PROPAGATOR = TraceContextTextMapPropagator()
LOCAL_MODELS = frozenset({"demo", "scripted"})
NS_PER_MS = 1_000_000


P = ParamSpec("P")


def _never_raises(
    method: Callable[Concatenate[OtelRunTrace, P], None],
) -> Callable[Concatenate[OtelRunTrace, P], None]:
    """A failure to trace is logged; it never fails the run."""

    def guarded(self: OtelRunTrace, /, *args: P.args, **kwargs: P.kwargs) -> None:
        try:
            method(self, *args, **kwargs)
        except Exception:
            log.exception("trace_failed", method=method.__name__)

    return guarded


def _text_message(role: str, text: str, **fields: Any) -> str:
    message = {"role": role, "parts": [{"type": "text", "content": text}], **fields}
    return json.dumps([message], ensure_ascii=False)


class OtelRunTrace:
    """The `RunTrace` of one run (see `app.runs.observer`)."""

    def __init__(
        self,
        tracer: trace.Tracer,
        record: RunRecord,
        parent: Context | None,
        *,
        capture_content: bool,
    ) -> None:
        self._tracer = tracer
        self._capture = capture_content
        self._provider = "finishline" if record.model in LOCAL_MODELS else "openai"
        self.span = tracer.start_span(
            "invoke_agent",
            context=parent,
            kind=SpanKind.INTERNAL,
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.provider.name": self._provider,
                "gen_ai.request.model": record.model,
                "gen_ai.conversation.id": record.id,
                "finishline.run.id": record.id,
            },
        )
        if capture_content:
            task = record.request.task
            self.span.set_attribute("gen_ai.input.messages", _text_message("user", task))
            if record.system_prompt:
                system = [{"type": "text", "content": record.system_prompt}]
                self.span.set_attribute("gen_ai.system_instructions", json.dumps(system))
        self._context = trace.set_span_in_context(self.span)
        carrier: dict[str, str] = {}
        PROPAGATOR.inject(carrier, context=self._context)
        self._traceparent = carrier.get("traceparent")
        self._recording = self.span.is_recording()
        self._last_ns = time.time_ns()
        self._chat: tuple[trace.Span, int] | None = None  # open until its thought has come
        self._retries: list[tuple[LLMRetry, int]] = []
        self._retry_start_ns: int | None = None
        self._arguments: dict[str, Any] = {}  # call id -> arguments, when capturing content
        self._agents = frozenset(record.request.agents or ())
        self._calls: dict[str, trace.Span] = {}  # a sub-agent call's span, open from its action

    @property
    def trace_id(self) -> str:
        return format(self.span.get_span_context().trace_id, "032x")

    @_never_raises
    def started(self) -> None:
        if self._traceparent is not None:
            TRACEPARENT.set(self._traceparent)  # outbound requests of this task carry it
        if self._recording:
            self.span.add_event("run.started")

    @_never_raises
    def step(self, step: Step) -> None:
        if not self._recording or isinstance(step, TokenDelta):
            return
        now = time.time_ns()
        if isinstance(step, Thought):
            if self._chat is not None and self._capture:
                self._chat[0].set_attribute(
                    "gen_ai.output.messages", _text_message("assistant", step.text)
                )
            return
        self._close_chat()
        if isinstance(step, LLMCalled):
            self._open_chat(step, now)
        elif isinstance(step, LLMRetry):
            if self._retry_start_ns is None:
                self._retry_start_ns = self._last_ns
            self._retries.append((step, now))
        elif isinstance(step, Observation):
            self._tool(step, now)
        elif isinstance(step, Action):
            if self._capture:
                self._arguments[step.call_id] = step.arguments
            if step.tool in self._agents:  # its child run's trace goes under this span
                self._calls[step.call_id] = self._tracer.start_span(
                    f"execute_tool {step.tool}",
                    context=self._context,
                    kind=SpanKind.INTERNAL,
                    start_time=now,
                )
        elif isinstance(step, Intervention):
            attributes = {"finishline.intervention.kind": step.kind.value}
            self.span.add_event("finishline.intervention", attributes, timestamp=now)
        elif isinstance(step, OutcomeGraded):
            self.span.add_event("finishline.outcome.graded", _verdict(step, self._capture), now)
        self._last_ns = now

    def call_traceparent(self, call_id: str) -> str | None:
        span = self._calls.get(call_id)
        if span is None:
            return None
        carrier: dict[str, str] = {}
        PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
        return carrier.get("traceparent")

    @_never_raises
    def ended(self, record: RunRecord) -> None:
        self._close_chat()
        for open_call in self._calls.values():  # a call its run did not see end (it waited)
            open_call.end()
        self._calls.clear()
        span = self.span
        for retry, at in self._retries:  # retried calls that never returned
            span.add_event("gen_ai.retry", _retry_attributes(retry), timestamp=at)
        span.set_attribute("finishline.run.status", record.status.value)
        if record.result is not None:
            span.set_attribute("finishline.run.reason", record.result.reason.value)
            span.set_attribute("finishline.run.degraded", record.result.degraded)
            if record.result.output_errors:  # a typed answer that failed its schema
                errors = len(record.result.output_errors)
                span.set_attribute("finishline.run.output_errors", errors)
            if self._capture and record.result.answer is not None:
                answer = _text_message(
                    "assistant", record.result.answer, finish_reason=record.result.reason.value
                )
                span.set_attribute("gen_ai.output.messages", answer)
        usage = record.usage
        span.set_attribute("gen_ai.usage.input_tokens", usage.prompt_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", usage.completion_tokens)
        span.set_attribute("finishline.run.steps", usage.steps)
        span.set_attribute("finishline.run.llm_calls", usage.llm_calls)
        span.set_attribute("finishline.run.tool_calls", usage.tool_calls)
        if usage.cost_usd is not None:  # absent: a call's model had no known price
            span.set_attribute("finishline.run.cost_usd", usage.cost_usd)
        if record.error is not None:
            span.set_attribute("error.type", record.error.type)
            span.set_status(Status(StatusCode.ERROR, record.error.message))
        span.end()

    # -- children -----------------------------------------------------------------------

    def _open_chat(self, step: LLMCalled, now: int) -> None:
        start = now - step.duration_ms * NS_PER_MS
        if self._retry_start_ns is not None:
            start = min(start, self._retry_start_ns)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": self._provider,
            "gen_ai.request.model": step.model,
            "gen_ai.usage.input_tokens": step.prompt_tokens,
            "gen_ai.usage.output_tokens": step.completion_tokens,
            "gen_ai.response.finish_reasons": ("tool_calls" if step.tool_calls else "stop",),
            "finishline.step": step.step,
        }
        if step.cost_usd is not None:  # absent: the model has no known price
            attributes["finishline.llm.cost_usd"] = step.cost_usd
        # the exceptions only: each attribute costs the SDK time on every span
        if step.estimated:
            attributes["finishline.llm.tokens_estimated"] = True
        if step.final:
            attributes["finishline.llm.final"] = True
        if self._retries:
            attributes["finishline.llm.attempts"] = len(self._retries) + 1
        span = self._tracer.start_span(
            f"chat {step.model}",
            context=self._context,
            kind=SpanKind.CLIENT,
            start_time=start,
            attributes=attributes,
        )
        for retry, at in self._retries:
            span.add_event("gen_ai.retry", _retry_attributes(retry), timestamp=at)
        self._retries.clear()
        self._retry_start_ns = None
        self._chat = (span, now)

    def _close_chat(self) -> None:
        if self._chat is not None:
            span, end = self._chat
            self._chat = None
            span.end(end_time=end)

    def _tool(self, step: Observation, now: int) -> None:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": step.tool,
            "gen_ai.tool.call.id": step.call_id,
            "gen_ai.tool.type": "function",
            "finishline.step": step.step,
        }
        if step.truncated:
            attributes["finishline.tool.truncated"] = True
        if step.repeated:
            attributes["finishline.tool.repeated"] = True
        if self._capture:
            arguments = self._arguments.pop(step.call_id, None)
            attributes["gen_ai.tool.call.arguments"] = json.dumps(arguments, ensure_ascii=False)
            attributes["gen_ai.tool.call.result"] = step.content
        span = self._calls.pop(step.call_id, None)
        if span is not None:  # a sub-agent call, open since its action
            span.set_attributes(attributes)
        else:
            span = self._tracer.start_span(
                f"execute_tool {step.tool}",
                context=self._context,
                kind=SpanKind.INTERNAL,
                start_time=now - step.duration_ms * NS_PER_MS,
                attributes=attributes,
            )
        if step.timed_out or step.is_error:
            kind = "timeout" if step.timed_out else "tool_error"
            span.set_attribute("error.type", kind)
            message = "the tool timed out" if step.timed_out else "the tool returned an error"
            span.set_status(Status(StatusCode.ERROR, message))
        span.end(end_time=now)


def _verdict(graded: OutcomeGraded, capture: bool) -> dict[str, Any]:
    """The grader's verdict (DESIGN §22) as a span event's attributes; its feedback only with
    message content opted in."""
    attributes: dict[str, Any] = {
        "finishline.outcome.satisfied": graded.satisfied,
        "finishline.outcome.revision": graded.revision,
        "finishline.outcome.final": graded.final,
        "finishline.outcome.valid": graded.valid,
    }
    if capture:
        attributes["finishline.outcome.feedback"] = graded.feedback[:2000]
    return attributes


def _retry_attributes(retry: LLMRetry) -> dict[str, Any]:
    return {
        "finishline.llm.attempt": retry.attempt,
        "finishline.llm.retry_delay_s": retry.delay_s,
        "finishline.llm.error": retry.error[:500],
    }
