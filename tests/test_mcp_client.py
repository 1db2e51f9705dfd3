"""art's MCP client against real MCP servers nobody here wrote: mcp-server-time,
mcp-server-git and mcp-server-fetch from PyPI, @modelcontextprotocol/server-everything from
npm (stdio, Streamable HTTP, SSE). Each test plans with the scripted model and runs real
tool calls; tests/mcp_probe.py, an SDK server, reports what reached the server's side."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from mcp_fixtures import (
    EVERYTHING,
    PROBE,
    alive,
    child_pids,
    command_line,
    everything_server,
    free_port,
    git_server,
    mcp_children,
    require_everything,
    run_everything,
    run_probe,
    time_server,
    wait_for_port,
)
from typer.testing import CliRunner

import art
from art.adapters.mcp import MCPClient, MCPServerError
from art.cli.app import EXIT_ERROR, EXIT_OK, app
from art.testing import replies
from art.testing._serving import ServerThread  # private: FakeProvider's server loop; unexported

pytestmark = pytest.mark.slow


def _plan(*steps: dict) -> dict:
    return {"title": "MCP steps", "steps": list(steps)}


def _step(step_id: str, tool: str, **args) -> dict:
    return {"id": step_id, "tool": tool, "args": args}


def _instance(model, mcp_servers, **config) -> art.ArtInstance:
    return art.create_art_instance(
        model=model.model,
        storage="memory://",
        mcp_servers=mcp_servers,
        execution_config={"step_max_retries": 0, **config},
    )


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("repo")
    env = {**os.environ, "GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@b.c"}
    env |= {"GIT_COMMITTER_NAME": "a", "GIT_COMMITTER_EMAIL": "a@b.c"}
    for command in (["init", "-q"], ["commit", "-q", "--allow-empty", "-m", "first commit"]):
        subprocess.run(["git", *command], cwd=path, env=env, check=True)
    return path


@pytest.fixture(scope="module")
def servers() -> Iterator[MCPClient]:
    """time, git and everything over stdio, started once for the tests that only call them."""
    client = MCPClient(
        {"time": time_server(), "git": git_server(), "everything": everything_server()}
    )
    client.start()
    yield client
    client.close()


# -- tools and schemas ---------------------------------------------------------------------
def test_every_servers_tools_are_listed_with_their_schemas(servers):
    tools = {tool.name: tool for tool in servers.tools}
    assert {"time__get_current_time", "time__convert_time", "git__git_log"} <= set(tools)
    assert "everything__trigger_long_running_operation" in tools  # trigger-long-running-...
    now = tools["time__get_current_time"]
    assert (now.server_name, now.mcp_name) == ("time", "get_current_time")
    assert now.schema.description == "Get current time in a specific timezone"
    assert now.schema.input_schema["required"] == ["timezone"]
    assert set(now.schema.output_schema["properties"]) == {
        "timezone",
        "datetime",
        "day_of_week",
        "is_dst",
    }
    image = tools["everything__get_tiny_image"]
    assert image.mcp_name == "get-tiny-image"
    assert image.schema.output_schema is None
    statuses = {s.name: s for s in servers.status()}
    assert statuses["time"].protocol_version == "2026-07-28"  # a server of both eras
    assert statuses["everything"].protocol_version == "2025-11-25"  # an older one
    assert all(s.state == "running" and s.transport == "stdio" for s in statuses.values())


def test_a_tool_that_must_run_as_a_task_is_left_out_with_the_reason(servers, caplog):
    # server-everything's simulate-research-query has execution.taskSupport "required":
    # a plain call always fails, so it is never offered.
    assert "everything__simulate_research_query" not in {tool.name for tool in servers.tools}
    status = {s.name: s for s in servers.status()}["everything"]
    assert list(status.left_out) == ["simulate-research-query"]
    assert "taskSupport" in status.left_out["simulate-research-query"]
    client = MCPClient({"everything": everything_server()})
    with client:
        assert "everything__echo" in {tool.name for tool in client.tools}
    warning = next(r for r in caplog.records if "left out" in r.getMessage())
    assert "simulate-research-query" in warning.getMessage()


# -- a whole run ---------------------------------------------------------------------------
def test_process_plans_steps_on_mcp_tools_and_gets_their_real_outputs(
    servers, scripted_model, repo
):
    model = scripted_model(
        planning=_plan(
            _step("s1", "time__get_current_time", timezone="Asia/Tokyo"),
            _step("s2", "git__git_log", repo_path=str(repo), max_count=1),
            # a field of s1's outputSchema (checked by the planner), and s2's text
            _step("s3", "everything__echo", message="{{s1.output.timezone}}: {{s2.output}}"),
        )
    )
    with _instance(model, servers) as inst:
        response = inst.process("Time in Tokyo, and the last commit?", "mcp-run")
    assert response.status == "success", response.content
    s1, s2, s3 = response.steps
    assert s1.output["timezone"] == "Asia/Tokyo"
    assert s1.output["datetime"].endswith("+09:00")  # structured content is the output
    assert s1.result.metadata["content"][0]["type"] == "text"  # the text is kept too
    assert "first commit" in s2.output
    assert s3.output.startswith("Echo: Asia/Tokyo: Commit history:")  # references between MCP steps
    synthesis = model.calls_for("synthesis")[0]
    assert "Asia/Tokyo" in json.dumps(synthesis.messages)


@pytest.fixture
def page(tmp_path) -> Iterator[str]:
    """A web page served on 127.0.0.1 (the fetch server's own robots.txt check gets a 404)."""
    (tmp_path / "prices.html").write_text(
        "<html><head><title>Shop</title></head><body><h1>Prices</h1><table>"
        "<tr><th>item</th><th>price</th></tr><tr><td>tea</td><td>3</td></tr></table></body></html>"
    )

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), partial(Quiet, directory=str(tmp_path)))
    with ServerThread(httpd):
        yield f"http://127.0.0.1:{httpd.server_port}/prices.html"


