"""Streamed planning with eager execution: the incremental reader, checks on arrival, the
executor's intake, and whole runs on a ScriptedModel that streams at a set rate."""

from __future__ import annotations

import asyncio
import json
import re
import time
from datetime import UTC, datetime
from typing import Any

import pytest

import art
from art.engine.scheduler import Executor, Readiness
from art.planning.plans import Plan
from art.planning.stream import StepArrivals, StepStreamReader
from art.responses import StepRecord
from art.storage.contract import RunRecord
from art.testing import Reply, replies
from art.tooling.registry import ToolRegistry

GUARD_S = 10.0
EAGER = {"execution_config": {"eager_execution": True}}


def _plan(*steps: dict[str, Any]) -> dict[str, Any]:
    return {"intent": "test", "title": "streamed", "steps": list(steps)}


def _step(sid: str, ms: Any, *deps: str, tool: str = "wait") -> dict[str, Any]:
    return {
        "id": sid,
        "description": f"step {sid} {{not a reference}}",
        "tool": tool,
        "args": {"ms": ms, "tag": {"nested": [sid, {"deep": "}]"}]}},
        "dependsOn": list(deps),
    }


PLAN = _plan(_step("s1", 30), _step("s2", 10), _step("s3", "{{s1.output}}", "s1"))


# -- the reader -------------------------------------------------------------------------------


def _closing_positions(text: str, steps: list[dict[str, Any]]) -> list[int]:
    """Where each step object's closing brace is in `text` (its compact JSON is unique)."""
    positions = []
    for step in steps:
        body = json.dumps(step, separators=(",", ":"))
        positions.append(text.index(body) + len(body) - 1)
    return positions


@pytest.mark.parametrize("wrap", ["plain", "wrapped"])
def test_each_step_is_handed_out_at_its_closing_brace_and_not_before(wrap):
    data = PLAN if wrap == "plain" else {"plan": PLAN}
    text = json.dumps(data, separators=(",", ":"))
    reader = StepStreamReader()
    seen: dict[str, int] = {}
    for index, char in enumerate(text):
        for step in reader.feed(char):
            seen[step["id"]] = index
    positions = _closing_positions(text, PLAN["steps"])
    assert seen == dict(zip(["s1", "s2", "s3"], positions, strict=True))


def test_steps_come_whole_from_text_with_thinking_a_fence_and_prose():
    text = (
        "<think>a plan {maybe} with [brackets]</think>Here it is: {not json}\n```json\n"
        + json.dumps(PLAN, indent=2)
        + "\n```\nThat is all {done}."
    )
    reader = StepStreamReader()
    got: list[Any] = []
    for piece in re.findall(r"\S+\s*|\s+", text):
        got.extend(reader.feed(piece))
    # The last step's brace is followed by "]" and "}" on later lines: complete too.
    assert got == PLAN["steps"]


def test_an_element_is_not_handed_out_while_it_may_still_grow():
    reader = StepStreamReader()
    head = '{"steps":[{"id":"s1","tool":"wait","args":{"ms":1}'
    assert reader.feed(head) == []  # the args object closed, the step did not
    assert reader.feed(',"dependsOn":[]') == []
    assert reader.feed("}") == [{"id": "s1", "tool": "wait", "args": {"ms": 1}, "dependsOn": []}]
    assert reader.feed(',{"id":"s2","args":{"ms":12') == []
    assert reader.feed("3}}") == [{"id": "s2", "args": {"ms": 123}}]
    assert reader.feed("]}") == []  # each element once


# -- checks on arrival ------------------------------------------------------------------------


async def _wait(ms: int, tag: dict | None = None) -> int:
    """Sleep `ms` milliseconds and return it."""
    await asyncio.sleep(ms / 1000)
    return ms


def _registry() -> ToolRegistry:
    registry = ToolRegistry()
    registry.register(art.tool(_wait, name="wait"))
    return registry


def test_arrivals_hand_on_valid_steps_and_hold_back_invalid_ones():
    taken: list[str] = []
    arrivals = StepArrivals(_registry(), lambda step, at: taken.append(step.id))
    arrivals.arrive(_step("s1", 5))
    arrivals.arrive(_step("s2", 5, tool="nope"))  # unknown tool
    arrivals.arrive(_step("s3", "five"))  # breaks the tool's input schema
    arrivals.arrive(_step("s4", "{{s9.output}}", "s9"))  # waits for a step not seen yet
    arrivals.arrive(_step("s9", 5, "s4"))  # would close a cycle with s4
    arrivals.arrive(_step("s1", 5))  # the same step again
    assert taken == ["s1", "s4"]


