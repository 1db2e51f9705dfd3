"""The DAG scheduler on fake tools and a scripted model: readiness, concurrency, policies,
retries."""

from __future__ import annotations

import asyncio
import threading
from graphlib import CycleError
from typing import Any

import pytest

import art
from art.engine.execute import PlanExecution
from art.engine.execution_state import ExecutionDeps
from art.engine.scheduler import Readiness
from art.llm.client import LLMClient
from art.planning.planner import Planner
from art.planning.plans import Plan
from art.responses import StepRecord
from art.testing import HTTPStatus, ScriptedModel, make_run_context
from art.tooling.registry import ToolRegistry

GUARD_S = 5.0  # a deadlock shows up as a timeout, never as a hung test


# -- fakes ------------------------------------------------------------------------------------


class FnTool(art.IToolExecutor):
    """A tool whose behaviour is an async function of (args, context)."""

    def __init__(self, name: str, fn: Any, *, mode: str = "functional", schema: dict | None = None):
        self.schema = art.ToolSchema(
            name=name,
            description=f"test tool {name}",
            input_schema=schema or {"type": "object"},
            execution_mode=mode,
        )
        self.fn = fn
        self.calls: list[tuple[dict, art.ExecutionContext]] = []

    async def execute(self, input: dict, context: art.ExecutionContext) -> art.ToolResult:
        self.calls.append((input, context))
        out = self.fn(input, context)
        if asyncio.iscoroutine(out):
            out = await out
        if isinstance(out, art.ToolResult):
            return out
        return ok(context, self.schema.name, out)


def ok(context: art.ExecutionContext, name: str, output: Any) -> art.ToolResult:
    return art.ToolResult(call_id=context.call_id, tool_name=name, status="success", output=output)


def echo(input: dict, context: art.ExecutionContext) -> Any:
    return input.get("value")


@pytest.fixture
def scripted_llm():
    """`scripted_llm(step=...)`: a real LLMClient whose model "m" is a ScriptedModel object
    (the engine's model seam), and that model, to read its calls."""
    made: list[ScriptedModel] = []

    def make(**script: Any) -> tuple[LLMClient, ScriptedModel]:
        model = ScriptedModel(**script)
        made.append(model)
        return LLMClient(models={"m": model}), model

    yield make
    for model in made:
        model.unregister()


def plan_of(*steps: dict) -> Plan:
    return Plan.model_validate({"title": "test", "steps": list(steps)})


def step(sid: str, tool: str | None = "echo", deps: tuple[str, ...] = (), **args: Any) -> dict:
    return {
        "id": sid,
        "description": f"do {sid}",
        "tool": tool,
        "args": args,
        "dependsOn": list(deps),
    }


def executor(
    plan: Plan, tools: list, *, events: list | None = None, **kwargs: Any
) -> PlanExecution:
    config = kwargs.pop("config", {})
    records = kwargs.pop("records", None)
    run = make_run_context(config={"retry_backoff_s": 0, **config})
    if events is not None:
        run.events.subscribe(events.append)
    deps = ExecutionDeps(run=run, registry=ToolRegistry(tools), **kwargs)
    return PlanExecution(deps, plan, records=records)


async def run_guarded(ex: PlanExecution):
    async with asyncio.timeout(GUARD_S):
        return await ex.run()


# -- Readiness -------------------------------------------------------------------------------


def test_readiness_hands_out_steps_as_their_dependencies_finish():
    r = Readiness({"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"]})
    assert r.start() == ["a"]
    assert r.finish("a") == ["b", "c"]
    assert r.finish("b") == []
    assert r.finish("c") == ["d"]
    assert r.finish("d") == []
    assert r.unfinished == 0


def test_readiness_counts_finished_steps_as_done_from_the_start():
    r = Readiness({"a": [], "b": ["a", "old"], "c": ["b"]}, finished=["a", "old"])
    assert r.start() == ["b"]
    assert r.finish("b") == ["c"]


def test_readiness_is_loud_about_misuse():
    with pytest.raises(CycleError):
        Readiness({"a": ["b"], "b": ["a"], "c": []})
    with pytest.raises(CycleError):
        Readiness({"a": ["a"]})
    with pytest.raises(ValueError, match="unknown step 'zz'"):
        Readiness({"a": ["zz"]})
    r = Readiness({"a": [], "b": ["a"]})
    with pytest.raises(ValueError, match="never handed out"):
        r.finish("b")
    r.start()
    r.finish("a")
    with pytest.raises(ValueError, match="'a'"):
        r.finish("a")
    with pytest.raises(ValueError, match="already called"):
        r.start()


