import asyncio
import math
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from art.tooling.contract import ExecutionContext
from art.tooling.invocation import invoke_tool
from art.tooling.registry import ToolRegistry
from art.tools import Calculator
from art.tools.calculator import CalculatorError, evaluate

CALCULATOR = Calculator()


def make_context() -> ExecutionContext:
    return ExecutionContext(thread_id="t1", trace_id="0" * 32, call_id="c1")


async def calculate(expression: str):
    return await invoke_tool(CALCULATOR, {"expression": expression}, make_context())


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("17 * 23", 391),
        ("17*23 + 12", 403),
        ("(1 + 2) * 3", 9),
        ("-3 ** 2", -9),
        ("(-3) ** 2", 9),
        ("2 ^ 10", 1024),
        ("2^3^2", 512),
        ("2^3 + 1", 9),
        ("7 // 2", 3),
        ("7 % 3", 1),
        ("7 / 2", 3.5),
        ("-(-4)", 4),
        ("+5", 5),
        ("1 << 8", 256),
        ("256 >> 4", 16),
        ("sqrt(16)", 4.0),
        ("abs(-2.5)", 2.5),
        ("round(2.567, 2)", 2.57),
        ("round(2.5)", 2),
        ("floor(2.7) + ceil(2.1)", 5),
        ("factorial(10)", 3628800),
        ("log(e)", 1.0),
        ("log(8, 2)", 3.0),
        ("log10(1000)", 3.0),
        ("exp(0)", 1.0),
        ("sin(0) + cos(0)", 1.0),
        ("tan(pi / 4)", pytest.approx(1.0)),
        ("tau / pi", 2.0),
        ("min(3, 1, 2)", 1),
        ("max([3, 1, 2])", 3),
        ("sum(1, 2, 3)", 6),
        ("sum([0.5, 0.25])", 0.75),
        ("mean([1, 2, 3, 4])", 2.5),
        ("median(5, 1, 3)", 3),
        ("stdev([2, 4, 4, 4, 5, 5, 7, 9])", pytest.approx(2.138089935)),
        ("pstdev([2, 4, 4, 4, 5, 5, 7, 9])", 2.0),
        ("variance(1, 2, 3)", 1),
        ("gcd(12, 18) + lcm(4, 6)", 18),
        ("comb(5, 2) + perm(4, 2)", 22),
        ("hypot(3, 4)", 5.0),
        ("2 ** 100", 2**100),
        ("  1 + 1  ", 2),
    ],
)
async def test_arithmetic(expression, expected):
    result = await calculate(expression)
    assert result.status == "success", result.error
    assert result.output == expected
    assert result.metadata["expression"] == expression


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("x + 1", "unknown name 'x'"),
        ("__import__('os')", "unknown function '__import__'"),
        ("open('/etc/passwd')", "unknown function 'open'"),
        ("(1).__class__", "attribute access is not allowed"),
        ("math.sqrt(4)", "attribute access is not allowed"),
        ("[x for x in [1, 2]]", "comprehensions are not allowed"),
        ("sum(x for x in [1, 2])", "comprehensions are not allowed"),
        ("(lambda: 1)()", "only named functions can be called"),
        ("lambda: 1", "lambda expressions are not allowed"),
        ("[1, 2][0]", "subscripts"),
        ("'a' * 3", "only numbers are allowed"),
        ("1 < 2", "comparisons are not supported"),
        ("1 if 1 else 2", "conditional expressions"),
        ("(y := 2)", "assignment"),
        ("1 & 2", "operator & is not supported"),
        ("~1", "operator ~ is not supported"),
        ("sqrt", "sqrt is a function"),
        ("round(1.5, ndigits=1)", "positional arguments only"),
        ("1 +", "invalid syntax"),
        ("   ", "empty"),
        ("1 / 0", "division by zero"),
        ("sqrt(-1)", "sqrt(): math domain error"),
        ("(-8) ** 0.5", "complex"),
        ("stdev(1)", "at least two"),
        ("min([])", "at least one value"),
        ("(1, 2)", "is a list, not a number"),
        ("1e308 * 10", "not a finite number"),
        ("1e400", "too large"),
        ("exp(1000)", "too large"),
        ("True + 1", "only numbers are allowed"),
    ],
)
async def test_refusals_are_clear_errors(expression, reason):
    result = await calculate(expression)
    assert result.status == "error"
    assert result.metadata["error_code"] == "VALIDATION_ERROR"
    assert result.retryable is False
    assert reason in result.error, result.error


@pytest.mark.parametrize(
    "expression",
    [
        "9**9**9",
        "9^9^9",
        "10**10**10",
        "2**100000",
        "factorial(100000)",
        "factorial(10**9)",
        "1 << 10**9",
        "1 << 100000",
        "(10**3000) * (10**3000)",
        "comb(10**6, 500000)",
        "perm(10**5)",
        "round(1, 10**9)",
        "lcm(2**6000, 3**6000)",
        "pow(7, 10**8)",
        "2**9999 + 2**9999 + 2**9999",
    ],
)
async def test_resource_bombs_are_refused_quickly(expression):
    started = time.perf_counter()
    result = await calculate(expression)
    assert time.perf_counter() - started < 0.5
    assert result.status == "error"
    assert "too large" in result.error or "within" in result.error, result.error


