from typing import Any

import pytest

from art.errors import ConfigurationError, ToolRegistrationError
from art.tooling.contract import ExecutionContext, IToolExecutor, ToolResult, ToolSchema
from art.tooling.registry import ToolRegistry, build_fast_check, build_validator, input_errors

ORDER_SCHEMA = {
    "type": "object",
    "properties": {
        "sku": {"type": "string", "minLength": 3},
        "quantity": {"type": "integer", "minimum": 1},
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"price": {"type": "number", "minimum": 0}},
                "required": ["price"],
            },
        },
    },
    "required": ["sku", "quantity"],
    "additionalProperties": False,
}


def make_tool(name: str = "place_order", input_schema: dict | None = None, **schema: Any):
    class Tool(IToolExecutor):
        def execute(self, input: dict, context: ExecutionContext) -> ToolResult:
            return ToolResult(
                call_id=context.call_id, tool_name=name, status="success", output=input
            )

    Tool.schema = ToolSchema(
        name=name,
        description=schema.pop("description", "Places an order."),
        input_schema=input_schema if input_schema is not None else ORDER_SCHEMA,
        **schema,
    )
    return Tool()


def test_register_and_look_up():
    order, other = make_tool(), make_tool("check_stock", {"type": "object"})
    registry = ToolRegistry([order])
    assert registry.register(other) is other
    assert registry.get("place_order") is order
    assert registry.get("missing") is None
    assert "check_stock" in registry
    assert "missing" not in registry
    assert len(registry) == 2
    assert list(registry) == [order, other]
    assert registry.names() == ["place_order", "check_stock"]
    assert [s.name for s in registry.schemas()] == ["place_order", "check_stock"]
    assert "place_order" in repr(registry)


def test_duplicate_names_are_refused():
    registry = ToolRegistry([make_tool()])
    with pytest.raises(ToolRegistrationError, match=r"already registered.*must be unique"):
        registry.register(make_tool())
    assert len(registry) == 1


@pytest.mark.parametrize("name", ["PlaceOrder", "place-order", "1tool", "_private", "", "a b"])
def test_non_snake_case_names_are_refused(name):
    with pytest.raises(ToolRegistrationError, match="not snake_case"):
        ToolRegistry([make_tool(name)])


def test_registration_error_is_a_configuration_error():
    assert issubclass(ToolRegistrationError, ConfigurationError)


@pytest.mark.parametrize(
    ("input_schema", "detail"),
    [
        ({"type": "object", "properties": {"a": {"type": "strin"}}}, "not valid JSON Schema"),
        ({"type": "object", "required": "a"}, "not valid JSON Schema"),
        ({"type": "object", "properties": {"n": {"minimum": "zero"}}}, "not valid JSON Schema"),
        ({"type": "string"}, "must describe an object"),
    ],
)
def test_invalid_input_schema_is_refused_at_registration(input_schema, detail):
    with pytest.raises(ToolRegistrationError, match=detail):
        ToolRegistry([make_tool(input_schema=input_schema)])


def test_schema_must_be_present_and_a_tool_schema():
    class NoSchema(IToolExecutor):
        def execute(self, input, context):
            raise NotImplementedError

    with pytest.raises(ToolRegistrationError, match="has no schema"):
        ToolRegistry([NoSchema()])

    wrong = NoSchema()
    wrong.schema = {"name": "x", "description": "y"}
    with pytest.raises(ToolRegistrationError, match="must be a ToolSchema, got dict"):
        ToolRegistry([wrong])


def test_empty_description_is_refused():
    with pytest.raises(ToolRegistrationError, match="empty description"):
        ToolRegistry([make_tool(description="  ")])


def test_classes_and_other_objects_are_refused_with_a_hint():
    tool_class = type(make_tool())
    with pytest.raises(ToolRegistrationError, match=r"instance, not the class"):
        ToolRegistry([tool_class])
    with pytest.raises(ToolRegistrationError, match="got int"):
        ToolRegistry([42])


