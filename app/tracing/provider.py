"""The OpenTelemetry SDK set up from the standard variables: a tracer provider of finishline's
own (the process-wide one is left alone), a batch processor exporting over OTLP/HTTP off the
event loop, and the run observer the run manager is given."""

from __future__ import annotations

import threading

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from app import __version__
from app.runs.records import RunRecord
from app.tracing.spans import PROPAGATOR, OtelRunTrace

DEFAULT_SERVICE_NAME = "finishline"
SHUTDOWN_FLUSH_S = 3.0
"""At shutdown, how long the spans still batched get to go out (a collector that is down
would otherwise hold the exit for the exporter's retries, up to OTEL_EXPORTER_OTLP_TIMEOUT per
batch)."""


class Tracing:
    """The provider, its exporter, and `open()` (the `RunObserver` port of the run manager)."""

    def __init__(self, *, capture_content: bool) -> None:
        resource = Resource.create({SERVICE_VERSION: __version__})
        if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
            resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
        # sampler, span limits and the batch processor's settings come from OTEL_* variables
        self.provider = TracerProvider(resource=resource)
        self.exporter = OTLPSpanExporter()
        self.provider.add_span_processor(BatchSpanProcessor(self.exporter))
        self.tracer = self.provider.get_tracer("finishline", __version__)
        self.capture_content = capture_content

    def open(self, record: RunRecord, traceparent: str | None) -> OtelRunTrace:
        parent = PROPAGATOR.extract({"traceparent": traceparent}) if traceparent else None
        return OtelRunTrace(self.tracer, record, parent, capture_content=self.capture_content)

    def force_flush(self, timeout_ms: int = 30_000) -> bool:
        """Export every ended span now (blocking: call it off the event loop)."""
        return self.provider.force_flush(timeout_ms)

    def shutdown(self, flush_s: float = SHUTDOWN_FLUSH_S) -> None:
        """Export what is left within `flush_s`, then stop (blocking: call it off the event
        loop). The SDK's own flush ignores its timeout, so it runs on a thread of its own;
        stopping the exporter ends a retry still in flight there, so the rest is quick."""
        flushing = threading.Thread(target=self.provider.force_flush, daemon=True)
        flushing.start()
        flushing.join(flush_s)
        self.exporter.shutdown()  # type: ignore[no-untyped-call]  # the SDK leaves it unannotated
        self.provider.shutdown()
