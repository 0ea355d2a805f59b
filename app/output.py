"""A run's `output_schema` (DESIGN §12) as the engine's `OutputSchema`, on jsonschema.

The schema is checked against the Draft 2020-12 metaschema and its validator built by
`app.tools.base.compiled_schema`, the same check and cache as tool parameters (remembered by
content, so a schema many runs share is compiled once); callers run it off the event loop
(`app.assembly`). Each error is reported where it is (a JSON path) with jsonschema's message;
for `anyOf`/`oneOf`, the error of the alternative that got furthest into the answer is named
too, which is what a model needs to fix it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from app.engine.errors import FinishlineError
from app.engine.ports import OutputError
from app.engine.typed import json_path
from app.tools.base import MAX_MESSAGE_CHARS, compiled_schema

if TYPE_CHECKING:  # jsonschema is imported where a schema is first checked (app.tools.base)
    from jsonschema.exceptions import ValidationError
    from jsonschema.protocols import Validator


class InvalidSchemaError(FinishlineError, ValueError):
    """The output schema is not a valid Draft 2020-12 JSON Schema; says where and what."""


def _shorten(message: str) -> str:
    if len(message) <= MAX_MESSAGE_CHARS:
        return message
    return message[: MAX_MESSAGE_CHARS - 1] + "…"


def _message(error: ValidationError) -> str:
    message = _shorten(error.message)
    if error.context:  # anyOf / oneOf: the alternative that got furthest, and why it failed
        closest = max(error.context, key=lambda e: len(e.absolute_path))
        where = json_path(list(closest.absolute_path))
        message += f" (closest: {where}: {_shorten(closest.message)})"
    return message


class JsonOutputSchema:
    """`OutputSchema` with a Draft 2020-12 validator built once."""

    def __init__(self, schema: Mapping[str, Any], validator: Validator) -> None:
        self.schema = schema
        self._validator = validator

    def errors(self, value: Any) -> list[OutputError]:
        from referencing.exceptions import Unresolvable

        try:
            return [
                OutputError(json_path(list(error.absolute_path)), _message(error))
                for error in self._validator.iter_errors(value)
            ]
        except Unresolvable as exc:  # a reference the check at creation could not follow
            return [OutputError("$", f"cannot be checked: the schema's {_shorten(str(exc))}")]
        except RecursionError:  # (a parsed answer nests at most 64 deep: app.engine.jsontext)
            return [OutputError("$", "nests too deep to check against the schema")]


def output_schema(schema: Mapping[str, Any]) -> JsonOutputSchema:
    """The schema checked and compiled (remembered by content; milliseconds a property on a
    miss, so call it off the event loop). InvalidSchemaError says what is wrong and where:
    not a Draft 2020-12 schema, or a reference that leaves it, points nowhere or loops
    (`app.tools.schemaguard`)."""
    compiled = compiled_schema(schema)
    if compiled.validator is None:
        raise InvalidSchemaError(f"is not a valid JSON Schema (draft 2020-12){compiled.problem}")
    return JsonOutputSchema(compiled.schema, compiled.validator)