def test_readiness_of_a_checked_graph_skips_only_the_cycle_search():
    r = Readiness({"a": [], "b": ["a"], "c": ["a", "b"]}, acyclic=True)
    assert r.start() == ["a"]
    assert r.finish("a") == ["b"]
    assert r.finish("b") == ["c"]
    with pytest.raises(ValueError, match="unknown step 'zz'"):
        Readiness({"a": ["zz"]}, acyclic=True)  # the other checks still run
    with pytest.raises(CycleError):
        Readiness({"a": ["a"]}, acyclic=True)


async def test_a_cyclic_plan_that_skipped_validation_still_raises_cycle_error():
    plan = plan_of(
        step("s1", "echo", value=1),
        step("s2", "echo", deps=("s3",), value=2),
        step("s3", "echo", deps=("s2",), value=3),
    )
    with pytest.raises(CycleError) as info:
        await run_guarded(executor(plan, [FnTool("echo", echo)]))
    assert info.value.args[1] == ["s2", "s3"]


# -- concurrency ------------------------------------------------------------------------------


async def test_independent_steps_run_at_the_same_time():
    started = {"a": asyncio.Event(), "b": asyncio.Event()}

    async def meet(input, context):
        me, other = input["me"], input["other"]
        started[me].set()
        await started[other].wait()  # only returns if the other step runs concurrently
        return me

    tool = FnTool("meet", meet)
    plan = plan_of(
        step("s1", "meet", me="a", other="b"),
        step("s2", "meet", me="b", other="a"),
    )
    outcome = await run_guarded(executor(plan, [tool]))
    assert outcome.status == "completed"
    assert outcome.outputs == {"s1": "a", "s2": "b"}


async def test_ready_steps_of_instant_tools_share_a_task_and_waiting_ones_get_their_own():
    tasks: dict[str, set[asyncio.Task]] = {"instant": set(), "waiting": set()}

    async def instant(input, context):
        tasks["instant"].add(asyncio.current_task())
        return None

    async def waiting(input, context):
        tasks["waiting"].add(asyncio.current_task())
        await asyncio.sleep(0.01)
        return None

    plan = plan_of(
        *(step(f"i{n}", "instant") for n in range(8)),
        *(step(f"w{n}", "waiting") for n in range(8)),
    )
    tools = [FnTool("instant", instant), FnTool("waiting", waiting)]
    outcome = await run_guarded(executor(plan, tools, config={"max_concurrency": 16}))
    assert outcome.status == "completed"
    # All sixteen were started together; the instant ones never waited, so one task ran
    # them back to back, and each step that waited let the next one start in a task of
    # its own (the sleeps overlap: eight tasks for eight waiting steps).
    assert len(tasks["instant"]) == 1
    assert len(tasks["waiting"]) == 8


async def test_idle_is_called_while_every_running_step_waits_for_its_tool():
    release = asyncio.Event()
    states: list[tuple[int, bool]] = []
    waiting = 0

    async def wait(input, context):
        nonlocal waiting
        waiting += 1
        await release.wait()
        waiting -= 1
        return "done"

    def idle() -> None:
        states.append((waiting, release.is_set()))
        release.set()  # seen idle once: let the tools finish

    plan = plan_of(step("s1", "wait"), step("s2", "wait"), step("s3", "echo", ("s1", "s2")))
    ex = executor(plan, [FnTool("wait", wait), FnTool("echo", echo)], idle=idle)
    outcome = await run_guarded(ex)
    assert outcome.status == "completed"
    assert states == [(2, False)]  # once, with both tool calls under way


async def test_idle_is_not_called_while_steps_are_ready_or_tools_return_at_once(monkeypatch):
    monkeypatch.setattr("art.engine.scheduler._SLICE_S", 0.0)  # the worker yields after every step
    calls: list[int] = []
    plan = plan_of(
        *(step(f"s{i}", deps=(f"s{i - 1}",) if i > 1 else (), value=i) for i in range(1, 60))
    )
    outcome = await run_guarded(
        executor(plan, [FnTool("echo", echo)], idle=lambda: calls.append(1))
    )
    assert outcome.status == "completed" and calls == []


class BlockingMeet(art.IToolExecutor):
    """A plain `def` tool that returns only once every copy of it is running at once."""

    schema = art.ToolSchema(name="blocking_meet", description="wait for all peers")

    def __init__(self, peers: int) -> None:
        self.barrier = threading.Barrier(peers, timeout=GUARD_S)

    def execute(self, input: dict, context: art.ExecutionContext) -> art.ToolResult:
        self.barrier.wait()  # raises BrokenBarrierError unless all peers run concurrently
        return ok(context, "blocking_meet", "met")


