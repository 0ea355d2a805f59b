"""Structured logs: structlog, JSON in production and console on a TTY.

finishline's own lines are rendered by structlog and written straight to stderr (a third of
the cost of going through the stdlib logging machinery); other libraries' stdlib logs
(uvicorn, httpx) go through the same renderer via `ProcessorFormatter`. `run_id` and `step`
are bound as context variables inside each run's task, so every line a run's engine, tools
or store writes carries them.

A run writes a line per thought, action and observation at INFO, so a line is kept cheap:
in JSON, after `merge_contextvars` one processor adds level, logger name and timestamp and
encodes the line with one reused encoder (the exception and stack renderers run only for a
line that asks for them), and each logger name gets one writer per configuration instead of
a new one (and a new lock) per call. Lines logged on the event loop's thread are written
together once per turn of the loop (one write system call for all the lines of a turn, not
one each), in the order they were logged; anywhere else (no running loop: start-up, worker
threads, tests) at once, after whatever is pending.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import logging
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Literal, TextIO

import structlog
from structlog.typing import EventDict, WrappedLogger

QUIET_LOGGERS = ("httpx", "httpcore", "uvicorn.access")


class LineWriter:
    """Whole lines to one file: on a running event loop, gathered and written at the end of
    the loop's turn (`call_soon`); without one, at once. Thread-safe; flushed at exit."""

    def __init__(self, file: TextIO) -> None:
        self.file = file
        self._pending: list[str] = []
        self._lock = threading.Lock()
        atexit.register(self.flush)

    def line(self, text: str) -> None:
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        with self._lock:
            self._pending.append(text)
            if loop is None:
                self._write_pending()
                return
            if len(self._pending) > 1:
                return  # a flush is scheduled already
        try:
            loop.call_soon(self.flush)
        except RuntimeError:  # the loop is closing
            self.flush()

    def flush(self) -> None:
        with self._lock:
            self._write_pending()

    def _write_pending(self) -> None:
        if not self._pending:
            return
        text = "\n".join(self._pending) + "\n"
        self._pending.clear()
        try:
            self.file.write(text)
            self.file.flush()
        except ValueError:  # closed (a test's captured stderr, at exit)
            pass


class NamedWriteLogger:
    """structlog's logger: writes each rendered line through a `LineWriter`; carries the
    `name` structlog's `add_logger_name` reads."""

    def __init__(self, name: str, out: LineWriter) -> None:
        self.name = name
        self._out = out

    def msg(self, message: str) -> None:
        self._out.line(message)

    log = debug = info = warn = warning = msg
    fatal = failure = err = error = critical = exception = msg


class NamedWriteLoggerFactory:
    """One `NamedWriteLogger` per name, all writing through one `LineWriter`."""

    def __init__(self, out: LineWriter) -> None:
        self._out = out
        self._loggers: dict[str, NamedWriteLogger] = {}

    def __call__(self, *args: Any) -> NamedWriteLogger:
        name = str(args[0]) if args else "finishline"
        logger = self._loggers.get(name)
        if logger is None:
            logger = self._loggers[name] = NamedWriteLogger(name, self._out)
        return logger


class LineHandler(logging.Handler):
    """The stdlib root handler: other libraries' lines, in order with finishline's own."""

    def __init__(self, out: LineWriter) -> None:
        super().__init__()
        self._out = out

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._out.line(self.format(record))
        except Exception:  # logging's contract: report it, never raise
            self.handleError(record)


_writer: LineWriter | None = None
"""The current configuration's writer (a new configuration flushes the old one first)."""

_LEVELS = {"exception": "error", "warn": "warning"}


def _fallback(obj: Any) -> Any:
    """What JSONRenderer does with a value JSON cannot hold: `__structlog__()`, else repr."""
    method = getattr(obj, "__structlog__", None)
    return method() if method is not None else repr(obj)