def test_the_fetch_server_reads_a_page_as_markdown(page, scripted_model):
    model = scripted_model(planning=_plan(_step("s1", "fetch__fetch", url=page)))
    # Loopback addresses are refused unless allowed (the server guards against SSRF).
    args = ["-m", "mcp_server_fetch", "--allow-private-ips"]
    with _instance(model, {"fetch": {"command": sys.executable, "args": args}}) as inst:
        response = inst.process("What does tea cost?", "mcp-fetch")
    assert response.status == "success", response.content
    assert "## Prices" in response.steps[0].output
    assert "| tea | 3 |" in response.steps[0].output  # the HTML table, as markdown


def test_binary_content_is_kept_as_bytes_and_prompts_only_describe_it(servers, scripted_model):
    model = scripted_model(
        planning=_plan(
            _step("s1", "everything__get_tiny_image"),
            _step("s2", "everything__get_resource_reference", resourceType="Blob", resourceId=1),
            {"id": "s3", "tool": None, "description": "describe the image", "dependsOn": ["s1"]},
        )
    )
    with _instance(model, servers) as inst:
        response = inst.process("Show me the logo", "mcp-image")
    assert response.status == "success", response.content
    blocks = response.steps[0].output
    assert [block["type"] for block in blocks] == ["text", "image", "text"]
    image = blocks[1]
    assert image["mimeType"] == "image/png"
    assert isinstance(image["data"], bytes) and image["data"].startswith(b"\x89PNG")
    blob = response.steps[1].output[1]["resource"]["blob"]
    assert isinstance(blob, bytes) and blob.startswith(b"Resource 1:")
    encoded = base64.b64encode(image["data"]).decode()
    prompts = [*model.calls_for("step"), *model.calls_for("synthesis")]
    assert len(prompts) == 2
    for call in prompts:
        text = json.dumps(call.messages)
        assert encoded[:40] not in text and base64.b64encode(blob).decode() not in text
        assert f"<binary data: {len(image['data']):,} bytes, image/png>" in text
    dumped = response.model_dump(mode="json")
    json.dumps(dumped)  # the whole response stays JSON-safe, the bytes as {"$bytes": ...}
    assert dumped["steps"][0]["result"]["output"][1]["data"] == {"$bytes": encoded}


def test_an_is_error_result_fails_the_step_with_the_servers_message(servers, scripted_model):
    model = scripted_model(
        planning=_plan(
            _step("s1", "time__get_current_time", timezone="Mars/Olympus_Mons"),
            _step("s2", "time__get_current_time", timezone="UTC"),
        )
    )
    with _instance(model, servers) as inst:
        response = inst.process("Time on Mars and in UTC?", "mcp-error")
    assert response.status == "partial"
    failed, ok = response.steps
    assert failed.status == "failed"
    assert "Invalid timezone" in failed.result.error
    assert "Mars/Olympus_Mons" in failed.result.error
    assert failed.result.error_code == "UNKNOWN"
    assert ok.status == "completed" and ok.output["timezone"] == "UTC"


@pytest.mark.parametrize(
    ("server", "tool", "arguments"),
    [
        ("everything", "echo", {"message": 5}),  # the TypeScript SDK's zod check
        ("probe", "wait", {"tag": "t", "seconds": "soon"}),  # the Python SDK's pydantic check
    ],
)
def test_arguments_the_server_rejects_fail_with_validation_error(server, tool, arguments):
    config = {
        "everything": everything_server(),
        "probe": {"command": sys.executable, "args": [str(PROBE), "stdio"]},
    }
    context = art.ExecutionContext(thread_id="t", trace_id="0" * 32, call_id="c1")
    with MCPClient({server: config[server]}) as client:
        (mcp_tool,) = [t for t in client.tools if t.mcp_name == tool]
        # Sent as they are (the engine would refuse them against the inputSchema first),
        # so the server's own check answers.
        result = asyncio.run(mcp_tool.execute(arguments, context))
    assert result.status == "error"
    assert result.error_code == "VALIDATION_ERROR", result.error
    assert result.retryable is False


