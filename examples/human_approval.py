"""Human in the loop: a blocking tool suspends the run; a decision resumes it, later.

    python examples/human_approval.py            # asks you in a terminal, else approves
    python examples/human_approval.py --reject   # decide "no" without asking

The run is stored in a SQLite file, and the resume happens on a *new* instance, as it
would in another process (a web request, a worker) after a restart. The scripted test
model plays the LLM so this runs offline.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import art
import art.logging
from art.testing import ScriptedModel


class RequestApproval(art.IToolExecutor):
    """A blocking tool: it returns `suspended` with the question for a person."""

    schema = art.ToolSchema(
        name="request_approval",
        description="Ask a manager to approve an action. Returns their decision.",
        input_schema={
            "type": "object",
            "properties": {"action": {"type": "string"}, "amount": {"type": "number"}},
            "required": ["action", "amount"],
        },
        execution_mode="blocking",
    )

    def execute(self, input: dict, context: art.ExecutionContext) -> art.ToolResult:
        # A suspended result: its output is the question the manager is asked.
        return self.ask(
            context, {"question": f"Approve: {input['action']} (${input['amount']:.2f})?"}
        )


@art.tool
def issue_refund(order_id: str, amount: float) -> dict:
    """Refund an order.

    Args:
        order_id: The order to refund.
        amount: How much to refund, in dollars.
    """
    return {"order_id": order_id, "refunded": amount, "status": "refunded"}


def make_model() -> ScriptedModel:
    return ScriptedModel(
        planning={
            "title": "Refund order 1234 after approval",
            "steps": [
                {
                    "id": "s1",
                    "tool": "request_approval",
                    "args": {"action": "refund order 1234", "amount": 120},
                },
                {
                    "id": "s2",
                    "tool": "issue_refund",
                    "args": {"order_id": "1234", "amount": 120},
                    "dependsOn": ["s1"],  # only after the decision
                },
            ],
        },
        synthesis=lambda messages, metadata: (
            "The refund of $120 for order 1234 was issued."
            if '"refunded"' in str(messages)
            else "The refund was not issued: the manager rejected it."
        ),
    )


def decide(question: str) -> dict:
    if "--reject" in sys.argv:
        return {"approved": False, "reason": "over the monthly limit"}
    if sys.stdin.isatty():
        answer = input(f"{question} [y/N] ").strip().lower()
        return {"approved": answer in ("y", "yes"), "reason": input("reason: ") or None}
    print("(stdin is not a terminal: approving automatically)")
    return {"approved": True, "reason": "customer is a regular"}


def main() -> None:
    art.logging.configure_logging(level="WARNING")
    with tempfile.TemporaryDirectory() as scratch:
        run_and_resume(f"sqlite:///{Path(scratch) / 'approvals.db'}")


def run_and_resume(storage: str) -> None:
    model = make_model()
    tools = [RequestApproval(), issue_refund]
    thread = "refund-1234"

    # 1. The run stops at the blocking step; its state is stored.
    with art.create_art_instance(model=model.model, tools=tools, storage=storage) as inst:
        resp = inst.process("Refund order 1234 ($120)", thread)
        print(f"status: {resp.status}, suspension: {resp.metadata.suspension_id}")
        print(f"steps: {[(r.step_id, r.status) for r in resp.steps]}")

    # 2. Later, anywhere with the same storage: find what waits, decide, resume.
    with art.create_art_instance(model=model.model, tools=tools, storage=storage) as inst:
        state = inst.check_for_suspended_state(thread)
        assert state is not None
        waiting = state.suspensions[0]
        print(f"waiting: step {waiting.step_id} ({waiting.tool_name}) asks {waiting.prompt}")
        decision = decide(waiting.prompt["question"])
        final = inst.resume_execution(thread, waiting.suspension_id, decision)

    print(f"status: {final.status}")
    print(f"steps: {[(r.step_id, r.status, r.reason) for r in final.steps]}")
    print(f"answer: {final.content}")
    print(f"{final.metadata.llm_calls} LLM calls for the whole run (plan + answer)")


if __name__ == "__main__":
    main()