async def test_blocking_tools_run_up_to_max_concurrency_at_once_not_the_default_pool_size():
    # The loop's default executor has min(32, cpus + 4) threads: 6 on two cores.
    width = 24
    plan = plan_of(*(step(f"s{i}", "blocking_meet") for i in range(width)))
    ex = executor(plan, [BlockingMeet(width)], config={"max_concurrency": width})
    outcome = await run_guarded(ex)
    assert outcome.status == "completed"
    assert set(outcome.outputs.values()) == {"met"}


async def test_a_step_starts_when_its_last_dependency_finishes_not_in_waves():
    # s2 (slow) can only finish after s3 started; s3 depends on s1 only.
    s3_started = asyncio.Event()

    async def slow(input, context):
        await s3_started.wait()
        return "slow"

    async def mark(input, context):
        s3_started.set()
        return "s3"

    plan = plan_of(
        step("s1", "echo", value=1),
        step("s2", "slow", deps=("s1",)),
        step("s3", "mark", deps=("s1",)),
        step("s4", "echo", deps=("s2", "s3"), value=4),
    )
    tools = [FnTool("echo", echo), FnTool("slow", slow), FnTool("mark", mark)]
    outcome = await run_guarded(executor(plan, tools))
    assert outcome.status == "completed"
    assert [r.status for r in outcome.records.values()] == ["completed"] * 4


async def test_max_concurrency_bounds_running_steps():
    running = 0
    peak = 0

    async def count(input, context):
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        running -= 1
        return None

    plan = plan_of(*(step(f"s{i}", "count") for i in range(1, 9)))
    ex = executor(plan, [FnTool("count", count)], config={"max_concurrency": 3})
    outcome = await run_guarded(ex)
    assert outcome.status == "completed"
    assert peak == 3


async def test_a_plan_of_instant_tools_lets_other_tasks_of_the_loop_run(monkeypatch):
    # Workers run ready steps back to back; between steps they yield to the loop once
    # their time slice is used up (here: after every step).
    monkeypatch.setattr("art.engine.scheduler._SLICE_S", 0.0)
    turns = 0
    done = False

    async def other_task():
        nonlocal turns
        while not done:
            turns += 1
            await asyncio.sleep(0)

    chain = [step("s1", "echo", value=0)]
    chain += [step(f"s{i}", "echo", deps=(f"s{i - 1}",), value=i) for i in range(2, 31)]
    ticker = asyncio.create_task(other_task())
    outcome = await run_guarded(executor(plan_of(*chain), [FnTool("echo", echo)]))
    done = True
    await ticker
    assert outcome.status == "completed"
    assert turns >= 30  # the other task ran between the steps, not only before and after


async def test_steps_ready_together_are_all_started_before_a_stop():
    # s1 suspends the run at once; s2 was ready at the same moment, so it still runs.
    async def suspend(input, context):
        return art.ToolResult(
            call_id=context.call_id,
            tool_name="ask",
            status="suspended",
            output={"prompt": "ok?"},
        )

    plan = plan_of(step("s1", "ask"), step("s2", "echo", value=2), step("s3", "echo", value=3))
    tools = [FnTool("ask", suspend, mode="blocking"), FnTool("echo", echo)]
    ex = executor(plan, tools, config={"max_concurrency": 2})
    outcome = await run_guarded(ex)
    assert outcome.status == "suspended"
    statuses = {sid: r.status for sid, r in outcome.records.items()}
    # s3 waited for a free slot, and nothing new starts once a step suspended the run.
    assert statuses == {"s1": "waiting", "s2": "completed", "s3": "pending"}


# -- arguments -------------------------------------------------------------------------------


async def test_references_are_resolved_with_their_types_when_the_step_starts():
    seen = []

    def record_args(input, context):
        seen.append(input)
        return input

    plan = plan_of(
        step("s1", "echo", value={"n": 17, "tags": ["x", "y"]}),
        step(
            "s2",
            "record",
            deps=("s1",),
            whole="{{s1.output}}",
            n="{{s1.output.n}}",
            text="n={{s1.output.n}}",
            tag="{{s1.output.tags.1}}",
        ),
    )
    outcome = await run_guarded(
        executor(plan, [FnTool("echo", echo), FnTool("record", record_args)])
    )
    assert outcome.status == "completed"
    assert seen == [{"whole": {"n": 17, "tags": ["x", "y"]}, "n": 17, "text": "n=17", "tag": "y"}]
    assert outcome.records["s2"].args == seen[0]


