"""SchemaTool: schema checked once, one precise message per invalid call; ToolError."""

from __future__ import annotations

from typing import Any

import pytest

from app.engine.ports import Tool, ToolContext
from app.tools.base import SchemaTool

ANSWER_SCHEMA = {
    "type": "object",
    "properties": {
        "answer": {"type": "string"},
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"n": {"type": "integer"}},
                "required": ["n"],
            },
        },
    },
    "required": ["answer"],
    "additionalProperties": False,
}


class EchoTool(SchemaTool):
    def __init__(self, parameters: dict[str, Any] = ANSWER_SCHEMA, name: str = "echo") -> None:
        super().__init__(name=name, description="Echo the answer.", parameters=parameters)

    async def call(self, arguments: dict[str, Any], ctx: ToolContext) -> str:
        return arguments["answer"]


def test_schema_tool_satisfies_the_engine_tool_protocol() -> None:
    assert isinstance(EchoTool(), Tool)


def test_validate_accepts_arguments_that_fit_the_schema() -> None:
    assert EchoTool().validate({"answer": "yes", "items": [{"n": 1}]}) is None


def test_validate_names_a_missing_required_property() -> None:
    assert EchoTool().validate({}) == "'answer' is a required property"


def test_validate_names_the_path_of_a_wrong_type() -> None:
    assert EchoTool().validate({"answer": 3}) == "at 'answer': 3 is not of type 'string'"


def test_validate_names_nested_paths_with_indexes() -> None:
    message = EchoTool().validate({"answer": "a", "items": [{"n": 1}, {"n": "two"}]})
    assert message == "at 'items[1].n': 'two' is not of type 'integer'"


def test_validate_names_unexpected_properties() -> None:
    message = EchoTool().validate({"answer": "a", "anwser": "b"})
    assert message is not None
    assert "'anwser' was unexpected" in message


def test_validate_shortens_messages_that_quote_huge_values() -> None:
    message = EchoTool().validate({"answer": ["x" * 10_000]})
    assert message is not None
    assert message.startswith("at 'answer': ")
    assert len(message) <= 320
    assert message.endswith("…")


def test_schema_tool_refuses_an_invalid_schema_at_construction() -> None:
    with pytest.raises(ValueError, match=r"not a valid JSON schema at 'properties.answer.type'"):
        EchoTool({"type": "object", "properties": {"answer": {"type": "text"}}})


@pytest.mark.parametrize("name", ["", "has space", "dots.not.allowed", "x" * 65])
def test_schema_tool_refuses_a_name_chat_apis_reject(name: str) -> None:
    with pytest.raises(ValueError, match="invalid tool name"):
        EchoTool(name=name)


def test_schema_tool_keeps_its_own_copy_of_the_schema() -> None:
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}}
    tool = EchoTool(schema)
    schema["properties"]["answer"]["type"] = "integer"
    assert tool.validate({"answer": "still a string"}) is None


def test_tool_errors_are_the_engines_so_the_model_sees_their_message_as_is() -> None:
    from app.engine import errors
    from app.tools.base import ToolError
    from app.tools.netguard import BlockedHostError

    assert ToolError is errors.ToolError
    assert issubclass(BlockedHostError, errors.ToolError)


class BuiltinEcho(EchoTool):
    def __init__(self, parameters: dict[str, Any]) -> None:
        SchemaTool.__init__(
            self, name="echo", description="Echo.", parameters=parameters, builtin=True
        )


def test_a_builtin_tool_compiles_its_schema_at_its_first_call() -> None:
    tool = BuiltinEcho(ANSWER_SCHEMA)
    assert tool._validator is None  # made at start-up: nothing compiled (nor jsonschema loaded)
    assert tool.validate({"answer": "yes"}) is None
    assert tool.validate({"answer": 1}) == "at 'answer': 1 is not of type 'string'"
    assert tool._validator is not None


def test_a_builtin_tool_with_a_broken_schema_fails_at_its_first_call() -> None:
    tool = BuiltinEcho({"type": "objekt"})
    with pytest.raises(ValueError, match="not a valid JSON schema"):
        tool.validate({})


def test_every_builtin_tool_has_a_valid_schema() -> None:
    """The built-in tools' schemas are finishline's own, compiled at their first call: checked
    here instead of at start-up."""
    from app.tools.plan import UpdatePlanTool
    from app.tools.registry import builtin_registry

    registry = builtin_registry(http_allow_hosts=["example.com"])
    tools = [*registry.resolve(list(registry.names())), UpdatePlanTool()]
    assert {t.name for t in tools} >= {"calculator", "current_time", "http_get", "update_plan"}
    for tool in tools:
        assert isinstance(tool, SchemaTool)
        assert tool._compiled(tool.parameters).validator is not None, tool.name
