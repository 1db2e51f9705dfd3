"""`art serve` in a process of its own, with a ScriptedModel as its model (the scripted
provider lives in the process that registers it, so this launcher registers it, then runs
the real `art serve` command with `--model` naming it and `--tools` naming `tools` below).

    python tests/server/scripted_serve.py --storage postgresql://... --port 0 --grace 2

The planner answers by the query: "approve ..." plans an approval (then a 1.5 s `work`
step with "slowly"); "table ..." plans a
product shown as a table, an approval, then a sum; "work 0.5 4 ..." plans
a chain of `work` steps, each working that many seconds. The `work` tool appends
`started|finished <thread> <step> <pid>` to $ART_TEST_WORK_LOG.
"""

from __future__ import annotations

import os
import re
import sys
import time
from typing import Any

from art.tooling.contract import ExecutionContext, IToolExecutor, ToolResult, ToolSchema
from art.tools import AskHuman, Calculator, Show


class Work(IToolExecutor):
    schema = ToolSchema(
        name="work",
        description="Works for a while.",
        input_schema={"type": "object", "properties": {"seconds": {"type": "number"}}},
    )

    def execute(self, input: dict[str, Any], context: ExecutionContext) -> ToolResult:
        self._log("started", context)
        deadline = time.monotonic() + input["seconds"]
        while time.monotonic() < deadline and not context.cancelled:
            time.sleep(0.02)
        self._log("finished", context)
        return ToolResult(
            call_id=context.call_id, tool_name="work", status="success", output="worked"
        )

    @staticmethod
    def _log(event: str, context: ExecutionContext) -> None:
        line = f"{event} {context.thread_id} {context.step_id} {os.getpid()}\n"
        fd = os.open(os.environ["ART_TEST_WORK_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


def tools() -> list[IToolExecutor]:
    return [Calculator(), AskHuman(), Show(), Work()]


TABLE_PLAN: dict[str, Any] = {
    "steps": [
        {"id": "s1", "tool": "calculator", "args": {"expression": "17 * 23"}},
        {
            "id": "s2",
            "tool": "show",
            "args": {
                "title": "Product",
                "table": {"columns": ["what", "value"], "rows": [["17 x 23", "{{s1.output}}"]]},
            },
        },
        {"id": "s3", "tool": "ask_human", "args": {"question": "Add 12?"}, "dependsOn": ["s1"]},
        {
            "id": "s4",
            "tool": "calculator",
            "args": {"expression": "{{s1.output}} + 12"},
            "dependsOn": ["s3"],
        },
    ]
}


def plan_for(messages: list[dict[str, Any]], metadata: dict[str, Any]) -> dict[str, Any]:
    query = next(m["content"] for m in reversed(messages) if m["role"] == "user")
    if "approve" in query:
        # "slowly": the step after the approval works for 1.5 s (the resumed run holds
        # the thread meanwhile).
        after = (
            {"id": "s2", "tool": "work", "args": {"seconds": 1.5}, "dependsOn": ["s1"]}
            if "slowly" in query
            else {"id": "s2", "tool": "calculator", "args": {"expression": "6 * 7"}}
        )
        return {"steps": [{"id": "s1", "tool": "ask_human", "args": {"question": "Go on?"}}, after]}
    if "table" in query:
        return TABLE_PLAN
    seconds = [float(s) for s in re.findall(r"\d+(?:\.\d+)?", query.split("work", 1)[-1])]
    return {
        "steps": [
            {
                "id": f"s{i}",
                "tool": "work",
                "args": {"seconds": duration},
                "dependsOn": [f"s{i - 1}"] if i > 1 else [],
            }
            for i, duration in enumerate(seconds or [0.1], start=1)
        ]
    }


def main() -> None:
    from art.cli.app import main as art_main
    from art.testing import ScriptedModel

    model = ScriptedModel(planning=plan_for, synthesis="Done.")
    sys.argv = [
        "art",
        "serve",
        "--model",
        model.model,
        "--tools",
        f"{os.path.abspath(__file__)}:tools",
        "--log-level",
        "warning",
        *sys.argv[1:],
    ]
    art_main()


if __name__ == "__main__":
    main()
