"""calculator: evaluate an arithmetic expression safely.

The expression is parsed with `ast` and walked against an allow-list; nothing is
ever passed to `eval` or `exec`. Operations that could exhaust memory or time
(`9**9**9`, `factorial(10**6)`, `1 << 10**9`, `[0] * 10**8`, ...) are refused before
they are computed: every integer result is bounded to MAX_INT_BITS bits, and operators
never apply to lists (no repetition or concatenation), so a list is never larger than
the expression that wrote it.
"""

from __future__ import annotations

import ast
import math
import operator
import statistics
from collections.abc import Callable
from typing import Any, TypeVar

from art.errors import ToolErrorCode
from art.tooling.contract import ExecutionContext, IToolExecutor, ToolResult, ToolSchema
from art.tools._common import failure, success

__all__ = ["Calculator", "CalculatorError", "evaluate"]

MAX_EXPRESSION_LENGTH = 2_000
MAX_INT_BITS = 10_000  # about 3,000 decimal digits
MAX_DEPTH = 100
MAX_ROUND_DIGITS = 400

Number = int | float
#: What an expression's parts evaluate to: a number, or a list literal's items.
Value = int | float | list["Value"]
_V = TypeVar("_V")


class CalculatorError(ValueError):
    """The expression is invalid, not allowed, or its result would be too large."""


CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e, "tau": math.tau}


def _aggregate(fn: Callable[[list[Number]], Number]) -> Callable[..., Number]:
    """Accept both `f(1, 2, 3)` and `f([1, 2, 3])`."""

    def call(*args: Value) -> Number:
        values = args[0] if len(args) == 1 and isinstance(args[0], list) else list(args)
        if not values:
            raise CalculatorError("needs at least one value")
        numbers: list[Number] = []
        for value in values:
            if isinstance(value, list):
                raise CalculatorError("expects numbers, not nested lists")
            numbers.append(value)
        return fn(numbers)

    return call


def _factorial(n: Number) -> int:
    if isinstance(n, float):
        if not n.is_integer():
            raise CalculatorError("factorial() needs a whole number")
        n = int(n)
    if n < 0:
        raise CalculatorError("factorial() of a negative number is undefined")
    if n > 1 and math.lgamma(n + 1) / math.log(2) > MAX_INT_BITS:
        raise CalculatorError(f"factorial({n}) is too large to compute")
    return math.factorial(n)


def _comb(n: int, k: int) -> int:
    if isinstance(n, int) and n > MAX_INT_BITS:
        raise CalculatorError(f"comb({n}, ...) is too large to compute")
    return math.comb(n, k)


def _perm(n: int, k: int | None = None) -> int:
    if isinstance(n, int) and n > 1:
        count = n if k is None else min(k, n)
        if count * math.log2(n) > MAX_INT_BITS:
            raise CalculatorError("perm() result is too large to compute")
    return math.perm(n, k)


def _round(x: Number, digits: int | None = None) -> Number:
    if digits is not None and (not isinstance(digits, int) or abs(digits) > MAX_ROUND_DIGITS):
        raise CalculatorError(f"round() digits must be a whole number within ±{MAX_ROUND_DIGITS}")
    return round(x) if digits is None else round(x, digits)


def _lcm(*args: int) -> int:
    if sum(abs(int(a)).bit_length() for a in args) > MAX_INT_BITS:
        raise CalculatorError("lcm() result is too large to compute")
    return math.lcm(*args)


