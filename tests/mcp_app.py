"""The art agent the MCP server tests serve: `art mcp --instance tests/mcp_app.py:build`.

Its scripted model plans by keyword: "approve" asks a human before doubling, "wait" runs
a slow step (for cancellation), anything else multiplies and adds with the calculator.
ART_TEST_MCP_STORAGE names its storage (default memory://).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import art
from art.testing import ScriptedModel
from art.tools import AskHuman, Calculator

PRODUCTS = {
    "title": "Products and their sum",
    "steps": [
        {"id": "s1", "tool": "calculator", "args": {"expression": "17 * 23"}},
        {"id": "s2", "tool": "calculator", "args": {"expression": "19 * 29"}},
        {"id": "s3", "tool": "calculator", "args": {"expression": "{{s1.output}} + {{s2.output}}"}},
    ],
}
APPROVAL = {
    "title": "Approve, then double",
    "steps": [
        {"id": "s1", "tool": "ask_human", "args": {"question": "Double 21?"}},
        {"id": "s2", "tool": "calculator", "args": {"expression": "21 * 2"}, "dependsOn": ["s1"]},
    ],
}
WAIT = {"title": "Wait", "steps": [{"id": "s1", "tool": "wait", "args": {"seconds": 30}}]}


@art.tool
async def wait(seconds: float) -> str:
    """Waits for a number of seconds, then says so.

    Returns:
        "waited".
    """
    await asyncio.sleep(seconds)
    return "waited"


def plan_for(messages: list[dict[str, Any]], metadata: dict[str, Any]) -> dict[str, Any]:
    question = str(messages[-1].get("content", "")).rpartition("Request:")[2].lower()
    if "approve" in question:
        return APPROVAL
    if "wait" in question:
        return WAIT
    return PRODUCTS


def build(model: ScriptedModel | None = None) -> art.ArtInstance:
    """The agent (in `art mcp`'s process, with a scripted model of its own)."""
    model = model or ScriptedModel(planning=plan_for)
    return art.create_art_instance(
        model=model.model,
        tools=[Calculator(), AskHuman(), wait],
        storage=os.environ.get("ART_TEST_MCP_STORAGE", "memory://"),
        execution_config={"step_max_retries": 0},
    )
