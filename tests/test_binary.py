"""Binary output (seed 000's attachments): bytes in a tool's output or metadata are
accepted, kept as bytes, stored and returned losslessly, shown, and described (never
sent) to the LLM."""

from __future__ import annotations

import json

from typer.testing import CliRunner

import art
import art.cli.app
from art.core.binary import BYTES_KEY, bytes_from_json, bytes_to_json, describe_bytes, media_type
from art.tooling.invocation import invoke_tool

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8
PDF = b"%PDF-1.7\n" + b"\x00\xff" * 100
ATTACHMENT = {"name": "report.pdf", "media_type": "application/pdf", "data": PDF}


class Chart(art.IToolExecutor):
    schema = art.ToolSchema(name="chart", description="Draw a chart as a PNG.")

    async def execute(self, input, context):
        return art.ToolResult(
            call_id=context.call_id, tool_name="chart", status="success", output=PNG
        )


class Report(art.IToolExecutor):
    schema = art.ToolSchema(name="report", description="Write a report with a PDF attached.")

    def execute(self, input, context):
        return art.ToolResult(
            call_id=context.call_id,
            tool_name="report",
            status="success",
            output="Sales grew 12 %.",
            metadata={"attachments": [ATTACHMENT]},
        )


class Size(art.IToolExecutor):
    schema = art.ToolSchema(
        name="size", description="The size of some data.", input_schema={"type": "object"}
    )

    async def execute(self, input, context):
        return art.ToolResult(
            call_id=context.call_id, tool_name="size", status="success", output=len(input["data"])
        )


PLAN = {
    "steps": [
        {"id": "s1", "tool": "chart", "args": {}},
        {"id": "s2", "tool": "report", "args": {}},
        {"id": "s3", "tool": "size", "args": {"data": "{{s1.output}}"}},
    ]
}


def test_bytes_are_described_and_carried_through_json():
    assert media_type(PNG) == "image/png" and media_type(PDF) == "application/pdf"
    assert media_type(b"RIFF\x00\x00\x00\x00WEBPVP8 ") == "image/webp"
    assert describe_bytes(PNG) == "<binary data: 2,056 bytes, image/png>"
    value = {"png": PNG, "list": [b"\x00", 1, "x"], "n": 2}
    encoded = bytes_to_json(value)
    assert encoded["png"] == {BYTES_KEY: json.loads(json.dumps(encoded))["png"][BYTES_KEY]}
    assert bytes_from_json(json.loads(json.dumps(encoded))) == value
    plain = {"a": [1, "x"]}
    assert bytes_to_json(plain) is plain  # nothing to encode: the value itself
    assert bytes_from_json({BYTES_KEY: "not base64!"}) == {BYTES_KEY: "not base64!"}


async def test_a_tool_may_return_bytes_and_attachments():
    context = art.ExecutionContext(thread_id="t", trace_id="0" * 32, call_id="c1")
    result = await invoke_tool(Chart(), {}, context)
    assert result.status == "success" and result.output == PNG
    result = await invoke_tool(Report(), {}, context)
    assert result.status == "success"
    assert result.metadata["attachments"][0]["data"] == PDF


async def test_binary_output_is_stored_returned_and_only_described_to_the_llm(
    scripted_model, tmp_path
):
    model = scripted_model(planning=PLAN, synthesis="Here is the chart and the report.")
    storage = f"sqlite:///{tmp_path / 'art.db'}"
    async with art.create_art_instance(
        model=model.model, tools=[Chart(), Report(), Size()], storage=storage
    ) as inst:
        resp = await inst.aprocess("chart and report", "t")
        stored = (await inst.aget_state("t")).runs[0].steps
    assert resp.status == "success"
    assert resp.steps[0].output == PNG
    assert resp.steps[1].result.metadata["attachments"][0]["data"] == PDF
    assert resp.steps[2].output == len(PNG)  # a whole-string reference passes the bytes on
    assert stored["s1"].output == PNG and stored["s3"].args == {"data": PNG}
    assert stored["s2"].result.metadata["attachments"][0]["data"] == PDF
    prompt = model.calls_for("synthesis")[0].messages[-1]["content"]
    assert "<binary data: 2,056 bytes, image/png>" in prompt
    assert "- report.pdf: <binary data: 209 bytes, application/pdf>" in prompt
    assert "PNG" not in prompt.replace("image/png", "")  # no byte of it reached the model
    # The response's JSON carries the bytes and reads back as bytes.
    again = art.AgentFinalResponse.model_validate_json(resp.model_dump_json())
    assert again.steps[0].output == PNG


def test_the_cli_shows_binary_outputs_and_attachments(scripted_model):
    model = scripted_model(planning=PLAN, synthesis="Done.")
    result = CliRunner().invoke(
        art.cli.app.app,
        ["run", "chart", "--model", model.model, "--storage", "memory://",
         "--tools", "tests/test_binary.py:TOOLS"],
        env={"COLUMNS": "160", "NO_COLOR": "1"},
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "📎 s1 (chart) output: <binary data: 2,056 bytes, image/png>" in result.stdout
    assert "📎 s2 (report) report.pdf: <binary data: 209 bytes, application/pdf>" in result.stdout
    document = CliRunner().invoke(
        art.cli.app.app,
        ["run", "chart", "--model", model.model, "--storage", "memory://",
         "--tools", "tests/test_binary.py:TOOLS", "--json"],
    )  # fmt: skip
    steps = json.loads(document.stdout)["steps"]
    assert bytes_from_json(steps[0]["result"]["output"]) == PNG


TOOLS = [Chart(), Report(), Size()]


def test_the_display_panel_describes_bytes():
    from rich.console import Console

    console = Console(record=True, width=120)
    console.print(art.cli.app.display_panel("chart", "s1", PNG))
    console.print(art.cli.app.display_panel("chart", "s1", {"image": PNG}))
    text = console.export_text()
    assert text.count("<binary data: 2,056 bytes, image/png>") == 2
