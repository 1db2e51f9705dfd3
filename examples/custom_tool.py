"""Custom tools: a class implementing IToolExecutor, and a typed function with @art.tool.

    python examples/custom_tool.py

The scripted test model plays the LLM so this runs offline; set ART_MODEL (e.g.
openai/gpt-4o-mini) to let a real model plan with these tools instead.
"""

from __future__ import annotations

import os

import art
import art.logging
from art.testing import ScriptedModel

# Pretend weather service: the data a real API would return.
_WEATHER = {
    "paris": {"city": "Paris", "temperature_c": 18.5, "sky": "cloudy"},
    "oslo": {"city": "Oslo", "temperature_c": 4.0, "sky": "snow"},
}


class Weather(art.IToolExecutor):
    """A class tool: the schema says what it takes; `execute` returns a ToolResult."""

    schema = art.ToolSchema(
        name="get_weather",
        description=(
            "Current weather for a city. Use it for temperatures and conditions. "
            "Returns {city, temperature_c, sky}."
        ),
        input_schema={
            "type": "object",
            "properties": {"city": {"type": "string", "description": "City name"}},
            "required": ["city"],
            "additionalProperties": False,
        },
    )

    async def execute(self, input: dict, context: art.ExecutionContext) -> art.ToolResult:
        # Input was validated against input_schema before this call.
        report = _WEATHER.get(input["city"].strip().lower())
        # self.fail / self.ok build the ToolResult for this call (call_id, tool_name).
        if report is None:
            return self.fail(context, f"no weather for {input['city']!r}", code="NOT_FOUND")
        return self.ok(
            context,
            report,  # the data goes in `output`, nowhere else
            metadata={"sources": [{"source_name": "example weather service"}]},
        )


@art.tool
def celsius_to_fahrenheit(celsius: float) -> float:
    """Convert a temperature from degrees Celsius to degrees Fahrenheit.

    Args:
        celsius: The temperature in degrees Celsius.
    """
    return round(celsius * 9 / 5 + 32, 1)


def main() -> None:
    art.logging.configure_logging(level="WARNING")
    # What a model would plan: two lookups at once, then two conversions that pick a
    # field out of each lookup's output with a reference.
    scripted = ScriptedModel(
        planning={
            "title": "Weather in Paris and Oslo, in Fahrenheit",
            "steps": [
                {"id": "s1", "tool": "get_weather", "args": {"city": "Paris"}},
                {"id": "s2", "tool": "get_weather", "args": {"city": "Oslo"}},
                {
                    "id": "s3",
                    "tool": "celsius_to_fahrenheit",
                    "args": {"celsius": "{{s1.output.temperature_c}}"},
                },
                {
                    "id": "s4",
                    "tool": "celsius_to_fahrenheit",
                    "args": {"celsius": "{{s2.output.temperature_c}}"},
                },
            ],
        },
        synthesis="Paris is cloudy at 65.3 °F; Oslo has snow at 39.2 °F.",
    )
    model = os.environ.get("ART_MODEL") or scripted  # a model name, or a Model object

    print("tools:")
    for tool in (Weather(), celsius_to_fahrenheit):
        print(f"  {tool.schema.name}: {tool.schema.input_schema['properties']}")

    with art.create_art_instance(
        model=model, tools=[Weather(), celsius_to_fahrenheit], storage="memory://"
    ) as inst:
        resp = inst.process("What's the weather in Paris and Oslo, in Fahrenheit?", "weather")

    print("\nsteps:")
    for record in resp.steps:
        print(f"  {record.step_id} {record.tool}({record.args}) -> {record.output!r}")
    print(f"\nanswer: {resp.content}")
    print(f"sources: {[s.source_name for s in resp.response.metadata.sources]}")
    print(f"{resp.metadata.llm_calls} LLM calls, {resp.metadata.tool_calls} tool calls")


if __name__ == "__main__":
    main()