def test_finishing_keeps_taken_steps_and_refuses_changes_to_them():
    taken: list[str] = []
    arrivals = StepArrivals(_registry(), lambda step, at: taken.append(step.id))
    arrivals.arrive(_step("s1", 5))
    arrivals.arrive(_step("s2", "{{s1.output}}", "s1"))
    repaired = Plan.model_validate(_plan(_step("s2", 7, "s1"), _step("s3", 5)))
    plan, problems = arrivals.finish(repaired)
    assert [s.id for s in plan.steps] == ["s1", "s2", "s3"]  # s1 left out: kept
    assert taken == ["s1", "s2", "s3"]  # s3 offered at the end of the reply
    assert problems == [
        "step 's2' already started as first written; keep it unchanged or give the "
        "changed step a new id"
    ]
    assert "s1, s2" in arrivals.repair_note()


# -- the executor's intake --------------------------------------------------------------------


def test_readiness_takes_steps_whose_dependencies_come_later():
    readiness = Readiness({})
    assert readiness.start() == []
    assert readiness.add("b", ["a"]) is False  # a has not arrived
    assert readiness.add("a", []) is True
    assert readiness.finish("a") == ["b"]
    assert readiness.add("c", ["a"]) is True  # a finished before c arrived
    assert readiness.add_finished("d") == []
    with pytest.raises(ValueError, match="already added"):
        readiness.add("a", [])


async def test_a_streaming_executor_runs_steps_as_they_arrive_until_closed():
    executor = Executor({}, max_concurrency=4, streaming=True)
    order: list[str] = []

    async def run_step(step_id: str) -> bool:
        order.append(step_id)
        await asyncio.sleep(0.001)
        return True

    running = asyncio.ensure_future(executor.run(run_step))
    executor.add("b", ["a"])
    await asyncio.sleep(0.01)
    assert order == []  # b waits for a, which has not arrived
    executor.add("a", [])
    await asyncio.sleep(0.01)
    assert order == ["a", "b"]
    assert not running.done()  # more steps may come
    executor.add("c", ["never"])
    executor.close()
    await asyncio.wait_for(running, GUARD_S)
    assert order == ["a", "b"]  # c waited for a step that never came


# -- whole runs -------------------------------------------------------------------------------


class Recorder:
    """A `wait` tool and a planning-stream listener that note when things happen."""

    def __init__(self) -> None:
        self.text = ""
        self.starts: dict[str, tuple[float, str]] = {}  # step id -> (time, plan text then)
        self.calls: list[str] = []

    def tool(self) -> Any:
        recorder = self

        @art.tool(name="wait")
        async def wait(context: art.ExecutionContext, ms: int, tag: dict | None = None) -> int:
            """Sleep `ms` milliseconds and return it."""
            step_id = context.step_id
            recorder.calls.append(step_id)
            recorder.starts[step_id] = (time.perf_counter(), recorder.text)
            await asyncio.sleep(ms / 1000)
            return ms

        return wait

    def listen(self, inst: art.ArtInstance) -> None:
        def on_chunk(data: dict[str, Any], context: Any) -> None:
            if data["phase"] == "planning":
                self.text += data["chunk"]

        inst.on("chunk:after", on_chunk)


@pytest.fixture
def build(scripted_model):
    made: list[art.ArtInstance] = []

    def factory(
        planning: Any, storage: str = "memory://", **model_fields: Any
    ) -> tuple[art.ArtInstance, Recorder, Any]:
        recorder = Recorder()
        model = scripted_model(planning=planning, **model_fields)
        inst = art.create_art_instance(model=model.model, tools=[recorder.tool()], storage=storage)
        recorder.listen(inst)
        made.append(inst)
        return inst, recorder, model

    yield factory
    for inst in made:
        inst.close()