def _encoder() -> Callable[[EventDict], str]:
    """`json.dumps(event_dict, default=_fallback)`, on one C encoder made once (json.dumps
    makes one a call). No check for circular references: a line holding one fails to encode
    either way (RecursionError instead of ValueError)."""
    make = getattr(json.encoder, "c_make_encoder", None)  # (the C accelerator's, untyped)
    if make is None:  # an interpreter without the C accelerator
        return json.JSONEncoder(default=_fallback).encode
    chunks = make(
        None, _fallback, json.encoder.encode_basestring_ascii, None, ": ", ", ", False, False, True
    )
    return lambda event_dict: "".join(chunks(event_dict, 0))


_encode = _encoder()
_exc_info = structlog.processors.format_exc_info
_stack_info = structlog.processors.StackInfoRenderer()
_second: tuple[int, str] = (-1, "")
"""The last whole second stamped and its `YYYY-MM-DDTHH:MM:SS` (UTC)."""


def _timestamp() -> str:
    """Now as ISO 8601 in UTC with microseconds: `2026-12-02T11:53:35.225404Z`."""
    global _second
    now = time.time()
    whole = int(now)
    second, text = _second
    if whole != second:
        text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole))
        _second = (whole, text)
    return f"{text}.{int((now - whole) * 1_000_000):06d}Z"


_BOUND = getattr(structlog.contextvars, "_CONTEXT_VARS", None)
"""structlog's context variables, one per key `bind_contextvars` was given (its own table)."""


def _merge_contextvars(logger: WrappedLogger, method: str, event_dict: EventDict) -> EventDict:
    """structlog's `merge_contextvars`, reading the variables structlog made instead of
    copying and scanning the whole context (a request's holds a dozen others): a quarter of
    the cost. Falls back to structlog's where its table is not there."""
    if _BOUND is None:
        return structlog.contextvars.merge_contextvars(logger, method, event_dict)
    for name, var in tuple(_BOUND.items()):  # (a key first bound in another thread meanwhile)
        value = var.get(Ellipsis)
        if value is not Ellipsis:
            event_dict.setdefault(name[_PREFIX:], value)
    return event_dict


_PREFIX = len(structlog.contextvars.STRUCTLOG_KEY_PREFIX)


def _json_line(logger: WrappedLogger, method: str, event_dict: EventDict) -> str:
    """add_log_level, add_logger_name, TimeStamper(iso, utc), StackInfoRenderer,
    format_exc_info and JSONRenderer in one step, with the same output (the timestamp always
    has its microseconds)."""
    event_dict["level"] = _LEVELS.get(method, method)
    event_dict["logger"] = logger.name
    event_dict["timestamp"] = _timestamp()
    if "stack_info" in event_dict:
        event_dict = _stack_info(logger, method, event_dict)
    if "exc_info" in event_dict:
        event_dict = _exc_info(logger, method, event_dict)
    return _encode(event_dict)


def configure_logging(
    fmt: Literal["auto", "json", "console"] = "auto", level: str = "INFO"
) -> None:
    """Configure structlog and the stdlib root logger, for the whole process."""
    as_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    global _writer
    if _writer is not None:
        _writer.flush()
        atexit.unregister(_writer.flush)
    out = _writer = LineWriter(sys.stderr)
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: structlog.types.Processor
    ours: list[structlog.types.Processor]
    if as_json:
        renderer = structlog.processors.JSONRenderer()
        shared_tail: list[structlog.types.Processor] = [structlog.processors.format_exc_info]
        ours = [_merge_contextvars, _json_line]
    else:
        renderer = structlog.dev.ConsoleRenderer(
            colors=sys.stderr.isatty(),
            # no local variables in tracebacks: they may hold keys and prompts
            exception_formatter=structlog.dev.RichTracebackFormatter(show_locals=False),
        )
        shared_tail = []
        ours = [*shared, structlog.processors.StackInfoRenderer(), renderer]
    structlog.configure(
        processors=ours,
        logger_factory=NamedWriteLoggerFactory(out),
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        # not cached: a module-level logger must follow a later configure_logging() (each
        # app, each test); hot paths bind a logger once per run instead
        cache_logger_on_first_use=False,
    )
    handler = LineHandler(out)
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
