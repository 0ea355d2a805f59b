"""A schema's regular expressions matched in linear time (RE2), never by backtracking.

JSON Schema's `pattern` and `patternProperties` come from a request (or a profile, an MCP
server) and are matched against what a model wrote. jsonschema matches them with Python's
`re`, which backtracks: `^(a+)+$` against 35 characters holds the event loop (and the GIL) for
minutes. Here they are matched by RE2 (the `google-re2` package), whose time grows linearly
with the text, whatever the pattern:

- `translated` turns a pattern (ECMA-262, as JSON Schema specifies) into RE2 syntax:
  `\\uXXXX` (and a surrogate pair of them, `\\u{X…}`) becomes `\\x{X…}`, `\\cX` the control
  character. RE2 already reads the rest as ECMA does: `\\d`, `\\w`, `\\b` are ASCII, `$` is
  the end of the text (Python's `$` also matches before a final newline), `(?<name>…)` names
  a group. Left as RE2 reads them: `\\s` (no vertical tab nor Unicode spaces beyond ASCII) and
  `.` (any character but `\\n`; ECMA also excludes `\\r`, U+2028 and U+2029).
- `pattern_problem` names, once per schema, the first pattern RE2 refuses: backreferences
  (`\\1`, `\\k<name>`), lookahead and lookbehind (`(?=`, `(?!`, `(?<=`, `(?<!`), which no
  linear-time engine has; a 422 at POST (`app.tools.base`).
- `search` is what the validator (`app.tools.validator`) matches with.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from app.engine.errors import FinishlineError
from app.engine.paths import field_path
from app.tools.schemaguard import subschemas

if TYPE_CHECKING:
    import re2

_ESCAPES = re.compile(r"\\(?:u\{([0-9A-Fa-f]{1,6})\}|u([0-9A-Fa-f]{4})|c([A-Za-z])|(.))", re.S)
_HIGH = range(0xD800, 0xDC00)
_LOW = range(0xDC00, 0xE000)


def translated(pattern: str) -> str:
    """`pattern` (ECMA-262) in RE2's syntax; see the module docstring."""
    if "\\" not in pattern:
        return pattern
    pieces: list[str] = []
    last = 0
    high: int | None = None  # the code of a `\uD8xx` just written, waiting for its low half
    for match in _ESCAPES.finditer(pattern):
        braced, four, control, other = match.groups()
        between = pattern[last : match.start()]
        last = match.end()
        code = int(braced or four, 16) if (braced or four) else None
        if high is not None and not between and code is not None and code in _LOW:
            pieces[-1] = f"\\x{{{0x10000 + ((high - 0xD800) << 10) + (code - 0xDC00):X}}}"
            high = None
            continue
        pieces.append(between)
        high = code if code is not None and code in _HIGH else None
        if code is not None:
            pieces.append(f"\\x{{{code:X}}}")
        elif control is not None:
            pieces.append(f"\\x{{{ord(control.upper()) - 64:02X}}}")
        else:
            pieces.append(f"\\{other}")
    pieces.append(pattern[last:])
    return "".join(pieces)


class PatternError(ValueError, FinishlineError):
    """RE2 refuses the pattern; the message is RE2's reason."""


@functools.lru_cache(maxsize=4096)
def compiled(pattern: str) -> re2._Regexp:
    """`pattern` compiled by RE2 (remembered); PatternError when RE2 refuses it."""
    import re2

    options = re2.Options()
    options.log_errors = False
    try:
        return re2.compile(translated(pattern), options)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        text = reason.decode("utf-8", "replace") if isinstance(reason, bytes) else str(reason)
        raise PatternError(text) from None


def search(pattern: str, text: str) -> bool:
    """Whether `pattern` (ECMA-262) matches somewhere in `text`, in linear time."""
    return compiled(pattern).search(text) is not None


def pattern_problem(schema: Mapping[str, Any]) -> str | None:
    """The first `pattern` or `patternProperties` name of `schema` that RE2 refuses, as
    " at 'where': what"; None when RE2 takes them all (RE2 is imported at the first pattern:
    a schema without one, like most, never loads it)."""
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(schema, ())]
    while stack:
        node, path = stack.pop()
        if not isinstance(node, dict):
            continue
        found = node.get("pattern")
        named = node.get("patternProperties")
        candidates: list[tuple[tuple[str, ...], str]] = []
        if isinstance(found, str):
            candidates.append((("pattern",), found))
        if isinstance(named, dict):
            candidates += [(("patternProperties", name), name) for name in named]
        for where, pattern in candidates:
            try:
                compiled(pattern)
            except PatternError as exc:
                return (
                    f" at '{field_path((*path, *where))}': the pattern {pattern!r} is not one"
                    f" finishline can match in linear time ({exc}); backreferences"
                    " and lookaround are not supported"
                )
        stack.extend((child, (*path, *key)) for key, child in subschemas(node))
    return None
