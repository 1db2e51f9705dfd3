"""Display tools: output meant for the user's screen, not for the LLM.

    python examples/display_tool.py

A display tool runs like any other, but its output goes to `resp.display` (and to a
`tool:update` event the moment it is ready), while the synthesis call only learns that
something was shown. Here a custom bar-chart tool and the built-in `show` table both
display the result of two calculations. The scripted test model plays the LLM.
"""

from __future__ import annotations

import art
import art.logging
from art.testing import ScriptedModel
from art.tools import Calculator, Show


class BarChart(art.IToolExecutor):
    """A display tool: returns a chart specification for the application to draw."""

    schema = art.ToolSchema(
        name="bar_chart",
        description="Show the user a bar chart of labelled values.",
        input_schema={
            "type": "object",
            "properties": {
                "title": {"type": "string"},
                "labels": {"type": "array", "items": {"type": "string"}},
                "values": {"type": "array", "items": {"type": "number"}},
            },
            "required": ["title", "labels", "values"],
        },
        execution_mode="display",
    )

    def execute(self, input: dict, context: art.ExecutionContext) -> art.ToolResult:
        pairs = zip(input["labels"], input["values"], strict=True)
        bars = [{"label": label, "value": value} for label, value in pairs]
        return art.ToolResult(
            call_id=context.call_id,
            tool_name=self.schema.name,
            status="success",
            output={"kind": "bar_chart", "title": input["title"], "bars": bars},
        )


def draw(output: dict) -> str:
    """How an application might render each kind of display payload (here: as text)."""
    if output.get("kind") == "bar_chart":
        top = max(bar["value"] for bar in output["bars"]) or 1
        lines = [output["title"]]
        for bar in output["bars"]:
            lines.append(
                f"  {bar['label']:>8} {'█' * round(30 * bar['value'] / top)} {bar['value']}"
            )
        return "\n".join(lines)
    if output.get("kind") == "table":
        rows = [" | ".join(map(str, row)) for row in output["rows"]]
        return "\n".join([output["title"], " | ".join(output["columns"]), *rows])
    return str(output)


def main() -> None:
    art.logging.configure_logging(level="WARNING")
    model = ScriptedModel(
        planning={
            "title": "Compare two products",
            "steps": [
                {"id": "s1", "tool": "calculator", "args": {"expression": "17 * 23"}},
                {"id": "s2", "tool": "calculator", "args": {"expression": "19 * 29"}},
                {
                    "id": "s3",
                    "tool": "bar_chart",
                    "args": {
                        "title": "Products",
                        "labels": ["17 x 23", "19 x 29"],
                        "values": ["{{s1.output}}", "{{s2.output}}"],
                    },
                },
                {
                    "id": "s4",
                    "tool": "show",
                    "args": {
                        "title": "Products",
                        "table": {
                            "columns": ["product", "value"],
                            "rows": [["17 x 23", "{{s1.output}}"], ["19 x 29", "{{s2.output}}"]],
                        },
                    },
                },
            ],
        },
        synthesis="19 x 29 = 551 is the larger product; the chart and table show both.",
    )
    with art.create_art_instance(
        model=model.model, tools=[Calculator(), BarChart(), Show()], storage="memory://"
    ) as inst:
        # Render each display the moment its tool finishes, before the answer exists.
        def on_update(data: dict, context: art.EventContext) -> None:
            if data["stage"] == "end" and data.get("display"):
                print(f"[event] {data['tool']} ready:\n{draw(data['result'])}\n")

        inst.on("tool:update", on_update)
        resp = inst.process("Compare 17 x 23 and 19 x 29 in a chart and a table", "display")

    print(f"answer: {resp.content}\n")
    print(f"resp.display has {len(resp.display)} items:")
    for item in resp.display:
        print(f"- step {item.step_id} ({item.tool_name}): kind {item.output['kind']}")

    # The synthesis call saw the calculations, not the chart or table payloads.
    synthesis_prompt = str(model.calls_for("synthesis")[0].messages)
    print(f"\nthe synthesis prompt mentions the chart's bars: {'bars' in synthesis_prompt}")


if __name__ == "__main__":
    main()
