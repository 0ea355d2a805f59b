"""Typed answers (DESIGN §12): a run's answer checked against its `output_schema`.

An answer is checked where it is given: `task_finished`'s `answer` argument (the stop tool on;
the tool's `answer` parameter *is* the schema, `finish_spec`), a plain reply's text (the stop
tool off: it must parse as JSON), the degraded final answer at a limit, the last reply at
`nudge_limit`. A valid one is the run's `output`, its JSON text its `answer`; an invalid one
gives the model every error as a JSON path and a message (`errors_text`), at most
`MAX_OUTPUT_ERRORS` of them, and counts against `max_output_retries` (`app.engine.loop`).

A text answer may be wrapped in a Markdown code fence (models add one unasked): the fence is
taken off. A `task_finished` answer that is a string holding JSON that validates, where the
schema wants something else, is taken as that JSON (models stringify nested objects).
Values JSON cannot carry on (non-finite numbers, integers past 64 bits, lone surrogates) are
errors like any other.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.engine import jsontext
from app.engine.context import RunContext
from app.engine.policies import output_retries_exhausted
from app.engine.ports import OutputError, OutputSchema, ToolSpec
from app.engine.prompts import TASK_FINISHED, Prompts

MAX_OUTPUT_ERRORS = 50
"""Errors of one answer shown to the model and kept in `result.output_errors`; a note says
how many more there were."""
_INT64 = 2**63


@dataclass(frozen=True, slots=True)
class CheckedAnswer:
    """An answer checked against the run's schema. `text` is what `result.answer` carries:
    the value's JSON text when it parsed, else the text as given. `output` is the value when
    it validates; `errors` (at most `MAX_OUTPUT_ERRORS`) and `more` (how many were left off)
    say why it does not."""

    text: str
    output: Any = None
    errors: tuple[OutputError, ...] = ()
    more: int = 0

    @property
    def valid(self) -> bool:
        return not self.errors


_TEXT = json.JSONEncoder(ensure_ascii=False, allow_nan=False)
"""An answer's JSON text (made once: `json.dumps` with options makes an encoder per call)."""


def _unfenced(text: str) -> str:
    """`text` without a Markdown code fence around it (```json … ```), stripped."""
    text = text.strip()
    if text.startswith("```") and text.endswith("```") and len(text) >= 6:
        first_line, _, rest = text[3:-3].partition("\n")
        if first_line.strip().isalnum() or not first_line.strip():
            return rest.strip()
    return text


def json_path(parts: Sequence[str | int]) -> str:
    """`$`, `$.a`, `$.a[2]`, `$["a b"]`: where a value sits in an answer."""
    path = "$"
    for part in parts:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part.isidentifier():
            path += f".{part}"
        else:
            quoted = json.dumps(part, ensure_ascii=False)
            if _surrogate(quoted):
                quoted = json.dumps(part)  # escaped: a lone surrogate is not text
            path += f"[{quoted}]"
    return path


def _surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _unrepresentable(value: Any) -> OutputError | None:
    """The first value JSON cannot carry on (see the module doc), iteratively."""
    stack: list[tuple[list[str | int], Any]] = [([], value)]
    while stack:
        parts, item = stack.pop()
        problem = None
        if isinstance(item, str):
            if _surrogate(item):
                problem = "contains a lone UTF-16 surrogate (not text)"
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, int):
            problem = None if -_INT64 <= item < _INT64 else "is an integer past 64 bits"
        elif isinstance(item, float):
            problem = None if math.isfinite(item) else "is not a finite number"
        elif isinstance(item, dict):
            stack.extend(([*parts, str(k)], v) for k, v in item.items())
        elif isinstance(item, list):
            stack.extend(([*parts, i], v) for i, v in enumerate(item))
        if problem is not None:
            return OutputError(json_path(parts), problem)
    return None


_LONG_DIGITS = re.compile(r"\d{19,}")
"""A run of digits as long as an integer past 64 bits can be (or a string holding one)."""


def check_value(schema: OutputSchema, value: Any) -> CheckedAnswer:
    """A parsed JSON value against the schema. What JSON cannot carry on is looked for in
    the value's JSON text first (C speed); only a suspect text makes the walk that says where."""
    try:
        text = _TEXT.encode(value)
        text.encode("utf-8")
        suspect = _LONG_DIGITS.search(text) is not None
    except (ValueError, UnicodeEncodeError):
        suspect = True
    problem = _unrepresentable(value) if suspect else None
    if problem is not None:  # its text escaped to ASCII, so that it can be stored
        return CheckedAnswer(json.dumps(value), None, (problem,))
    errors = schema.errors(value)
    if not errors:
        return CheckedAnswer(text, value)
    kept = tuple(errors[:MAX_OUTPUT_ERRORS])
    return CheckedAnswer(text, None, kept, len(errors) - len(kept))