FUNCTIONS: dict[str, Callable[..., Number]] = {
    # arithmetic
    "abs": abs,
    "round": _round,
    "floor": math.floor,
    "ceil": math.ceil,
    "trunc": math.trunc,
    "sqrt": math.sqrt,
    "cbrt": lambda x: math.copysign(abs(x) ** (1 / 3), x),
    "exp": math.exp,
    "log": math.log,
    "log10": math.log10,
    "log2": math.log2,
    "pow": lambda x, y: _power(x, y),
    "hypot": math.hypot,
    "factorial": _factorial,
    "comb": _comb,
    "perm": _perm,
    "gcd": math.gcd,
    "lcm": _lcm,
    # trigonometry
    "sin": math.sin,
    "cos": math.cos,
    "tan": math.tan,
    "asin": math.asin,
    "acos": math.acos,
    "atan": math.atan,
    "atan2": math.atan2,
    "sinh": math.sinh,
    "cosh": math.cosh,
    "tanh": math.tanh,
    "degrees": math.degrees,
    "radians": math.radians,
    # aggregates and statistics
    "min": _aggregate(min),
    "max": _aggregate(max),
    "sum": _aggregate(lambda v: sum(v) if all(isinstance(x, int) for x in v) else math.fsum(v)),
    "mean": _aggregate(statistics.fmean),
    "median": _aggregate(statistics.median),
    "mode": _aggregate(statistics.mode),
    "stdev": _aggregate(statistics.stdev),
    "pstdev": _aggregate(statistics.pstdev),
    "variance": _aggregate(statistics.variance),
    "pvariance": _aggregate(statistics.pvariance),
}


def _bits(value: Number) -> float:
    """log2 of |value| (0 for 0); math.log2 handles ints of any size."""
    return math.log2(abs(value)) if value else 0.0


def _check_int(value: _V) -> _V:
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise CalculatorError(f"a result is too large (over {MAX_INT_BITS} bits)")
    return value


def _power(base: Number, exponent: Number) -> Number:
    # Only int ** positive int can grow without bound; float powers raise OverflowError.
    grows = isinstance(base, int) and isinstance(exponent, int) and abs(base) > 1
    if grows and exponent > 0 and exponent * _bits(base) > MAX_INT_BITS:
        raise CalculatorError(
            f"{_short(base)} ** {_short(exponent)} is too large to compute "
            f"(limit: {MAX_INT_BITS} bits)"
        )
    result = base**exponent
    if isinstance(result, complex):
        raise CalculatorError("result is a complex number (negative base, fractional power)")
    return result


def _multiply(a: Number, b: Number) -> Number:
    if isinstance(a, int) and isinstance(b, int) and _bits(a) + _bits(b) > MAX_INT_BITS + 1:
        raise CalculatorError("product is too large to compute")
    return a * b


def _lshift(a: int, b: int) -> int:
    _require_ints("<<", a, b)
    if b > MAX_INT_BITS or _bits(a) + b > MAX_INT_BITS:
        raise CalculatorError(f"shift by {_short(b)} bits is too large")
    return a << b


def _rshift(a: int, b: int) -> int:
    _require_ints(">>", a, b)
    return a >> b if b <= MAX_INT_BITS else (0 if a >= 0 else -1)


def _require_ints(symbol: str, *values: object) -> None:
    if not all(isinstance(v, int) for v in values):
        raise CalculatorError(f"{symbol} needs whole numbers")


BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: _multiply,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: _power,
    ast.LShift: _lshift,
    ast.RShift: _rshift,
}
UNARY: dict[type[ast.unaryop], Callable[[Number], Number]] = {
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}
REFUSED: dict[type[ast.AST], str] = {
    ast.Attribute: "attribute access is not allowed",
    ast.Subscript: "subscripts (x[i]) are not allowed",
    ast.Lambda: "lambda expressions are not allowed",
    ast.ListComp: "comprehensions are not allowed",
    ast.SetComp: "comprehensions are not allowed",
    ast.DictComp: "comprehensions are not allowed",
    ast.GeneratorExp: "comprehensions are not allowed",
    ast.NamedExpr: "assignment (:=) is not allowed",
    ast.Compare: "comparisons are not supported",
    ast.BoolOp: "and/or are not supported",
    ast.IfExp: "conditional expressions are not supported",
    ast.JoinedStr: "strings are not supported",
    ast.Dict: "dicts are not supported",
    ast.Set: "sets are not supported",
    ast.Starred: "star-arguments are not supported",
    ast.Await: "await is not allowed",
}


def _syntax(exc: SyntaxError) -> str:
    """Python's reason, with where it is when Python says no more than "invalid syntax"."""
    if exc.msg == "invalid syntax" and exc.offset:
        return f"invalid syntax at character {exc.offset}"
    return exc.msg