def test_progress_notifications_become_running_tool_updates(servers, scripted_model):
    model = scripted_model(
        planning=_plan(
            _step("s1", "everything__trigger_long_running_operation", duration=0.6, steps=3)
        )
    )
    updates = []
    with _instance(model, servers) as inst:
        inst.on("tool:update", lambda data, context: updates.append(data))
        response = inst.process("Run the long operation", "mcp-progress")
    assert response.status == "success"
    assert [u["stage"] for u in updates] == ["start", "running", "running", "running", "end"]
    running = [u for u in updates if u["stage"] == "running"]
    assert [u["metadata"]["progress"] for u in running] == [1, 2, 3]
    assert {u["metadata"]["total"] for u in running} == {3}
    assert running[0]["title"] == "1/3"
    assert "Long running operation completed" in updates[-1]["result"]


def test_concurrent_steps_share_one_server_process(servers, scripted_model):
    before = mcp_children("mcp-server-everything")
    model = scripted_model(
        planning=_plan(
            *(
                _step(f"s{i}", "everything__trigger_long_running_operation", duration=1, steps=1)
                for i in (1, 2, 3)
            )
        )
    )
    with _instance(model, servers) as inst:
        started = time.perf_counter()
        response = inst.process("Three at once", "mcp-parallel")
        elapsed = time.perf_counter() - started
    assert response.status == "success"
    assert elapsed < 2.5, f"three 1 s calls took {elapsed:.2f} s: they did not run together"
    assert len(before) == 1 and mcp_children("mcp-server-everything") == before


def test_a_server_that_does_not_answer_in_time_fails_its_step_with_timeout(servers, scripted_model):
    model = scripted_model(
        planning=replies(
            _plan(
                _step("s1", "everything__trigger_long_running_operation", duration=30, steps=30),
                _step("s2", "everything__echo", message="still here"),
            ),
            _plan(_step("s1", "everything__echo", message="again")),
        )
    )
    with _instance(model, servers, step_timeout_s=1.0) as inst:
        started = time.perf_counter()
        response = inst.process("Slow and fast", "mcp-timeout")
        assert time.perf_counter() - started < 10
        assert response.status == "partial"
        slow, fast = response.steps
        assert slow.status == "failed" and slow.result.error_code == "TIMEOUT"
        assert fast.output == "Echo: still here"
        # The server is still usable: the abandoned call was cancelled, not the session.
        # (The echo gets time of its own: 1 s is short for a Node server on a busy machine.)
        again = inst.process("Again", "mcp-timeout-2", {"execution_config": {"step_timeout_s": 30}})
        assert again.steps[0].output == "Echo: again"


def test_a_servers_own_request_timeout_also_fails_the_step_with_timeout(scripted_model):
    model = scripted_model(
        planning=_plan(
            _step("s1", "everything__trigger_long_running_operation", duration=10, steps=10)
        )
    )
    config = {"everything": {**everything_server(), "timeout": 0.5}}
    with _instance(model, config) as inst:
        response = inst.process("Slow", "mcp-request-timeout")
    step = response.steps[0]
    assert step.result.error_code == "TIMEOUT" and step.result.retryable
    assert "no answer within 0.5 s" in step.result.error


def test_cancelling_the_run_cancels_the_mcp_call_and_keeps_the_session(servers, scripted_model):
    model = scripted_model(
        planning=_plan(
            _step("s1", "everything__trigger_long_running_operation", duration=30, steps=30)
        )
    )
    with _instance(model, servers) as inst:
        inst.on(
            "tool:update",
            lambda data, context: inst.cancel("mcp-cancel") if data["stage"] == "running" else None,
        )
        started = time.perf_counter()
        response = inst.process("Start, then stop", "mcp-cancel")
    assert time.perf_counter() - started < 10
    assert response.metadata.error.code == "CANCELLED"
    # Still answering, and from any event loop (here a new one of asyncio.run).
    echo = next(tool for tool in servers.tools if tool.name == "everything__echo")
    context = art.ExecutionContext(thread_id="t", trace_id="0" * 32, call_id="c")
    assert asyncio.run(echo.execute({"message": "alive"}, context)).output == "Echo: alive"


# -- lifecycle -----------------------------------------------------------------------------
def test_servers_start_lazily_and_close_leaves_no_processes(scripted_model):
    model = scripted_model(
        planning=_plan(
            _step("s1", "time__get_current_time", timezone="UTC"),
            _step("s2", "everything__echo", message="hi"),
        )
    )

    def servers_running() -> set[int]:
        return mcp_children("mcp_server_time") | mcp_children("mcp-server-everything")

    before = servers_running()  # the shared servers of the other tests
    inst = _instance(model, {"time": time_server(), "everything": everything_server()})
    assert servers_running() == before  # nothing starts with the instance
    response = inst.process("Time and echo", "mcp-close")
    assert response.status == "success"
    pids = servers_running() - before
    assert len(pids) == 2
    inst.close()
    assert not any(alive(pid) for pid in pids)


