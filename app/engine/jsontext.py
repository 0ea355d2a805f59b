"""The one way JSON that a model (or a model's server) wrote is parsed: bounded.

`json.loads` of text nested deeper than Python's recursion limit (5,000 `[`, say) raises
`RecursionError`, which no `ValueError` handler catches: the run failed `internal` instead of
showing the model its mistake. And text that parses may nest deep enough to break what comes
after (validation, storage). `loads` raises `ValueError` for both: `json.JSONDecodeError` for
text that is not JSON, `TooDeepError` for a value nesting more than `MAX_DEPTH` levels of
arrays and objects. `problem` says either in a line the model can act on.

The depth is counted only when the text has more brackets than `MAX_DEPTH` (two `count`s at C
speed): an ordinary tool call's arguments never pay for the walk.
"""

from __future__ import annotations

import json
from typing import Any

from app.engine.errors import FinishlineError

MAX_DEPTH = 64
"""Levels of arrays and objects a model's JSON may nest (a request's own JSON: 32)."""


class TooDeepError(ValueError, FinishlineError):
    """The JSON nests more than `MAX_DEPTH` levels of arrays and objects."""

    def __init__(self) -> None:
        super().__init__(f"nests deeper than {MAX_DEPTH} levels of arrays and objects")


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_DECODER = json.JSONDecoder()
_STRICT = json.JSONDecoder(parse_constant=_no_constants)
_WHITESPACE = " \t\n\r"


def loads(text: str | bytes, *, constants: bool = True) -> Any:
    """`json.loads(text)`, bounded (see the module docstring). `constants=False`: `NaN` and
    `Infinity` are errors too. For `str`, a third of `json.loads`' cost: `raw_decode` skips
    `decode`'s two whitespace scans (once per tool call)."""
    try:
        if isinstance(text, str):
            value = _decoded(text, _DECODER if constants else _STRICT)
            brackets = text.count("[") + text.count("{")
        else:
            value = json.loads(text, parse_constant=None if constants else _no_constants)
            brackets = text.count(b"[") + text.count(b"{")
    except RecursionError:
        raise TooDeepError from None
    if brackets > MAX_DEPTH and depth(value) > MAX_DEPTH:
        raise TooDeepError
    return value


def _decoded(text: str, decoder: json.JSONDecoder) -> Any:
    if text[:1] in _WHITESPACE or text[-1:] in _WHITESPACE:
        text = text.strip(_WHITESPACE)
    if text.startswith("\ufeff"):
        raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
    value, end = decoder.raw_decode(text)
    if end != len(text):  # reported where json.loads does: after the whitespace
        pos = len(text) - len(text[end:].lstrip(_WHITESPACE))
        raise json.JSONDecodeError("Extra data", text, pos)
    return value


def depth(value: Any) -> int:
    """How many levels of arrays and objects nest in `value` (0 for a scalar); no recursion,
    and it stops counting past `MAX_DEPTH`."""
    levels, level = 0, [value]
    while levels <= MAX_DEPTH and (level := [v for v in level if isinstance(v, dict | list)]):
        levels += 1
        level = [c for v in level for c in (v.values() if isinstance(v, dict) else v)]
    return levels


def problem(exc: ValueError) -> str:
    """What is wrong with the text, for the model: `Expecting value at position 0`."""
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} at position {exc.pos}"
    return str(exc)
