import asyncio
import datetime as dt
import threading
from enum import Enum
from typing import Annotated, Literal

import pytest
from pydantic import BaseModel, Field

import art
from art.errors import ToolRegistrationError
from art.tooling.contract import ExecutionContext, IToolExecutor, ToolResult
from art.tooling.functions import FunctionTool, tool
from art.tooling.invocation import invoke_tool
from art.tooling.registry import ToolRegistry


def make_context(call_id: str = "call-1") -> ExecutionContext:
    return ExecutionContext(thread_id="t1", trace_id="0" * 32, call_id=call_id)


class Unit(Enum):
    CELSIUS = "celsius"
    FAHRENHEIT = "fahrenheit"


class Location(BaseModel):
    city: str
    country: str = "FR"


@tool
def get_weather(location: Location, days: int = 1, unit: Unit = Unit.CELSIUS) -> dict:
    """Look up the weather forecast
    for a city.

    Uses a made-up service; this paragraph is part of the description too.

    Args:
        location: Where to look,
            city and country.
        days: How many days ahead.
        unit: Temperature unit.

    Returns:
        A dict with the city, the unit and one temperature per day.
    """
    return {"city": location.city, "unit": unit.value, "temps": [20] * days}


def test_decorator_builds_an_executor_with_a_schema():
    assert isinstance(get_weather, FunctionTool)
    assert isinstance(get_weather, IToolExecutor)
    schema = get_weather.schema
    assert schema.name == "get_weather"
    assert schema.description == (
        "Look up the weather forecast for a city.\n\nUses a made-up service; this paragraph "
        "is part of the description too. Returns: A dict with the city, the unit and one "
        "temperature per day."
    )
    assert schema.execution_mode == "functional"
    props = schema.input_schema["properties"]
    assert schema.input_schema["required"] == ["location"]
    assert schema.input_schema["additionalProperties"] is False
    assert props["days"] == {"default": 1, "description": "How many days ahead.", "type": "integer"}
    assert props["location"]["description"] == "Where to look, city and country."
    assert props["unit"]["default"] == "celsius"
    assert "title" not in schema.input_schema
    assert schema.output_schema == {"type": "object", "additionalProperties": True}


def test_schema_is_valid_and_registrable():
    registry = ToolRegistry([get_weather])
    assert registry.validate_input("get_weather", {"location": {"city": "Paris"}}) == []
    problems = registry.validate_input(
        "get_weather", {"location": {"country": "FR"}, "unit": "kelvin", "extra": 1}
    )
    assert len(problems) == 3


def test_examples_go_into_the_schema_and_become_demonstrations():
    from art.planning.planner import render_demonstrations

    @tool(examples=[{"input": {"a": 2, "b": 3}, "output": 5, "description": "Add 2 and 3."}])
    def add(a: int, b: int) -> int:
        """Adds two integers."""
        return a + b

    assert add.schema.examples == [
        art.ToolExample(input={"a": 2, "b": 3}, output=5, description="Add 2 and 3.")
    ]
    request, plan = render_demonstrations(ToolRegistry([add]), "Add 4 and 5.")
    assert request["content"] == "Request: Add 2 and 3."
    assert '"tool":"add","args":{"a":2,"b":3}' in plan["content"]


def test_still_calls_like_the_original_function():
    assert get_weather(Location(city="Oslo"), days=2) == {
        "city": "Oslo",
        "unit": "celsius",
        "temps": [20, 20],
    }
    assert get_weather.__name__ == "get_weather"
    assert "weather forecast" in get_weather.__doc__


async def test_invocation_converts_input_to_the_parameter_types():
    result = await invoke_tool(
        get_weather,
        {"location": {"city": "Paris"}, "days": 2, "unit": "fahrenheit"},
        make_context(),
    )
    assert result.status == "success", result
    assert result.output == {"city": "Paris", "unit": "fahrenheit", "temps": [20, 20]}
    assert result.tool_name == "get_weather"
    assert result.call_id == "call-1"


async def test_invalid_input_is_refused_before_the_call():
    result = await invoke_tool(get_weather, {"days": "two"}, make_context())
    assert result.metadata["error_code"] == "VALIDATION_ERROR"
    assert "'location' is a required property" in result.error
    assert "$.days: 'two' is not of type 'integer'" in result.error


def test_decorator_with_arguments_and_async_function():
    @art.tool(name="slow_add", description="Adds two numbers, slowly.", execution_mode="immediate")
    async def add(a: float, b: float = 0.0) -> float:
        await asyncio.sleep(0)
        return a + b

    assert add.schema.name == "slow_add"
    assert add.schema.description == "Adds two numbers, slowly."
    assert add.schema.execution_mode == "immediate"
    assert add.schema.output_schema == {"type": "number"}
    assert asyncio.run(add(1, 2)) == 3


async def test_async_function_is_awaited_and_sync_runs_in_a_thread():
    @tool
    async def double(n: int) -> int:
        """Double a number."""
        return n * 2

    threads = []

    @tool
    def triple(n: int) -> int:
        """Triple a number."""
        threads.append(threading.current_thread())
        return n * 3

    assert (await invoke_tool(double, {"n": 4}, make_context())).output == 8
    assert (await invoke_tool(triple, {"n": 4}, make_context())).output == 12
    assert threads[0] is not threading.main_thread()


