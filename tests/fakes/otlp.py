"""A real OTLP/HTTP trace receiver on a loopback socket, for the tracing tests; it also stands
in for an HTTP tool and a webhook receiver, recording their request headers.

    async with OtlpReceiver() as otlp:
        otlp.endpoint                          # http://127.0.0.1:PORT (OTEL_EXPORTER_OTLP_ENDPOINT)
        spans = await otlp.wait_for_span("invoke_agent")

POST /v1/traces   an ExportTraceServiceRequest (protobuf, gzip or not), decoded with
                  opentelemetry-proto; its spans are kept, flattened, in arrival order
POST /tool        answers "order 42 ships today"; the request's headers are kept in `calls`
POST /hook        answers 200; the request's headers are kept in `calls`
"""

from __future__ import annotations

import gzip
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Self

import anyio
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from tests.fakes.serving import Served


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


@dataclass(frozen=True, slots=True)
class ReceivedSpan:
    """One exported span, decoded; ids in lower-case hex, times in ns."""

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]]
    status_code: int  # 0 unset, 1 ok, 2 error
    status_message: str
    resource: dict[str, Any]


class OtlpReceiver:
    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.exports = 0
        self.calls: dict[str, list[dict[str, str]]] = defaultdict(list)
        self._arrived = anyio.Event()
        self._served = Served(
            Starlette(
                routes=[
                    Route("/v1/traces", self._traces, methods=["POST"]),
                    Route("/tool", self._tool, methods=["POST", "GET"]),
                    Route("/hook", self._hook, methods=["POST"]),
                ]
            ),
            timeout_graceful_shutdown=1,
        )

    @property
    def endpoint(self) -> str:
        return self._served.url()

    def url(self, path: str) -> str:
        return self._served.url(path)

    async def __aenter__(self) -> Self:
        await self._served.__aenter__()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._served.stop()

    async def wait_for_span(self, name: str, timeout_s: float = 10) -> list[ReceivedSpan]:
        """Wait until a span called `name` has arrived; all spans received so far."""
        await self.wait_until(lambda: any(s.name == name for s in self.spans), timeout_s)
        return list(self.spans)

    async def wait_for_call(self, path: str, timeout_s: float = 10) -> dict[str, str]:
        await self.wait_until(lambda: bool(self.calls[path]), timeout_s)
        return self.calls[path][0]

    async def wait_until(self, ready: Any, timeout_s: float) -> None:
        with anyio.fail_after(timeout_s):
            while not ready():
                await self._arrived.wait()

    def _wake(self) -> None:
        arrived, self._arrived = self._arrived, anyio.Event()
        arrived.set()

    async def _traces(self, request: Request) -> Response:
        body = await request.body()
        if request.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        assert request.headers["content-type"] == "application/x-protobuf"
        export = ExportTraceServiceRequest.FromString(body)
        self.exports += 1
        for resource_spans in export.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.spans.append(
                        ReceivedSpan(
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            kind=span.kind,
                            start_ns=span.start_time_unix_nano,
                            end_ns=span.end_time_unix_nano,
                            attributes={a.key: _value(a.value) for a in span.attributes},
                            events=[
                                (e.name, {a.key: _value(a.value) for a in e.attributes})
                                for e in span.events
                            ],
                            status_code=span.status.code,
                            status_message=span.status.message,
                            resource=resource,
                        )
                    )
        self._wake()
        return Response(
            ExportTraceServiceResponse().SerializeToString(),
            media_type="application/x-protobuf",
        )

    async def _tool(self, request: Request) -> Response:
        await request.body()
        self.calls["/tool"].append(dict(request.headers))
        self._wake()
        return PlainTextResponse("order 42 ships today")

    async def _hook(self, request: Request) -> Response:
        await request.body()
        self.calls["/hook"].append(dict(request.headers))
        self._wake()
        return PlainTextResponse("ok")