def test_close_stops_a_servers_whole_process_tree(scripted_model):
    """A launcher that leaves a process of its own beside the server (as npx or uvx may):
    close() stops it too, not only the process art started."""
    script = f'sleep 300 & exec "{sys.executable}" -m mcp_server_time --local-timezone UTC'
    model = scripted_model(planning=_plan(_step("s1", "time__get_current_time", timezone="UTC")))
    before = mcp_children("mcp_server_time")  # the shared servers of the other tests
    inst = _instance(model, {"time": {"command": "sh", "args": ["-c", script]}})
    tree: set[int] = set()
    try:
        assert inst.process("Time?", "mcp-tree").status == "success"
        (server,) = mcp_children("mcp_server_time") - before
        tree = {server} | child_pids(server)
        assert any(command_line(pid).startswith("sleep 300") for pid in tree)
        inst.close()
        assert not [pid for pid in tree if alive(pid)]
    finally:
        inst.close()
        for pid in tree:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_crashed_server_is_restarted_and_the_step_retried(scripted_model):
    model = scripted_model(planning=_plan(_step("s1", "time__get_current_time", timezone="UTC")))
    inst = _instance(model, {"time": time_server()}, step_max_retries=1, retry_backoff_s=0)
    before = mcp_children("mcp_server_time")  # the shared servers of the other tests
    try:
        assert inst.process("Time?", "mcp-crash-1").status == "success"
        (first,) = mcp_children("mcp_server_time") - before
        os.kill(first, signal.SIGKILL)
        response = inst.process("Time again?", "mcp-crash-2")
        assert response.status == "success"
        assert response.steps[0].attempts == 2  # the call that found it gone, then the retry
        (second,) = mcp_children("mcp_server_time") - before
        assert second != first
    finally:
        inst.close()


@pytest.mark.parametrize("which", ["the server's timeout", "the step's timeout"])
def test_a_hung_server_is_restarted_so_later_calls_succeed(which, scripted_model):
    model = scripted_model(planning=_plan(_step("s1", "everything__echo", message="hi")))
    server_timeout = {"timeout": 1} if which == "the server's timeout" else {}
    step_timeout = {"step_timeout_s": 1.0} if which == "the step's timeout" else {}
    config = {"everything": {**everything_server(), **server_timeout}}
    before = mcp_children("mcp-server-everything")  # the shared servers of the other tests
    inst = _instance(model, config, **step_timeout)
    first = None
    try:
        assert inst.process("Echo", "mcp-hung-1").steps[0].output == "Echo: hi"
        (first,) = mcp_children("mcp-server-everything") - before
        os.kill(first, signal.SIGSTOP)  # alive, but never answers again
        hung = inst.process("Echo", "mcp-hung-2")
        assert hung.steps[0].result.error_code == "TIMEOUT"
        started = time.perf_counter()
        # The next call waits for the ping to go unanswered and the restart: it gets the
        # time for that (a 1 s step timeout would end it first on a slow machine), and the
        # default retry, for a call that reached the hung server before its ping began.
        later = {"execution_config": {"step_timeout_s": 30, "step_max_retries": 2}}
        response = inst.process("Echo", "mcp-hung-3", later)
        assert response.steps[0].output == "Echo: hi", response.steps[0].result
        # It waited for the ping to go unanswered and the restart, not another timeout each.
        assert time.perf_counter() - started < 15
        (second,) = mcp_children("mcp-server-everything") - before
        assert second != first and not alive(first)
        assert inst.process("Echo", "mcp-hung-4").steps[0].output == "Echo: hi"
    finally:
        if first is not None:
            with contextlib.suppress(OSError):
                os.kill(first, signal.SIGKILL)
        inst.close()


def test_a_server_that_cannot_be_restarted_fails_steps_with_a_clear_error(scripted_model, tmp_path):
    marker = tmp_path / "started-once"
    script = (
        f'if [ -e "{marker}" ]; then echo "boom: the license expired" >&2; exit 3; fi; '
        f'touch "{marker}"; exec "{sys.executable}" -m mcp_server_time'
    )
    model = scripted_model(planning=_plan(_step("s1", "flaky__get_current_time", timezone="UTC")))
    inst = _instance(model, {"flaky": {"command": "sh", "args": ["-c", script]}})
    before = mcp_children("mcp_server_time")
    try:
        assert inst.process("Time?", "mcp-broken-1").status == "success"
        (pid,) = mcp_children("mcp_server_time") - before
        os.kill(pid, signal.SIGKILL)
        for thread in ("mcp-broken-2", "mcp-broken-3"):  # the second fails at once
            error = inst.process("Time?", thread).steps[0].result.error
            assert "MCP server 'flaky' stopped and could not be restarted" in error
            assert "boom: the license expired" in error
    finally:
        inst.close()


