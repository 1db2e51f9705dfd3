"""A tool's output_schema: shown to the planner in compact form, and references into a
step's output checked against it (a wrong field is a plan problem sent to repair)."""

from __future__ import annotations

import pytest

import art
from art.planning.output_schemas import output_path_problem, output_sketch
from art.planning.planner import render_tools
from art.planning.plans import Plan, validate_plan
from art.testing import replies
from art.tooling.registry import ToolRegistry

WEATHER_OUTPUT = {
    "type": "object",
    "properties": {
        "temperature": {"type": "number", "description": "degrees"},
        "unit": {"enum": ["C", "F"]},
        "hourly": {
            "type": "array",
            "items": {"$ref": "#/$defs/hour"},
        },
        "note": {"type": ["string", "null"]},
    },
    "$defs": {
        "hour": {
            "type": "object",
            "properties": {"hour": {"type": "integer"}, "t": {"type": "number"}},
        }
    },
}


class Weather(art.IToolExecutor):
    schema = art.ToolSchema(
        name="get_weather",
        description="The weather in a city.",
        input_schema={"type": "object", "properties": {"city": {"type": "string"}}},
        output_schema=WEATHER_OUTPUT,
    )

    async def execute(self, input, context):
        return art.ToolResult(
            call_id=context.call_id,
            tool_name="get_weather",
            status="success",
            output={"temperature": 21.5, "unit": "C", "hourly": [{"hour": 9, "t": 19.0}]},
        )


class Echo(art.IToolExecutor):
    schema = art.ToolSchema(
        name="echo",
        description="Return the value.",
        input_schema={"type": "object", "properties": {"value": {}}},
    )

    async def execute(self, input, context):
        return art.ToolResult(
            call_id=context.call_id, tool_name="echo", status="success", output=input["value"]
        )


class Approve(art.IToolExecutor):
    schema = art.ToolSchema(name="approve", description="Ask a human.", execution_mode="blocking")

    async def execute(self, input, context):
        return art.ToolResult(
            call_id=context.call_id, tool_name="approve", status="suspended", output="ok?"
        )


def test_the_planner_sees_each_tools_output_in_compact_form():
    text = render_tools(ToolRegistry([Weather(), Echo(), Approve()]))
    assert (
        '  returns: {"temperature":"number","unit":"C|F","hourly":[{"hour":"integer",'
        '"t":"number"}],"note":"string|null"}'
    ) in text
    # A blocking step outputs the reviewer's decision, whatever the tool's output_schema.
    assert (
        '  returns: {"approved":"boolean","reason":"string|null","modified_args":"object|null"}'
    ) in text
    assert text.count("returns:") == 2  # echo declares nothing
    assert "degrees" not in text  # compact: no descriptions


@pytest.mark.parametrize(
    ("path", "problem"),
    [
        (("temperature",), None),
        (("hourly", "0", "t"), None),
        (("hourly", "-1", "hour"), None),
        (("note",), None),
        (("temp",), "output has no field 'temp' (its fields: temperature, unit, hourly, note)"),
        (("hourly", "first"), "output.hourly is a list: use an index such as .0, not 'first'"),
        (("hourly", "0", "temp"), "output.hourly.0 has no field 'temp' (its fields: hour, t)"),
        (("temperature", "value"), "output.temperature is number: it has no 'value'"),
    ],
)
def test_reference_paths_are_checked_field_by_field(path, problem):
    assert output_path_problem(WEATHER_OUTPUT, path) == problem


def test_what_a_schema_cannot_tell_is_accepted():
    assert output_path_problem({"type": "string"}, ("a",)) is None  # may hold JSON text
    assert output_path_problem({"type": "object"}, ("anything",)) is None
    open_object = {"type": "object", "properties": {"a": {}}, "additionalProperties": True}
    assert output_path_problem(open_object, ("b",)) is None
    typed_more = {"type": "object", "properties": {}, "additionalProperties": {"type": "integer"}}
    assert output_path_problem({**typed_more, "properties": {"a": {}}}, ("b", "c")) == (
        "output.b is integer: it has no 'c'"
    )
    either = {"anyOf": [{"type": "object", "properties": {"a": {}}}, {"type": "null"}]}
    assert output_path_problem(either, ("a",)) is None
    assert output_path_problem({"$ref": "https://example.com/s.json"}, ("a",)) is None
    assert output_sketch({"anyOf": [{"type": "integer"}, {"type": "null"}]}) == "integer|null"


def test_a_plan_referring_to_a_field_the_output_lacks_is_invalid():
    registry = ToolRegistry([Weather(), Echo(), Approve()])
    plan = Plan.model_validate(
        {
            "steps": [
                {"id": "s1", "tool": "get_weather", "args": {"city": "Bern"}},
                {"id": "s2", "tool": "echo", "args": {"value": "It is {{s1.output.temp}} C"}},
                {"id": "s3", "tool": "echo", "args": {"value": "{{s1.output.temperature}}"}},
                {"id": "s4", "tool": "approve", "args": {}},
                {"id": "s5", "tool": "echo", "args": {"value": "{{s4.output.modified_args}}"}},
                {"id": "s6", "tool": "echo", "args": {"value": "{{s2.output.anything}}"}},
            ]
        }
    )
    assert validate_plan(plan, registry) == [
        "step 's2' references {{s1.output.temp}}, but get_weather's output has no field "
        "'temp' (its fields: temperature, unit, hourly, note)"
    ]


async def test_a_wrong_field_goes_back_to_the_planner_and_the_repaired_plan_runs(scripted_model):
    wrong = {
        "steps": [
            {"id": "s1", "tool": "get_weather", "args": {"city": "Bern"}},
            {"id": "s2", "tool": "echo", "args": {"value": "{{s1.output.temp}}"}},
        ]
    }
    right = {
        "steps": [
            {"id": "s1", "tool": "get_weather", "args": {"city": "Bern"}},
            {"id": "s2", "tool": "echo", "args": {"value": "{{s1.output.temperature}}"}},
        ]
    }
    model = scripted_model(planning=replies(wrong, right), synthesis="21.5 C")
    async with art.create_art_instance(
        model=model.model, tools=[Weather(), Echo()], storage="memory://"
    ) as inst:
        resp = await inst.aprocess("How warm is Bern?", "t")
    assert resp.status == "success" and resp.steps[1].output == 21.5
    repair = model.calls_for("planning")[1].messages[-1]["content"]
    assert "{{s1.output.temp}}, but get_weather's output has no field 'temp'" in repair
