"""ask_human: stop the run and ask a person (a blocking, human-in-the-loop tool)."""

from __future__ import annotations

import uuid
from typing import Any

from art.tooling.contract import ExecutionContext, IToolExecutor, ToolResult, ToolSchema

__all__ = ["AskHuman"]


class AskHuman(IToolExecutor):
    """Suspend the run with a question; the person's decision becomes the step's output."""

    schema = ToolSchema(
        name="ask_human",
        description=(
            "Pauses the run and asks a person a question. Use it when a decision needs human "
            "approval or information only a person has (a preference, a confirmation before "
            "an irreversible action). Do not use it for facts a tool can look up. The run "
            "stops until the person answers; the answer (for example {'approved': true, "
            "'reason': '...'}) then becomes this step's output."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "question": {
                    "type": "string",
                    "minLength": 1,
                    "description": "The question, phrased so a person can answer it directly.",
                },
                "options": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "Possible answers to offer, if the choice is closed.",
                },
                "details": {
                    "type": "string",
                    "description": "Background the person needs to decide.",
                },
            },
            "required": ["question"],
            "additionalProperties": False,
        },
        execution_mode="blocking",
        blocking_config={"kind": "question"},
        examples=[
            {
                "input": {"question": "Delete the old backups?", "options": ["yes", "no"]},
                "description": "Ask me before deleting the old backups.",
            }
        ],
    )

    def execute(self, input: dict[str, Any], context: ExecutionContext) -> ToolResult:
        question: dict[str, Any] = {"question": input["question"]}
        if input.get("options"):
            question["options"] = list(input["options"])
        if input.get("details"):
            question["details"] = input["details"]
        return ToolResult(
            call_id=context.call_id,
            tool_name=self.schema.name,
            status="suspended",
            output=question,
            metadata={"suspension_id": uuid.uuid4().hex},
        )
