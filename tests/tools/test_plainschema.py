"""The quick yes of a plain tool schema (`app.tools.plainschema`, issue #42): it says "fits"
only where jsonschema says valid, and it is asked first by every `SchemaTool`."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from app.tools.base import SchemaTool, compiled_schema
from app.tools.calculator import PARAMETERS
from app.tools.plainschema import plain_fit

EXAMPLES = hypothesis_settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=400,
    suppress_health_check=[HealthCheck.too_slow],
)

TYPE_NAMES = ["string", "integer", "number", "boolean", "null", "object", "array"]
property_schemas = st.fixed_dictionaries(
    {
        "type": st.one_of(
            st.sampled_from(TYPE_NAMES),
            st.lists(st.sampled_from(TYPE_NAMES), min_size=1, unique=True),
        )
    },
    optional={
        "description": st.text(max_size=5),
        "minLength": st.integers(0, 3),
        "maxLength": st.integers(0, 3),
        "enum": st.lists(st.sampled_from(["a", "b", "1", ""]), min_size=1, unique=True),
    },
)
NAMES = ["a", "b", "c"]
schemas = st.fixed_dictionaries(
    {
        "type": st.just("object"),
        "properties": st.dictionaries(st.sampled_from(NAMES), property_schemas),
    },
    optional={
        "required": st.lists(st.sampled_from(NAMES), unique=True),
        "additionalProperties": st.booleans(),
        "title": st.text(max_size=3),
    },
)
values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-2, 2),
    st.sampled_from([0.0, 1.0, 1.5, -2.0, float("nan")]),
    st.sampled_from(["", "a", "b", "1", "abcd"]),
    st.just([]),
    st.just({}),
    st.just([1]),
)
arguments = st.dictionaries(st.sampled_from([*NAMES, "d"]), values, max_size=4)


def valid(schema: dict[str, Any], instance: dict[str, Any]) -> bool:
    compiled = compiled_schema(schema)
    assert compiled.validator is not None, compiled.problem
    return bool(compiled.validator.is_valid(instance))


@EXAMPLES
@given(schema=schemas, instance=arguments)
def test_the_quick_check_says_fits_only_where_jsonschema_says_valid(
    schema: dict[str, Any], instance: dict[str, Any]
) -> None:
    fits = plain_fit(schema)
    assert fits is not None  # every schema drawn here is plain
    if fits(instance):
        assert valid(schema, instance)


@EXAMPLES
@given(schema=schemas, instance=arguments)
def test_the_quick_check_says_fits_for_valid_arguments_of_a_schema_with_no_enum(
    schema: dict[str, Any], instance: dict[str, Any]
) -> None:
    """Not only a safe answer but a useful one: without `enum` (left to jsonschema when the
    value is no string) it says yes to every valid call."""
    for subschema in schema["properties"].values():
        subschema.pop("enum", None)
    fits = plain_fit(schema)
    assert fits is not None
    assert fits(instance) == valid(schema, instance)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"a": {"type": "string", "pattern": "^x"}}},
        {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "string"}}}},
        {"type": "object", "properties": {"a": {"$ref": "#/$defs/x"}}, "$defs": {"x": {}}},
        {"type": "object", "properties": {"a": {"type": "integer", "enum": [1, 2]}}},
        {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0}}},
        {"type": "object", "additionalProperties": {"type": "string"}},
        {"type": "object", "properties": {"a": True}},
        {"properties": {"a": {"type": "string"}}},
        {"type": "object", "anyOf": [{"required": ["a"]}]},
    ],
)
def test_a_schema_with_any_other_keyword_gets_no_quick_check(schema: dict[str, Any]) -> None:
    assert plain_fit(schema) is None


class Echo(SchemaTool):
    def __init__(self, parameters: dict[str, Any], *, builtin: bool = False) -> None:
        super().__init__(name="echo", description="d", parameters=parameters, builtin=builtin)

    async def call(self, arguments: dict[str, Any], ctx: Any) -> str:
        return ""


@pytest.mark.parametrize("builtin", [False, True])
def test_a_tool_asks_the_quick_check_first_and_jsonschema_for_the_error(
    builtin: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    tool = Echo(dict(PARAMETERS), builtin=builtin)
    assert tool.validate({"expression": "1 + 1"}) is None  # (a built-in's first call compiles)
    assert tool._fits is not None
    asked: list[Any] = []
    monkeypatch.setattr(tool, "_validator", _Refusing(asked))
    assert tool.validate({"expression": "2 * 3"}) is None
    assert asked == []  # jsonschema was not asked
    monkeypatch.undo()
    assert tool.validate({"expression": ""}) == "at 'expression': '' should be non-empty"
    assert tool.validate({"expression": "1", "x": 1}) == (
        "Additional properties are not allowed ('x' was unexpected)"
    )


class _Refusing:
    def __init__(self, asked: list[Any]) -> None:
        self.asked = asked

    def iter_errors(self, instance: Any) -> Any:
        self.asked.append(instance)
        raise AssertionError("jsonschema asked")
