"""Writing tools the short way: whole docstrings, warned-about examples, result helpers."""

from __future__ import annotations

import inspect

import pydantic
import pytest

import art
from art.tooling.contract import ExecutionContext
from art.tooling.registry import ToolExampleWarning, ToolRegistry


def _context() -> ExecutionContext:
    return ExecutionContext(thread_id="t", trace_id="0" * 32, call_id="c-1")


def test_every_paragraph_before_the_first_section_is_the_description():
    @art.tool
    def find_order(order_id: str) -> dict:
        """Find an order by its id.

        Orders older than two years are archived
        and are not found.

        Use the id printed on the invoice, e.g. A-1042.

        Args:
            order_id: The order's id.
        """
        return {}

    assert find_order.schema.description == (
        "Find an order by its id.\n\nOrders older than two years are archived and are not "
        "found.\n\nUse the id printed on the invoice, e.g. A-1042."
    )


def test_an_example_that_does_not_match_the_schema_warns_at_registration():
    @art.tool(examples=[{"input": {"order": "A-1"}, "description": "Find A-1"}])
    def find_order(order_id: str) -> dict:
        """Find an order by its id."""
        return {}

    with pytest.warns(ToolExampleWarning) as caught:
        ToolRegistry([find_order])
    [warning] = caught
    message = str(warning.message)
    assert "tool 'find_order': examples[0] is left out of the planner's prompt" in message
    assert "'order_id' is a required property" in message


def test_the_example_warning_points_at_the_tool_that_has_it():
    @art.tool(examples=[{"input": {"order": "A-1"}, "description": "Find A-1"}])
    def find_order(order_id: str) -> dict:
        """Find an order by its id."""
        return {}

    class FindInvoice(art.IToolExecutor):
        schema = art.ToolSchema(
            name="find_invoice",
            description="Find an invoice.",
            input_schema={"type": "object", "properties": {"n": {"type": "integer"}}},
            examples=[art.ToolExample(input={"n": "one"}, description="Invoice one")],
        )

        async def execute(self, input, context):
            return self.ok(context, {})

    with pytest.warns(ToolExampleWarning) as caught:
        ToolRegistry([find_order])
        inst = art.create_art_instance(model="openai/x", tools=[FindInvoice()], storage="memory://")
    inst.close()
    decorator_line = find_order.fn.__code__.co_firstlineno  # the @art.tool(examples=...) line
    class_line = inspect.getsourcelines(FindInvoice)[1]
    assert [(w.filename, w.lineno) for w in caught] == [
        (__file__, decorator_line),
        (__file__, class_line),
    ]  # not art/tooling/registry.py or art/instance.py


def test_good_examples_register_without_a_warning(recwarn):
    @art.tool(examples=[{"input": {"order_id": "A-1"}, "description": "Find A-1"}])
    def find_order(order_id: str) -> dict:
        """Find an order by its id."""
        return {}

    ToolRegistry([find_order])
    assert not [w for w in recwarn if issubclass(w.category, ToolExampleWarning)]


class LookupInput(pydantic.BaseModel):
    order_id: str = pydantic.Field(description="The order's id, e.g. A-1042.")


class LookupOrder(art.IToolExecutor):
    schema = art.ToolSchema(
        name="lookup_order",
        description="Look up an order.",
        input_schema=LookupInput.model_json_schema(),
    )

    async def execute(self, input, context):
        order = LookupInput.model_validate(input)
        if order.order_id != "A-1":
            return self.fail(context, f"no order {order.order_id}", code="NOT_FOUND")
        return self.ok(context, {"order_id": order.order_id, "status": "shipped"})


class ConfirmRefund(art.IToolExecutor):
    schema = art.ToolSchema(
        name="confirm_refund", description="Ask a person to confirm.", execution_mode="blocking"
    )

    async def execute(self, input, context):
        return self.ask(context, "Refund A-1?")


async def test_result_helpers_fill_in_the_call_and_the_tool():
    tool = LookupOrder()
    ok = await tool.execute({"order_id": "A-1"}, _context())
    assert ok == art.ToolResult(
        call_id="c-1",
        tool_name="lookup_order",
        status="success",
        output={"order_id": "A-1", "status": "shipped"},
    )
    failed = await tool.execute({"order_id": "B-2"}, _context())
    assert (failed.status, failed.error, failed.error_code, failed.retryable) == (
        "error",
        "no order B-2",
        "NOT_FOUND",
        False,
    )
    flaky = tool.fail(_context(), "busy", code="RATE_LIMITED", retryable=True)
    assert flaky.retryable and flaky.metadata == {"error_code": "RATE_LIMITED", "retryable": True}
    partial = tool.fail(_context(), "cut short", output=[1, 2], metadata={"page": 3})
    assert partial.output == [1, 2]
    assert partial.metadata == {"page": 3, "error_code": "UNKNOWN", "retryable": False}
    asked = await ConfirmRefund().execute({}, _context())
    assert (asked.status, asked.output, asked.tool_name) == (
        "suspended",
        "Refund A-1?",
        "confirm_refund",
    )


async def test_a_class_tool_with_a_pydantic_input_model_runs_in_a_plan(scripted_model):
    plan = {"steps": [{"id": "s1", "tool": "lookup_order", "args": {"order_id": "A-1"}}]}
    model = scripted_model(planning=plan, synthesis="Shipped.")
    async with art.create_art_instance(
        model=model.model, tools=[LookupOrder()], storage="memory://"
    ) as inst:
        resp = await inst.aprocess("where is A-1?", "t")
    assert resp.steps[0].output == {"order_id": "A-1", "status": "shipped"}
    assert LookupOrder.schema.input_schema["properties"]["order_id"]["description"] == (
        "The order's id, e.g. A-1042."
    )
