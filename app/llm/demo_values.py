"""Values the demo model makes up to match a JSON Schema (a run's `output_schema`, DESIGN §12),
so that a newcomer can try typed answers with no API key.

`example(schema, text=…, number=…)` builds one value from the schema's own words: `const`,
the first of an `enum`, then by `type`: an object with its properties (the required ones
first, within `maxProperties`), an array of `minItems` items (at least one, unless
`maxItems` is 0), a string (`text` at the top level, a short note inside; a date, an e-mail
or a URL for those `format`s; within `minLength`/`maxLength`), a number within its bounds
(`number`, what the demo's calculator returned, when it fits), `true`, `null`. `$ref`s to a
place in the document are followed (`#/$defs/…`), `allOf` merged, the first alternative of
`anyOf`/`oneOf` taken. It is a demo, not a solver: a `pattern` or an intricate schema may
get a value that does not validate, and the run then shows what an invalid answer does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

MAX_DEPTH = 12
SHORT = "demo value"
_FORMATS: dict[str, Callable[[], str]] = {
    "date-time": lambda: datetime.now(UTC).isoformat(timespec="seconds"),
    "date": lambda: datetime.now(UTC).date().isoformat(),
    "time": lambda: datetime.now(UTC).time().isoformat(timespec="seconds") + "Z",
    "email": lambda: "demo@example.com",
    "uri": lambda: "https://example.com/",
    "url": lambda: "https://example.com/",
    "uuid": lambda: "00000000-0000-4000-8000-000000000000",
}


def example(
    schema: Any,
    *,
    text: str = SHORT,
    short: str = SHORT,
    number: float | None = None,
    root: Mapping[str, Any] | None = None,
) -> Any:
    """A value for `schema` (see the module doc): `text` for a string at the top, `short` for
    one inside; `root` is the document its `$ref`s point into (the schema by default)."""
    maker = _Maker(root if root is not None else schema, text, short, number)
    return maker.value(schema, 0, top=True)


class _Maker:
    def __init__(self, root: Any, text: str, short: str, number: float | None) -> None:
        self.root = root
        self.text = text
        self.short = short
        self.number = number

    def value(self, schema: Any, depth: int, *, top: bool = False) -> Any:
        if not isinstance(schema, Mapping) or depth > MAX_DEPTH:
            return self.text if top else self.short
        schema = self._resolved(schema, depth)
        if "const" in schema:
            return schema["const"]
        if schema.get("enum"):
            return schema["enum"][0]
        for key in ("anyOf", "oneOf"):
            if schema.get(key):
                return self.value(schema[key][0], depth + 1, top=top)
        kind = schema.get("type")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), "null")
        if kind is None:
            kind = "object" if "properties" in schema else ("array" if "items" in schema else "")
        maker = {
            "object": self._object,
            "array": self._array,
            "string": self._string,
            "integer": self._integer,
            "number": self._number,
        }.get(kind)
        if maker is not None:
            return maker(schema, depth, top)
        return {"boolean": True, "null": None}.get(kind, self.text if top else self.short)

    def _resolved(self, schema: Mapping[str, Any], depth: int) -> Mapping[str, Any]:
        """`schema` with its local `$ref` followed and its `allOf` merged in."""
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith("#") and depth <= MAX_DEPTH:
            target: Any = self.root
            for token in [t for t in ref[1:].split("/") if t]:
                key = token.replace("~1", "/").replace("~0", "~")
                target = target.get(key) if isinstance(target, Mapping) else None
            if isinstance(target, Mapping):
                rest = {k: v for k, v in schema.items() if k != "$ref"}
                schema = {**self._resolved(target, depth + 1), **rest}
        if isinstance(schema.get("allOf"), list):
            merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
            for each in schema["allOf"]:
                if isinstance(each, Mapping):
                    part = self._resolved(each, depth + 1)
                    properties = {**merged.get("properties", {}), **part.get("properties", {})}
                    required = [*merged.get("required", []), *part.get("required", [])]
                    merged = {**part, **merged, "properties": properties, "required": required}
            schema = merged
        return schema

    def _object(self, schema: Mapping[str, Any], depth: int, top: bool) -> Any:
        properties = schema.get("properties") or {}
        required = [n for n in schema.get("required") or () if isinstance(n, str)]
        names = [*dict.fromkeys([*required, *properties])]
        most = schema.get("maxProperties")
        if isinstance(most, int):
            names = names[: max(most, len(required))]
        return {name: self.value(properties.get(name, {}), depth + 1) for name in names}

    def _array(self, schema: Mapping[str, Any], depth: int, top: bool) -> Any:
        prefix = list(schema.get("prefixItems") or ())
        least = schema.get("minItems", 0)
        most = schema.get("maxItems")
        count = max(least if isinstance(least, int) else 0, len(prefix), 1)
        if isinstance(most, int):
            count = min(count, most)
        items = schema.get("items", {})
        return [
            self.value(prefix[i] if i < len(prefix) else items, depth + 1) for i in range(count)
        ]

    def _string(self, schema: Mapping[str, Any], depth: int, top: bool) -> Any:
        made = _FORMATS.get(str(schema.get("format")))
        value = made() if made is not None else (self.text if top else self.short)
        least, most = schema.get("minLength"), schema.get("maxLength")
        if isinstance(least, int) and len(value) < least:
            value += "." * (least - len(value))
        if isinstance(most, int):
            value = value[:most]
        return value

    def _integer(self, schema: Mapping[str, Any], depth: int, top: bool) -> Any:
        return int(self._bounded(schema, integer=True))

    def _number(self, schema: Mapping[str, Any], depth: int, top: bool) -> Any:
        return self._bounded(schema, integer=False)

    def _bounded(self, schema: Mapping[str, Any], *, integer: bool) -> float:
        """`number` when it fits the bounds (and is an integer where one is wanted), else the
        lowest value they allow (0 when they allow it)."""
        low = _bound(schema, "minimum", "exclusiveMinimum", integer, up=True)
        high = _bound(schema, "maximum", "exclusiveMaximum", integer, up=False)
        for candidate in (self.number, 0):
            if candidate is None or (integer and candidate != int(candidate)):
                continue
            if (low is None or candidate >= low) and (high is None or candidate <= high):
                return candidate
        return low if low is not None else (high if high is not None else 0)


def _bound(
    schema: Mapping[str, Any], inclusive: str, exclusive: str, integer: bool, *, up: bool
) -> float | None:
    value = schema.get(inclusive)
    strict = schema.get(exclusive)
    if isinstance(strict, int | float) and not isinstance(strict, bool):
        step = 1 if integer else 1e-6
        value = strict + step if up else strict - step
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    if integer:
        return math.ceil(value) if up else math.floor(value)
    return value