async def test_context_parameter_receives_the_context_and_is_not_in_the_schema():
    seen = {}

    @tool
    def whoami(context: ExecutionContext, greeting: str = "hi") -> str:
        """Say who is asking."""
        seen["context"] = context
        return f"{greeting} {context.thread_id}"

    @tool
    def maybe(note: str, ctx: ExecutionContext | None = None) -> str:
        """Echo a note."""
        return note

    assert list(whoami.schema.input_schema["properties"]) == ["greeting"]
    assert list(maybe.schema.input_schema["properties"]) == ["note"]
    context = make_context()
    result = await invoke_tool(whoami, {}, context)
    assert result.output == "hi t1"
    assert seen["context"] is context


async def test_returned_toolresult_passes_through():
    @tool
    def careful(path: str, context: ExecutionContext) -> ToolResult:
        """Refuse everything."""
        return ToolResult(
            call_id=context.call_id,
            tool_name="careful",
            status="error",
            error=f"{path} is off limits",
            metadata={"error_code": "PERMISSION_DENIED"},
        )

    result = await invoke_tool(careful, {"path": "/etc"}, make_context())
    assert result.status == "error"
    assert result.error == "/etc is off limits"
    assert result.metadata["error_code"] == "PERMISSION_DENIED"
    assert careful.schema.output_schema is None


async def test_a_returned_dict_is_output_not_a_result():
    @tool
    def status() -> dict:
        """Report a status."""
        return {"status": "success", "data": 1}

    result = await invoke_tool(status, {}, make_context())
    assert result.status == "success"
    assert result.output == {"status": "success", "data": 1}


async def test_exceptions_become_error_results():
    @tool
    def boom(n: int) -> int:
        """Fail."""
        raise ValueError(f"cannot handle {n}")

    result = await invoke_tool(boom, {"n": 3}, make_context())
    assert result.status == "error"
    assert result.error == "ValueError: cannot handle 3"


async def test_types_that_need_conversion_and_constraints():
    @tool
    def schedule(
        when: dt.date,
        priority: Literal["low", "high"] = "low",
        count: Annotated[int, Field(ge=1, le=5)] = 1,
        tags: list[str] | None = None,
    ) -> str:
        """Schedule something."""
        assert isinstance(when, dt.date)
        return f"{when.isoformat()} {priority} x{count} {tags or []}"

    props = schedule.schema.input_schema["properties"]
    assert props["count"]["minimum"] == 1 and props["count"]["maximum"] == 5
    assert props["priority"]["enum"] == ["low", "high"]
    result = await invoke_tool(schedule, {"when": "2024-05-01", "tags": ["a"]}, make_context())
    assert result.output == "2024-05-01 low x1 ['a']"
    result = await invoke_tool(schedule, {"when": "2024-05-01", "count": 9}, make_context())
    assert result.metadata["error_code"] == "VALIDATION_ERROR"


async def test_parameter_names_that_clash_with_pydantic_are_fine():
    @tool
    def query(schema: str, json: bool = False, copy: int = 0) -> str:
        """Query a database schema."""
        return f"{schema}/{json}/{copy}"

    assert set(query.schema.input_schema["properties"]) == {"schema", "json", "copy"}
    result = await invoke_tool(query, {"schema": "public", "json": True}, make_context())
    assert result.output == "public/True/0"


async def test_positional_only_parameters():
    @tool
    def power(base: int, /, exponent: int = 2) -> int:
        """Raise to a power."""
        return base**exponent

    assert (await invoke_tool(power, {"base": 3}, make_context())).output == 9


def test_registry_wraps_plain_functions():
    def shout(text: str) -> str:
        """Upper-case some text."""
        return text.upper()

    registry = ToolRegistry([shout])
    registered = registry.get("shout")
    assert isinstance(registered, FunctionTool)
    assert registered("hey") == "HEY"


def test_reST_and_numpy_docstrings():
    @tool
    def rest(x: int) -> int:
        """Square a number.

        :param x: the number to square
        """
        return x * x

    @tool
    def numpy_style(x: int) -> int:
        """Negate a number.

        Parameters
        ----------
        x : int
            the number to negate
        """
        return -x

    assert rest.schema.input_schema["properties"]["x"]["description"] == "the number to square"
    assert numpy_style.schema.input_schema["properties"]["x"]["description"] == (
        "the number to negate"
    )
    assert numpy_style.schema.description == "Negate a number."


def test_functions_that_cannot_be_tools_are_refused():
    with pytest.raises(ToolRegistrationError, match="needs a description"):

        @tool
        def undocumented(x: int) -> int:
            return x

    with pytest.raises(ToolRegistrationError, match=r"\*args"):

        @tool
        def variadic(*args: int) -> int:
            """Sum things."""
            return sum(args)

    with pytest.raises(ToolRegistrationError, match=r"cannot be tool input.*JSON-friendly types"):

        @tool
        def opaque(lock: threading.Lock) -> None:  # type: ignore[valid-type]
            """Hold a lock."""

    with pytest.raises(ToolRegistrationError, match="invalid tool settings"):
        tool(lambda: None, description="d", execution_mode="sometimes")

    with pytest.raises(ToolRegistrationError, match="not snake_case"):
        ToolRegistry([tool(lambda: 1, name="BadName", description="d")])


def test_undocumented_function_may_pass_a_description():
    described = tool(lambda n: n, name="identity", description="Return the input.")
    assert described.schema.description == "Return the input."
    assert described.schema.input_schema["properties"] == {"n": {}}
    assert repr(described) == "FunctionTool('identity')"
