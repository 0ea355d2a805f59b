"""Structured logs: structlog, JSON in production and console on a TTY.

finishline's own lines are rendered by structlog and written straight to stderr (a third of
the cost of going through the stdlib logging machinery); other libraries' stdlib logs
(uvicorn, httpx) go through the same renderer via `ProcessorFormatter`. `run_id` and `step`
are bound as context variables inside each run's task, so every line a run's engine, tools
or store writes carries them.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, Literal, TextIO

import structlog

QUIET_LOGGERS = ("httpx", "httpcore", "uvicorn.access")


class NamedWriteLogger(structlog.WriteLogger):
    """A WriteLogger with the `name` structlog's `add_logger_name` reads."""

    def __init__(self, name: str, file: TextIO) -> None:
        super().__init__(file)
        self.name = name


class NamedWriteLoggerFactory:
    def __init__(self, file: TextIO) -> None:
        self._file = file

    def __call__(self, *args: Any) -> NamedWriteLogger:
        return NamedWriteLogger(str(args[0]) if args else "finishline", self._file)


def configure_logging(
    fmt: Literal["auto", "json", "console"] = "auto", level: str = "INFO"
) -> None:
    """Configure structlog and the stdlib root logger, for the whole process."""
    as_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: structlog.types.Processor
    if as_json:
        renderer = structlog.processors.JSONRenderer()
        shared_tail: list[structlog.types.Processor] = [structlog.processors.format_exc_info]
    else:
        renderer = structlog.dev.ConsoleRenderer(
            colors=sys.stderr.isatty(),
            # no local variables in tracebacks: they may hold keys and prompts
            exception_formatter=structlog.dev.RichTracebackFormatter(show_locals=False),
        )
        shared_tail = []
    structlog.configure(
        processors=[*shared, structlog.processors.StackInfoRenderer(), *shared_tail, renderer],
        logger_factory=NamedWriteLoggerFactory(sys.stderr),
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        # not cached: a module-level logger must follow a later configure_logging() (each
        # app, each test); hot paths bind a logger once per run instead
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[*shared, *shared_tail],
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
