"""Seed 001 on every path: each tool execution has exactly one `tool:update` `start` and
one `end` (progress in between), one `tool:after` and one `on_tool_end`, whether it
succeeds, fails, times out, is retried, cancelled, suspends or is vetoed."""

from __future__ import annotations

import asyncio
import threading
from collections import defaultdict
from typing import Any

import pytest

import art

GUARD_S = 10.0


class Recorder(art.AgentCallbacks):
    def __init__(self) -> None:
        self.started: list[str] = []
        self.ended: list[art.ToolResult] = []

    def on_tool_start(self, ctx, tool_name, args):
        self.started.append(tool_name)

    def on_tool_end(self, ctx, tool_name, result):
        self.ended.append(result)


def lifecycle(events: list, recorder: Recorder) -> dict[str, list[str]]:
    """Each execution's stages, checked against seed 001's contract; by call id."""
    stages: dict[str, list[str]] = defaultdict(list)
    after: dict[str, int] = defaultdict(int)
    for event in events:
        if event.name == "tool:update" and not event.data.get("reasoning"):
            stages[event.data["call_id"]].append(event.data["stage"])
        elif event.name == "tool:after":
            after[event.data["call_id"]] += 1
    for call_id, seen in stages.items():
        assert seen[0] == "start" and seen[-1] == "end", (call_id, seen)
        assert seen.count("start") == 1 and seen.count("end") == 1, (call_id, seen)
        assert set(seen[1:-1]) <= {"running", "streaming"}, (call_id, seen)
        assert after[call_id] == 1, call_id
    assert set(after) == set(stages)
    assert len(recorder.started) == len(recorder.ended) == len(stages)
    return dict(stages)


class Tool(art.IToolExecutor):
    """Does what its input says: succeed, fail, fail once, wait forever, or sleep."""

    schema = art.ToolSchema(
        name="act",
        description="Act.",
        input_schema={"type": "object", "properties": {"how": {"type": "string"}}},
    )

    def __init__(self) -> None:
        self.calls: dict[str, int] = defaultdict(int)
        self.started = asyncio.Event()

    async def execute(self, input, context):
        how = input["how"]
        self.calls[how] += 1
        context.progress(f"{how}...")
        if how == "fail":
            return art.ToolResult(
                call_id=context.call_id, tool_name="act", status="error", error="it broke"
            )
        if how == "flaky" and self.calls[how] == 1:
            raise ConnectionError("the service hiccuped")
        if how == "hang":
            self.started.set()
            await asyncio.Event().wait()
        if how == "slow":
            await asyncio.sleep(5)
        return art.ToolResult(
            call_id=context.call_id, tool_name="act", status="success", output=how
        )


class Ask(art.IToolExecutor):
    schema = art.ToolSchema(name="ask", description="Ask a human.", execution_mode="blocking")

    async def execute(self, input, context):
        return art.ToolResult(
            call_id=context.call_id, tool_name="ask", status="suspended", output="ok?"
        )


def plan(*hows: str) -> dict[str, Any]:
    return {"steps": [{"id": f"s{n}", "tool": "act", "args": {"how": how}} for n, how in
                      enumerate(hows, start=1)]}  # fmt: skip


@pytest.fixture
def run(scripted_model):
    made: list[art.ArtInstance] = []

    def factory(planning: Any, tools=None, **config: Any):
        model = scripted_model(planning=planning, synthesis="done")
        recorder = Recorder()
        tool = Tool()
        inst = art.create_art_instance(
            model=model.model,
            tools=tools or [tool, Ask()],
            storage="memory://",
            callbacks=recorder,
            execution_config={"retry_backoff_s": 0, **config},
        )
        events: list = []
        inst.events.subscribe(events.append)
        made.append(inst)
        return inst, tool, events, recorder

    yield factory
    for inst in made:
        inst.close()


async def test_success_and_error(run):
    inst, _tool, events, recorder = run(plan("ok", "fail"))
    resp = await inst.aprocess("go", "t")
    stages = lifecycle(events, recorder)
    assert len(stages) == 2 and all("running" in seen for seen in stages.values())
    ends = {e.data["step_id"]: e.data for e in events if e.name == "tool:update"
            and e.data["stage"] == "end"}  # fmt: skip
    assert ends["s1"]["status"] == "success" and ends["s1"]["result"] == "ok"
    assert ends["s2"]["status"] == "error" and ends["s2"]["error"] == "it broke"
    assert resp.status == "partial"


async def test_a_retried_step_has_a_start_and_an_end_per_attempt(run):
    inst, tool, events, recorder = run(plan("flaky"))
    resp = await inst.aprocess("go", "t")
    assert resp.steps[0].status == "completed" and tool.calls["flaky"] == 2
    stages = lifecycle(events, recorder)
    assert len(stages) == 2  # two executions, two call ids
    ends = [e.data for e in events if e.name == "tool:update" and e.data["stage"] == "end"]
    assert [e["status"] for e in ends] == ["error", "success"]