async def test_resolved_arguments_are_validated_against_the_schema_before_the_tool_runs():
    strict = FnTool(
        "strict",
        echo,
        schema={
            "type": "object",
            "properties": {"value": {"type": "integer"}},
            "required": ["value"],
        },
    )
    plan = plan_of(
        step("s1", "echo", value="not a number"),
        step("s2", "strict", deps=("s1",), value="{{s1.output}}"),
    )
    outcome = await run_guarded(executor(plan, [FnTool("echo", echo), strict]))
    assert strict.calls == []
    record = outcome.records["s2"]
    assert record.status == "failed"
    assert record.result.error_code == "VALIDATION_ERROR"
    assert "is not of type 'integer'" in record.reason


# -- hooks -----------------------------------------------------------------------------------


async def test_a_tool_before_hook_can_change_the_arguments():
    tool = FnTool("echo", echo)
    ex = executor(plan_of(step("s1", value="original")), [tool])

    def edit(data, context):
        return {**data, "args": {"value": "edited"}}

    ex.deps.run.events.on("tool:before", edit)
    outcome = await run_guarded(ex)
    assert outcome.outputs == {"s1": "edited"}
    assert outcome.records["s1"].args == {"value": "edited"}


async def test_a_tool_before_hook_that_raises_vetoes_the_call_and_fails_the_step():
    tool = FnTool("echo", echo)
    events: list = []
    ex = executor(
        plan_of(step("s1", value=1), step("s2", deps=("s1",), value=2)), [tool], events=events
    )

    def veto(data, context):
        raise PermissionError("not on a Sunday")

    ex.deps.run.events.on("tool:before", veto)
    outcome = await run_guarded(ex)
    assert tool.calls == []
    assert outcome.records["s1"].status == "failed"
    assert "not on a Sunday" in outcome.records["s1"].reason
    assert outcome.records["s2"].status == "skipped"
    assert outcome.records["s1"].attempts == 1  # a veto is never retried
    errors = [e for e in events if e.name == "error"]
    assert errors and errors[0].data["event"] == "tool:before"
    # The vetoed execution still starts and ends (seed 001), with the veto as its error.
    updates = [e.data for e in events if e.name == "tool:update"]
    assert [u["stage"] for u in updates] == ["start", "end"]
    assert updates[1]["status"] == "error" and "not on a Sunday" in updates[1]["error"]


# -- failure policies ------------------------------------------------------------------------


def boom(input, context):
    raise ValueError("boom")


async def test_skip_dependents_skips_only_what_depends_on_the_failure():
    plan = plan_of(
        step("s1", "boom"),
        step("s2", "echo", deps=("s1",), value=2),
        step("s3", "echo", deps=("s2",), value=3),
        step("s4", "echo", value=4),
    )
    outcome = await run_guarded(
        executor(plan, [FnTool("boom", boom), FnTool("echo", echo)], config={"step_max_retries": 0})
    )
    statuses = {sid: r.status for sid, r in outcome.records.items()}
    assert statuses == {"s1": "failed", "s2": "skipped", "s3": "skipped", "s4": "completed"}
    assert outcome.records["s2"].reason == "skipped because step s1 failed: ValueError: boom"
    assert outcome.records["s3"].reason == "skipped because step s2 was skipped"
    assert outcome.status == "partial"


async def test_fail_policy_stops_launching_and_cancels_running_steps():
    hanging_started = asyncio.Event()
    cancelled = []

    async def hang(input, context):
        hanging_started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(context.cancelled)
            raise

    async def fail_after_hang_started(input, context):
        await hanging_started.wait()
        raise ValueError("broken")

    plan = plan_of(
        step("s1", "hang"),
        step("s2", "fail"),
        step("s3", "echo", deps=("s2",), value=3),
    )
    tools = [FnTool("hang", hang), FnTool("fail", fail_after_hang_started), FnTool("echo", echo)]
    outcome = await run_guarded(
        executor(plan, tools, config={"on_step_failure": "fail", "step_max_retries": 0})
    )
    assert outcome.status == "failed"
    assert outcome.error.code == "STEP_FAILED"
    assert "s2" in outcome.error.message
    statuses = {sid: r.status for sid, r in outcome.records.items()}
    assert statuses == {"s1": "cancelled", "s2": "failed", "s3": "pending"}
    assert cancelled == [True]  # the tool saw its cancellation signal


def replanner(llm: LLMClient, tools: list) -> Planner:
    """The real planner over `tools`, writing its plans with the client's model "m"."""
    return Planner(llm, ToolRegistry(tools), model="m")


