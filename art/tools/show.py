"""show: display a table or markdown to the user (a display tool)."""

from __future__ import annotations

from typing import Any

from art.errors import ToolErrorCode
from art.tooling.contract import ExecutionContext, IToolExecutor, ToolResult, ToolSchema
from art.tools._common import failure, success

__all__ = ["Show"]

_CELL = {"type": ["string", "number", "integer", "boolean", "null"]}


class Show(IToolExecutor):
    """Turn a title plus markdown or a table into a payload the application renders."""

    schema = ToolSchema(
        name="show",
        description=(
            "Shows the user a titled table or a markdown block, rendered by the application "
            "next to the answer. Use it when results are best seen at a glance (a "
            "comparison, a list of records, a formatted summary). Give a title and either "
            "markdown text or a table of columns and rows (one value per column in each "
            "row). Returns the display payload; its content is not read back by the model."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "title": {"type": "string", "minLength": 1},
                "markdown": {"type": "string", "description": "Markdown text to display."},
                "table": {
                    "type": "object",
                    "properties": {
                        "columns": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                        "rows": {"type": "array", "items": {"type": "array", "items": _CELL}},
                    },
                    "required": ["columns", "rows"],
                    "additionalProperties": False,
                },
            },
            "required": ["title"],
            "additionalProperties": False,
        },
        output_schema={
            "type": "object",
            "properties": {
                "kind": {"enum": ["markdown", "table"]},
                "title": {"type": "string"},
                "markdown": {"type": "string"},
                "columns": {"type": "array", "items": {"type": "string"}},
                "rows": {"type": "array", "items": {"type": "array"}},
            },
        },
        execution_mode="display",
        display_config={"kinds": ["markdown", "table"]},
        examples=[
            {
                "input": {"title": "Reminder", "markdown": "Stand-up moves to **10:00**."},
                "description": "Show the user a note that stand-up moves to 10:00.",
            },
            {
                "input": {
                    "title": "Team",
                    "table": {"columns": ["name", "role"], "rows": [["Ada", "lead"]]},
                },
                "description": "Show a table of the team: Ada, the lead.",
            },
        ],
    )

    def execute(self, input: dict[str, Any], context: ExecutionContext) -> ToolResult:
        title = input["title"]
        markdown: str | None = input.get("markdown")
        table: dict[str, Any] | None = input.get("table")
        if (markdown is None) == (table is None):
            return failure(
                self,
                context,
                ToolErrorCode.VALIDATION_ERROR,
                "give exactly one of 'markdown' (text) or 'table' ({columns, rows})",
            )
        if table is None:  # then markdown is given: exactly one of the two is
            return success(
                self, context, {"kind": "markdown", "title": title, "markdown": markdown}
            )
        columns, rows = table["columns"], table["rows"]
        ragged = [i for i, row in enumerate(rows) if len(row) != len(columns)]
        if ragged:
            return failure(
                self,
                context,
                ToolErrorCode.VALIDATION_ERROR,
                f"table rows {ragged[:10]} do not have one value per column "
                f"({len(columns)} columns: {', '.join(columns)})",
            )
        return success(
            self, context, {"kind": "table", "title": title, "columns": columns, "rows": rows}
        )
