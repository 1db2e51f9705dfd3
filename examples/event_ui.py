"""A user interface drawn from a run's events alone.

    python examples/event_ui.py

`inst.stream(...)` yields every event of a run as it happens. This script prints what
a chat UI would draw from them, line by line: the spinner's label, one block per tool
execution from its start through its progress to its end (a vetoed call included),
each step's output as its status completes, the display payload the moment it exists,
and the answer as it streams. The run also gets per-call options: only two of the
instance's tools, a system context every LLM call sees, and metadata for the tools.
The scripted test model plays the LLM.
"""

from __future__ import annotations

import asyncio
from typing import Any

import art
import art.logging
from art.testing import ScriptedModel
from art.tools import Calculator, Show


@art.tool
def lookup_price(item: str, context: art.ExecutionContext) -> float:
    """The price of an item in the customer's currency."""
    context.progress(f"asking the {context.extra['store']} price list")
    return {"apples": 2.5, "pears": 3.0}[item]


PLAN = {
    "title": "Fruit prices",
    "steps": [
        {"id": "s1", "tool": "lookup_price", "args": {"item": "apples"}},
        {"id": "s2", "tool": "lookup_price", "args": {"item": "pears"}},
        {"id": "s3", "tool": "lookup_price", "args": {"item": "plums"}},
        {
            "id": "s4",
            "tool": "show",
            "args": {
                "title": "Prices",
                "table": {
                    "columns": ["fruit", "price"],
                    "rows": [["apples", "{{s1.output}}"], ["pears", "{{s2.output}}"]],
                },
            },
        },
        {"id": "s5", "tool": None, "description": "Which is cheaper?", "dependsOn": ["s1", "s2"]},
    ],
}


class Ui:
    """Prints what a UI would draw, as the events arrive."""

    def __init__(self) -> None:
        self.spinner: str | None = None
        self.answer_started = False

    def spin(self, label: str) -> None:
        self.spinner = label
        print(f"[spinner] {label}...")

    def handle(self, event: art.Event) -> None:
        name, data = event.name, event.data
        if name == "session:start":
            self.spin("Planning")
            print(f"[tools] this run may use: {', '.join(data['tools'])}")
        elif name == "tool:loop:before":
            self.spin(f"Running {data['steps']} steps")
        elif name == "message:before" and data["phase"] == "synthesis":
            self.spin("Writing the answer")
        elif name == "tool:update":
            self.block(data)
        elif name == "step:status" and data["status"] == "completed":
            print(f"[output] {data['step_id']}: {data['output']!r}")
        elif name == "chunk:after" and data["phase"] == "synthesis":
            if not self.answer_started:
                self.answer_started, self.spinner = True, None
                print("[answer] ", end="")
            print(data["chunk"], end="", flush=True)
        elif name == "session:end":
            print()
            print(f"[done] {data['status']}: {data['llm_calls']} LLM calls")

    def block(self, data: dict[str, Any]) -> None:
        step, tool, stage = data["step_id"], data["tool"], data["stage"]
        if stage == "start":
            print(f"[block {step}] {tool} {data['args']} ...")
        elif stage in ("running", "streaming"):
            print(f"[block {step}]   {data.get('title') or data.get('output')}")
        elif data["status"] == "error":
            print(f"[block {step}] {tool} failed: {data['error']}")
        else:
            print(f"[block {step}] {tool} {data['status']} in {data['duration_ms']:.0f} ms")
            if data.get("display"):
                print(f"[display] {data['result']['title']}: {data['result']['rows']}")


def no_plums(data: dict[str, Any], context: art.EventContext) -> None:
    if data["args"].get("item") == "plums":
        raise PermissionError("plums are out of season")


async def main() -> None:
    art.logging.configure_logging(level="ERROR")  # the veto's warning would interleave
    ui = Ui()
    with ScriptedModel(
        planning=PLAN, step="Apples are cheaper.", synthesis="Apples (2.50) are cheaper than pears."
    ) as model:
        async with art.create_art_instance(
            model=model.model,
            tools=[lookup_price, Show(), Calculator()],
            storage="memory://",
        ) as inst:
            inst.on("tool:before", no_plums)
            options = {
                "tools": ["lookup_price", "show"],  # the calculator is left out of this run
                "system_context": {"currency": "CHF"},
                "metadata": {"store": "Bern"},
            }
            async for event in inst.stream("Which is cheaper, apples or pears?", "ui", options):
                ui.handle(event)
    planning_prompt = model.calls_for("planning")[0].messages[0]["content"]
    print(f"the planner saw the calculator: {'- calculator:' in planning_prompt}")
    print(f"the planner saw the currency: {'- currency: CHF' in planning_prompt}")


if __name__ == "__main__":
    asyncio.run(main())