def test_validate_input_lists_every_violation_with_its_path():
    registry = ToolRegistry([make_tool()])
    problems = registry.validate_input(
        "place_order",
        {"sku": "ab", "items": [{"price": 1}, {"price": -2}, {}], "colour": "red"},
    )
    assert problems == [
        "$: 'quantity' is a required property",
        "$: Additional properties are not allowed ('colour' was unexpected)",
        "$.items[1].price: -2 is less than the minimum of 0",
        "$.items[2]: 'price' is a required property",
        "$.sku: 'ab' is too short",
    ]
    assert registry.validate_input("place_order", {"sku": "abc", "quantity": 2}) == []


def test_validate_input_for_unknown_tool_and_non_object_args():
    registry = ToolRegistry([make_tool()])
    assert registry.validate_input("nope", {}) == [
        "unknown tool 'nope' (registered tools: place_order)"
    ]
    assert registry.validate_input("place_order", [1, 2]) == [
        "$: arguments must be a JSON object, got list"
    ]


def test_validators_are_compiled_once_per_tool():
    registry = ToolRegistry([make_tool()])
    first = registry.validator("place_order")
    registry.validate_input("place_order", {})
    assert registry.validator("place_order") is first
    assert registry.validator("missing") is None


def test_build_validator_checks_formats_and_dialect():
    validator = build_validator(
        {"type": "object", "properties": {"when": {"type": "string", "format": "date"}}}
    )
    assert input_errors(validator, {"when": "2024-02-30"}) == [
        "$.when: '2024-02-30' is not a 'date'"
    ]
    draft7 = build_validator(
        {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"}
    )
    assert type(draft7).__name__ == "Draft7Validator"


def test_error_lines_stay_short():
    validator = build_validator(
        {"type": "object", "properties": {"text": {"type": "string", "maxLength": 3}}}
    )
    (line,) = input_errors(validator, {"text": "x" * 10_000})
    assert line.startswith("$.text: ")
    assert len(line) <= 500


def test_valid_arguments_take_the_compiled_check_and_jsonschema_is_not_asked():
    registry = ToolRegistry([make_tool()])
    assert registry.fast_check("place_order") is not None

    class Refusing:
        def iter_errors(self, args):
            raise AssertionError("jsonschema must not run for valid arguments")

    fast = registry.fast_check("place_order")
    assert input_errors(Refusing(), {"sku": "abc", "quantity": 2}, fast_check=fast) == []
    # Invalid arguments are worded by jsonschema, as without the fast check.
    assert input_errors(registry.validator("place_order"), {"sku": "ab"}, fast_check=fast) == [
        "$: 'quantity' is a required property",
        "$.sku: 'ab' is too short",
    ]


def test_values_the_compiled_check_cannot_read_fall_back_to_jsonschema():
    schema = {"type": "object", "properties": {"blob": {"type": "string"}}}
    fast = build_fast_check(schema)
    assert fast is not None
    with pytest.raises(ValueError):
        fast({"blob": b"bytes"})
    problems = input_errors(build_validator(schema), {"blob": b"bytes"}, fast_check=fast)
    assert problems == ["$.blob: b'bytes' is not of type 'string'"]


def test_a_schema_the_compiled_check_cannot_build_is_checked_by_jsonschema_alone():
    # A remote $ref: jsonschema-rs would have to fetch it and never does.
    schema = {"type": "object", "properties": {"a": {"$ref": "https://example.com/a.json"}}}
    assert build_fast_check(schema) is None
    assert input_errors(build_validator(schema), {}) == []


def test_an_entry_holds_what_a_call_needs():
    class AsyncTool(IToolExecutor):
        schema = ToolSchema(name="async_tool", description="d")

        async def execute(self, input, context):
            return None

    class SyncTool(IToolExecutor):
        schema = ToolSchema(name="sync_tool", description="d")

        def execute(self, input, context):
            return None

    registry = ToolRegistry([AsyncTool(), SyncTool()])
    async_entry, sync_entry = registry.entry("async_tool"), registry.entry("sync_tool")
    assert async_entry.tool is registry.get("async_tool") and async_entry.is_async
    assert sync_entry.tool is registry.get("sync_tool") and not sync_entry.is_async
    assert async_entry.validator is registry.validator("async_tool")
    assert async_entry.fast_check is registry.fast_check("async_tool")
    assert registry.entry("missing") is None
