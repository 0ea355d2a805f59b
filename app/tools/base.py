"""What every tool shares: JSON-schema validation and the error a model is meant to read.

`SchemaTool` implements the `app.engine.ports.Tool` protocol up to `call`: its `parameters`
schema is checked and its Draft 2020-12 validator built once per schema content
(`compiled_schema`, shared by every tool, run and call with that schema), and it turns the most
relevant schema violation into one short sentence the model can act on.

`ToolError` (the engine's, re-exported here) is the failure a tool expects (division by
zero, an unknown time zone, a host that is not allowed, an HTTP 500 from a declared
endpoint). Its message is written for the model, and the engine shows it as is; any other
exception is shown as `TypeName: message`.
"""

from __future__ import annotations

import asyncio
import copy
import importlib
import json
import re
import sys
import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.engine.errors import ToolError
from app.engine.paths import field_path
from app.engine.ports import ToolContext
from app.tools.patterns import pattern_problem
from app.tools.plainschema import Fit, plain_fit
from app.tools.schemaguard import local_registry, reference_problem
from app.tools.validator import metaschema_formats, schema_validator

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError
    from jsonschema.protocols import Validator

__all__ = [
    "MAX_MESSAGE_CHARS",
    "TOOL_NAME_PATTERN",
    "CompiledSchema",
    "SchemaTool",
    "ToolError",
    "compiled_schema",
]

TOOL_NAME_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
"""What chat APIs accept as a function name (OpenAI: letters, digits, `_`, `-`, 64 at most)."""

MAX_MESSAGE_CHARS = 300
"""A validation message quotes the offending value; a huge value is cut to this length."""


@dataclass(frozen=True, slots=True)
class CompiledSchema:
    """A tool's `parameters` schema, checked once against the Draft 2020-12 metaschema, with
    its validator built once: shared by every tool built from the same schema content."""

    schema: Mapping[str, Any]
    """A private deep copy of the schema; never mutated."""
    problem: str | None
    """None for a valid schema, else " at 'where': what"."""
    validator: Validator | None
    """None when `problem` is set."""
    fits: Fit | None = None
    """The quick yes of a plain schema (`app.tools.plainschema`), asked before `validator`."""


_COMPILED: OrderedDict[str, CompiledSchema] = OrderedDict()
_COMPILED_LOCK = threading.Lock()
COMPILED_SCHEMAS = 1024
"""Distinct schemas whose check and validator are remembered (least recently used dropped
first). Checking a schema against the metaschema costs milliseconds per property; a request
may declare 64 KB of schemas (FINISHLINE_MAX_TOOL_SCHEMAS_TOTAL_BYTES), so a request's
schemas are compiled in a worker thread (`app.assembly`, `app.api.runbody`) and handed to
its tools compiled. At most 1,024 schemas of at most 16 KB each (the per-schema cap) are kept.
"""


def schema_key(schema: Mapping[str, Any]) -> str | None:
    """The schema's content as canonical JSON (the cache key), None if it is not JSON."""
    try:
        return json.dumps(schema, sort_keys=True, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError):
        return None


def compiled_schema(schema: Mapping[str, Any]) -> CompiledSchema:
    """The schema checked and its validator built, remembered by content (thread-safe)."""
    key = schema_key(schema)
    if key is not None:
        with _COMPILED_LOCK:
            found = _COMPILED.get(key)
            if found is not None:
                _COMPILED.move_to_end(key)
                return found
    compiled = _compile(copy.deepcopy(dict(schema)))
    if key is not None:
        with _COMPILED_LOCK:
            _COMPILED[key] = compiled
            while len(_COMPILED) > COMPILED_SCHEMAS:
                _COMPILED.popitem(last=False)
    return compiled


async def validation_ready() -> None:
    """jsonschema imported: in a worker thread the first time (~40 ms of imports), so the
    event loop is not held by them at a run's first tool call. A server that never checks a
    schema never imports it (its built-in tools compile theirs at their first call); each
    run's assembly awaits this first (`app.assembly`)."""
    if "jsonschema" not in sys.modules:
        await asyncio.to_thread(importlib.import_module, "jsonschema")


def _compile(schema: dict[str, Any]) -> CompiledSchema:
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        Draft202012Validator.check_schema(schema, format_checker=metaschema_formats())
    except SchemaError as exc:
        where = field_path(exc.absolute_path)
        found = (f" at '{where}'" if where else "") + f": {_shorten(exc.message)}"
        return CompiledSchema(schema, found, None)
    except RecursionError:  # (a request's schemas nest at most 32 deep; an MCP server's may)
        return CompiledSchema(schema, ": nests too deep to check", None)
    problem = reference_problem(schema) or pattern_problem(schema)
    if problem is not None:
        return CompiledSchema(schema, _shorten(problem), None)
    validator = schema_validator()(schema, registry=local_registry())
    return CompiledSchema(schema, None, validator, plain_fit(schema))


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
        parameters: Mapping[str, Any] | CompiledSchema,
        idempotent: bool = True,
        builtin: bool = False,
    ) -> None:
        """`parameters`: a JSON schema, or one already compiled (off the event loop).
        `builtin`: a schema of finishline's own, compiled at the tool's first call instead
        (the built-in tools are made at start-up; tests check their schemas)."""
        if not TOOL_NAME_PATTERN.fullmatch(name):
            raise ValueError(f"invalid tool name {name!r}: use 1 to 64 letters, digits, '_' or '-'")
        self.name = name
        self.description = description
        self.idempotent = idempotent
        self._validator: Validator | None = None
        self._fits: Fit | None = None
        if builtin and not isinstance(parameters, CompiledSchema):
            self.parameters = parameters
            return
        compiled = self._compiled(parameters)
        self._validator, self._fits = compiled.validator, compiled.fits

    def _compiled(self, parameters: Mapping[str, Any] | CompiledSchema) -> CompiledSchema:
        compiled = (
            parameters if isinstance(parameters, CompiledSchema) else compiled_schema(parameters)
        )
        if compiled.validator is None:
            raise ValueError(
                f"the parameters of tool {self.name!r} are not a valid JSON schema"
                f"{compiled.problem}"
            )
        self.parameters = compiled.schema
        return compiled

    def validate(self, arguments: Mapping[str, Any]) -> str | None:
        """None when `arguments` fit the schema, else one sentence naming where and what."""
        from jsonschema.exceptions import best_match

        validator = self._validator
        if validator is None:  # a built-in tool's first call
            compiled = self._compiled(self.parameters)
            validator, self._fits = compiled.validator, compiled.fits
            assert validator is not None  # (_compiled raised otherwise)
            self._validator = validator
        if self._fits is not None and self._fits(arguments):
            return None
        try:
            error = best_match(validator.iter_errors(arguments))
        except RecursionError:  # (parsed arguments nest at most 64 deep: app.engine.jsontext)
            return "nests too deep to check against the schema"
        return None if error is None else describe_validation_error(error)

    @abstractmethod
    async def call(self, arguments: dict[str, Any], ctx: ToolContext) -> str:
        """Run the tool on validated arguments; raise `ToolError` for an expected failure."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


def describe_validation_error(error: ValidationError) -> str:
    """`at 'plan[1].status': 'done' is not one of [...]`, or the bare message at the root."""
    where = field_path(error.absolute_path)
    message = _shorten(error.message)
    return f"at '{where}': {message}" if where else message


def _shorten(message: str) -> str:
    if len(message) <= MAX_MESSAGE_CHARS:
        return message
    return message[: MAX_MESSAGE_CHARS - 1] + "…"