def test_a_server_that_does_not_start_is_left_out_with_a_warning(scripted_model, caplog):
    model = scripted_model(planning=_plan(_step("s1", "time__get_current_time", timezone="UTC")))
    config = {"missing": {"command": "no-such-mcp-server-here"}, "time": time_server()}
    with _instance(model, config) as inst:
        response = inst.process("Time?", "mcp-missing")
        assert response.status == "success"
        assert not any(name.startswith("missing__") for name in inst.registry.names())
    warning = next(r for r in caplog.records if "did not start" in r.getMessage())
    assert "command not found: no-such-mcp-server-here" in warning.getMessage()

    client = MCPClient({"missing": {"command": "no-such-mcp-server-here"}})
    with pytest.raises(MCPServerError, match=r"'missing' .* did not start: command not found"):
        client.start()
    client.close()


# -- log notifications and sampling ---------------------------------------------------------
def test_a_servers_log_notifications_become_running_updates_of_its_calls(scripted_model):
    model = scripted_model(
        planning=_plan(
            _step("s1", "everything__toggle_simulated_logging"),
            # server-everything then logs every 5 s: at least once during this call
            {
                **_step("s2", "everything__trigger_long_running_operation", duration=6, steps=2),
                "dependsOn": ["s1"],
            },
        )
    )
    updates = []
    with _instance(model, {"everything": everything_server()}) as inst:
        inst.on("tool:update", lambda data, context: updates.append(data))
        response = inst.process("Log while working", "mcp-logs")
    assert response.status == "success", response.content
    logs = [u for u in updates if "mcp_log" in u.get("metadata", {})]
    assert logs, updates
    entry = logs[-1]
    assert entry["stage"] == "running" and entry["step_id"] == "s2"
    assert entry["metadata"]["mcp_log"]["level"] in {
        "debug",
        "info",
        "notice",
        "warning",
        "error",
        "critical",
        "alert",
        "emergency",
    }
    assert entry["title"].startswith(entry["metadata"]["mcp_log"]["level"] + ": ")
    assert "message" in entry["title"]


def test_sampling_requests_are_answered_by_the_agents_model_within_the_limits(scripted_model):
    model = scripted_model(
        planning=_plan(
            _step("s1", "everything__trigger_sampling_request", prompt="a haiku", maxTokens=500),
            {
                **_step("s2", "everything__trigger_sampling_request", prompt="again", maxTokens=5),
                "dependsOn": ["s1"],
            },
        ),
        default="Leaves fall quietly",
    )
    config = {
        "everything": {**everything_server(), "samplingMaxTokens": 64, "samplingPerMinute": 1}
    }
    with _instance(model, config) as inst:
        response = inst.process("Sample twice", "mcp-sampling")
    first, second = response.steps
    assert first.status == "completed", first.result
    assert "Leaves fall quietly" in first.output
    (sampled,) = model.calls_for("sampling")  # the second one was over the limit
    assert sampled.params["max_tokens"] == 64  # the server asked for 500: the ceiling holds
    assert "a haiku" in json.dumps(sampled.messages)
    assert sampled.messages[0] == {"role": "system", "content": "You are a helpful test server."}
    assert second.status == "failed"
    assert "sampling limit reached (1 requests a minute)" in second.result.error


def test_a_server_not_allowed_to_sample_does_not_offer_its_sampling_tools():
    with MCPClient({"everything": {**everything_server(), "sampling": False}}) as client:
        names = {tool.mcp_name for tool in client.tools}
    assert "trigger-sampling-request" not in names and "echo" in names


def test_an_elicitation_suspends_the_run_and_the_answer_runs_the_call_again(scripted_model):
    model = scripted_model(planning=_plan(_step("s1", "everything__trigger_elicitation_request")))
    with _instance(model, {"everything": everything_server()}) as inst:
        response = inst.process("Ask me", "mcp-elicit")
        assert response.status == "suspended"
        (suspension,) = inst.check_for_suspended_state("mcp-elicit").suspensions
        asked = suspension.prompt
        assert asked["question"] == asked["elicitation"]["message"]
        assert asked["elicitation"]["mode"] == "form"
        assert asked["elicitation"]["requestedSchema"]["required"] == ["name"]
        answer = {"name": "Ada", "integer": 7}
        done = inst.resume_execution(
            "mcp-elicit", suspension.suspension_id, {"approved": True, "modified_args": answer}
        )
    assert done.status == "success", done.content
    output = done.steps[0].output
    assert "User provided the requested information" in output
    assert '"name": "Ada"' in output and '"integer": 7' in output


