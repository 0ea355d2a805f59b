"""What a decoded JSON body may hold beyond its shape: values Python's JSON parser lets
through but nothing downstream can carry.

- non-finite numbers (`NaN`, `Infinity`, and `1e400`, which parses as infinity): JSON has
  none, so the run could never be written back out;
- lone UTF-16 surrogates (`"\\ud800"`): not text, so not encodable as UTF-8 (a valid pair
  decodes to one character and is fine);
- integers outside 64 bits: past what SQLite and most JSON readers hold exactly.

And the helpers every request shape shares: `STRICT` models, JSON-Schema integers
(`json_integer`), how deep free-form JSON nests (`json_depth`).
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import ConfigDict
from pydantic_core import PydanticCustomError

from app.engine.paths import field_path

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
STRICT = ConfigDict(extra="forbid", strict=True)
"""Unknown fields refused; values taken as JSON types only, as the schema says (no `true`
for 1, no "30" for 30)."""
MAX_JSON_DEPTH = 32
"""How deeply free-form JSON (metadata, tool schemas, scripted arguments) may nest: far past
any real use, well short of what serializing it again can handle."""


def _text_problem(text: str) -> str | None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "contains a lone UTF-16 surrogate (not text)"
    return None


def json_problem(value: Any, root: str = "") -> tuple[str, str] | None:
    """The first unrepresentable value in `value` as (its path, what is wrong), else None.

    Iterative, so nesting cannot exhaust the stack; linear in the size of `value`. Every
    request body goes through it, so it first only looks (`_has_problem`: no path is built),
    and walks again naming the paths only when something is wrong."""
    if not _has_problem(value):
        return None
    return _first_problem(value, root)


def _has_problem(value: Any) -> bool:
    stack = [value]
    pop, extend = stack.pop, stack.extend
    while stack:
        item = pop()
        kind = type(item)
        if kind is str:
            if not item.isascii() and _text_problem(item):
                return True
        elif kind is int:
            if not INT64_MIN <= item <= INT64_MAX:
                return True
        elif kind is float:
            if not math.isfinite(item):
                return True
        elif kind is dict:
            for key in item:
                if type(key) is not str or (not key.isascii() and _text_problem(key)):
                    return True
            extend(item.values())
        elif kind is list:
            extend(item)
        elif item is not None and kind is not bool:
            return True  # another type (a subclass, a tuple): the full walk decides
    return False


def _first_problem(value: Any, root: str) -> tuple[str, str] | None:
    stack: list[tuple[str, Any]] = [(root, value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, str):
            problem = _text_problem(item)
            if problem:
                return path or "body", problem
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, int):
            if not INT64_MIN <= item <= INT64_MAX:
                return path or "body", "is an integer outside the 64-bit range"
        elif isinstance(item, float):
            if not math.isfinite(item):
                return path or "body", "is not a finite number (NaN, Infinity, or out of range)"
        elif isinstance(item, dict):
            children = list(item.items())
            for key, child in reversed(children):
                if isinstance(key, str) and (problem := _text_problem(key)):
                    return path or "body", f"has a key that {problem}"
                stack.append((field_path((str(key),), path), child))
        elif isinstance(item, list):
            stack.extend(
                (field_path((i,), path), child) for i, child in reversed(list(enumerate(item)))
            )
    return None


def json_integer(value: Any) -> Any:
    """JSON Schema's integers include 2.0: take it as 2 (strict mode refuses any float). One
    past 64 bits (`1e19`) is refused, as the integer literal would be (`app.runs.jsonsafe`):
    taken as it is, it was stored and then could not be read back."""
    if isinstance(value, float) and value.is_integer():
        if not INT64_MIN <= value <= INT64_MAX:
            raise PydanticCustomError("int64_range", "is an integer outside the 64-bit range")
        return int(value)
    return value


def json_depth(value: Any) -> int:
    """How many levels of objects and arrays nest in `value` (0 for a scalar); no recursion."""
    depth, level = 0, [value]
    while level := [v for v in level if isinstance(v, dict | list)]:
        depth += 1
        level = [c for v in level for c in (v.values() if isinstance(v, dict) else v)]
    return depth


def shallow(value: Any) -> Any:
    """`value`, if it nests no deeper than MAX_JSON_DEPTH (ValueError otherwise): a pydantic
    before-validator of free-form JSON fields."""
    if json_depth(value) > MAX_JSON_DEPTH:
        raise ValueError(f"nests deeper than {MAX_JSON_DEPTH} levels of objects and arrays")
    return value