@pytest.mark.parametrize(
    "expression",
    ["[0] * 10**8", "10**8 * [0]", "[0, 1] * 10**8 + [1]", "[1, 2] + [3]", "-[1]", "[1] ** 2"],
)
def test_operators_on_lists_are_refused_before_anything_is_allocated(expression):
    import tracemalloc

    tracemalloc.start()
    try:
        with pytest.raises(CalculatorError, match="does not apply to lists"):
            evaluate(expression)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000, f"{expression!r} allocated {peak:,} bytes"


@pytest.mark.parametrize(
    "expression",
    [
        '"a" * 10**9',
        "(0,) * 10**9",
        "[[0] * 9] * 9",
        'f"{9**9**9}"',
        "sum(range(10**9))",
        "max(*[1] * 10**9)",
        "[x for x in [1]] * 10**9",
    ],
)
def test_strings_and_sequences_are_never_built_large(expression):
    import tracemalloc

    tracemalloc.start()
    try:
        with pytest.raises(CalculatorError):
            evaluate(expression)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000, f"{expression!r} allocated {peak:,} bytes"


def test_big_but_bounded_integers_are_exact():
    assert evaluate("2 ** 9000") == 2**9000
    assert evaluate("factorial(1000)") == math.factorial(1000)


def test_long_flat_expressions_are_fine_but_deep_nesting_is_refused():
    assert evaluate("+".join(["1"] * 900)) == 900
    with pytest.raises(CalculatorError, match="nested too deeply"):
        evaluate("-" * 1500 + "1")
    with pytest.raises(CalculatorError, match=r"nested|parenthes"):
        evaluate("(" * 300 + "1" + ")" * 300)
    with pytest.raises(CalculatorError, match="limit is 2000"):
        evaluate("1+" * 1500 + "1")


def test_calculator_never_uses_eval(monkeypatch):
    import builtins

    def forbidden(*args, **kwargs):
        raise AssertionError("eval/exec must never be called")

    monkeypatch.setattr(builtins, "eval", forbidden)
    monkeypatch.setattr(builtins, "exec", forbidden)
    assert evaluate("2 * (3 + 4)") == 14


async def test_input_is_validated_before_the_calculator_runs():
    registry = ToolRegistry([CALCULATOR])
    result = await invoke_tool(CALCULATOR, {"expr": "1"}, make_context(), registry=registry)
    assert result.metadata["error_code"] == "VALIDATION_ERROR"
    assert "'expression' is a required property" in result.error


def test_schema_describes_what_when_and_returns():
    description = Calculator.schema.description
    assert "Use it" in description and "Returns" in description
    assert "mean" in description and "pi" in description


# --- random expressions ----------------------------------------------------------------

numbers = st.one_of(
    st.integers(-(10**6), 10**6).map(str),
    st.floats(allow_nan=False, allow_infinity=False, width=32).map(repr),
    st.sampled_from(["9", "99", "999999", "1e308", "0", "pi", "e", "tau"]),
)
names = st.sampled_from(
    ["sqrt", "log", "exp", "factorial", "sin", "round", "max", "mean", "stdev", "pow", "comb"]
)
junk = st.sampled_from(["x", "__import__", "os", "().__class__", "'s'", "[1,2]", "lambda: 0"])


def expressions(depth: int = 3) -> st.SearchStrategy[str]:
    if depth == 0:
        return numbers | junk
    inner = expressions(depth - 1)
    return st.one_of(
        numbers,
        junk,
        st.tuples(
            inner, st.sampled_from(["+", "-", "*", "/", "//", "%", "**", "^", "<<", ">>"]), inner
        ).map(lambda t: f"{t[0]} {t[1]} {t[2]}"),
        inner.map(lambda s: f"({s})"),
        inner.map(lambda s: f"-{s}"),
        st.tuples(names, st.lists(inner, min_size=1, max_size=3)).map(
            lambda t: f"{t[0]}({', '.join(t[1])})"
        ),
    )


def _check(expression: str) -> None:
    started = time.perf_counter()
    result = asyncio.run(calculate(expression))
    elapsed = time.perf_counter() - started
    assert elapsed < 1.0, f"{expression!r} took {elapsed:.2f} s"
    assert result.status in ("success", "error")
    if result.status == "error":
        # Only the calculator's own refusals: never an exception or a contract problem.
        assert result.metadata["error_code"] == "VALIDATION_ERROR", result.error
        assert result.error.startswith(("cannot evaluate", "invalid input"))
    else:
        assert isinstance(result.output, int | float)
        assert not isinstance(result.output, bool)


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expressions())
def test_random_expressions_never_escape_or_hang(expression):
    _check(expression)


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet="0123456789+-*/^%().,e pi!<>~&|[]_abcdxyz'\"", max_size=60))
def test_random_text_never_escapes_or_hangs(expression):
    _check(expression)


@pytest.mark.parametrize(
    ("expression", "error"),
    [
        ("1 2", "invalid expression '1 2': invalid syntax at character 3"),
        ("1 +", "invalid expression '1 +': invalid syntax"),
        ("(1", "invalid expression '(1': '(' was never closed"),
    ],
)
async def test_a_syntax_error_says_what_and_where_once(expression, error):
    result = await calculate(expression)
    assert result.status == "error"
    assert error in result.error, result.error
    assert result.error.count("invalid syntax") <= 1