def test_art_resume_answers_an_elicitation(scripted_model, tmp_path, restore_logging):
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"everything": everything_server()}}))
    storage = f"sqlite:///{tmp_path / 'art.db'}"
    model = scripted_model(planning=_plan(_step("s1", "everything__trigger_elicitation_request")))
    common = ["--mcp-config", str(config), "--model", model.model, "--storage", storage]
    asked = CliRunner().invoke(app, ["run", "Ask me", "-T", "cli-elicit", *common, "--json"])
    suspension_id = json.loads(asked.stdout)["metadata"]["suspensionId"]
    answer = json.dumps({"name": "Grace"})
    decide = ["resume", "cli-elicit", suspension_id, "--approve", "--modified-args", answer]
    done = CliRunner().invoke(app, [*decide, *common, "--json"])
    assert done.exit_code == EXIT_OK, done.output
    (step,) = json.loads(done.stdout)["steps"]
    assert '"name": "Grace"' in step["result"]["output"]


def test_the_http_api_answers_an_elicitation(scripted_model):
    import httpx

    from art.server import create_app, serve_in_thread

    model = scripted_model(planning=_plan(_step("s1", "everything__trigger_elicitation_request")))
    app = create_app(
        model=model.model, storage="memory://", mcp_servers={"everything": everything_server()}
    )
    with serve_in_thread(app) as url, httpx.Client(base_url=url, timeout=60) as client:
        asked = client.post("/threads/api-elicit/runs?wait=true", json={"query": "Ask me"})
        assert asked.json()["metadata"]["status"] == "suspended", asked.text
        (pending,) = client.get("/threads/api-elicit/suspensions").json()["suspensions"]
        assert pending["prompt"]["elicitation"]["requestedSchema"]["required"] == ["name"]
        done = client.post(
            f"/threads/api-elicit/suspensions/{pending['suspensionId']}/decision?wait=true",
            json={"approved": True, "modifiedArgs": {"name": "Lin"}},
        ).json()
    assert done["metadata"]["status"] == "success"
    assert '"name": "Lin"' in done["steps"][0]["result"]["output"]


def test_a_rejected_elicitation_fails_the_step_without_calling_again(scripted_model):
    model = scripted_model(planning=_plan(_step("s1", "everything__trigger_elicitation_request")))
    with _instance(model, {"everything": everything_server()}) as inst:
        response = inst.process("Ask me", "mcp-elicit-no")
        done = inst.resume_execution(
            "mcp-elicit-no", response.metadata.suspension_id, {"approved": False, "reason": "no"}
        )
    assert done.steps[0].status == "failed"
    assert "rejected by a human reviewer: no" in done.steps[0].reason


# -- approval and retries ------------------------------------------------------------------
def _staged_repo(path: Path) -> Path:
    env = {**os.environ, "GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@b.c"}
    env |= {"GIT_COMMITTER_NAME": "a", "GIT_COMMITTER_EMAIL": "a@b.c"}
    subprocess.run(["git", "init", "-q"], cwd=path, env=env, check=True)
    commit = ["git", "commit", "-q", "--allow-empty", "-m", "c1"]
    subprocess.run(commit, cwd=path, env=env, check=True)
    (path / "notes.txt").write_text("draft")
    subprocess.run(["git", "add", "notes.txt"], cwd=path, check=True)
    return path


def _staged(repo: Path) -> list[str]:
    names = subprocess.run(
        ["git", "diff", "--cached", "--name-only"], cwd=repo, capture_output=True, text=True
    )
    return names.stdout.split()


@pytest.mark.parametrize("decision", [True, False])
def test_a_destructive_tool_waits_for_a_persons_approval(decision, scripted_model, tmp_path):
    repo = _staged_repo(tmp_path)
    # git_reset says destructiveHint: true, so by default it asks first.
    model = scripted_model(planning=_plan(_step("s1", "git__git_reset", repo_path=str(repo))))
    with _instance(model, {"git": git_server()}) as inst:
        response = inst.process("Unstage everything", "mcp-approve")
        assert response.status == "suspended"
        assert _staged(repo) == ["notes.txt"]  # nothing ran yet
        state = inst.check_for_suspended_state("mcp-approve")
        (suspension,) = state.suspensions
        assert suspension.prompt["tool"] == "git_reset"
        assert suspension.prompt["arguments"] == {"repo_path": str(repo)}
        assert suspension.prompt["annotations"]["destructiveHint"] is True
        done = inst.resume_execution(
            "mcp-approve", response.metadata.suspension_id, {"approved": decision}
        )
    if decision:
        assert done.status == "success", done.content
        assert "reset" in done.steps[0].output.lower()
        assert _staged(repo) == []
    else:
        assert done.steps[0].status == "failed"
        assert _staged(repo) == ["notes.txt"]  # a rejected call never reaches the server


