"""A JSON-RPC request before the SDK's dispatcher reads it, and what the dispatcher logs of a
client's mistakes.

The body cap held already (`app.api.bodylimit`). Here, as `POST /runs` and `/ag-ui` bound
theirs, the request's JSON values are counted (FINISHLINE_MAX_BODY_JSON_VALUES) and its nesting
bounded (`MAX_NESTING`), each refusal an InvalidRequest naming what was too much, before the
dispatcher parses it (Python's parser, recursive, gave out 1,000 levels down: an InternalError
and a traceback in the log). A body whose Content-Type says it is not JSON (`text/plain`) is
ContentTypeNotSupported (A2A §9.1: requests are `application/json`); one that says nothing is
read as JSON.

The dispatcher logs a request it cannot read (not a JSON-RPC request, params of the wrong
types) with its traceback at ERROR, then the refusal it answers at WARNING. That is the
client's doing, not ours: `ClientMistakes` makes those lines warnings that name the problem,
without the traceback. What the dispatcher logs of its own failures keeps its traceback.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from a2a.utils.errors import A2AError, ContentTypeNotSupportedError, InvalidRequestError

from app.api.runbody import check_value_count
from app.runs.errors import InvalidRunError
from app.runs.spec import MAX_JSON_DEPTH, json_depth
from app.settings import Settings

MAX_NESTING = MAX_JSON_DEPTH + 16
"""How deep a request's objects and arrays may nest: the 32 levels free-form JSON may nest in a
run's body (metadata, a tool's schema) with room for where A2A holds it
(`params.metadata.finishline.agents.A.http_tools[0].parameters`), and short of the ~50 levels
the SDK's protobuf parser takes."""
SDK_LOGGERS = ("a2a.server.routes.jsonrpc_dispatcher", "a2a.compat.v0_3.jsonrpc_adapter")
CLIENT_MISTAKES = frozenset(
    {
        "Failed to validate base JSON-RPC request",
        "Failed to validate base JSON-RPC request for v0.3",
        "Failed to parse request params",
    }
)
"""The dispatchers' log lines (their messages, as the SDK writes them) about a request the
client made wrong."""


def refusal(
    raw: bytes, content_type: str | None, settings: Settings
) -> tuple[Any, A2AError] | None:
    """Why the request whose body is `raw` is not read: (its id, if it can be read, and the
    error to answer); None when the dispatcher may read it."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media and "json" not in media.rpartition("/")[2]:
        return None, ContentTypeNotSupportedError(
            f"Content-Type {media}: A2A's JSON-RPC requests are application/json",
            data={"type": "validation_error", "field": "Content-Type"},
        )
    try:
        check_value_count(raw, settings)
    except InvalidRunError as exc:
        return None, InvalidRequestError(exc.message, data={"type": "validation_error"})
    if raw.count(b"[") + raw.count(b"{") <= MAX_NESTING:
        return None  # cannot nest deeper than it has objects and arrays
    try:
        body = json.loads(raw)
    except RecursionError:
        return None, _too_deep(None)
    except ValueError:
        return None  # not JSON: the dispatcher answers a parse error
    depth = json_depth(body)
    if depth <= MAX_NESTING:
        return None
    request_id = body.get("id") if isinstance(body, dict) else None
    if isinstance(request_id, bool) or not isinstance(request_id, str | int):
        request_id = None
    return request_id, _too_deep(depth)


def _too_deep(depth: int | None) -> InvalidRequestError:
    deep = f"{depth:,} levels deep" if depth is not None else "too deep to parse"
    return InvalidRequestError(
        f"the request nests objects and arrays {deep}; at most {MAX_NESTING} levels are read",
        data={"type": "validation_error", "field": "body", "cap": MAX_NESTING},
    )


class ClientMistakes(logging.Filter):
    """On the SDK's dispatcher loggers: a line about a request the client made wrong is a
    warning that names the problem, without a traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg in CLIENT_MISTAKES and record.exc_info:
            problem = record.exc_info[1]
            record.msg = f"{record.msg}: {problem}"
            record.args = ()
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.exc_info, record.exc_text = None, None
        return True


CLIENT_MISTAKES_FILTER = ClientMistakes()


def quiet_client_mistakes() -> None:
    """Put `ClientMistakes` on the SDK's dispatcher loggers (once: a filter added again is not
    added twice)."""
    for name in SDK_LOGGERS:
        logging.getLogger(name).addFilter(CLIENT_MISTAKES_FILTER)