def check_text(schema: OutputSchema, text: str) -> CheckedAnswer:
    """A text answer (a plain reply, the degraded final answer): JSON that validates."""
    try:
        value = jsontext.loads(_unfenced(text), constants=False)
    except jsontext.TooDeepError as exc:
        return CheckedAnswer(text, None, (OutputError("$", str(exc)),))
    except ValueError as exc:
        return CheckedAnswer(
            text, None, (OutputError("$", f"is not JSON: {jsontext.problem(exc)}"),)
        )
    return check_value(schema, value)


def check_argument(schema: OutputSchema, answer: Any) -> CheckedAnswer:
    """`task_finished`'s `answer` argument: the value itself, or a string holding it."""
    checked = check_value(schema, answer)
    if checked.valid or not isinstance(answer, str):
        return checked
    inner = check_text(schema, answer)
    return inner if inner.valid else checked


def errors_text(checked: CheckedAnswer) -> str:
    """The errors as lines `- PATH: MESSAGE`, and how many more there were."""
    lines = [f"- {e.path}: {e.message}" for e in checked.errors]
    if checked.more:
        lines.append(f"- (and {checked.more} more)")
    return "\n".join(lines)


def invalid_answer_text(template: str, checked: CheckedAnswer, tries_left: int) -> str:
    count = len(checked.errors) + checked.more
    return template.format(count=count, errors=errors_text(checked), tries_left=tries_left)


def rejected(run: RunContext, checked: CheckedAnswer) -> tuple[int, bool]:
    """One more answer of `run` failed its schema: the tries the model has left, and whether
    that was its last (`max_output_retries`: the run ends with invalid_output)."""
    st, limits = run.state, run.limits
    st.invalid_answers += 1
    ended = output_retries_exhausted(st.invalid_answers, limits) is not None
    left = 0 if ended else limits.max_output_retries - st.invalid_answers + 1
    run.log.info("answer_rejected", errors=len(checked.errors) + checked.more, tries_left=left)
    return left, ended


# -- the stop tool with the schema as its answer ---------------------------------------------

_DEFS = ("$defs", "definitions")
_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})
"""Keywords whose values are data, not schemas: a `$ref` key there is not a reference."""


def _rerooted(node: Any) -> Any:
    """`node` with each `$ref` to a place in its document (`#…`, not in `$defs`) pointing
    into the stop tool's `answer` property, where the schema now sits."""
    if isinstance(node, list):
        return [_rerooted(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "$ref" and isinstance(value, str) and value.startswith("#"):
            pointer = value[1:]
            kept = any(pointer.startswith(f"/{d}/") for d in _DEFS)
            out[key] = value if kept else f"#/properties/answer{pointer}"
        elif key in _DATA_KEYWORDS:
            out[key] = value
        else:
            out[key] = _rerooted(value)
    return out


def finish_parameters(schema: Mapping[str, Any], prompts: Prompts) -> dict[str, Any]:
    """task_finished's parameters with `schema` as its `answer`: the schema's `$defs` (and
    `definitions`) move to the parameters' root, where `#/$defs/…` references find them, and
    other references into the schema are re-rooted under `answer`."""
    answer = {k: _rerooted(v) for k, v in schema.items() if k not in _DEFS}
    answer.setdefault("description", prompts.task_finished_answer)
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {"answer": answer},
        "required": ["answer"],
        "additionalProperties": False,
    }
    for key in _DEFS:
        if key in schema:
            parameters[key] = _rerooted(schema[key])
    return parameters


def finish_spec(schema: Mapping[str, Any], prompts: Prompts) -> ToolSpec:
    """The stop tool's spec whose `answer` is `schema`."""
    parameters = finish_parameters(schema, prompts)
    return ToolSpec(TASK_FINISHED, prompts.task_finished_description, parameters)


def schema_prompt(prompts: Prompts, output: OutputSchema) -> str:
    """The prompt that asks for an answer as JSON matching the schema (given compactly)."""
    schema = json.dumps(output.schema, ensure_ascii=False, separators=(",", ":"))
    return prompts.output_schema_prompt.format(schema=schema)


def limit_text(prompts: Prompts, reason: str, output: OutputSchema | None) -> str:
    """The prompt of the degraded final call: with an output schema, it asks for JSON
    matching it (the call also asks for it as `response_format`, where it can)."""
    text = prompts.limit_prompt.format(reason=reason)
    return text if output is None else f"{text}\n\n{schema_prompt(prompts, output)}"