@pytest.mark.parametrize(
    ("settings", "asking"),
    [
        ({}, {"git_reset"}),  # the default: the tools annotated destructive
        ({"autoApprove": ["git_reset"]}, set()),  # Cline's list
        ({"alwaysAllow": ["git_reset"]}, set()),  # Roo Code's list
        ({"requireApproval": ["git_log"]}, {"git_reset", "git_log"}),
        ({"approval": "never"}, set()),
        ({"approval": "always", "autoApprove": ["git_status"]}, "all but git_status"),
    ],
)
def test_annotations_and_the_configs_lists_decide_which_tools_ask(settings, asking):
    with MCPClient({"git": {**git_server(), **settings}}) as client:
        tools = {tool.mcp_name: tool.schema for tool in client.tools}
    if asking == "all but git_status":
        asking = set(tools) - {"git_status"}
    assert {name for name, schema in tools.items() if schema.mode == "blocking"} == asking
    assert all(tools[name].runs_on_approval for name in asking)


def test_a_tool_that_is_not_idempotent_is_not_retried_after_its_server_crashed(
    scripted_model, tmp_path
):
    log = tmp_path / "probe.log"
    probe = {
        "command": sys.executable,
        "args": [str(PROBE), "stdio"],
        "env": {"MCP_PROBE_LOG": str(log)},
    }
    model = scripted_model(planning=_plan(_step("s1", "probe__wait_and_count", seconds=30)))
    inst = _instance(model, {"probe": probe}, step_max_retries=2, retry_backoff_s=0)
    try:
        killer = threading.Thread(target=_kill_when_started, args=(log,))
        killer.start()
        response = inst.process("Wait", "mcp-not-idempotent")
        killer.join()
    finally:
        inst.close()
    step = response.steps[0]
    assert step.result.error_code == "IO_ERROR" and not step.result.retryable
    assert step.attempts == 1 and log.read_text().split() == ["started"]


def _kill_when_started(log: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (log.exists() and log.read_text()):
        time.sleep(0.05)
    for pid in mcp_children(str(PROBE)):
        os.kill(pid, signal.SIGKILL)


# -- HTTP ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def everything_http() -> Iterator[str]:
    yield from run_everything("streamableHttp")


@pytest.fixture(scope="module")
def everything_sse() -> Iterator[str]:
    yield from run_everything("sse")


def test_streamable_http_server_with_progress(everything_http, scripted_model):
    model = scripted_model(
        planning=_plan(
            _step("s1", "remote__echo", message="over HTTP"),
            _step("s2", "remote__trigger_long_running_operation", duration=0.4, steps=2),
        )
    )
    updates = []
    with MCPClient({"remote": {"url": f"{everything_http}/mcp"}}) as client:
        assert client.status()[0].transport == "http"
        with _instance(model, client) as inst:
            inst.on("tool:update", lambda data, context: updates.append(data["stage"]))
            response = inst.process("Echo over HTTP", "mcp-http")
    assert response.steps[0].output == "Echo: over HTTP"
    assert updates.count("running") == 2


def test_an_sse_only_server_is_reached_through_the_fallback(everything_sse, scripted_model):
    model = scripted_model(planning=_plan(_step("s1", "old__echo", message="over SSE")))
    config = {"old": {"url": f"{everything_sse}/sse"}}  # no type: Streamable HTTP first
    with MCPClient(config) as client:
        assert client.status()[0].transport == "sse"
        with _instance(model, client) as inst:
            response = inst.process("Echo over SSE", "mcp-sse")
    assert response.steps[0].output == "Echo: over SSE"


def test_an_http_server_that_comes_back_is_reconnected(scripted_model):
    port = free_port()

    def start() -> subprocess.Popen[bytes]:
        require_everything()
        process = subprocess.Popen(
            [str(EVERYTHING), "streamableHttp"],
            env={**os.environ, "PORT": str(port)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for_port(port, process)
        return process

    server = start()
    model = scripted_model(planning=_plan(_step("s1", "remote__echo", message="hello")))
    config = {"remote": {"url": f"http://127.0.0.1:{port}/mcp"}}
    inst = _instance(model, config, step_max_retries=1, retry_backoff_s=0)
    try:
        assert inst.process("Echo", "mcp-http-1").steps[0].output == "Echo: hello"
        server.kill()
        server.wait()
        server = start()  # a deploy: a new process, new sessions
        step = inst.process("Echo again", "mcp-http-2").steps[0]
        assert step.output == "Echo: hello" and step.attempts == 2
    finally:
        inst.close()
        server.kill()
        server.wait()


# -- what the server sees (tests/mcp_probe.py, an SDK MCPServer) ---------------------------
@pytest.fixture(scope="module")
def probe_http() -> Iterator[str]:
    yield from run_probe("streamable-http")


@pytest.fixture(scope="module")
def probe_sse() -> Iterator[str]:
    yield from run_probe("sse")


@pytest.mark.parametrize("transport", ["http", "sse"])
def test_configured_headers_reach_an_http_server_on_every_request(
    transport, probe_http, probe_sse, scripted_model, tmp_path, monkeypatch
):
    url = f"{probe_http}/mcp" if transport == "http" else f"{probe_sse}/sse"
    path = tmp_path / "mcp.json"
    headers = {"Authorization": "Bearer ${PROBE_TOKEN}", "X-Tenant": "acme"}
    path.write_text(json.dumps({"mcpServers": {"probe": {"url": url, "headers": headers}}}))
    monkeypatch.setenv("PROBE_TOKEN", "s3cret")
    model = scripted_model(
        planning=_plan(_step("s1", "probe__request_headers"), _step("s2", "probe__request_headers"))
    )
    with MCPClient(path) as client:
        assert client.status()[0].transport == transport  # SSE: reached through the fallback
        with _instance(model, client) as inst:
            response = inst.process("Which headers arrive?", f"mcp-headers-{transport}")
    assert response.status == "success", response.content
    for step in response.steps:
        assert step.output["authorization"] == "Bearer s3cret"
        assert step.output["x-tenant"] == "acme"


@pytest.mark.parametrize("how", ["run cancelled", "step timed out"])
def test_a_cancelled_call_sends_the_server_mcps_cancellation(how, scripted_model, tmp_path):
    log = tmp_path / "probe.log"
    model = scripted_model(planning=_plan(_step("s1", "probe__wait", tag=how, seconds=60)))
    probe = {"command": sys.executable, "args": [str(PROBE), "stdio"]}
    config = {"probe": {**probe, "env": {"MCP_PROBE_LOG": str(log)}}}
    timeout = {"step_timeout_s": 1.5} if how == "step timed out" else {}
    with _instance(model, config, **timeout) as inst:
        if how == "run cancelled":
            inst.on(
                "tool:update",
                lambda data, context: (
                    threading.Timer(1.0, inst.cancel, [context.thread_id]).start()
                    if data["stage"] == "start"
                    else None
                ),
            )
        started = time.perf_counter()
        response = inst.process("Wait, then stop", "mcp-cancelled")
        assert time.perf_counter() - started < 15
        if how == "run cancelled":
            assert response.metadata.error.code == "CANCELLED"
        else:
            assert response.steps[0].result.error_code == "TIMEOUT"
        deadline = time.monotonic() + 10
        # The server opens the file, then writes its line: wait for the line.
        while not (log.exists() and log.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        # The server cancelled the tool's task (its session still open): it received
        # notifications/cancelled for the call.
        assert log.exists(), "the server never heard that the call was cancelled"
        assert log.read_text() == f"cancelled {how}\n"


# -- the command line ----------------------------------------------------------------------
@pytest.fixture
def mcp_json(tmp_path) -> Path:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"time": time_server()}}))
    return path


