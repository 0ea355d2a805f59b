"""The `calculator` tool: arithmetic on a whitelisted subset of Python expression syntax.

The expression is parsed with `ast` and walked node by node; nothing is ever passed to
`eval` or `exec`. Allowed: int and float literals, `+ - * / // % **`, unary `+`/`-`,
parentheses, the constants in `CONSTANTS` and the functions in `FUNCTIONS`. Everything
else (names, attributes, subscripts, calls of anything but a listed function, strings,
comparisons, lambdas...) is refused with a message saying what is allowed.

Denial of service is bounded before the work is done: the expression length, the nesting
depth, the size of an integer power (`9**9**9` is refused without being computed), the
argument of `factorial` and `round`'s digits; every intermediate integer is capped at
`MAX_INT_BITS` bits and floats that overflow are reported, never returned as `inf`.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

from app.engine.ports import ToolContext
from app.tools.base import SchemaTool, ToolError

Number = int | float

MAX_EXPRESSION_CHARS = 1_000
MAX_DEPTH = 64
MAX_INT_BITS = 4_000
"""About 1,200 decimal digits: more than any answer needs, cheap to compute and print."""
MAX_FACTORIAL = 1_000
MAX_ROUND_DIGITS = 100

CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e, "tau": math.tau}


def _log(x: Number, base: Number = math.e) -> float:
    return math.log(x, base)


def _round(x: Number, ndigits: Number | None = None) -> Number:
    if ndigits is None:
        return round(x)
    if not isinstance(ndigits, int) or abs(ndigits) > MAX_ROUND_DIGITS:
        raise ToolError("round() takes a whole number of digits between -100 and 100")
    return round(x, ndigits)


def _factorial(n: Number) -> int:
    if isinstance(n, float) and n.is_integer():
        n = int(n)
    if not isinstance(n, int) or n < 0:
        raise ToolError("factorial() takes a whole number that is not negative")
    if n > MAX_FACTORIAL:
        raise ToolError(f"factorial() is limited to {MAX_FACTORIAL} here")
    return math.factorial(n)


FUNCTIONS: dict[str, Callable[..., Number]] = {
    "abs": abs,
    "round": _round,
    "sqrt": math.sqrt,
    "exp": math.exp,
    "log": _log,
    "log10": math.log10,
    "log2": math.log2,
    "sin": math.sin,
    "cos": math.cos,
    "tan": math.tan,
    "asin": math.asin,
    "acos": math.acos,
    "atan": math.atan,
    "floor": math.floor,
    "ceil": math.ceil,
    "factorial": _factorial,
}

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Number], Number]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}
_ALLOWED = (
    "numbers, + - * / // % **, parentheses, the constants "
    + ", ".join(CONSTANTS)
    + " and the functions "
    + ", ".join(FUNCTIONS)
)

PARAMETERS = {
    "type": "object",
    "properties": {
        "expression": {
            "type": "string",
            "description": "An arithmetic expression, e.g. 'sqrt(2) * (3 + 4) ** 2'.",
            "minLength": 1,
            "maxLength": MAX_EXPRESSION_CHARS,
        }
    },
    "required": ["expression"],
    "additionalProperties": False,
}


class CalculatorTool(SchemaTool):
    """Evaluates an arithmetic expression exactly (integers) or to double precision."""

    def __init__(self) -> None:
        super().__init__(
            name="calculator",
            description=(
                "Evaluate an arithmetic expression and return its value. Supports "
                f"{_ALLOWED}. Use ** for powers."
            ),
            parameters=PARAMETERS,
            builtin=True,
        )

    async def call(self, arguments: dict[str, Any], ctx: ToolContext) -> str:
        return format_number(evaluate(arguments["expression"]))


def evaluate(expression: str) -> Number:
    """The value of `expression`, or `ToolError` saying why it cannot be computed."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ToolError(f"the expression is longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        where = f" at column {exc.offset}" if exc.offset else ""
        raise ToolError(f"syntax error{where}: {exc.msg}") from None
    except (ValueError, RecursionError, MemoryError):
        raise ToolError("the expression cannot be parsed (too deeply nested?)") from None
    try:
        result = _eval(tree.body, 0)
    except ZeroDivisionError:
        raise ToolError("division by zero") from None
    except OverflowError:
        raise ToolError("the result is too large") from None
    except ValueError as exc:
        raise ToolError(f"math domain error ({exc})") from None
    if isinstance(result, float) and not math.isfinite(result):
        raise ToolError("the result is not a finite number")
    return result