async def test_replan_policy_asks_the_planner_and_never_reruns_finished_steps(scripted_llm):
    echo_tool = FnTool("echo", echo)
    tools = [echo_tool, FnTool("boom", boom)]
    plan = plan_of(
        step("s1", "echo", value=1),
        step("s2", "boom", deps=("s1",)),
        step("s3", "echo", deps=("s2",), value=3),
    )
    # The new plan builds on s1, which finished; redefining it would be refused.
    llm, model = scripted_llm(
        replan={
            "title": "again",
            "steps": [step("s4", "echo", deps=("s1",), value="{{s1.output}}")],
        }
    )
    events: list = []
    updated = []

    async def plan_updated(plan, replans):
        updated.append((plan, replans))

    ex = executor(
        plan,
        tools,
        events=events,
        planner=replanner(llm, tools),
        query="q",
        plan_updated=plan_updated,
        config={"on_step_failure": "replan", "step_max_retries": 0, "max_replans": 1},
    )
    outcome = await run_guarded(ex)
    assert [call.phase for call in model.calls] == ["replan"]
    prompt = model.calls[0].messages[-1]["content"]
    assert "- s1 (echo) do s1: 1" in prompt  # the planner sees what finished and what failed
    assert "- s2 (boom) do s2 failed: " in prompt and "boom" in prompt.split("s2 failed: ")[1]
    assert outcome.status == "completed"
    assert outcome.replans == 1
    assert outcome.plan.step_ids == ["s4"]
    assert [input for input, _ in echo_tool.calls] == [{"value": 1}, {"value": 1}]  # s1 once, s4
    assert set(outcome.records) == {"s1", "s4"}
    assert updated == [(outcome.plan, 1)]
    assert [e.data["replans"] for e in events if e.name == "plan:updated"] == [1]


async def test_replan_policy_falls_back_to_skipping_when_replans_are_used_up(scripted_llm):
    tools = [FnTool("echo", echo), FnTool("boom", boom)]
    plan = plan_of(step("s1", "boom"), step("s2", "echo", deps=("s1",), value=2))
    llm, model = scripted_llm(replan={"title": "unused", "steps": [step("s3", "echo", value=3)]})
    outcome = await run_guarded(
        executor(
            plan,
            tools,
            planner=replanner(llm, tools),
            config={"on_step_failure": "replan", "step_max_retries": 0, "max_replans": 0},
        )
    )
    assert model.calls == []
    assert outcome.status == "partial"
    assert outcome.records["s2"].status == "skipped"


# -- timeouts and retries ------------------------------------------------------------------------


async def test_a_step_that_runs_too_long_times_out():
    async def forever(input, context):
        await asyncio.Event().wait()

    outcome = await run_guarded(
        executor(
            plan_of(step("s1", "forever")),
            [FnTool("forever", forever)],
            config={"step_timeout_s": 0.05, "step_max_retries": 0},
        )
    )
    record = outcome.records["s1"]
    assert record.status == "failed"
    assert record.result.error_code == "TIMEOUT"


async def test_exceptions_are_retried_with_the_attempt_number_in_the_context():
    attempts = []

    def flaky(input, context):
        attempts.append(context.attempt)
        if context.attempt < 3:
            raise ConnectionError("try again")
        return "finally"

    outcome = await run_guarded(
        executor(
            plan_of(step("s1", "flaky")), [FnTool("flaky", flaky)], config={"step_max_retries": 2}
        )
    )
    assert attempts == [1, 2, 3]
    assert outcome.records["s1"].attempts == 3
    assert outcome.outputs == {"s1": "finally"}


async def test_retries_stop_at_step_max_retries():
    outcome = await run_guarded(
        executor(
            plan_of(step("s1", "boom")), [FnTool("boom", boom)], config={"step_max_retries": 1}
        )
    )
    assert outcome.records["s1"].attempts == 2
    assert outcome.records["s1"].status == "failed"


async def test_only_error_results_marked_retryable_are_retried():
    calls = {"retryable": 0, "final": 0}

    def error_result(input, context):
        calls[input["kind"]] += 1
        return art.ToolResult(
            call_id=context.call_id,
            tool_name="err",
            status="error",
            error="nope",
            metadata={"retryable": input["kind"] == "retryable"},
        )

    plan = plan_of(step("s1", "err", kind="retryable"), step("s2", "err", kind="final"))
    await run_guarded(executor(plan, [FnTool("err", error_result)], config={"step_max_retries": 2}))
    assert calls == {"retryable": 3, "final": 1}


