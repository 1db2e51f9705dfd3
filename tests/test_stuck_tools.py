"""Tools that do not stop, raise what they should not, or change their arguments: every
run still ends, its results stay right, and the process can exit."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import textwrap
import threading
import time
from typing import Any

import pytest

import art
from art.tooling.invocation import CallTimeouts, invoke_tool
from art.tooling.threads import ThreadCalls, ToolThreads

GUARD_S = 10.0
GRACE_S = 0.3
# A tool that never stops is abandoned after any grace; a short one keeps its test quick.
SHORT_GRACE_S = 0.05


def done(context: art.ExecutionContext, name: str, output: Any = None) -> art.ToolResult:
    return art.ToolResult(call_id=context.call_id, tool_name=name, status="success", output=output)


class Stubborn(art.IToolExecutor):
    """An `async def` tool that catches every cancellation and goes on waiting."""

    schema = art.ToolSchema(name="stubborn", description="Ignores cancellation.")

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.cancels = 0

    async def execute(self, input, context):
        self.started.set()
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                self.cancels += 1


class Blocked(art.IToolExecutor):
    """A plain `def` tool that blocks its thread until released, ignoring cancellation."""

    schema = art.ToolSchema(name="blocked", description="Blocks its thread.")

    def __init__(self) -> None:
        self.release = threading.Event()
        self.running = 0
        self.most_at_once = 0
        self.calls = 0
        self._lock = threading.Lock()

    def execute(self, input, context):
        with self._lock:
            self.calls += 1
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
        try:
            self.release.wait(GUARD_S)
        finally:
            with self._lock:
                self.running -= 1
        return done(context, "blocked")


class Polite(art.IToolExecutor):
    """A plain `def` tool that is slow but stops as soon as it is told to."""

    schema = art.ToolSchema(name="polite", description="Stops when told.")

    def __init__(self) -> None:
        self.running = 0
        self.most_at_once = 0
        self.calls = 0

    def execute(self, input, context):
        self.calls += 1
        self.running += 1
        self.most_at_once = max(self.most_at_once, self.running)
        try:
            context.cancellation.wait(GUARD_S)
            time.sleep(0.05)  # cleaning up after being told to stop
        finally:
            self.running -= 1
        return done(context, "polite")


def one_step(tool: str) -> dict[str, Any]:
    return {"steps": [{"id": "s1", "tool": tool}]}


@pytest.fixture
def instance(scripted_model):
    made: list[art.ArtInstance] = []

    def factory(plan: dict[str, Any], tools: list[Any], **config: Any) -> art.ArtInstance:
        model = scripted_model(planning=plan, synthesis="done")
        inst = art.create_art_instance(
            model=model.model,
            tools=tools,
            storage="memory://",
            execution_config={"retry_backoff_s": 0, "tool_stop_grace_s": GRACE_S, **config},
        )
        made.append(inst)
        return inst

    yield factory
    for inst in made:
        inst.close()


def warnings_about(caplog: pytest.LogCaptureFixture, tool: str) -> list[dict[str, Any]]:
    return [
        r.msg
        for r in caplog.records
        if r.levelno == logging.WARNING and isinstance(r.msg, dict) and r.msg.get("tool") == tool
    ]


# -- a tool that ignores cancellation is abandoned ------------------------------------------


async def test_an_async_tool_ignoring_its_timeout_is_abandoned_and_the_run_ends(instance, caplog):
    tool = Stubborn()
    inst = instance(
        one_step("stubborn"),
        [tool],
        step_timeout_s=0.05,
        step_max_retries=2,
        tool_stop_grace_s=SHORT_GRACE_S,
    )
    started = time.perf_counter()
    with caplog.at_level(logging.WARNING, logger="art.tooling.invocation"):
        resp = await asyncio.wait_for(inst.aprocess("go", "t"), GUARD_S)
    took = time.perf_counter() - started
    (step,) = resp.steps
    assert step.status == "failed" and step.result.error_code == "NOT_STOPPED"
    assert "did not stop" in step.result.error and "abandoned" in step.result.error
    assert step.attempts == 1  # not retried: the abandoned call is still running
    assert tool.cancels >= 1  # it was told to stop
    assert took < 0.05 + SHORT_GRACE_S + 3
    (warning,) = warnings_about(caplog, "stubborn")
    assert "abandoned" in warning["event"] and warning["grace_s"] == SHORT_GRACE_S


async def test_cancel_returns_a_run_whose_async_tool_ignores_cancellation(instance, caplog):
    tool = Stubborn()
    inst = instance(
        one_step("stubborn"), [tool], step_timeout_s=None, tool_stop_grace_s=SHORT_GRACE_S
    )
    task = asyncio.create_task(inst.aprocess("go", "t"))
    await asyncio.wait_for(tool.started.wait(), GUARD_S)
    with caplog.at_level(logging.WARNING, logger="art.tooling.invocation"):
        cancelled_at = time.perf_counter()
        inst.cancel("t", "stop now")
        resp = await asyncio.wait_for(task, GUARD_S)
    assert time.perf_counter() - cancelled_at < SHORT_GRACE_S + 2
    assert resp.metadata.error.code == "CANCELLED"
    (step,) = resp.steps
    assert step.status == "cancelled" and step.result.error_code == "CANCELLED"
    assert "did not stop" in step.result.error
    assert warnings_about(caplog, "stubborn")


async def test_a_tool_that_cleans_up_after_its_cancellation_is_waited_for(instance):
    cleaned = asyncio.Event()

    class Tidy(art.IToolExecutor):
        schema = art.ToolSchema(name="tidy", description="Cleans up when cancelled.")

        async def execute(self, input, context):
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                await asyncio.sleep(0.05)  # an await while cleaning up: not abandoned
                cleaned.set()
                raise

    inst = instance(one_step("tidy"), [Tidy()], step_timeout_s=0.05, step_max_retries=0)
    resp = await asyncio.wait_for(inst.aprocess("go", "t"), GUARD_S)
    assert resp.steps[0].result.error_code == "TIMEOUT" and cleaned.is_set()


async def test_a_timed_out_sync_tool_is_retried_only_once_its_attempt_stopped(instance):
    polite = Polite()
    inst = instance(one_step("polite"), [polite], step_timeout_s=0.05, step_max_retries=2)
    resp = await asyncio.wait_for(inst.aprocess("go", "t"), GUARD_S)
    (step,) = resp.steps
    assert step.result.error_code == "TIMEOUT" and step.attempts == 3
    assert polite.calls == 3 and polite.most_at_once == 1  # never two attempts at once


async def test_a_timed_out_sync_tool_that_does_not_stop_is_not_retried(instance, caplog):
    blocked = Blocked()
    inst = instance(
        one_step("blocked"),
        [blocked],
        step_timeout_s=0.05,
        step_max_retries=2,
        tool_stop_grace_s=SHORT_GRACE_S,
    )
    try:
        with caplog.at_level(logging.WARNING, logger="art.tooling.invocation"):
            resp = await asyncio.wait_for(inst.aprocess("go", "t"), GUARD_S)
    finally:
        blocked.release.set()
    (step,) = resp.steps
    assert step.status == "failed" and step.result.error_code == "NOT_STOPPED"
    assert step.result.metadata["stuck_calls"] == 1
    assert blocked.calls == 1
    (warning,) = warnings_about(caplog, "blocked")
    assert warning["stuck_calls"] == 1


# -- stuck threads never starve healthy calls, and never keep the process alive --------------


async def test_calls_stuck_in_their_threads_do_not_count_against_the_pool():
    pool = ToolThreads(2)
    calls = ThreadCalls(pool)
    blocked = Blocked()
    timeouts = CallTimeouts(0.05)

    def context(n: int) -> art.ExecutionContext:
        return art.ExecutionContext(thread_id="t", trace_id="0" * 32, call_id=f"c{n}")

    try:
        stuck = [
            await invoke_tool(
                blocked, {}, context(n), thread_pool=calls, timeouts=timeouts, stop_grace_s=0.05
            )
            for n in range(3)
        ]
        assert [r.error_code for r in stuck] == ["NOT_STOPPED"] * 3
        assert [r.metadata["stuck_calls"] for r in stuck] == [1, 2, 3]
        assert pool.stuck == 3
        # Three threads hold stuck calls; a healthy call still gets a thread at once.
        result = await invoke_tool(
            _Quick(), {}, context(9), thread_pool=calls, timeouts=timeouts, stop_grace_s=0.05
        )
        assert result.status == "success" and result.output == "quick"
    finally:
        blocked.release.set()
        timeouts.close()
    # Released, the calls end and their threads serve again.
    assert await asyncio.to_thread(eventually, lambda: pool.stuck == 0)
    pool.shutdown()


def eventually(condition: Any) -> bool:
    deadline = time.perf_counter() + GUARD_S
    while not condition() and time.perf_counter() < deadline:
        time.sleep(0.01)
    return bool(condition())


class _Quick(art.IToolExecutor):
    schema = art.ToolSchema(name="quick", description="Answers at once.")

    def execute(self, input, context):
        return done(context, "quick", "quick")


@pytest.mark.slow
def test_a_sync_tool_blocked_forever_does_not_keep_the_interpreter_from_exiting(tmp_path):
    script = tmp_path / "blocked.py"
    script.write_text(
        textwrap.dedent(
            """
            import os, threading
            import art
            from art.testing import ScriptedModel

            class Fifo(art.IToolExecutor):
                schema = art.ToolSchema(name="fifo", description="Reads a FIFO nobody writes.")

                def execute(self, input, context):
                    with open(os.environ["FIFO"]) as pipe:  # blocks in open() forever
                        return pipe.read()

            plan = {"steps": [{"id": "s1", "tool": "fifo"}]}
            with ScriptedModel(planning=plan, synthesis="done") as model:
                inst = art.create_art_instance(
                    model=model.model, tools=[Fifo()], storage="memory://",
                    execution_config={"step_timeout_s": 0.2, "tool_stop_grace_s": 0.2},
                )
                resp = inst.process("go", "t")
                print(resp.steps[0].result.error_code, flush=True)
            """
        )
    )
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    done_run = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "FIFO": str(fifo), "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
    )
    assert done_run.returncode == 0, done_run.stderr[-2000:]
    assert done_run.stdout.strip().splitlines()[-1] == "NOT_STOPPED"


# -- KeyboardInterrupt and SystemExit inside a tool -------------------------------------------


def _raising(kind: type[BaseException], asynchronous: bool) -> art.IToolExecutor:
    schema = art.ToolSchema(name="quits", description="Raises what a tool should not.")

    if asynchronous:

        class AsyncQuits(art.IToolExecutor):
            async def execute(self, input, context):
                raise kind()

        tool: art.IToolExecutor = AsyncQuits()
    else:

        class Quits(art.IToolExecutor):
            def execute(self, input, context):
                raise kind()

        tool = Quits()
    tool.schema = schema  # type: ignore[misc]
    return tool


@pytest.mark.parametrize("kind", [KeyboardInterrupt, SystemExit])
@pytest.mark.parametrize("asynchronous", [True, False])
def test_keyboard_interrupt_or_system_exit_in_a_tool_fails_its_step(
    scripted_model, kind, asynchronous
):
    plan = {"steps": [{"id": "s1", "tool": "quits"}, {"id": "s2", "tool": "quick"}]}
    model = scripted_model(planning=plan, synthesis="done")
    with art.create_art_instance(
        model=model.model,
        tools=[_raising(kind, asynchronous), _Quick()],
        storage="memory://",
        execution_config={"retry_backoff_s": 0, "step_max_retries": 0},
    ) as inst:
        result: dict[str, Any] = {}
        # The sync API runs the engine on a thread of its own: a hung engine hangs here.
        worker = threading.Thread(target=lambda: result.update(r=inst.process("go", "t")))
        worker.start()
        worker.join(GUARD_S * 3)
        assert not worker.is_alive(), "process() hung"
    resp = result["r"]
    assert resp.status == "partial"
    by_id = {s.step_id: s for s in resp.steps}
    assert by_id["s1"].status == "failed"
    assert by_id["s1"].result.metadata["exception_type"] == kind.__name__
    assert by_id["s2"].status == "completed" and by_id["s2"].result.output == "quick"


# -- a tool's arguments are its own --------------------------------------------------------------


class Mutator(art.IToolExecutor):
    """Returns a nested value, or changes the one it was given (in place) and returns it."""

    schema = art.ToolSchema(
        name="mutator",
        description="Changes its input in place.",
        input_schema={"type": "object", "properties": {"data": {}}},
    )

    def execute(self, input, context):
        data = input.get("data")
        if data is None:
            return done(context, "mutator", {"items": [1, 2], "meta": {"seen": False}})
        data["items"].append(len(data["items"]) + 1)
        data["meta"]["seen"] = True
        return done(context, "mutator", data)


async def test_a_tool_changing_its_arguments_changes_no_other_steps_output(
    scripted_model, tmp_path
):
    plan = {
        "steps": [
            {"id": "s1", "tool": "mutator", "args": {}},
            {"id": "s2", "tool": "mutator", "args": {"data": "{{s1.output}}"}},
            {"id": "s3", "tool": "mutator", "args": {"data": "{{s1.output}}"}}
            | {"depends_on": ["s2"]},
        ]
    }
    model = scripted_model(planning=plan, synthesis="done")
    async with art.create_art_instance(
        model=model.model, tools=[Mutator()], storage=f"sqlite:///{tmp_path / 'art.db'}"
    ) as inst:
        resp = await inst.aprocess("go", "t")
        run = await inst.storage.get_run(resp.metadata.run_id)
    original = {"items": [1, 2], "meta": {"seen": False}}
    changed = {"items": [1, 2, 3], "meta": {"seen": True}}
    outputs = {s.step_id: s.result.output for s in resp.steps}
    assert outputs == {"s1": original, "s2": changed, "s3": changed}
    assert {k: s.result.output for k, s in run.steps.items()} == outputs
    (synthesis,) = model.calls_for("synthesis")
    prompt = "\n".join(str(m["content"]) for m in synthesis.messages)
    s1 = prompt[prompt.index("s1") :]
    assert '"seen": false' in s1[: s1.index("s2")]  # s1 as it returned it
