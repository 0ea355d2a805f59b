"""The one JSON Schema validator finishline checks values with: Draft 2020-12, with every
keyword that matches a regular expression matching it through RE2 (`app.tools.patterns`).

jsonschema matches a schema's regexes with Python's `re` in four keywords: `pattern`,
`patternProperties`, `additionalProperties` (which leaves out the names `patternProperties`
matches) and `unevaluatedProperties` (which counts them as evaluated). Each is replaced here by
the same keyword matching through `patterns.search`; the rest is jsonschema's own. The
functions follow jsonschema 4.26's (`_keywords.py`, `_utils.py`, MIT), messages included.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from app.tools.patterns import search

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError
    from jsonschema.protocols import Validator


def _pattern(validator: Any, patrn: str, instance: Any, schema: Any) -> Iterator[Any]:
    from jsonschema.exceptions import ValidationError

    if validator.is_type(instance, "string") and not search(patrn, instance):
        yield ValidationError(f"{instance!r} does not match {patrn!r}")


def _pattern_properties(
    validator: Any, patterns: Mapping[str, Any], instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for k, v in instance.items():
            if search(pattern, k):
                yield from validator.descend(v, subschema, path=k, schema_path=pattern)


def _additional(instance: Mapping[str, Any], schema: Mapping[str, Any]) -> Iterator[str]:
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    for name in instance:
        if name not in properties and not any(search(p, name) for p in patterns):
            yield name


def _additional_properties(
    validator: Any, ap: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    from jsonschema._utils import extras_msg
    from jsonschema.exceptions import ValidationError

    if not validator.is_type(instance, "object"):
        return
    extras = set(_additional(instance, schema))
    if validator.is_type(ap, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], ap, path=extra)
    elif not ap and extras:
        if "patternProperties" in schema:
            verb = "does" if len(extras) == 1 else "do"
            joined = ", ".join(repr(each) for each in sorted(extras))
            patterns = ", ".join(repr(each) for each in sorted(schema["patternProperties"]))
            yield ValidationError(f"{joined} {verb} not match any of the regexes: {patterns}")
        else:
            error = "Additional properties are not allowed (%s %s unexpected)"
            yield ValidationError(error % extras_msg(sorted(extras, key=str)))


def _valid(errors: Iterator[Any]) -> bool:
    return next(errors, None) is None


def _evaluated(validator: Any, instance: Mapping[str, Any], schema: Any) -> list[str]:
    """The names of `instance` that `schema` evaluates (`unevaluatedProperties`)."""
    if validator.is_type(schema, "boolean"):
        return []
    keys: list[str] = []
    for keyword in ("$ref", "$dynamicRef"):
        ref = schema.get(keyword)
        if ref is not None:
            resolved = validator._resolver.lookup(ref)
            inner = validator.evolve(schema=resolved.contents, _resolver=resolved.resolver)
            keys += _evaluated(inner, instance, resolved.contents)
    properties = schema.get("properties")
    if validator.is_type(properties, "object"):
        keys += properties.keys() & instance.keys()
    for keyword in ("additionalProperties", "unevaluatedProperties"):
        if (subschema := schema.get(keyword)) is not None:
            keys += (k for k, v in instance.items() if _valid(validator.descend(v, subschema)))
    for pattern in schema.get("patternProperties", ()):
        keys += (name for name in instance if search(pattern, name))
    for name, subschema in schema.get("dependentSchemas", {}).items():
        if name in instance:
            keys += _evaluated(validator, instance, subschema)
    for keyword in ("allOf", "oneOf", "anyOf"):
        for subschema in schema.get(keyword, []):
            if _valid(validator.descend(instance, subschema)):
                keys += _evaluated(validator, instance, subschema)
    if "if" in schema:
        if validator.evolve(schema=schema["if"]).is_valid(instance):
            keys += _evaluated(validator, instance, schema["if"])
            if "then" in schema:
                keys += _evaluated(validator, instance, schema["then"])
        elif "else" in schema:
            keys += _evaluated(validator, instance, schema["else"])
    return keys


def _unevaluated_properties(
    validator: Any, unevaluated: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    from jsonschema._utils import extras_msg
    from jsonschema.exceptions import ValidationError

    if not validator.is_type(instance, "object"):
        return
    evaluated = _evaluated(validator, instance, schema)
    names = [
        name
        for name in instance
        if name not in evaluated
        and not _valid(validator.descend(instance[name], unevaluated, path=name, schema_path=name))
    ]
    if names:
        if unevaluated is False:
            error = "Unevaluated properties are not allowed (%s %s unexpected)"
            yield ValidationError(error % extras_msg(sorted(names, key=str)))
        else:
            error = (
                "Unevaluated properties are not valid under "
                "the given schema (%s %s unevaluated and invalid)"
            )
            yield ValidationError(error % extras_msg(names))


@functools.cache
def schema_validator() -> type[Validator]:
    """Draft 2020-12 whose regex keywords match through RE2 (made once)."""
    from jsonschema import Draft202012Validator
    from jsonschema.validators import extend

    made: type[Validator] = extend(  # type: ignore[no-untyped-call]
        Draft202012Validator,
        validators={
            "pattern": _pattern,
            "patternProperties": _pattern_properties,
            "additionalProperties": _additional_properties,
            "unevaluatedProperties": _unevaluated_properties,
        },
    )
    return made


@functools.cache
def metaschema_formats() -> Any:
    """The format checker a schema is checked against the metaschema with: jsonschema's, but
    for `regex`, which it checks with Python's `re` (refusing ECMA's `(?<name>…)`); patterns
    are checked by RE2 instead (`app.tools.patterns.pattern_problem`)."""
    from jsonschema import Draft202012Validator, FormatChecker

    checkers = Draft202012Validator.FORMAT_CHECKER.checkers
    return FormatChecker(formats=[name for name in checkers if name != "regex"])