async def test_an_error_result_naming_an_exception_type_is_not_retried_unless_marked_retryable():
    # What the tool says in its metadata is data for the user; whether the engine
    # retries is decided where the failure is made (a raised exception), not read back.
    calls = {"reported": 0, "raised": 0}

    def reports_or_raises(input, context):
        calls[input["kind"]] += 1
        if input["kind"] == "raised":
            raise ValueError("broken")
        return art.ToolResult(
            call_id=context.call_id,
            tool_name="err",
            status="error",
            error="caught a ValueError",
            metadata={"exception_type": "ValueError", "error_code": "UNKNOWN"},
        )

    plan = plan_of(step("s1", "err", kind="reported"), step("s2", "err", kind="raised"))
    outcome = await run_guarded(
        executor(plan, [FnTool("err", reports_or_raises)], config={"step_max_retries": 2})
    )
    assert calls == {"reported": 1, "raised": 3}
    assert outcome.records["s1"].result.metadata["exception_type"] == "ValueError"
    assert outcome.records["s2"].result.metadata["exception_type"] == "ValueError"


async def test_backoff_grows_exponentially():
    sleeps = []
    real_sleep = asyncio.sleep

    async def fake_sleep(delay, *args):
        if delay:  # sleep(0) is a worker letting the loop run others, not a backoff
            sleeps.append(delay)
        await real_sleep(0)

    ex = executor(
        plan_of(step("s1", "boom")),
        [FnTool("boom", boom)],
        config={"step_max_retries": 3, "retry_backoff_s": 0.5},
    )
    import art.engine.scheduler as execution_module

    original = execution_module.asyncio.sleep
    execution_module.asyncio.sleep = fake_sleep
    try:
        await run_guarded(ex)
    finally:
        execution_module.asyncio.sleep = original
    assert sleeps == [0.5, 1.0, 2.0]


# -- reasoning steps and LLM assistance ---------------------------------------------------------


async def test_a_reasoning_step_makes_one_step_call_with_its_inputs_cut(scripted_llm):
    llm, model = scripted_llm(step="the sum is 3")
    plan = plan_of(
        step("s1", "echo", value="x" * 500),
        {"id": "s2", "description": "add things up", "tool": None, "dependsOn": ["s1"]},
    )
    ex = executor(
        plan,
        [FnTool("echo", echo)],
        llm=llm,
        model="m",
        query="what is it?",
        config={"tool_result_max_length": 100},
    )
    outcome = await run_guarded(ex)
    assert [c.phase for c in model.calls] == ["step"]
    prompt = model.calls[0].messages[-1]["content"]
    assert "add things up" in prompt and "what is it?" in prompt
    assert "x" * 100 not in prompt and "truncated" in prompt
    assert outcome.outputs["s2"] == "the sum is 3"
    assert outcome.records["s2"].tool is None
    assert ex.deps.run.stats.llm_calls == 1
    assert ex.deps.run.stats.tool_calls == 1


async def test_a_failed_reasoning_call_fails_the_step(fake_provider):
    fake_provider.queue(HTTPStatus(429, message="rate limited"))
    llm = LLMClient({"api_base": fake_provider.openai_base, "api_key": "test-key"})
    plan = plan_of({"id": "s1", "description": "think", "tool": None})
    outcome = await run_guarded(
        executor(plan, [], llm=llm, model="openai/m", config={"llm_max_retries": 0})
    )
    assert outcome.records["s1"].status == "failed"
    assert "rate limited" in outcome.records["s1"].reason


@pytest.mark.parametrize("as_json", [True, False])
async def test_llm_assist_required_makes_one_step_call_with_the_tools_prompt(as_json, scripted_llm):
    import json

    def needs_help(input, context):
        output = {"action": "LLM_ASSIST_REQUIRED", "prompt": "Summarize: abc", "message": "too big"}
        return art.ToolResult(
            call_id=context.call_id,
            tool_name="helpme",
            status="success",
            output=json.dumps(output) if as_json else output,
            metadata={"error": "LLM_ASSIST_REQUIRED"},
        )

    llm, model = scripted_llm(step="a summary")
    outcome = await run_guarded(
        executor(plan_of(step("s1", "helpme")), [FnTool("helpme", needs_help)], llm=llm, model="m")
    )
    assert [c.phase for c in model.calls] == ["step"]
    assert model.calls[0].messages[-1]["content"] == "Summarize: abc"
    assert outcome.outputs == {"s1": "a summary"}
    assert outcome.records["s1"].result.metadata["llm_assisted"] is True


# -- progress events ---------------------------------------------------------------------------


