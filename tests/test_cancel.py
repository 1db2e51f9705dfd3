"""Cancel ends a run within half a second in every phase: the run ends CANCELLED, what
finished is stored, and the provider request that was under way is closed (the fake
provider sees the connection drop)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

import pytest

import art
from art.testing import Answer, FakeProvider, Hang

GUARD_S = 30.0  # the first LLM call of a process loads litellm
CANCEL_WITHIN_S = 0.5
#: A provider reply that would take far longer than any test: only a cancel ends it.
FOREVER = Hang(60)


class Echo(art.IToolExecutor):
    schema = art.ToolSchema(
        name="echo",
        description="echoes its text",
        input_schema={"type": "object", "properties": {"text": {"type": "string"}}},
    )

    async def execute(self, input: dict[str, Any], context: art.ExecutionContext) -> art.ToolResult:
        return self.ok(context, input.get("text", "echo"))


class Broken(art.IToolExecutor):
    schema = art.ToolSchema(name="broken", description="always fails")

    async def execute(self, input: dict[str, Any], context: art.ExecutionContext) -> art.ToolResult:
        return art.ToolResult(
            call_id=context.call_id, tool_name="broken", status="error", error="disk on fire"
        )


class NeedsModel(art.IToolExecutor):
    schema = art.ToolSchema(name="needs_model", description="asks the model for help")

    async def execute(self, input: dict[str, Any], context: art.ExecutionContext) -> art.ToolResult:
        return art.ToolResult(
            call_id=context.call_id,
            tool_name="needs_model",
            status="error",
            error="needs the model",
            output={"prompt": "summarise the weather"},
            metadata={"error_code": "LLM_ASSIST_REQUIRED"},
        )


def plan(*steps: dict[str, Any]) -> Answer:
    return Answer(json.dumps({"title": "t", "steps": list(steps)}))


ECHO_STEP = {"id": "s1", "tool": "echo", "args": {"text": "kept"}}


def instance(provider: FakeProvider, **execution: Any) -> art.ArtInstance:
    return art.create_art_instance(
        model="openai/fake",
        tools=[Echo(), Broken(), NeedsModel()],
        storage="memory://",
        llm_params={"api_base": provider.openai_base, "api_key": "k"},
        execution_config={"retry_backoff_s": 0, "llm_max_retries": 0, **execution},
    )


async def until(condition, what: str) -> None:
    """Poll `condition` (set by the provider's threads, which cannot set an asyncio.Event)."""
    deadline = time.monotonic() + GUARD_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


async def cancel_at_request(
    inst: art.ArtInstance, provider: FakeProvider, nth: int
) -> tuple[art.AgentFinalResponse, float]:
    """Start a run, cancel it once the provider holds its `nth` request; the response and
    the time the cancel was asked for."""
    task = asyncio.create_task(inst.aprocess("go", "t"))
    await until(lambda: len(provider.requests) >= nth, f"request {nth}")
    cancelled_at = time.monotonic()
    assert inst.cancel("t", "stop now")
    async with asyncio.timeout(GUARD_S):
        response = await task
    assert time.monotonic() - cancelled_at < CANCEL_WITHIN_S
    return response, cancelled_at


async def assert_cancelled(
    inst: art.ArtInstance,
    provider: FakeProvider,
    response: art.AgentFinalResponse,
    cancelled_at: float,
    *,
    stored_steps: dict[str, str] | None = None,
) -> None:
    assert response.metadata.status == "error"
    assert response.metadata.error.code == "CANCELLED"
    assert response.metadata.error.message == "stop now"
    request = provider.requests[-1]
    await until(lambda: request.dropped_at is not None, "the provider to see the drop")
    assert request.dropped_at - cancelled_at < CANCEL_WITHIN_S
    record = await inst.storage.get_run(response.metadata.run_id)
    assert record.status == "failed" and record.error.code == "CANCELLED"
    assert {s: r.status for s, r in record.steps.items()} == (stored_steps or {})
    assert await inst.storage.get_active_run("t") is None


async def test_cancel_while_planning(fake_provider):
    fake_provider.queue(FOREVER)
    async with instance(fake_provider) as inst:
        response, at = await cancel_at_request(inst, fake_provider, 1)
        await assert_cancelled(inst, fake_provider, response, at)
        assert response.plan is None


async def test_cancel_while_the_plan_streams(fake_provider):
    slow = plan(ECHO_STEP, {"id": "s2", "tool": "echo", "args": {"text": "never"}})
    fake_provider.queue(Answer(slow.content, chunk_delay_s=0.3))
    async with instance(fake_provider, eager_execution=True) as inst:
        response, at = await cancel_at_request(inst, fake_provider, 1)
        await assert_cancelled(inst, fake_provider, response, at)


async def test_cancel_while_the_plan_is_repaired(fake_provider):
    fake_provider.queue(plan({"id": "s1", "tool": "no_such_tool"}), FOREVER)
    async with instance(fake_provider) as inst:
        response, at = await cancel_at_request(inst, fake_provider, 2)
        await assert_cancelled(inst, fake_provider, response, at)


async def test_cancel_while_replanning_keeps_the_finished_steps(fake_provider):
    fake_provider.queue(
        plan(ECHO_STEP, {"id": "s2", "tool": "broken", "dependsOn": ["s1"]}), FOREVER
    )
    async with instance(fake_provider, on_step_failure="replan") as inst:
        response, at = await cancel_at_request(inst, fake_provider, 2)
        await assert_cancelled(
            inst, fake_provider, response, at, stored_steps={"s1": "completed", "s2": "failed"}
        )
        assert {s.step_id: s.status for s in response.steps} == {
            "s1": "completed",
            "s2": "failed",
        }


async def test_cancel_during_a_reasoning_step(fake_provider):
    fake_provider.queue(plan(ECHO_STEP, {"id": "s2", "tool": None, "dependsOn": ["s1"]}), FOREVER)
    async with instance(fake_provider) as inst:
        response, at = await cancel_at_request(inst, fake_provider, 2)
        await assert_cancelled(
            inst, fake_provider, response, at, stored_steps={"s1": "completed", "s2": "cancelled"}
        )


async def test_cancel_during_llm_assistance(fake_provider):
    fake_provider.queue(plan(ECHO_STEP, {"id": "s2", "tool": "needs_model"}), FOREVER)
    async with instance(fake_provider) as inst:
        response, at = await cancel_at_request(inst, fake_provider, 2)
        await assert_cancelled(
            inst, fake_provider, response, at, stored_steps={"s1": "completed", "s2": "cancelled"}
        )


async def test_cancel_during_synthesis(fake_provider):
    fake_provider.queue(plan(ECHO_STEP), FOREVER)
    async with instance(fake_provider) as inst:
        response, at = await cancel_at_request(inst, fake_provider, 2)
        await assert_cancelled(inst, fake_provider, response, at, stored_steps={"s1": "completed"})
        assert [s.status for s in response.steps] == ["completed"]


async def test_cancel_during_a_streamed_synthesis(fake_provider):
    answer = "the answer comes one slow word at a time " * 5
    fake_provider.queue(plan(ECHO_STEP), Answer(answer, chunk_delay_s=0.2))
    async with instance(fake_provider) as inst:
        chunks: list[str] = []
        inst.on("chunk:after", lambda data, context: chunks.append(data["chunk"]))
        task = asyncio.create_task(inst.aprocess("go", "t"))
        await until(lambda: len(chunks) >= 2, "the answer to start streaming")
        cancelled_at = time.monotonic()
        assert inst.cancel("t", "stop now")
        async with asyncio.timeout(GUARD_S):
            response = await task
        assert time.monotonic() - cancelled_at < CANCEL_WITHIN_S
        await assert_cancelled(
            inst, fake_provider, response, cancelled_at, stored_steps={"s1": "completed"}
        )
        assert "".join(chunks) != answer


async def test_a_cancel_of_a_finished_run_changes_nothing(fake_provider):
    fake_provider.queue(plan(ECHO_STEP), Answer("done"))
    async with instance(fake_provider) as inst:
        response = await inst.aprocess("go", "t")
        assert response.status == "success"
        assert not inst.cancel("t")


async def test_a_run_cancelled_as_its_session_starts_never_calls_the_model(fake_provider):
    fake_provider.queue(FOREVER)
    async with instance(fake_provider) as inst:
        inst.on("session:start", lambda data, context: inst.cancel(context.thread_id, "stop now"))
        async with asyncio.timeout(GUARD_S):
            response = await inst.aprocess("go", "t")
        assert response.metadata.error.code == "CANCELLED"
        assert fake_provider.requests == []


async def test_cancel_before_the_run_exists_in_a_slow_run_before_hook(fake_provider):
    async with instance(fake_provider) as inst:
        entered = asyncio.Event()

        async def slow_setup(data, context):
            entered.set()
            await asyncio.sleep(60)  # a hook asking a slow service for the user's context

        inst.on("run:before", slow_setup)
        ended = []
        inst.on("session:end", lambda data, context: ended.append(data))
        task = asyncio.create_task(inst.aprocess("go", "t"))
        async with asyncio.timeout(GUARD_S):
            await entered.wait()
        cancelled_at = time.monotonic()
        assert inst.cancel("t", "stop now")
        async with asyncio.timeout(GUARD_S):
            response = await task
        assert time.monotonic() - cancelled_at < CANCEL_WITHIN_S
        assert response.metadata.error.code == "CANCELLED"
        assert response.metadata.error.message == "stop now"
        assert (await inst.aget_state("t")).runs == []  # nothing was stored
        assert ended == [] and fake_provider.requests == []
        assert not inst.cancel("t")
        # The thread is free again.
        fake_provider.queue(plan(ECHO_STEP), Answer("done"))
        inst.off("run:before")
        assert (await inst.aprocess("go", "t")).status == "success"


# -- the doors ------------------------------------------------------------------------------


CALCULATOR_PLAN = plan({"id": "s1", "tool": "calculator", "args": {"expression": "6 * 7"}})


def wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + GUARD_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


@pytest.mark.slow
def test_ctrl_c_in_art_run_cancels_the_run(fake_provider, tmp_path):
    fake_provider.queue(CALCULATOR_PLAN, FOREVER)
    storage = f"sqlite:///{tmp_path / 'art.db'}"
    env = {
        **os.environ,
        "ART_MODEL": "openai/fake",
        "ART_API_BASE": fake_provider.openai_base,
        "ART_STORAGE": storage,
        "OPENAI_API_KEY": "k",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    command = [sys.executable, "-c", "from art.cli.app import main; main()"]
    process = subprocess.Popen(
        [*command, "run", "what is 6 x 7?", "--thread", "t", "--json"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: len(fake_provider.requests) >= 2, "the synthesis request")
        interrupted_at = time.monotonic()
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=GUARD_S)
    finally:
        process.kill()
    assert process.returncode == 130, err
    request = fake_provider.requests[-1]
    wait_for(lambda: request.dropped_at is not None, "the provider to see the drop")
    assert request.dropped_at - interrupted_at < CANCEL_WITHIN_S
    document = json.loads(out)
    assert document["metadata"]["error"]["code"] == "CANCELLED"
    assert [s["status"] for s in document["steps"]] == ["completed"]

    async def stored() -> Any:
        async with art.create_art_instance(model="openai/fake", storage=storage) as inst:
            return (await inst.aget_state("t")).runs

    [run] = asyncio.run(stored())
    assert run.status == "failed" and run.error.code == "CANCELLED"
    assert run.steps["s1"].status == "completed"


@pytest.mark.slow
def test_the_api_cancel_ends_a_run_in_synthesis_at_once(fake_provider):
    import httpx

    from art.server import create_app, serve_in_thread
    from art.tools import Calculator

    fake_provider.queue(CALCULATOR_PLAN, FOREVER)
    app = create_app(
        model="openai/fake",
        tools=[Calculator()],
        storage="memory://",
        llm_params={"api_base": fake_provider.openai_base, "api_key": "k"},
    )
    with serve_in_thread(app) as url, httpx.Client(base_url=url, timeout=GUARD_S) as client:
        run = client.post("/threads/t/runs", json={"query": "go"}).json()
        wait_for(lambda: len(fake_provider.requests) >= 2, "the synthesis request")
        cancelled_at = time.monotonic()
        body = client.post(f"/threads/t/runs/{run['runId']}/cancel").json()
        assert time.monotonic() - cancelled_at < CANCEL_WITHIN_S
        assert body["status"] == "failed" and body["error"]["code"] == "CANCELLED"
        request = fake_provider.requests[-1]
        wait_for(lambda: request.dropped_at is not None, "the provider to see the drop")
        assert request.dropped_at - cancelled_at < CANCEL_WITHIN_S


@pytest.mark.slow
async def test_an_mcp_clients_cancellation_ends_a_run_in_synthesis_at_once(fake_provider):
    from mcp import Client

    from art.adapters.mcp import create_mcp_server

    fake_provider.queue(plan(ECHO_STEP), FOREVER)
    async with instance(fake_provider) as inst, Client(create_mcp_server(inst)) as client:
        ended = asyncio.Event()
        inst.on("session:end", lambda data, context: ended.set())
        call = asyncio.create_task(client.call_tool("query", {"question": "go", "thread_id": "t"}))
        await until(lambda: len(fake_provider.requests) >= 2, "the synthesis request")
        cancelled_at = time.monotonic()
        call.cancel()
        request = fake_provider.requests[-1]
        await until(lambda: request.dropped_at is not None, "the provider to see the drop")
        assert request.dropped_at - cancelled_at < CANCEL_WITHIN_S
        async with asyncio.timeout(GUARD_S):
            await ended.wait()
        [run] = (await inst.aget_state("t")).runs
        assert run.status == "failed" and run.error.code == "CANCELLED"
        assert run.error.message == "cancelled by the MCP client"
        assert run.steps["s1"].status == "completed"
