"""`art serve`'s /ag-ui read by the AG-UI protocol's own client: `@ag-ui/client`'s
HttpAgent (npm, installed by .ci/agui-client.sh outside the checkout) runs an art agent
in a real `art serve` process on 127.0.0.1. The client verifies every event; a question
streams text, tool calls with their results, state and an interrupt; the interrupt's
answer resumes the run; the client's final state is the run's stored state."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .test_processes import ServeProcess, start_server

pytestmark = pytest.mark.slow

NODE_DIR = Path(
    os.environ.get("ART_TEST_AGUI_NODE_DIR")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "art" / "agui-node"
)
DRIVER = Path(__file__).with_name("agui_client.cjs")


def require_agui_client() -> str:
    """The `node` executable; fails (under CI=true, which must run it) or skips when Node.js
    or @ag-ui/client is missing."""
    node = shutil.which("node")
    if node and (NODE_DIR / "node_modules" / "@ag-ui" / "client" / "package.json").exists():
        return node
    message = (
        f"node or @ag-ui/client (in {NODE_DIR}) is missing; install it with: "
        "bash .ci/agui-client.sh"
    )
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture
def serve(tmp_path: Path) -> Any:
    server = start_server(f"sqlite:///{tmp_path / 'art.db'}", tmp_path / "work.log")
    yield server
    server.stop()


def run_client(node: str, server: ServeProcess, thread_id: str, question: str) -> Any:
    done = subprocess.run(
        [node, str(DRIVER), str(NODE_DIR), server.url, thread_id, question],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def of(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == kind]


def test_the_ag_ui_client_runs_an_agent_through_an_interrupt_to_the_stored_state(
    serve: ServeProcess,
) -> None:
    node = require_agui_client()

    seen = run_client(node, serve, "t-agui-client", "table: what is 17 * 23 + 12?")

    first, second = seen["first"], seen["second"]
    assert first[0]["type"] == "RUN_STARTED" and first[-1]["type"] == "RUN_FINISHED"
    assert of(first, "STATE_SNAPSHOT")[0]["snapshot"]["runId"]  # known from the start
    assert {e["stepName"] for e in of(first, "STEP_STARTED")} == {"s1", "s2", "s3"}
    [interrupt] = seen["interrupts"]
    assert interrupt["message"] == "Add 12?" and interrupt["reason"] == "tool_approval"
    assert seen["stateAtInterrupt"]["steps"]["s3"]["status"] == "waiting"
    assert second[-1]["type"] == "RUN_FINISHED" and second[-1]["outcome"]["type"] == "success"
    assert seen["result"]["answer"] == "Done." and seen["pendingInterrupts"] == []

    # The messages: every tool call with its result (the person's decision for the
    # interrupted call), then the answer.
    calls = {
        call["id"]: call["function"]
        for message in seen["messages"]
        if message["role"] == "assistant"
        for call in message.get("toolCalls") or []
    }
    results = {m["toolCallId"]: m["content"] for m in seen["messages"] if m["role"] == "tool"}
    assert sorted(f["name"] for f in calls.values()) == [
        "ask_human",
        "calculator",
        "calculator",
        "show",
    ]
    assert set(results) == set(calls)
    by_args = {(f["name"], f["arguments"]): results[cid] for cid, f in calls.items()}
    assert by_args["calculator", '{"expression": "17 * 23"}'] == "391"
    assert by_args["calculator", '{"expression": "391 + 12"}'] == "403"
    decision = json.loads(by_args["ask_human", '{"question": "Add 12?"}'])
    assert decision["approved"] is True and decision["modified_args"] == {"note": "ok"}
    answers = [
        m["content"] for m in seen["messages"] if m["role"] == "assistant" and m.get("content")
    ]
    assert answers == ["Done."]

    # The client's state is the run as stored.
    state = seen["state"]
    [run] = serve.client.get("/threads/t-agui-client/runs").json()
    assert state["runId"] == run["runId"]
    assert (state["status"], run["status"]) == ("success", "completed")
    assert state["query"] == run["query"]
    assert state["plan"] == run["plan"]
    assert {sid: s["status"] for sid, s in state["steps"].items()} == {
        sid: s["status"] for sid, s in run["steps"].items()
    }
    assert {sid: s.get("output") for sid, s in state["steps"].items()} == {
        sid: (s["result"] or {}).get("output") for sid, s in run["steps"].items()
    }
    assert state["display"] == [
        {"step_id": d["stepId"], "tool_name": d["toolName"], "output": d["output"]}
        for d in run["display"]
    ]
    assert state["display"][0]["output"]["rows"] == [["17 x 23", 391]]


def test_without_the_client_ci_fails_saying_what_to_install(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "CI": "true", "ART_TEST_AGUI_NODE_DIR": str(tmp_path / "none")}
    test = test_the_ag_ui_client_runs_an_agent_through_an_interrupt_to_the_stored_state
    named = f"{Path(__file__).relative_to(root)}::{test.__name__}"

    done = subprocess.run(
        [sys.executable, "-m", "pytest", named, "--slow", "-p", "no:cacheprovider", "-q"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )

    assert done.returncode == 1, done.stdout
    assert "install it with: bash .ci/agui-client.sh" in done.stdout
