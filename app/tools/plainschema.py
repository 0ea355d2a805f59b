"""A quick yes for the usual tool schema: an object of named, typed, flat properties.

jsonschema walks a schema keyword by keyword for every call (~50 µs for a one-string schema,
a few percent of a run's CPU: issue #42). Most tools' schemas are plain: `type: object`,
`properties` each a simple type (with a string's length bounds or a string `enum`),
`required`, `additionalProperties: false`. For such a schema `plain_fit` makes a check that
answers True only when the arguments certainly fit; on False (they may not fit, or the check
cannot tell) the caller asks jsonschema, which also words the error. A schema with any other
keyword gets no check (None): jsonschema alone.

The types follow Draft 2020-12 as jsonschema checks them: a bool is no number, and a float
with no fractional part is an integer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

Fit = Callable[[Mapping[str, Any]], bool]

ANNOTATIONS = frozenset(("description", "title", "$comment", "examples", "default"))
"""Keywords that constrain nothing."""
ROOT_KEYWORDS = ANNOTATIONS | {"type", "properties", "required", "additionalProperties"}
PROPERTY_KEYWORDS = ANNOTATIONS | {"type", "enum", "minLength", "maxLength"}


def _integer(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


TYPES: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": _integer,
    "number": _number,
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
}


def plain_fit(schema: Mapping[str, Any]) -> Fit | None:
    """The quick check of `schema` (a schema already checked against the metaschema), or
    None when it is not plain."""
    if schema.get("type") != "object" or not ROOT_KEYWORDS.issuperset(schema):
        return None
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    closed = schema.get("additionalProperties", True)
    if not isinstance(properties, dict) or not isinstance(closed, bool):
        return None
    checks: dict[str, Callable[[Any], bool]] = {}
    for name, subschema in properties.items():
        check = _property_fit(subschema)
        if check is None:
            return None
        checks[name] = check
    names = frozenset(required)

    def fits(arguments: Mapping[str, Any]) -> bool:
        if not isinstance(arguments, dict) or not names.issubset(arguments):
            return False
        for name, value in arguments.items():
            check = checks.get(name)
            if check is None:
                if not closed:
                    return False
            elif not check(value):
                return False
        return True

    return fits


def _property_fit(schema: Any) -> Callable[[Any], bool] | None:
    if not isinstance(schema, dict) or not PROPERTY_KEYWORDS.issuperset(schema):
        return None
    kind = schema.get("type")
    kinds: list[Any] = kind if isinstance(kind, list) else [kind]
    typed = [TYPES.get(k) if isinstance(k, str) else None for k in kinds]
    if not typed or None in typed:
        return None
    enum = schema.get("enum")
    if enum is not None and not (isinstance(enum, list) and all(isinstance(e, str) for e in enum)):
        return None  # (jsonschema's equality of 1, 1.0 and True: left to it)
    checks = [t for t in typed if t is not None]
    low, high = schema.get("minLength", 0), schema.get("maxLength")
    allowed = frozenset(enum) if enum is not None else None

    def fits(value: Any) -> bool:
        if not any(t(value) for t in checks):
            return False
        if isinstance(value, str):
            if len(value) < low or (high is not None and len(value) > high):
                return False
        elif allowed is not None:
            return False
        return allowed is None or value in allowed

    return fits
