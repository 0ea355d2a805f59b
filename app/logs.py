"""Structured logs: structlog, JSON in production and console on a TTY, stdlib bridged.

`run_id` and `step` are bound as context variables inside each run's task, so every line a
run's engine, tools or store writes carries them.
"""

from __future__ import annotations

import logging
import sys
from typing import Literal

import structlog

QUIET_LOGGERS = ("httpx", "httpcore", "uvicorn.access")


def configure_logging(
    fmt: Literal["auto", "json", "console"] = "auto", level: str = "INFO"
) -> None:
    """Configure structlog and the stdlib root logger once, for the whole process."""
    as_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer()
        if as_json
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[
            *shared,
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        # no caching: a logger keeps the configuration it was first used under, so a second
        # create_app() (another log level; tests reading logs) would not reach it
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