def format_number(value: Number) -> str:
    """Integers in full; floats to 15 significant digits, so 0.1 + 0.2 reads 0.3."""
    if isinstance(value, int):
        return str(value)
    return format(value, ".15g")


def _eval(node: ast.expr, depth: int) -> Number:
    if depth > MAX_DEPTH:
        raise ToolError("the expression is nested too deeply")
    if isinstance(node, ast.Constant):
        value: object = node.value
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ToolError(f"{value!r} is not a number; {_ALLOWED} are allowed")
        return value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand, depth + 1))
    if isinstance(node, ast.BinOp):
        return _binary(node, depth)
    if isinstance(node, ast.Name):
        if node.id in CONSTANTS:
            return CONSTANTS[node.id]
        raise ToolError(f"unknown name {node.id!r}; {_ALLOWED} are allowed")
    if isinstance(node, ast.Call):
        return _call(node, depth)
    raise ToolError(f"{_describe(node)} is not allowed; {_ALLOWED} are allowed")


def _binary(node: ast.BinOp, depth: int) -> Number:
    apply = _BINARY.get(type(node.op))
    if apply is None:
        if isinstance(node.op, ast.BitXor):
            raise ToolError("'^' is not supported: use ** for powers")
        raise ToolError(f"the operator {_describe(node.op)} is not allowed; {_ALLOWED} are allowed")
    left = _eval(node.left, depth + 1)
    right = _eval(node.right, depth + 1)
    if isinstance(node.op, ast.Pow):
        _check_power(left, right)
    result = apply(left, right)
    if isinstance(result, complex):
        raise ToolError("the result is a complex number, which is not supported")
    return _checked(result)


def _call(node: ast.Call, depth: int) -> Number:
    if not isinstance(node.func, ast.Name):
        raise ToolError(f"{_describe(node.func)} cannot be called; {_ALLOWED} are allowed")
    function = FUNCTIONS.get(node.func.id)
    if function is None:
        raise ToolError(f"unknown function {node.func.id!r}; {_ALLOWED} are allowed")
    if node.keywords or any(isinstance(arg, ast.Starred) for arg in node.args):
        raise ToolError(f"{node.func.id}() takes plain positional arguments only")
    args = [_eval(arg, depth + 1) for arg in node.args]
    try:
        result = function(*args)
    except TypeError:
        raise ToolError(f"wrong number or kind of arguments for {node.func.id}()") from None
    except ValueError:
        shown = ", ".join(format_number(arg) for arg in args)
        raise ToolError(f"math domain error in {node.func.id}({shown})") from None
    return _checked(result)


def _check_power(base: Number, exponent: Number) -> None:
    """Refuse an integer power whose result would exceed `MAX_INT_BITS`, before computing it."""
    if not (isinstance(base, int) and isinstance(exponent, int)) or exponent <= 0:
        return
    if abs(base) <= 1:
        return
    if exponent * (abs(base).bit_length() - 1) > MAX_INT_BITS:
        raise ToolError(
            f"{base} ** {exponent} is too large to compute (results are limited to about "
            f"{MAX_INT_BITS * 3 // 10} digits)"
        )


def _checked(value: Number) -> Number:
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise ToolError(
            f"the result is too large (limited to about {MAX_INT_BITS * 3 // 10} digits)"
        )
    return value


def _describe(node: ast.AST) -> str:
    names = {
        "Attribute": "attribute access",
        "Subscript": "indexing",
        "Compare": "a comparison",
        "BoolOp": "a boolean operator",
        "Lambda": "a lambda",
        "IfExp": "a conditional expression",
        "JoinedStr": "an f-string",
        "List": "a list",
        "Tuple": "a tuple",
        "Dict": "a dict",
        "Set": "a set",
        "NamedExpr": "an assignment",
    }
    kind = type(node).__name__
    return names.get(kind, f"'{kind}'")