def test_art_tools_lists_what_a_config_exposes(mcp_json, restore_logging):
    result = CliRunner().invoke(
        app, ["tools", "--mcp-config", str(mcp_json), "--json"], env={"COLUMNS": "200"}
    )
    assert result.exit_code == EXIT_OK, result.output
    document = json.loads(result.stdout)
    names = [tool["name"] for tool in document["tools"]]
    assert names[:4] == ["calculator", "http_get", "ask_human", "show"]
    assert names[4:] == ["time__get_current_time", "time__convert_time"]
    assert document["tools"][4]["source"] == "mcp:time"
    assert document["tools"][4]["mcp_tool"] == "get_current_time"
    (server,) = document["mcp_servers"]
    assert server["state"] == "running" and server["error"] is None

    table = CliRunner().invoke(
        app, ["tools", "--mcp-config", str(mcp_json)], env={"COLUMNS": "200"}
    )
    assert "time__convert_time" in table.stdout and "mcp:time (convert_time)" in table.stdout
    assert "running MCP server time (stdio:" in table.stdout


def test_art_tools_exits_1_naming_a_server_that_does_not_start(tmp_path, restore_logging):
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"gone": {"command": "no-such-mcp-server"}}}))
    result = CliRunner().invoke(app, ["tools", "--mcp-config", str(path)], env={"COLUMNS": "200"})
    assert result.exit_code == EXIT_ERROR
    assert "failed MCP server gone" in result.stdout
    assert "command not found: no-such-mcp-server" in result.stderr


def test_art_run_with_mcp_config(mcp_json, scripted_model, restore_logging):
    model = scripted_model(planning=_plan(_step("s1", "time__get_current_time", timezone="UTC")))
    result = CliRunner().invoke(
        app,
        ["run", "Time?", "--mcp-config", str(mcp_json), "--model", model.model, "--json"],
        env={"ART_STORAGE": "memory://"},
    )
    assert result.exit_code == EXIT_OK, result.output
    document = json.loads(result.stdout)
    assert document["steps"][0]["result"]["output"]["timezone"] == "UTC"