async def test_progress_from_a_worker_thread_becomes_tool_updates_between_start_and_end():
    class Progressing(art.IToolExecutor):
        schema = art.ToolSchema(name="progressing", description="reports progress")

        def execute(self, input, context):  # sync: runs in a worker thread
            assert threading.current_thread() is not threading.main_thread()
            context.progress("working", {"done": 1})
            context.progress("half", output="partial text")
            context.progress("almost", {"done": 2})
            return art.ToolResult(
                call_id=context.call_id, tool_name="progressing", status="success", output="done"
            )

    events: list = []
    plan = plan_of(step("s1", "progressing"), step("s2", "progressing"))
    outcome = await run_guarded(executor(plan, [Progressing()], events=events))
    assert outcome.status == "completed"
    for sid in ("s1", "s2"):
        updates = [e for e in events if e.name == "tool:update" and e.data["step_id"] == sid]
        assert [u.data["stage"] for u in updates] == [
            "start",
            "running",
            "streaming",
            "running",
            "end",
        ]
        assert [u.data.get("title") for u in updates[1:4]] == ["working", "half", "almost"]
        assert updates[2].data["output"] == "partial text"
        assert updates[-1].data["result"] == "done"
        assert all("is_running" not in u.data and "isRunning" not in u.data for u in updates)
        assert len({u.span.span_id for u in updates}) == 1  # the tool call's own span


async def test_events_carry_spans_nested_run_step_tool():
    events: list = []
    ex = executor(
        plan_of(step("s1", value=1), step("s2", value=2)), [FnTool("echo", echo)], events=events
    )
    await run_guarded(ex)
    run_span = ex.deps.run.span
    for sid in ("s1", "s2"):
        status = next(e for e in events if e.name == "step:status" and e.data["step_id"] == sid)
        tool = next(e for e in events if e.name == "tool:update" and e.data["step_id"] == sid)
        assert status.span.parent_span_id == run_span.span_id
        assert tool.span.parent_span_id == status.span.span_id
        assert tool.span.trace_id == run_span.trace_id
    names = [e.name for e in events]
    assert names[0] == "tool:loop:before" and names[-1] == "tool:loop:after"


# -- persistence ---------------------------------------------------------------------------------


async def test_every_record_is_persisted_when_it_starts_and_when_it_ends():
    saved: list[tuple[str, str, int]] = []

    async def persist(record: StepRecord):
        saved.append((record.step_id, record.status, record.attempts))

    plan = plan_of(step("s1", "boom"), step("s2", "echo", deps=("s1",), value=1))
    await run_guarded(
        executor(
            plan,
            [FnTool("boom", boom), FnTool("echo", echo)],
            persist=persist,
            config={"step_max_retries": 1},
        )
    )
    assert saved == [
        ("s1", "in_progress", 1),
        ("s1", "in_progress", 2),
        ("s1", "failed", 2),
        ("s2", "skipped", 0),
    ]


async def test_a_continued_run_keeps_finished_steps_and_reruns_interrupted_ones():
    echo_tool = FnTool("echo", echo)
    plan = plan_of(step("s1", value=1), step("s2", deps=("s1",), value="{{s1.output}}"))
    done = StepRecord(
        step_id="s1",
        tool="echo",
        status="completed",
        attempts=1,
        result=art.ToolResult(call_id="old", tool_name="echo", status="success", output=41),
    )
    interrupted = StepRecord(step_id="s2", tool="echo", status="in_progress", attempts=1)
    outcome = await run_guarded(
        executor(plan, [echo_tool], records={"s1": done, "s2": interrupted})
    )
    assert [(input, ctx.attempt) for input, ctx in echo_tool.calls] == [({"value": 41}, 2)]
    assert outcome.records["s2"].attempts == 2
    assert outcome.status == "completed"


# -- modes -------------------------------------------------------------------------------------


async def test_a_suspended_blocking_step_stops_new_steps_and_lets_running_ones_finish():
    approve_started = asyncio.Event()

    async def approve(input, context):
        await asyncio.sleep(0)
        return art.ToolResult(
            call_id=context.call_id,
            tool_name="approve",
            status="suspended",
            output={"question": f"ok to {input['what']}?"},
            metadata={"suspension_id": f"susp-{input['what']}"} if input["what"] == "a" else {},
        )

    async def slow(input, context):
        approve_started.set()
        await asyncio.sleep(0.01)
        return "slow done"

    saved_suspensions = []

    async def suspend(s):
        saved_suspensions.append(s)

    plan = plan_of(
        step("s1", "approve", what="a"),
        step("s2", "approve", what="b"),
        step("s3", "slow"),
        step("s4", "echo", deps=("s1",), value=1),
        step("s5", "echo", deps=("s3",), value=5),
    )
    tools = [
        FnTool("approve", approve, mode="blocking"),
        FnTool("slow", slow),
        FnTool("echo", echo),
    ]
    outcome = await run_guarded(executor(plan, tools, suspend=suspend))
    statuses = {sid: r.status for sid, r in outcome.records.items()}
    assert statuses == {
        "s1": "waiting",
        "s2": "waiting",
        "s3": "completed",
        "s4": "pending",
        "s5": "pending",
    }
    assert outcome.status == "suspended"
    ids = [s.suspension_id for s in outcome.suspensions]
    assert ids[0] == "susp-a" and len(set(ids)) == 2
    assert saved_suspensions == outcome.suspensions
    assert outcome.suspensions[0].prompt == {"question": "ok to a?"}
    assert outcome.suspensions[0].args == {"what": "a"}


