"""What every tool shares: JSON-schema validation and the error a model is meant to read.

`SchemaTool` implements the `app.engine.ports.Tool` protocol up to `call`: it checks its
`parameters` schema once, compiles a Draft 2020-12 validator once, and turns the most
relevant schema violation into one short sentence the model can act on.

`ToolError` (the engine's, re-exported here) is the failure a tool expects (division by
zero, an unknown time zone, a host that is not allowed, an HTTP 500 from a declared
endpoint). Its message is written for the model, and the engine shows it as is; any other
exception is shown as `TypeName: message`.
"""

from __future__ import annotations

import copy
import json
import re
import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, ValidationError, best_match

from app.engine.errors import ToolError
from app.engine.ports import ToolContext

__all__ = ["MAX_MESSAGE_CHARS", "TOOL_NAME_PATTERN", "SchemaTool", "ToolError"]

TOOL_NAME_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
"""What chat APIs accept as a function name (OpenAI: letters, digits, `_`, `-`, 64 at most)."""

MAX_MESSAGE_CHARS = 300
"""A validation message quotes the offending value; a huge value is cut to this length."""


_CHECKED: OrderedDict[str, str | None] = OrderedDict()
_CHECKED_LOCK = threading.Lock()
CHECKED_SCHEMAS = 256
"""Schemas whose check is remembered: checking one against the Draft 2020-12 metaschema
costs milliseconds per property, and a request's tools are built three times (validated in
a worker thread, checked at creation, built at start)."""


def schema_problem(schema: Mapping[str, Any]) -> str | None:
    """None for a valid Draft 2020-12 schema, else " at 'where': what" (remembered)."""
    try:
        key = json.dumps(schema, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError):
        key = None
    if key is not None:
        with _CHECKED_LOCK:
            if key in _CHECKED:
                _CHECKED.move_to_end(key)
                return _CHECKED[key]
    try:
        Draft202012Validator.check_schema(schema)
        problem = None
    except SchemaError as exc:
        where = _format_path(exc.absolute_path)
        problem = (f" at '{where}'" if where else "") + f": {_shorten(exc.message)}"
    if key is not None:
        with _CHECKED_LOCK:
            _CHECKED[key] = problem
            while len(_CHECKED) > CHECKED_SCHEMAS:
                _CHECKED.popitem(last=False)
    return problem


class SchemaTool(ABC):
    """A tool whose arguments are checked against a JSON schema before `call`.

    Subclasses pass their name, description and schema to `__init__` and implement `call`.
    Instances are shared by every run, so they must keep no per-run state: that belongs in
    the `ToolContext` passed to `call`.
    """

    name: str
    description: str
    parameters: Mapping[str, Any]
    idempotent: bool

    def __init__(
        self,
        *,
        name: str,
        description: str,
        parameters: Mapping[str, Any],
        idempotent: bool = True,
    ) -> None:
        if not TOOL_NAME_PATTERN.fullmatch(name):
            raise ValueError(f"invalid tool name {name!r}: use 1 to 64 letters, digits, '_' or '-'")
        schema = copy.deepcopy(dict(parameters))
        problem = schema_problem(schema)
        if problem is not None:
            raise ValueError(
                f"the parameters of tool {name!r} are not a valid JSON schema{problem}"
            )
        self.name = name
        self.description = description
        self.parameters = schema
        self.idempotent = idempotent
        self._validator = Draft202012Validator(schema)

    def validate(self, arguments: Mapping[str, Any]) -> str | None:
        """None when `arguments` fit the schema, else one sentence naming where and what."""
        error = best_match(self._validator.iter_errors(arguments))
        return None if error is None else describe_validation_error(error)

    @abstractmethod
    async def call(self, arguments: dict[str, Any], ctx: ToolContext) -> str:
        """Run the tool on validated arguments; raise `ToolError` for an expected failure."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


def describe_validation_error(error: ValidationError) -> str:
    """`at 'plan[1].status': 'done' is not one of [...]`, or the bare message at the root."""
    where = _format_path(error.absolute_path)
    message = _shorten(error.message)
    return f"at '{where}': {message}" if where else message


def _format_path(path: Sequence[str | int]) -> str:
    """Render a JSON path as `a.b[2].c`."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text


def _shorten(message: str) -> str:
    if len(message) <= MAX_MESSAGE_CHARS:
        return message
    return message[: MAX_MESSAGE_CHARS - 1] + "…"