def evaluate(expression: str) -> Number:
    """The value of `expression`; raises CalculatorError with a clear reason otherwise."""
    if not isinstance(expression, str) or not expression.strip():
        raise CalculatorError("the expression is empty")
    if len(expression) > MAX_EXPRESSION_LENGTH:
        raise CalculatorError(
            f"the expression is {len(expression)} characters long; the limit is "
            f"{MAX_EXPRESSION_LENGTH}"
        )
    # `^` means power in a calculator; as Python's xor it would bind looser than `+`.
    source = expression.strip().replace("^", "**")
    try:
        tree = ast.parse(source, mode="eval")
    except SyntaxError as exc:
        raise CalculatorError(f"invalid expression {expression!r}: {_syntax(exc)}") from None
    except (ValueError, RecursionError, MemoryError) as exc:
        raise CalculatorError(f"cannot parse the expression ({type(exc).__name__})") from None
    try:
        result = _eval(tree.body, 0)
    except CalculatorError:
        raise
    except ZeroDivisionError:
        raise CalculatorError("division by zero") from None
    except OverflowError:
        raise CalculatorError("the result is too large") from None
    except statistics.StatisticsError as exc:
        raise CalculatorError(str(exc)) from None
    except (ValueError, TypeError, ArithmeticError) as exc:
        raise CalculatorError(_plain_message(exc)) from None
    except RecursionError:
        raise CalculatorError("the expression is nested too deeply") from None
    if isinstance(result, list):
        raise CalculatorError("the expression is a list, not a number; wrap it in sum(), mean()...")
    if isinstance(result, float) and not math.isfinite(result):
        raise CalculatorError("the result is not a finite number")
    return result


def _eval(node: ast.AST, depth: int) -> Value:
    if depth > MAX_DEPTH:
        raise CalculatorError("the expression is nested too deeply")
    depth += 1
    if isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise CalculatorError(f"only numbers are allowed, not {value!r}"[:200])
        if isinstance(value, float) and not math.isfinite(value):
            raise CalculatorError("a number in the expression is too large")
        return _check_int(value)
    if isinstance(node, ast.BinOp):
        return _binary_chain(node, depth)
    if isinstance(node, ast.UnaryOp):
        op = UNARY.get(type(node.op))
        if op is None:
            raise CalculatorError(f"operator {_symbol(node.op)} is not supported")
        operand = _eval(node.operand, depth)
        _numbers(operand)
        _no_lists(_symbol(node.op), operand)
        assert not isinstance(operand, list)  # _no_lists refused it
        return op(operand)
    if isinstance(node, ast.Name):
        if node.id in CONSTANTS:
            return CONSTANTS[node.id]
        if node.id in FUNCTIONS:
            raise CalculatorError(f"{node.id} is a function: call it, e.g. {node.id}(2)")
        raise CalculatorError(f"unknown name {node.id!r}; known constants: {', '.join(CONSTANTS)}")
    if isinstance(node, ast.Call):
        return _call(node, depth)
    if isinstance(node, ast.List | ast.Tuple):
        items = [_eval(item, depth) for item in node.elts]
        _numbers(*items)
        return items
    reason = REFUSED.get(type(node), f"{type(node).__name__} is not supported")
    raise CalculatorError(reason)


def _binary_chain(node: ast.BinOp, depth: int) -> Value:
    """Evaluate `a + b - c * ...` along its left spine without recursing per operator."""
    spine: list[ast.BinOp] = []
    current: ast.AST = node
    while isinstance(current, ast.BinOp):
        spine.append(current)
        current = current.left
    value = _eval(current, depth)
    for binop in reversed(spine):
        op = BINARY.get(type(binop.op))
        if op is None:
            raise CalculatorError(f"operator {_symbol(binop.op)} is not supported")
        right = _eval(binop.right, depth)
        _numbers(value, right)
        _no_lists(_symbol(binop.op), value, right)
        value = _check_int(op(value, right))
    return value


