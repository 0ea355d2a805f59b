"""calculator: arithmetic on a whitelist, never eval; every refusal is a clear ToolError."""

from __future__ import annotations

import re

import pytest

from app.engine.ports import ToolContext
from app.tools.base import ToolError
from app.tools.calculator import MAX_EXPRESSION_CHARS, CalculatorTool


async def calc(expression: str, ctx: ToolContext) -> str:
    tool = CalculatorTool()
    assert tool.validate({"expression": expression}) is None
    return await tool.call({"expression": expression}, ctx)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("1 + 2 * 3", "7"),
        ("(1 + 2) * 3", "9"),
        ("2 ** 10", "1024"),
        ("-2 ** 2", "-4"),
        ("+5 - -5", "10"),
        ("7 / 2", "3.5"),
        ("7 // 2", "3"),
        ("7 % 3", "1"),
        ("0.1 + 0.2", "0.3"),
        ("1_000 * 3", "3000"),
        ("2 ** -1", "0.5"),
        ("sqrt(16)", "4"),
        ("sqrt(2)", "1.4142135623731"),
        ("sin(pi / 2)", "1"),
        ("cos(0) + tan(0)", "1"),
        ("log(e)", "1"),
        ("log(8, 2)", "3"),
        ("log10(1000) + log2(8)", "6"),
        ("exp(0)", "1"),
        ("abs(-3.5)", "3.5"),
        ("round(2.567, 2)", "2.57"),
        ("round(2.5)", "2"),
        ("floor(-2.5) + ceil(2.1)", "0"),
        ("factorial(20)", "2432902008176640000"),
        ("2 ** 100", "1267650600228229401496703205376"),
        ("tau / pi", "2"),
    ],
)
async def test_calculator_evaluates_arithmetic(
    expression: str, expected: str, ctx: ToolContext
) -> None:
    assert await calc(expression, ctx) == expected


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("__import__('os')", "unknown function '__import__'"),
        ("__import__('os').system('true')", "attribute access cannot be called"),
        ("(1).__class__", "attribute access is not allowed"),
        ("().__class__.__bases__[0]", "indexing is not allowed"),
        ("().__class__", "attribute access is not allowed"),
        ("open('/etc/passwd')", "unknown function 'open'"),
        ("eval('1')", "unknown function 'eval'"),
        ("x + 1", "unknown name 'x'"),
        ("[1, 2][0]", "indexing is not allowed"),
        ("'a' * 3", "'a' is not a number"),
        ("True + 1", "True is not a number"),
        ("1j * 2", "1j is not a number"),
        ("lambda: 1", "a lambda is not allowed"),
        ("1 < 2", "a comparison is not allowed"),
        ("(y := 2)", "an assignment is not allowed"),
        ("f'{1}'", "an f-string is not allowed"),
        ("sqrt(x=4)", "plain positional arguments only"),
        ("sqrt(*[4])", "plain positional arguments only"),
        ("(sqrt)(4)(1)", "cannot be called"),
        ("2 ^ 3", "use ** for powers"),
        ("6 & 3", "the operator"),
        ("1 / 0", "division by zero"),
        ("1 // 0", "division by zero"),
        ("1 % 0", "division by zero"),
        ("0 ** -1", "division by zero"),
        ("1 +", "syntax error"),
        ("2 3", "syntax error"),
        ("sqrt(-1)", "math domain error in sqrt(-1)"),
        ("log(0)", "math domain error"),
        ("sqrt(1, 2)", "wrong number or kind of arguments for sqrt()"),
        ("(-8) ** 0.5", "complex number"),
        ("9 ** 9 ** 9", "9 ** 387420489 is too large to compute"),
        ("10 ** 100000", "too large to compute"),
        ("2 ** 3999 * 2 ** 3999", "the result is too large"),
        ("factorial(100000)", "factorial() is limited to 1000"),
        ("factorial(2.5)", "whole number"),
        ("factorial(1000) * factorial(1000)", "the result is too large"),
        ("round(10, -1000000000)", "between -100 and 100"),
        ("exp(1000)", "the result is too large"),
        ("10.0 ** 400", "the result is too large"),
        ("10 ** 400 / 3", "the result is too large"),
        ("1e308 * 10", "not a finite number"),
        ("-" * 200 + "1", "nested too deeply"),
        ("(" * 300 + "1" + ")" * 300, "too many nested parentheses"),
    ],
)
async def test_calculator_refuses_with_a_clear_message(
    expression: str, message: str, ctx: ToolContext
) -> None:
    with pytest.raises(ToolError, match=re.escape(message)):
        await CalculatorTool().call({"expression": expression}, ctx)


async def test_calculator_refuses_an_expression_over_the_length_limit(ctx: ToolContext) -> None:
    expression = "+".join(["1"] * MAX_EXPRESSION_CHARS)
    assert CalculatorTool().validate({"expression": expression}) is not None
    with pytest.raises(ToolError, match="longer than 1000 characters"):
        await CalculatorTool().call({"expression": expression}, ctx)


def test_calculator_validate_rejects_a_non_string_expression() -> None:
    assert CalculatorTool().validate({"expression": 3}) == (
        "at 'expression': 3 is not of type 'string'"
    )


def test_calculator_lists_what_it_supports_in_its_description() -> None:
    description = CalculatorTool().description
    assert "sqrt" in description
    assert "**" in description