@pytest.mark.slow
async def test_steps_start_only_once_complete_and_after_their_dependencies(build):
    inst, recorder, model = build(PLAN, tokens_per_s=400, synthesis="done")
    response = await asyncio.wait_for(inst.aprocess("q", "t", options=EAGER), GUARD_S)
    assert response.status == "success"
    assert model.calls_for("planning")[0].stream
    records = {r.step_id: r for r in response.steps}
    for step in PLAN["steps"]:
        _, text_then = recorder.starts[step["id"]]
        body = json.dumps(step)  # what the model sent (json.dumps spacing)
        assert body in text_then  # the whole object had arrived
        for dep in step["dependsOn"]:
            assert records[dep].ended_at <= records[step["id"]].started_at
    # s1 and s2 started before the plan was complete: the planning reply had not ended.
    assert not recorder.starts["s1"][1].rstrip().endswith("]}")
    assert all(r.arrived_at is not None for r in response.steps)
    assert records["s1"].arrived_at < records["s2"].arrived_at < records["s3"].arrived_at
    assert response.plan.model_dump() == Plan.model_validate(PLAN).model_dump()


@pytest.mark.slow
@pytest.mark.parametrize("structured", [False, True])
async def test_streamed_and_whole_plans_give_the_same_outputs_and_answer(build, structured):
    text = "<think>plan it</think>```json\n" + json.dumps(PLAN) + "\n```"
    answers = []
    for options in (None, EAGER):
        inst, recorder, model = build(
            PLAN if structured else text, tokens_per_s=1000, response_schema=structured
        )
        response = await asyncio.wait_for(inst.aprocess("q", "t", options=options), GUARD_S)
        assert response.status == "success"
        assert sorted(recorder.calls) == ["s1", "s2", "s3"]
        call = model.calls_for("planning")[0]
        assert call.stream is (options is not None)
        assert (call.response_format is not None) is structured
        answers.append(
            (response.content, {r.step_id: (r.status, r.output) for r in response.steps})
        )
    assert answers[0] == answers[1]


@pytest.mark.slow
async def test_a_repair_keeps_the_steps_that_already_ran(build):
    first = _plan(_step("s1", 5), _step("s2", "{{s9.output}}", "s9"))  # s9 never comes
    second = _plan(_step("s2", "{{s9.output}}", "s9"), _step("s9", 5))  # s1 left out
    inst, recorder, model = build(replies(first, second), tokens_per_s=1000)
    response = await asyncio.wait_for(inst.aprocess("q", "t", options=EAGER), GUARD_S)
    assert response.status == "success"
    assert sorted(recorder.calls) == ["s1", "s2", "s9"]  # s1 ran once
    assert recorder.starts["s1"][0] < recorder.starts["s9"][0]  # before the repair
    repair = model.calls_for("planning")[1].messages[-1]["content"]
    assert "'s9'" in repair and "s1, s2 already started" in repair
    assert [s.id for s in response.plan.steps] == ["s1", "s2", "s9"]
    assert {r.step_id: r.output for r in response.steps} == {"s1": 5, "s2": 5, "s9": 5}


@pytest.mark.slow
async def test_a_cut_off_reply_runs_its_complete_steps_and_the_repair_the_rest(build):
    whole = json.dumps(_plan(_step("s1", 5), _step("s2", 5)))
    cut = whole[: whole.index('"s2"') + 30]  # inside s2's object
    repaired = _plan(_step("s1", 5), _step("s2", 6))
    inst, recorder, model = build(replies(Reply(cut, "length"), repaired), tokens_per_s=1000)
    response = await asyncio.wait_for(inst.aprocess("q", "t", options=EAGER), GUARD_S)
    assert response.status == "success"
    assert sorted(recorder.calls) == ["s1", "s2"]
    assert {r.step_id: r.output for r in response.steps} == {"s1": 5, "s2": 6}
    assert "cut off" in model.calls_for("planning")[1].messages[-1]["content"]


