"""art as an MCP server, driven by the SDK's own client (in-process, over stdio through
`art mcp`, over Streamable HTTP through `art mcp --http`) and by art's own MCP client."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp import Client, MCPError, StdioServerParameters
from mcp_fixtures import APP
from typer.testing import CliRunner

import art
from art.adapters.mcp import create_mcp_server
from art.cli.app import EXIT_USAGE, app
from art.storage.opening import open_storage

ART = str(Path(sys.executable).parent / "art")
# PYTHONPATH too: the server runs the code under test (a checkout that is not the installed one).
SERVER_ENV = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
}


async def exercise(client: Client) -> None:
    """Everything the server offers, through one client session."""
    listed = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert list(listed) == ["query", "plan", "list_suspensions", "decide_suspension"]
    assert listed["query"].input_schema["required"] == ["question"]
    assert listed["query"].output_schema["required"] == ["status", "answer", "thread_id", "steps"]

    # query: the answer as text, the run as structured content, progress per step
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, total, message))

    result = await client.call_tool(
        "query", {"question": "What is 17*23 + 19*29?"}, progress_callback=on_progress
    )
    assert not result.is_error
    run = result.structured_content
    assert run["status"] == "success"
    assert result.content[0].text == run["answer"]
    assert "942" in run["answer"]
    assert [(s["id"], s["output"]) for s in run["steps"]] == [("s1", 391), ("s2", 551), ("s3", 942)]
    assert run["plan"]["title"] == "Products and their sum"
    assert run["usage"]["total_tokens"] > 0 and run["llm_calls"] == 2 and run["tool_calls"] == 3
    assert run["thread_id"].startswith("mcp-")
    assert [(value, total) for value, total, _ in progress] == [(0, 3), (1, 3), (2, 3), (3, 3)]
    assert progress[0][2] == "planned 3 steps"
    assert {message for _, _, message in progress[1:]} == {
        "s1 calculator: completed",
        "s2 calculator: completed",
        "s3 calculator: completed",
    }

    # plan: nothing runs
    planned = await client.call_tool("plan", {"question": "the sum again"})
    assert [s["id"] for s in planned.structured_content["plan"]["steps"]] == ["s1", "s2", "s3"]
    assert planned.content[0].text.startswith("Plan: Products and their sum\n- s1 calculator")

    # human in the loop: suspended, listed, decided
    thread = f"approve-{time.monotonic_ns()}"
    waiting = await client.call_tool("query", {"question": "Please approve", "thread_id": thread})
    assert waiting.structured_content["status"] == "suspended"
    (suspension,) = waiting.structured_content["suspensions"]
    assert suspension["tool"] == "ask_human" and suspension["prompt"]["question"] == "Double 21?"
    listed_now = await client.call_tool("list_suspensions", {"thread_id": thread})
    assert listed_now.structured_content["suspensions"] == [suspension]
    everywhere = await client.call_tool("list_suspensions", {})
    assert suspension in everywhere.structured_content["suspensions"]
    decided = await client.call_tool(
        "decide_suspension",
        {
            "thread_id": thread,
            "suspension_id": suspension["suspension_id"],
            "approved": True,
            "reason": "fine",
        },
    )
    assert decided.structured_content["status"] == "success"
    assert [s["output"] for s in decided.structured_content["steps"]] == [
        {"approved": True, "reason": "fine", "modified_args": None},
        42,
    ]
    again = await client.call_tool(
        "decide_suspension",
        {"thread_id": thread, "suspension_id": suspension["suspension_id"], "approved": False},
    )
    assert again.is_error and "already decided" in again.content[0].text

    # bad input is an error result naming the problem; an unknown tool a protocol error
    bad = await client.call_tool("query", {"question": ""})
    assert bad.is_error and "invalid arguments for query" in bad.content[0].text
    with pytest.raises(MCPError, match="Unknown tool: nope"):
        await client.call_tool("nope", {})


async def test_the_sdk_client_in_process(scripted_model):
    from mcp_app import build, plan_for

    inst = build(scripted_model(planning=plan_for))
    async with inst, Client(create_mcp_server(inst)) as client:
        await exercise(client)
        json.dumps((await client.call_tool("query", {"question": "sum"})).structured_content)


async def test_a_bytes_step_output_comes_back_as_base64_in_the_structured_result(scripted_model):
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256))  # not UTF-8

    @art.tool
    def chart() -> bytes:
        """Draws the chart.

        Returns:
            The PNG.
        """
        return png

    model = scripted_model(planning={"title": "chart", "steps": [{"id": "s1", "tool": "chart"}]})
    inst = art.create_art_instance(model=model.model, tools=[chart], storage="memory://")
    async with inst, Client(create_mcp_server(inst)) as client:
        result = await client.call_tool("query", {"question": "draw it"})
    assert not result.is_error, result.content[0].text
    (step,) = result.structured_content["steps"]
    assert step["status"] == "completed"
    assert step["output"] == {"$bytes": base64.b64encode(png).decode()}


@pytest.mark.slow
async def test_the_sdk_client_over_stdio_through_art_mcp():
    params = StdioServerParameters(
        command=ART, args=["mcp", "--instance", f"{APP}:build"], env=SERVER_ENV
    )
    async with Client(params) as client:
        assert client.server_info.name == "art"
        await exercise(client)


@pytest.fixture(scope="module")
def http_server() -> Iterator[str]:
    """`art mcp --http --port 0`, its URL read from the line it prints when listening."""
    process = subprocess.Popen(
        [ART, "mcp", "--http", "--port", "0", "--instance", f"{APP}:build"],
        env={**os.environ, **SERVER_ENV},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        assert line.startswith("art: serving MCP at http://127.0.0.1:"), line
        yield line.split(" at ", 1)[1].strip()
    finally:
        process.terminate()
        process.wait(timeout=15)


@pytest.mark.slow
async def test_the_sdk_client_over_streamable_http_through_art_mcp(http_server):
    assert http_server.endswith("/mcp")
    async with Client(http_server) as client:
        await exercise(client)


@pytest.mark.slow
def test_art_client_talks_to_art_server_and_cancelling_a_step_cancels_the_run(
    scripted_model, tmp_path
):
    """An outer agent plans steps on the inner agent's `query` tool (served by `art mcp`).
    A step that times out is cancelled; the MCP cancellation ends the inner run."""
    storage = f"sqlite:///{tmp_path / 'inner.db'}"
    inner = {
        "command": ART,
        "args": ["mcp", "--instance", f"{APP}:build"],
        "env": {**SERVER_ENV, "ART_TEST_MCP_STORAGE": storage},
    }
    model = scripted_model(
        planning={
            "steps": [
                {"id": "s1", "tool": "inner__query", "args": {"question": "17*23 + 19*29?"}},
                {
                    "id": "s2",
                    "tool": "inner__query",
                    "args": {"question": "wait for it", "thread_id": "to-cancel"},
                },
            ]
        }
    )
    with art.create_art_instance(
        model=model.model,
        storage="memory://",
        mcp_servers={"inner": inner},
        execution_config={"step_timeout_s": 8, "step_max_retries": 0},
    ) as outer:
        response = outer.process("Ask the inner agent twice", "outer")
        answered, cancelled = response.steps
        assert answered.output["status"] == "success"
        assert [s["output"] for s in answered.output["steps"]] == [391, 551, 942]
        assert cancelled.result.error_code == "TIMEOUT"
        # The inner run on thread to-cancel ends as cancelled (not left running).
        run = asyncio.run(_inner_run(storage, "to-cancel"))
        assert run.status == "failed" and run.error.code == "CANCELLED", run
        assert "cancelled by the MCP client" in run.error.message


async def _inner_run(storage: str, thread: str, wait_s: float = 15.0) -> art.RunRecord:
    store = open_storage(storage)
    await store.open()
    try:
        deadline = time.monotonic() + wait_s
        while True:
            runs = await store.list_runs(thread)
            if (runs and runs[-1].status != "running") or time.monotonic() > deadline:
                return runs[-1]
            await asyncio.sleep(0.1)
    finally:
        await store.close()


def test_art_mcp_refuses_instance_with_other_agent_options(restore_logging):
    result = CliRunner().invoke(app, ["mcp", "--instance", f"{APP}:build", "--model", "x/y"])
    assert result.exit_code == EXIT_USAGE
    assert "--instance builds the whole agent" in result.stderr
    result = CliRunner().invoke(app, ["mcp", "--instance", f"{APP}:PRODUCTS"])
    assert result.exit_code == EXIT_USAGE
    said = " ".join(result.stderr.split())  # rich wraps the message at the terminal's width
    assert "expected an ArtInstance or a function returning one, got dict" in said


def test_art_mcp_help_names_both_transports():
    result = CliRunner().invoke(app, ["mcp", "--help"], env={"COLUMNS": "120"})
    assert "stdio" in result.stdout and "--http" in result.stdout and "--instance" in result.stdout
