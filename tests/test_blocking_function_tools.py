"""A blocking tool written as a function suspends: its return value is the question."""

from __future__ import annotations

import pytest

import art


@art.tool(execution_mode="blocking")
def approve_refund(order_id: str, amount: float) -> dict:
    """Ask a person to approve a refund."""
    return {"question": f"Refund {amount} EUR on {order_id}?"}


class ApproveRefund(art.IToolExecutor):
    schema = art.ToolSchema(
        name="approve_refund",
        description="Ask a person to approve a refund.",
        input_schema={
            "type": "object",
            "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}},
            "required": ["order_id", "amount"],
        },
        execution_mode="blocking",
    )

    async def execute(self, input, context):
        return art.ToolResult(
            call_id=context.call_id,
            tool_name="approve_refund",
            status="suspended",
            output={"question": f"Refund {float(input['amount'])} EUR on {input['order_id']}?"},
        )


@art.tool
def refund(order_id: str, approval: dict) -> str:
    """Refund an order once approved."""
    return f"refunded {order_id}" if approval["approved"] else "not refunded"


PLAN = {
    "steps": [
        {"id": "s1", "tool": "approve_refund", "args": {"order_id": "A-1", "amount": 20}},
        {"id": "s2", "tool": "refund", "args": {"order_id": "A-1", "approval": "{{s1.output}}"}},
    ]
}


@pytest.mark.parametrize("approval", [approve_refund, ApproveRefund()], ids=["function", "class"])
@pytest.mark.parametrize("storage", ["memory", "sqlite"])
async def test_a_blocking_tool_suspends_until_a_person_decides(
    scripted_model, tmp_path, approval, storage
):
    url = "memory://" if storage == "memory" else f"sqlite:///{tmp_path / 'art.db'}"
    model = scripted_model(planning=PLAN, synthesis="Refunded.")
    inst = art.create_art_instance(model=model.model, tools=[approval, refund], storage=url)
    try:
        resp = await inst.aprocess("refund order A-1", "t")
        assert resp.status == "suspended"
        assert [(s.step_id, s.status) for s in resp.steps] == [("s1", "waiting"), ("s2", "pending")]
        info = await inst.acheck_for_suspended_state("t")
        assert info.suspensions[0].prompt == {"question": "Refund 20.0 EUR on A-1?"}

        done = await inst.aresume_execution("t", resp.metadata.suspension_id, True)
        assert done.status == "success"
        assert done.steps[1].output == "refunded A-1"
    finally:
        await inst.aclose()


@art.tool(execution_mode="blocking", blocking_config={"run_on_approval": True})
def send_mail(to: str, context: art.ExecutionContext) -> str:
    """Send a mail once a person approves."""
    if context.decision is None:
        return f"Send a mail to {to}?"
    return f"sent to {to}"


async def test_a_blocking_function_run_on_approval_asks_then_acts(scripted_model):
    plan = {"steps": [{"id": "s1", "tool": "send_mail", "args": {"to": "ann@example.com"}}]}
    model = scripted_model(planning=plan, synthesis="Sent.")
    inst = art.create_art_instance(model=model.model, tools=[send_mail], storage="memory://")
    try:
        resp = await inst.aprocess("mail ann", "t")
        assert resp.status == "suspended"
        info = await inst.acheck_for_suspended_state("t")
        assert info.suspensions[0].prompt == "Send a mail to ann@example.com?"
        done = await inst.aresume_execution("t", resp.metadata.suspension_id, True)
        assert done.status == "success"
        assert done.steps[0].output == "sent to ann@example.com"
    finally:
        await inst.aclose()
