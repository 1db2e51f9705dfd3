"""`art mcp` under hostile clients: keys and Host/Origin checks over HTTP whatever the bind
address, bounded questions and thread ids, and a request the SDK cannot read answered
over stdio rather than never."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp_fixtures import APP
from typer.testing import CliRunner

from art.adapters.mcp import create_mcp_server
from art.cli.app import app

ART = str(Path(sys.executable).parent / "art")
SERVER_ENV = {"LITELLM_LOCAL_MODEL_COST_MAP": "True"}
KEY = "mcp-test-key-0123456789"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "probe", "version": "0"},
    },
}
HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"k": value}
    return value


def _start(*args: str) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [ART, "mcp", "--http", "--port", "0", "--instance", f"{APP}:build", *args],
        env={**os.environ, **SERVER_ENV},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    line = process.stderr.readline()
    assert line.startswith("art: serving MCP at http://"), line
    return process, line.split(" at ", 1)[1].strip()


@pytest.fixture
def open_server() -> Iterator[str]:
    """`art mcp --http --host 0.0.0.0` with a key, reached on 127.0.0.1."""
    process, url = _start("--host", "0.0.0.0", "--api-key", KEY, "--allowed-host", "agent.test")
    try:
        yield url.replace("0.0.0.0", "127.0.0.1")
    finally:
        process.terminate()
        process.wait(timeout=15)


def test_art_mcp_http_refuses_to_listen_beyond_loopback_without_keys(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ART_API_KEYS", raising=False)
    result = CliRunner().invoke(
        app, ["mcp", "--http", "--host", "0.0.0.0", "--instance", f"{APP}:build"]
    )
    assert result.exit_code != 0
    assert "refusing to listen on 0.0.0.0 without API keys" in result.output
    short = CliRunner().invoke(
        app, ["mcp", "--http", "--api-key", "short", "--instance", f"{APP}:build"]
    )
    assert short.exit_code != 0 and "at least 16 characters" in short.output


@pytest.mark.slow
async def test_art_mcp_http_beyond_loopback_needs_the_key_and_checks_host_and_origin(
    open_server: str,
) -> None:
    body = json.dumps(INITIALIZE)
    async with httpx.AsyncClient(timeout=10) as http:
        no_key = await http.post(open_server, content=body, headers=HEADERS)
        wrong_key = {**HEADERS, "authorization": "Bearer wrong-key"}
        wrong = await http.post(open_server, content=body, headers=wrong_key)
        keyed = {**HEADERS, "authorization": f"Bearer {KEY}"}
        evil_host = await http.post(
            open_server, content=body, headers={**keyed, "host": "evil.example"}
        )
        evil_origin = await http.post(
            open_server, content=body, headers={**keyed, "origin": "http://evil.example"}
        )
        named = await http.post(
            open_server, content=body, headers={**keyed, "host": "agent.test:80"}
        )
    assert (no_key.status_code, wrong.status_code) == (401, 401)
    assert no_key.headers["www-authenticate"] == 'Bearer realm="art"'
    assert evil_host.status_code == 421, evil_host.text
    assert evil_origin.status_code == 403, evil_origin.text
    assert named.status_code == 200, named.text

    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    auth = httpx2.AsyncClient(headers={"authorization": f"Bearer {KEY}"})
    async with auth, Client(streamable_http_client(open_server, http_client=auth)) as client:
        result = await client.call_tool("query", {"question": "sum"})
        assert result.structured_content["status"] == "success"


async def test_query_bounds_the_question_and_validates_the_thread_id(scripted_model) -> None:
    from mcp_app import build, plan_for

    inst = build(scripted_model(planning=plan_for))
    async with inst, Client(create_mcp_server(inst)) as client:
        long = await client.call_tool("query", {"question": "x" * 32_001})
        assert long.is_error and "invalid arguments for query" in long.content[0].text
        for bad in ("t\x00", "t\udc80x", "../etc", "x" * 129, ""):
            refused = await client.call_tool("query", {"question": "sum", "thread_id": bad})
            assert refused.is_error, bad
            assert "invalid arguments for query" in refused.content[0].text
        fine = await client.call_tool("query", {"question": "sum", "thread_id": "t-1.a:b"})
        assert fine.structured_content["status"] == "success"
        assert (await inst.aget_state("t-1.a:b")).runs
        assert [t.thread_id for t in await inst.alist_threads()] == ["t-1.a:b"]


def _read_answer(process: subprocess.Popen[str], request_id: int, timeout_s: float) -> dict:
    assert process.stdout is not None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([process.stdout], [], [], deadline - time.monotonic())
        if not ready:
            break
        line = process.stdout.readline()
        if not line:
            break
        message = json.loads(line)
        if message.get("id") == request_id:
            return message
    raise AssertionError(f"no answer to request {request_id} within {timeout_s} s")


@pytest.mark.slow
def test_over_stdio_a_request_nested_too_deep_is_answered_with_an_error() -> None:
    process = subprocess.Popen(
        [ART, "mcp", "--instance", f"{APP}:build"],
        env={**os.environ, **SERVER_ENV},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdin is not None

    def send(message: dict[str, Any]) -> None:
        assert process.stdin is not None
        process.stdin.write(json.dumps(message) + "\n")
        process.stdin.flush()

    try:
        send(INITIALIZE)
        assert "result" in _read_answer(process, 1, 30)
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        deep = {"question": "sum", "extra": _nested(250)}
        send(
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "query", "arguments": deep},
            }
        )
        answer = _read_answer(process, 2, 10)
        assert answer["error"]["code"] == -32600
        assert "recursion limit" in answer["error"]["message"]
        send({"jsonrpc": "2.0", "id": 3, "method": "tools/list"})  # still serving
        tools = _read_answer(process, 3, 10)["result"]["tools"]
        assert tools[0]["name"] == "query"
    finally:
        process.stdin.close()
        process.wait(timeout=15)