@pytest.mark.slow
async def test_cancelling_mid_stream_stops_the_steps_and_the_planning_call(build):
    plan = _plan(_step("s1", 2000), *(_step(f"s{i}", 5) for i in range(2, 40)))
    inst, recorder, model = build(plan, tokens_per_s=100)  # the reply takes ~6 s

    s1_started = asyncio.Event()
    inst.on("tool:before", lambda data, context: s1_started.set())

    async def cancel_when_s1_runs() -> None:
        await s1_started.wait()
        await asyncio.sleep(0.05)
        assert inst.cancel("t", "stop now")

    started = time.perf_counter()
    canceller = asyncio.ensure_future(cancel_when_s1_runs())
    response = await asyncio.wait_for(inst.aprocess("q", "t", options=EAGER), GUARD_S)
    await canceller
    assert time.perf_counter() - started < 2.0  # neither the tool nor the stream awaited
    assert response.status == "error"
    assert response.metadata.error.code == "CANCELLED"
    assert recorder.calls == ["s1"]
    statuses = {r.step_id: r.status for r in response.steps}
    assert statuses.pop("s1") == "cancelled"
    assert set(statuses.values()) <= {"pending"}  # arrived, never started
    assert [c.phase for c in model.calls] == ["planning"]  # no synthesis, no repair


@pytest.mark.slow
async def test_a_plan_that_stays_invalid_fails_the_run_and_cancels_running_steps(build):
    bad = _plan(_step("s1", 3000), _step("s2", "{{s9.output}}", "s9"))
    inst, recorder, model = build(bad, tokens_per_s=2000)
    response = await asyncio.wait_for(inst.aprocess("q", "t", options=EAGER), GUARD_S)
    assert response.status == "error"
    assert response.metadata.error.code == "PLAN_INVALID"
    assert len(model.calls_for("planning")) == 3  # max_plan_attempts
    assert recorder.calls == ["s1"]
    assert {r.step_id: r.status for r in response.steps}["s1"] == "cancelled"


@pytest.mark.slow
async def test_a_run_killed_mid_stream_reuses_its_finished_steps(build, tmp_path):
    storage_url = f"sqlite:///{tmp_path / 'art.db'}"
    inst, recorder, _ = build(PLAN, storage=storage_url, tokens_per_s=1000, synthesis="done")
    storage = inst.storage
    await storage.open()
    # What a killed process leaves: no plan stored yet, s1 finished, s2 in progress.
    record = RunRecord(run_id="killed", thread_id="t", trace_id="a" * 32, query="q")
    await storage.create_run(record)
    result = art.ToolResult(call_id="x", tool_name="wait", status="success", output=30)
    await storage.save_step(
        "killed",
        StepRecord(
            step_id="s1", tool="wait", status="completed", attempts=1, result=result,
            args=PLAN["steps"][0]["args"], started_at=datetime.now(UTC),
        ),
    )  # fmt: skip
    s2 = StepRecord(step_id="s2", tool="wait", status="in_progress", attempts=1)
    await storage.save_step("killed", s2)
    response = await asyncio.wait_for(inst.aprocess("q", "t", options=EAGER), GUARD_S)
    assert response.status == "success"
    assert response.metadata.run_id == "killed"
    assert sorted(recorder.calls) == ["s2", "s3"]  # planning redone, s1 reused
    assert {r.step_id: r.output for r in response.steps} == {"s1": 30, "s2": 10, "s3": 30}
    assert [r.attempts for r in response.steps] == [1, 2, 1]  # s2 ran again as attempt 2
    stored = await storage.get_run("killed")
    assert stored.plan is not None and stored.plan.step_ids == ["s1", "s2", "s3"]


@pytest.mark.slow
async def test_a_suspension_mid_stream_waits_for_the_whole_plan(scripted_model):
    from art.tools.human import AskHuman

    plan = _plan(
        {"id": "s1", "tool": "ask_human", "args": {"question": "go?"}, "dependsOn": []},
        *(_step(f"s{i}", 1) for i in range(2, 6)),
    )
    model = scripted_model(planning=plan, tokens_per_s=500)
    recorder = Recorder()
    with art.create_art_instance(
        model=model.model, tools=[AskHuman(), recorder.tool()], storage="memory://"
    ) as inst:
        response = await asyncio.wait_for(inst.aprocess("q", "t", options=EAGER), GUARD_S)
        assert response.status == "suspended"
        stored = (await inst.aget_state("t")).runs[-1]
        assert stored.plan is not None and len(stored.plan.steps) == 5  # stored whole
        assert recorder.calls == []  # no step starts once one is suspended


def _refuse_negative(data: dict[str, Any], context: Any) -> None:
    if data["args"].get("ms", 0) < 0:
        raise ValueError("negative sleep")  # a veto: the step fails


