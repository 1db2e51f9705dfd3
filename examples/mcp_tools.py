"""MCP tools as plan steps, offline: the reference time server from PyPI (mcp-server-time,
in the `mcp` extra's test dependencies) and art's scripted test model.

    python examples/mcp_tools.py

The servers come from an `mcpServers` JSON file, the format Claude Desktop reads. art
starts the server on the first run, lists its tools as `time__get_current_time` and
`time__convert_time`, runs the plan's steps on it at the same time, and stops it when
the instance is closed. docs/mcp.md explains every part.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import art
from art.testing import ScriptedModel

# What a planner would write for the question below (the scripted model replies with it).
PLAN = {
    "title": "Noon UTC around the world",
    "steps": [
        {
            "id": "s1",
            "tool": "time__convert_time",
            "args": {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"},
        },
        {
            "id": "s2",
            "tool": "time__convert_time",
            "args": {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Kolkata"},
        },
        {"id": "s3", "tool": "time__get_current_time", "args": {"timezone": "UTC"}},
    ],
}


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        config = Path(scratch) / "mcp.json"
        config.write_text(
            json.dumps(
                {
                    "mcpServers": {
                        "time": {
                            "command": sys.executable,
                            "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"],
                        }
                    }
                },
                indent=2,
            )
        )
        print(f"config ({config.name}):\n{config.read_text()}")

        with (
            ScriptedModel(
                planning=PLAN, synthesis="Noon UTC is 21:00 in Tokyo and 17:30 in Kolkata."
            ) as model,
            art.create_art_instance(
                model=model.model, storage="memory://", mcp_servers=config
            ) as inst,
        ):
            response = inst.process("When is noon UTC in Tokyo and Kolkata?", "mcp-example")

            print("tools from the MCP server:")
            for tool in inst.registry:
                if hasattr(tool, "mcp_name"):
                    print(f"  {tool.name} <- {tool.server_name}:{tool.mcp_name}")
            print("steps:")
            for step in response.steps[:2]:
                target = step.output["target"]
                print(
                    f"  {step.step_id} {step.tool}: {target['timezone']} "
                    f"{target['datetime'][11:16]} ({step.output['time_difference']})"
                )
            now = response.steps[2].output
            print(f"  s3 {response.steps[2].tool}: {now['timezone']} {now['day_of_week']}")
            print(f"answer: {response.content}")
            meta = response.metadata
            print(f"{meta.status}: {meta.llm_calls} LLM calls, {meta.tool_calls} MCP tool calls")
        print("closed: the MCP server process has been stopped")


if __name__ == "__main__":
    main()