async def test_display_steps_are_marked_in_their_events():
    events: list = []
    shown = FnTool("show", echo, mode="display")
    await run_guarded(executor(plan_of(step("s1", "show", value="chart")), [shown], events=events))
    after = next(e for e in events if e.name == "tool:after")
    assert after.data["display"] is True
    end = next(e for e in events if e.name == "tool:update" and e.data["stage"] == "end")
    assert end.data["display"] is True and end.data["result"] == "chart"


# -- cancellation -------------------------------------------------------------------------------


async def test_cancel_reaches_a_sync_tool_in_its_worker_thread():
    class Waits(art.IToolExecutor):
        schema = art.ToolSchema(name="waits", description="waits for cancellation")
        started = threading.Event()

        def execute(self, input, context):
            self.started.set()
            seen = context.cancellation.wait(GUARD_S)
            return art.ToolResult(
                call_id=context.call_id, tool_name="waits", status="success", output=seen
            )

    tool = Waits()
    ex = executor(
        plan_of(step("s1", "waits"), step("s2", "echo", deps=("s1",))), [tool, FnTool("echo", echo)]
    )
    task = asyncio.create_task(run_guarded(ex))
    await asyncio.to_thread(tool.started.wait, GUARD_S)
    ex.cancel("user pressed stop")
    outcome = await task
    assert outcome.status == "cancelled"
    assert outcome.error.code == "CANCELLED"
    assert outcome.records["s1"].status == "cancelled"
    assert outcome.records["s2"].status == "pending"
    assert ex.deps.run.cancellation.cancelled


async def test_cancelling_the_runs_token_directly_stops_the_run():
    class Waits(art.IToolExecutor):
        schema = art.ToolSchema(name="waits", description="waits for cancellation")

        def execute(self, input, context):
            seen = context.cancellation.wait(GUARD_S)
            return art.ToolResult(
                call_id=context.call_id, tool_name="waits", status="success", output=seen
            )

    echo_tool = FnTool("echo", echo)
    ex = executor(
        plan_of(step("s1", "waits"), step("s2", "echo", deps=("s1",))), [Waits(), echo_tool]
    )
    task = asyncio.create_task(run_guarded(ex))
    await asyncio.sleep(0.05)
    ex.deps.run.cancellation.cancel("stop now")
    outcome = await task
    assert outcome.records["s1"].output is True  # the sync tool saw the signal
    assert echo_tool.calls == []  # nothing new started
    assert outcome.status == "cancelled"
    assert outcome.error.message == "stop now"


async def test_cancelling_the_awaiting_task_cancels_running_tools():
    started = asyncio.Event()
    seen = []

    async def hang(input, context):
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            seen.append(context)  # async tools get CancelledError itself
            raise

    ex = executor(plan_of(step("s1", "hang")), [FnTool("hang", hang)])
    task = asyncio.create_task(ex.run())
    async with asyncio.timeout(GUARD_S):
        await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(seen) == 1
    assert seen[0].cancelled  # and the signal sync tools read is set too
    assert ex.state.records["s1"].status == "in_progress"  # left as a crash would leave it


async def test_failed_records_of_an_earlier_plan_do_not_count_against_a_new_one():
    plan = plan_of(step("s2", value="{{s1.output}}"))
    earlier = {
        "s1": StepRecord(
            step_id="s1",
            tool="echo",
            status="completed",
            result=art.ToolResult(call_id="c", tool_name="echo", status="success", output=5),
        ),
        "old": StepRecord(step_id="old", tool="echo", status="failed", reason="replaced"),
    }
    outcome = await run_guarded(executor(plan, [FnTool("echo", echo)], records=earlier))
    assert outcome.status == "completed"
    assert list(outcome.records) == ["s2", "s1"]
    assert outcome.outputs == {"s2": 5, "s1": 5}