@pytest.mark.slow
async def test_a_failing_step_under_fail_stops_the_run_without_waiting_for_the_plan(build):
    plan = _plan(_step("s1", -1), *(_step(f"s{i}", 5) for i in range(2, 40)))
    inst, recorder, model = build(plan, tokens_per_s=100)  # the reply takes ~6 s
    inst.on("tool:before", _refuse_negative)
    options = {"execution_config": {"eager_execution": True, "on_step_failure": "fail"}}
    started = time.perf_counter()
    response = await asyncio.wait_for(inst.aprocess("q", "t", options=options), GUARD_S)
    assert time.perf_counter() - started < 3.0  # the rest of the plan was not awaited
    assert response.status == "error"
    assert response.metadata.error.code == "STEP_FAILED"
    assert response.steps[0].status == "failed"
    assert recorder.calls == []
    assert [c.phase for c in model.calls] == ["planning"]


@pytest.mark.slow
async def test_a_failing_step_under_replan_replans_once_the_plan_is_complete(build):
    first = _plan(_step("s1", -1), _step("s2", 5), _step("s3", "{{s2.output}}", "s2"))
    events: list[str] = []
    inst, recorder, model = build(first, tokens_per_s=1000, replan=_plan(_step("s4", 7)))
    inst.on("tool:before", _refuse_negative)
    inst.on("plan:created", lambda data, context: events.append("plan:created"))
    inst.on("plan:updated", lambda data, context: events.append("plan:updated"))
    options = {"execution_config": {"eager_execution": True, "on_step_failure": "replan"}}
    response = await asyncio.wait_for(inst.aprocess("q", "t", options=options), GUARD_S)
    assert events == ["plan:created", "plan:updated"]
    assert response.status == "success"
    # As with a whole plan, no step starts after the failure: s2 and s3 came later.
    assert recorder.calls == ["s4"]
    replan = model.calls_for("replan")[0].messages[-1]["content"]
    assert "s1" in replan and "s3" in replan  # the whole streamed plan was known
    assert [s.id for s in response.plan.steps] == ["s4"]


def _flaky_and_stuck() -> list[Any]:
    """A tool that fails once per step with a connection error, and one that hangs."""
    failed_once: set[str] = set()

    @art.tool(name="flaky")
    async def flaky(context: art.ExecutionContext, value: int) -> int:
        """Fails once per step with a connection error, then returns `value`."""
        if context.step_id not in failed_once:
            failed_once.add(str(context.step_id))
            raise ConnectionError("try again")
        return value

    @art.tool(name="stuck")
    async def stuck() -> int:
        """Never answers in time."""
        await asyncio.sleep(10)
        return 0

    return [flaky, stuck]


@pytest.mark.slow
async def test_retries_timeouts_and_display_tools_behave_as_with_a_whole_plan(scripted_model):
    from art.tools.show import Show

    plan = _plan(
        {"id": "s1", "tool": "flaky", "args": {"value": 3}, "dependsOn": []},
        {"id": "s2", "tool": "stuck", "args": {}, "dependsOn": []},
        {"id": "s3", "tool": "show", "args": {"title": "Value", "markdown": "v={{s1.output}}"},
         "dependsOn": ["s1"]},
        {"id": "s4", "tool": "flaky", "args": {"value": "{{s2.output}}"}, "dependsOn": ["s2"]},
    )  # fmt: skip
    config = {"step_timeout_s": 0.2, "step_max_retries": 1, "retry_backoff_s": 0}
    outcomes = []
    for eager in (False, True):
        model = scripted_model(planning=plan, synthesis="done", tokens_per_s=500)
        async with art.create_art_instance(
            model=model.model, tools=[*_flaky_and_stuck(), Show()], storage="memory://"
        ) as inst:
            options = {"execution_config": {**config, "eager_execution": eager}}
            response = await asyncio.wait_for(inst.aprocess("q", "t", options=options), GUARD_S)
        outcomes.append(
            (
                response.status,
                [(r.step_id, r.status, r.attempts, r.output) for r in response.steps],
                [(d.step_id, d.output) for d in response.display],
            )
        )
    assert outcomes[0] == outcomes[1]
    status, records, display = outcomes[1]
    assert status == "partial"
    assert records[0] == ("s1", "completed", 2, 3)  # retried after the connection error
    assert records[1][:3] == ("s2", "failed", 2)  # timed out twice
    assert records[3][1] == "skipped"  # s2 failed
    assert [step_id for step_id, _ in display] == ["s3"]