async def test_a_timed_out_call_ends(run):
    inst, _tool, events, recorder = run(plan("slow"), step_timeout_s=0.05, step_max_retries=0)
    resp = await inst.aprocess("go", "t")
    assert resp.steps[0].result.error_code == "TIMEOUT"
    lifecycle(events, recorder)
    end = next(e.data for e in events if e.name == "tool:update" and e.data["stage"] == "end")
    assert end["error_code"] == "TIMEOUT"


async def test_a_suspending_call_ends_with_status_suspended(run):
    inst, _tool, events, recorder = run({"steps": [{"id": "s1", "tool": "ask"}]})
    resp = await inst.aprocess("go", "t")
    assert resp.status == "suspended"
    lifecycle(events, recorder)
    end = next(e.data for e in events if e.name == "tool:update" and e.data["stage"] == "end")
    assert end["status"] == "suspended" and end["result"] == "ok?"


async def test_a_vetoed_call_starts_and_ends_with_the_veto(run):
    inst, tool, events, recorder = run(plan("ok"))

    def veto(data, ctx):
        raise PermissionError("not today")

    inst.on("tool:before", veto)
    resp = await inst.aprocess("go", "t")
    assert tool.calls == {} and resp.steps[0].status == "failed"
    lifecycle(events, recorder)
    assert recorder.ended[0].metadata["vetoed"] is True
    assert "not today" in recorder.ended[0].error


async def test_a_call_cancelled_by_inst_cancel_ends_and_reaches_on_tool_end(run):
    inst, tool, events, recorder = run(plan("hang"))
    task = asyncio.create_task(inst.aprocess("go", "t"))
    async with asyncio.timeout(GUARD_S):
        await tool.started.wait()
    inst.cancel("t", "the user pressed stop")
    resp = await task
    assert resp.metadata.error.code == "CANCELLED"
    lifecycle(events, recorder)
    (ended,) = recorder.ended
    assert ended.error_code == "CANCELLED" and "the user pressed stop" in ended.error
    assert resp.steps[0].status == "cancelled" and resp.steps[0].result.error_code == "CANCELLED"
    end = next(e.data for e in events if e.name == "tool:update" and e.data["stage"] == "end")
    assert end["status"] == "error" and end["error_code"] == "CANCELLED"


async def test_a_call_cancelled_because_a_sibling_failed_ends(run):
    inst, _tool, events, recorder = run(plan("hang", "fail"), on_step_failure="fail")
    resp = await inst.aprocess("go", "t")
    assert resp.metadata.error.code == "STEP_FAILED"
    assert resp.steps[0].status == "cancelled"
    stages = lifecycle(events, recorder)
    assert len(stages) == 2
    codes = sorted(r.error_code for r in recorder.ended)
    assert codes == ["CANCELLED", "UNKNOWN"]


async def test_a_sync_call_cancelled_in_its_thread_ends(run):
    release = threading.Event()
    entered = threading.Event()

    class Block(art.IToolExecutor):
        schema = art.ToolSchema(name="block", description="Blocks a thread.")

        def execute(self, input, context):
            entered.set()
            context.cancellation.wait(GUARD_S)
            release.set()
            return art.ToolResult(
                call_id=context.call_id, tool_name="block", status="success", output=1
            )

    inst, _tool, events, recorder = run({"steps": [{"id": "s1", "tool": "block"}]},
                                        tools=[Block()])  # fmt: skip
    task = asyncio.create_task(inst.aprocess("go", "t"))
    assert await asyncio.to_thread(entered.wait, GUARD_S)
    inst.cancel("t")
    resp = await task
    assert resp.metadata.error.code == "CANCELLED"
    assert release.wait(GUARD_S)  # the thread saw the cancellation
    lifecycle(events, recorder)
    assert recorder.ended[0].error_code == "CANCELLED"


async def test_a_call_run_on_approval_is_an_execution_with_its_own_start_and_end(run):
    class Pay(art.IToolExecutor):
        schema = art.ToolSchema(
            name="pay",
            description="Pay once approved.",
            execution_mode="blocking",
            input_schema={"type": "object", "properties": {"amount": {"type": "number"}}},
            blocking_config={"run_on_approval": True},
        )

        async def execute(self, input, context):
            if context.decision is None:
                return art.ToolResult(
                    call_id=context.call_id, tool_name="pay", status="suspended", output="ok?"
                )
            return art.ToolResult(
                call_id=context.call_id, tool_name="pay", status="success", output=input["amount"]
            )

    steps = {"steps": [{"id": "s1", "tool": "pay", "args": {"amount": 5}}]}
    inst, _tool, events, recorder = run(steps, tools=[Pay()])
    waiting = await inst.aprocess("go", "t")
    decision = {"approved": True, "modified_args": {"amount": 3}}
    done = await inst.aresume_execution("t", waiting.metadata.suspension_id, decision)
    assert done.status == "success" and done.steps[0].output == 3
    stages = lifecycle(events, recorder)
    assert len(stages) == 2  # the suspending call and the approved one
    ends = [e.data for e in events if e.name == "tool:update" and e.data["stage"] == "end"]
    assert [(e["status"], e["result"]) for e in ends] == [("suspended", "ok?"), ("success", 3)]