def _call(node: ast.Call, depth: int) -> Value:
    if not isinstance(node.func, ast.Name):
        if isinstance(node.func, ast.Attribute):
            raise CalculatorError("attribute access is not allowed")
        raise CalculatorError("only named functions can be called, e.g. sqrt(2)")
    name = node.func.id
    function = FUNCTIONS.get(name)
    if function is None:
        raise CalculatorError(
            f"unknown function {name!r}; known functions: {', '.join(sorted(FUNCTIONS))}"
        )
    if node.keywords:
        raise CalculatorError(f"{name}() takes positional arguments only")
    args = [_eval(arg, depth) for arg in node.args]
    if any(isinstance(arg, list) for arg in args) and name not in _LIST_FUNCTIONS:
        raise CalculatorError(f"{name}() takes numbers, not a list")
    try:
        return _check_int(function(*args))
    except CalculatorError:
        raise
    except (TypeError, ValueError) as exc:
        raise CalculatorError(f"{name}(): {_plain_message(exc)}") from None


_LIST_FUNCTIONS = frozenset(
    {"min", "max", "sum", "mean", "median", "mode", "stdev", "pstdev", "variance", "pvariance"}
)


def _numbers(*values: object) -> None:
    for value in values:
        if isinstance(value, list):
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise CalculatorError(f"expected a number, got {type(value).__name__}")


def _no_lists(symbol: str, *values: object) -> None:
    """Refuse an operator on a list before it runs (`[0] * 10**8` would allocate 800 MB)."""
    if any(isinstance(value, list) for value in values):
        raise CalculatorError(
            f"{symbol} does not apply to lists; lists are only arguments of "
            f"{', '.join(sorted(_LIST_FUNCTIONS))}"
        )


def _plain_message(exc: BaseException) -> str:
    message = str(exc) or type(exc).__name__
    return message[:300]


def _short(value: Number) -> str:
    if _bits(value) < 200:
        return str(value)
    return f"<{int(_bits(value) * math.log10(2)) + 1}-digit number>"


def _symbol(op: ast.AST) -> str:
    symbols = {
        ast.Add: "+",
        ast.Sub: "-",
        ast.Mult: "*",
        ast.Div: "/",
        ast.FloorDiv: "//",
        ast.Mod: "%",
        ast.Pow: "**",
        ast.LShift: "<<",
        ast.RShift: ">>",
        ast.USub: "-",
        ast.UAdd: "+",
        ast.BitAnd: "&",
        ast.BitOr: "|",
        ast.MatMult: "@",
        ast.Invert: "~",
        ast.Not: "not",
    }
    return symbols.get(type(op), type(op).__name__)


class Calculator(IToolExecutor):
    """Evaluate arithmetic safely; results are numbers, errors say what to fix."""

    schema = ToolSchema(
        name="calculator",
        description=(
            "Evaluates a single arithmetic expression and returns its numeric value. Use it "
            "for any exact arithmetic instead of computing in your head: + - * / // %, "
            "powers (** or ^), parentheses, unary minus, bit shifts, functions called by name "
            "(sqrt(x) is the square root of x; all of them: "
            f"{', '.join(sorted(FUNCTIONS))}; aggregates accept several numbers or one list, "
            "e.g. mean([1, 2, 3])), and the constants pi, e and tau. Returns the result as a "
            "number (an integer when exact). Variables, strings and comparisons are not "
            "supported."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "expression": {
                    "type": "string",
                    "description": "The expression, e.g. '(2 + 3) * sqrt(16) ^ 2'.",
                    "minLength": 1,
                    "maxLength": MAX_EXPRESSION_LENGTH,
                }
            },
            "required": ["expression"],
            "additionalProperties": False,
        },
        output_schema={"type": "number"},
        examples=[
            {
                "input": {"expression": "12 * 7 + 5"},
                "output": 89,
                "description": "What is 12 times 7, plus 5?",
            },
            {
                "input": {"expression": "mean([2, 4, 9])"},
                "output": 5.0,
                "description": "What is the average of 2, 4 and 9?",
            },
            {
                "input": {"expression": "sqrt(144)"},
                "output": 12.0,
                "description": "What is the square root of 144?",
            },
        ],
    )

    def execute(self, input: dict[str, Any], context: ExecutionContext) -> ToolResult:
        expression = input["expression"]
        try:
            value = evaluate(expression)
        except CalculatorError as exc:
            return failure(
                self,
                context,
                ToolErrorCode.VALIDATION_ERROR,
                f"cannot evaluate {_quote(expression)}: {exc}",
            )
        return success(self, context, value, expression=expression)


def _quote(expression: str) -> str:
    return repr(expression if len(expression) <= 80 else expression[:77] + "...")
