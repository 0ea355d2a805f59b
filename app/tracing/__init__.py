"""OpenTelemetry traces of runs, opt-in with the standard OTEL_* variables.

Tracing is on when an OTLP endpoint is set (`OTEL_EXPORTER_OTLP_ENDPOINT`, or
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`), unless `OTEL_SDK_DISABLED=true` or
`OTEL_TRACES_EXPORTER=none`. Spans go over OTLP/HTTP with protobuf; the SDK reads the rest of
the standard variables itself (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`,
`OTEL_TRACES_SAMPLER`/`_ARG`, `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_BSP_*`, ...). Prompt and
completion text, tool arguments and results are recorded only with
`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`.

With tracing off, nothing of OpenTelemetry is imported: this module reads the environment and
the run manager gets no observer. The spans (`app.tracing.spans`) follow the GenAI semantic
conventions: `invoke_agent` per run, `chat {model}` per LLM call, `execute_tool {name}` per
tool call, built from the engine's typed steps.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

if TYPE_CHECKING:
    from app.tracing.provider import Tracing

log = structlog.get_logger("finishline.tracing")

CAPTURE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"


@dataclass(frozen=True, slots=True)
class TracingConfig:
    endpoint: str
    capture_content: bool


def _true(value: str | None) -> bool:
    return (value or "").strip().lower() == "true"


def tracing_config(environ: Mapping[str, str]) -> TracingConfig | None:
    """What the environment asks for; None when tracing is off."""
    if _true(environ.get("OTEL_SDK_DISABLED")):
        return None
    exporters = {e.strip().lower() for e in environ.get("OTEL_TRACES_EXPORTER", "otlp").split(",")}
    if "none" in exporters:
        return None
    endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    if not endpoint:
        return None
    protocol = environ.get(
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
    )
    if protocol not in (None, "", "http/protobuf"):
        log.warning("otlp_protocol_unsupported", protocol=protocol, using="http/protobuf")
    return TracingConfig(endpoint=endpoint, capture_content=_true(environ.get(CAPTURE_CONTENT)))


def start_tracing(environ: Mapping[str, str] | None = None) -> Tracing | None:
    """The tracing of this process (its exporter running), or None when it is off."""
    config = tracing_config(os.environ if environ is None else environ)
    if config is None:
        return None
    from app.tracing.provider import Tracing  # the SDK: imported only when tracing is on

    tracing = Tracing(capture_content=config.capture_content)
    log.info("tracing_started", endpoint=config.endpoint, capture_content=config.capture_content)
    return tracing
