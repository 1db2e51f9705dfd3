"""ArtInstance end to end, with the LLM driven only through ScriptedModel (the litellm path)."""

from __future__ import annotations

import asyncio
import gc
import io
import json
import logging
import threading
from typing import Any

import pytest
import structlog

import art
from art.adapters.memory import MemoryStorage
from art.errors import ConfigurationError
from art.responses import StepRecord
from art.storage.contract import RunRecord
from art.testing import Answer, FakeProvider, HTTPStatus, replies

GUARD_S = 10.0


class Add(art.IToolExecutor):
    schema = art.ToolSchema(
        name="add",
        description="Add two numbers.",
        input_schema={
            "type": "object",
            "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            "required": ["a", "b"],
        },
    )

    def __init__(self) -> None:
        self.calls: list[tuple[dict, int]] = []

    async def execute(self, input, context):
        self.calls.append((dict(input), context.attempt))
        return art.ToolResult(
            call_id=context.call_id,
            tool_name="add",
            status="success",
            output=input["a"] + input["b"],
            metadata={"sources": [{"source_name": "arithmetic", "url": "https://math.example"}]},
        )


class Fail(art.IToolExecutor):
    schema = art.ToolSchema(name="fail", description="Always fails.")

    async def execute(self, input, context):
        return art.ToolResult(
            call_id=context.call_id, tool_name="fail", status="error", error="the service is down"
        )


class Show(art.IToolExecutor):
    schema = art.ToolSchema(
        name="show_chart", description="Show a chart to the user.", execution_mode="display"
    )

    async def execute(self, input, context):
        return art.ToolResult(
            call_id=context.call_id,
            tool_name="show_chart",
            status="success",
            output={"chart": "CHART-PIXELS"},
        )


ADD_PLAN = {
    "intent": "arithmetic",
    "title": "Add things",
    "steps": [
        {"id": "s1", "description": "1+2", "tool": "add", "args": {"a": 1, "b": 2}},
        {"id": "s2", "description": "3+4", "tool": "add", "args": {"a": 3, "b": 4}},
        {
            "id": "s3",
            "description": "sum",
            "tool": "add",
            "args": {"a": "{{s1.output}}", "b": "{{s2.output}}"},
            "dependsOn": ["s1", "s2"],
        },
    ],
}


@pytest.fixture
def make(scripted_model):
    """Build an instance on memory storage around a ScriptedModel; closed after the test."""
    made: list[art.ArtInstance] = []

    def factory(tools=(), *, model=None, **fields: Any) -> art.ArtInstance:
        inst = art.create_art_instance(
            model=model.model,
            tools=list(tools),
            storage=fields.pop("storage", "memory://"),
            **fields,
        )
        made.append(inst)
        return inst

    yield factory
    for inst in made:
        inst.close()


# -- the happy path --------------------------------------------------------------------------


async def test_a_tool_only_plan_costs_exactly_two_llm_calls(scripted_model, make):
    model = scripted_model(planning=ADD_PLAN, synthesis="The sum is 10.")
    add = Add()
    inst = make([add], model=model)
    response = await inst.aprocess("what is (1+2)+(3+4)?", "t1")

    assert response.status == "success"
    assert response.content == "The sum is 10."
    assert [call.phase for call in model.calls] == ["planning", "synthesis"]
    meta = response.metadata
    assert meta.llm_calls == 2
    assert meta.tool_calls == 3
    assert [s.status for s in response.steps] == ["completed"] * 3
    assert response.steps[2].output == 10
    assert response.plan.title == "Add things"
    assert meta.total_duration_ms > 0
    assert meta.thread_id == "t1" and len(meta.trace_id) == 32
    assert meta.error is None and meta.suspension_id is None
    # usage is the sum of both calls' usage as the provider reported it
    assert meta.usage.total_tokens > 0
    assert meta.usage.total_tokens == meta.usage.prompt_tokens + meta.usage.completion_tokens
    assert [s.url for s in response.response.metadata.sources] == ["https://math.example"]


async def test_a_finished_run_is_freed_without_the_garbage_collector(scripted_model, make):
    model = scripted_model(planning=ADD_PLAN, synthesis="The sum is 10.")
    inst = make([Add()], model=model)
    await inst.aprocess("warm up", "t0")  # imports and caches made once
    gc.collect()
    gc.disable()
    try:
        response = await inst.aprocess("what is (1+2)+(3+4)?", "t1")
        assert response.status == "success"
        del response
        # Nothing of the run is left in a reference cycle for a collection to find
        # (other libraries' garbage, if any, is not art's to answer for).
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        left = {type(o).__qualname__ for o in gc.garbage if type(o).__module__.startswith("art")}
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert left == set()


async def test_usage_and_cost_are_summed_over_the_calls(scripted_model, make):
    model = scripted_model(planning=ADD_PLAN, synthesis="ten", cost_per_token=(0.001, 0.002))
    response = await make([Add()], model=model).aprocess("sum", "t")
    usages = []
    for call in model.calls:
        words = sum(len(str(m["content"]).split()) for m in call.messages)
        usages.append((words, len(call.reply.split())))
    prompt = sum(p for p, _ in usages)
    completion = sum(c for _, c in usages)
    assert response.metadata.usage.prompt_tokens == prompt
    assert response.metadata.usage.completion_tokens == completion
    assert response.metadata.llm_cost == pytest.approx(prompt * 0.001 + completion * 0.002)


async def test_a_reasoning_step_adds_one_step_call(scripted_model, make):
    plan = {
        "steps": [
            {"id": "s1", "tool": "add", "args": {"a": 1, "b": 1}},
            {"id": "s2", "description": "judge the result", "tool": None, "dependsOn": ["s1"]},
        ]
    }
    model = scripted_model(planning=plan, step="looks right", synthesis="2")
    response = await make([Add()], model=model).aprocess("1+1?", "t")
    assert [c.phase for c in model.calls] == ["planning", "step", "synthesis"]
    assert "judge the result" in model.calls_for("step")[0].messages[-1]["content"]
    assert response.steps[1].output == "looks right"
    assert response.metadata.llm_calls == 3


async def test_history_is_kept_and_given_to_the_planner_on_follow_ups(scripted_model, make):
    model = scripted_model(
        planning=replies(ADD_PLAN, {"steps": []}), synthesis=replies("It is 10.", "Still 10.")
    )
    inst = make([Add()], model=model)
    await inst.aprocess("what is the sum?", "talk")
    second = await inst.aprocess("and again?", "talk")
    assert second.content == "Still 10."
    planning_prompt = json.dumps(model.calls_for("planning")[1].messages)
    assert "what is the sum?" in planning_prompt and "It is 10." in planning_prompt
    state = await inst.aget_state("talk")
    assert [(m.role, m.content) for m in state.history] == [
        ("user", "what is the sum?"),
        ("assistant", "It is 10."),
        ("user", "and again?"),
        ("assistant", "Still 10."),
    ]
    assert [r.status for r in state.runs] == ["completed", "completed"]
    assert state.active_run is None
    threads = await inst.alist_threads()
    assert threads[0].thread_id == "talk" and threads[0].runs == 2


async def test_display_output_goes_to_the_response_not_the_synthesis_prompt(scripted_model, make):
    plan = {"steps": [{"id": "s1", "tool": "show_chart", "args": {}}]}
    model = scripted_model(planning=plan, synthesis="Here is your chart.")
    response = await make([Show()], model=model).aprocess("chart please", "t")
    assert [(d.step_id, d.tool_name, d.output) for d in response.display] == [
        ("s1", "show_chart", {"chart": "CHART-PIXELS"})
    ]
    prompt = model.calls_for("synthesis")[0].messages[-1]["content"]
    assert "CHART-PIXELS" not in prompt and "shown to the user" in prompt


# -- failures ----------------------------------------------------------------------------------


async def test_skip_dependents_ends_partial_and_tells_the_synthesis(scripted_model, make):
    plan = {
        "steps": [
            {"id": "s1", "tool": "fail", "args": {}},
            {"id": "s2", "tool": "add", "args": {"a": "{{s1.output}}", "b": 1}},
            {"id": "s3", "tool": "add", "args": {"a": 1, "b": 1}},
        ]
    }
    model = scripted_model(planning=plan, synthesis="Partly done.")
    response = await make([Add(), Fail()], model=model).aprocess("go", "t")
    assert response.status == "partial"
    assert [s.status for s in response.steps] == ["failed", "skipped", "completed"]
    prompt = model.calls_for("synthesis")[0].messages[-1]["content"]
    assert "FAILED: the service is down" in prompt
    assert "skipped because step s1 failed" in prompt


async def test_fail_policy_ends_the_run_with_an_error_and_no_synthesis(scripted_model, make):
    plan = {"steps": [{"id": "s1", "tool": "fail", "args": {}}]}
    model = scripted_model(planning=plan, synthesis="never")
    inst = make([Fail()], model=model, execution_config={"on_step_failure": "fail"})
    response = await inst.aprocess("go", "t")
    assert response.status == "error"
    assert response.metadata.error.code == "STEP_FAILED"
    assert [c.phase for c in model.calls] == ["planning"]
    with pytest.raises(art.ResponseError, match="STEP_FAILED"):
        response.raise_for_status()


async def test_replan_policy_calls_the_planner_again_and_keeps_finished_work(scripted_model, make):
    plan = {
        "steps": [
            {"id": "s1", "tool": "add", "args": {"a": 1, "b": 2}},
            {"id": "s2", "tool": "fail", "args": {}, "dependsOn": ["s1"]},
        ]
    }
    replan = {"steps": [{"id": "s3", "tool": "add", "args": {"a": "{{s1.output}}", "b": 10}}]}
    model = scripted_model(planning=plan, replan=replan, synthesis="13")
    add = Add()
    inst = make(
        [add, Fail()],
        model=model,
        execution_config={"on_step_failure": "replan", "max_replans": 1, "step_max_retries": 0},
    )
    events: list = []
    inst.events.subscribe(events.append)
    response = await inst.aprocess("go", "t")
    assert [c.phase for c in model.calls] == ["planning", "replan", "synthesis"]
    assert response.status == "success"
    assert [i for i, _ in add.calls] == [{"a": 1, "b": 2}, {"a": 3, "b": 10}]  # s1 ran once
    assert [s.step_id for s in response.steps] == ["s3", "s1"]
    assert response.plan.steps[0].id == "s3"
    assert [e.name for e in events].count("plan:updated") == 1
    replan_prompt = model.calls_for("replan")[0].messages[-1]["content"]
    assert "the service is down" in replan_prompt


async def test_an_invalid_plan_is_an_error_response_listing_the_problems(scripted_model, make):
    bad = {"steps": [{"id": "s1", "tool": "no_such_tool", "args": {}}]}
    model = scripted_model(planning=bad)
    inst = make([Add()], model=model, execution_config={"max_plan_attempts": 2})
    response = await inst.aprocess("go", "t")
    assert response.status == "error"
    assert response.metadata.error.code == "PLAN_INVALID"
    assert any("no_such_tool" in p for p in response.metadata.error.problems)
    assert response.metadata.llm_calls == 2
    assert (await inst.aget_state("t")).runs[0].status == "failed"


def over_http(provider: FakeProvider, tools=(), **fields: Any) -> art.ArtInstance:
    """An instance whose model is served by `provider` over HTTP."""
    return art.create_art_instance(
        model="openai/served",
        tools=list(tools),
        storage="memory://",
        llm_params={"api_base": provider.openai_base, "api_key": "test-key"},
        **fields,
    )


async def test_a_provider_failure_is_an_error_response_with_its_model_error_code(fake_provider):
    fake_provider.queue(HTTPStatus(401, message="invalid api key"))
    async with over_http(fake_provider, [Add()]) as inst:
        response = await inst.aprocess("go", "t")
    assert response.status == "error"
    assert response.metadata.error.code == "AUTHENTICATION_ERROR"
    assert response.metadata.llm_calls == 1


async def test_retryable_provider_failures_are_retried(fake_provider):
    fake_provider.queue(HTTPStatus(429), Answer(json.dumps(ADD_PLAN)), Answer("10"))
    async with over_http(fake_provider, [Add()], execution_config={"retry_backoff_s": 0}) as inst:
        response = await inst.aprocess("go", "t")
    assert response.status == "success" and response.content == "10"
    assert len(fake_provider.requests) == 3 and response.metadata.llm_calls == 3


async def test_api_keys_never_appear_in_responses_events_logs_or_storage(fake_provider):
    from art.logging import configure_logging

    key = "sk-test-abcdefghijklmnopqrstuvwxyz123456"
    # The provider echoes the whole key in its error, as some do.
    fake_provider.queue(
        Answer(json.dumps(ADD_PLAN)),
        HTTPStatus(401, message=f"Incorrect API key provided: {key}"),
    )
    logs = io.StringIO()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    configure_logging(json=True, level="DEBUG", stream=logs)
    try:
        inst = art.create_art_instance(
            model="openai/served",
            tools=[Add()],
            storage="memory://",
            llm_params={"api_base": fake_provider.openai_base, "api_key": key, "temperature": 0},
        )
        events: list = []
        inst.events.subscribe(events.append)
        response = await inst.aprocess("go", "t", {"llm_params": {"api_key": key}})
        state = await inst.aget_state("t")
        stored = await inst.storage.query_events("t")
        await inst.aclose()
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        structlog.reset_defaults()
    assert response.status == "error"
    assert response.metadata.error.code == "AUTHENTICATION_ERROR"
    everything = [
        response.model_dump_json(),
        state.model_dump_json(),
        json.dumps([e.model_dump(mode="json") for e in stored]),
        json.dumps([e.model_dump(mode="json") for e in events], default=str),
        logs.getvalue(),
        repr(inst),
    ]
    assert logs.getvalue()  # something was logged
    assert [text for text in everything if key in text or key[-12:] in text] == []
    first = fake_provider.requests[0]
    assert first.body["temperature"] == 0  # the other llm_params did go through
    assert first.headers["authorization"] == f"Bearer {key}"


async def test_known_keys_in_tool_data_are_masked_in_storage_events_and_logs(
    scripted_model, make, tmp_path, monkeypatch, restore_logging
):
    """Keys from llm_params and from the environment, whole or in part, wherever a tool
    puts them (output, progress, error): never stored, never logged."""
    import sqlite3

    from art.logging import configure_logging

    params_key = "sk-params-ABCDEFGHIJKLMNOP0123"
    env_key = "env-key-QRSTUVWXYZ456789"
    monkeypatch.setenv("GROQ_API_KEY", env_key)
    partial = params_key[-16:]  # a provider's "...HIJKLMNOP0123" echo

    class Leaky(art.IToolExecutor):
        schema = art.ToolSchema(name="leaky", description="Leaks keys.")

        async def execute(self, input, context):
            context.progress(f"using {env_key}", output={"seen": params_key})
            return art.ToolResult(
                call_id=context.call_id,
                tool_name="leaky",
                status="success",
                output={"config": {"key": "x", "token_in_text": f"k={params_key} e={env_key}"}},
                metadata={"note": f"...{partial}"},
            )

    class Raises(art.IToolExecutor):
        schema = art.ToolSchema(name="raises", description="Fails quoting a key.")

        async def execute(self, input, context):
            raise RuntimeError(f"login failed for {env_key} / ...{partial}")

    plan = {"steps": [{"id": "s1", "tool": "leaky"}, {"id": "s2", "tool": "raises"}]}
    model = scripted_model(planning=plan, synthesis="done")
    logs = io.StringIO()
    configure_logging(json=True, level="DEBUG", stream=logs)
    db = tmp_path / "leak.db"
    inst = make(
        [Leaky(), Raises()],
        model=model,
        storage=f"sqlite:///{db}",
        llm_params={"api_key": params_key},
        execution_config={"step_max_retries": 0},
    )

    def fussy_hook(data, context):  # an application's hook that fails quoting tool data
        raise ValueError(f"cannot handle {data['result'].output}")

    inst.on("tool:after", fussy_hook)
    response = await inst.aprocess("go", "t")
    state = await inst.aget_state("t")
    stored = await inst.storage.query_events("t")
    assert response.status == "partial"
    rows = []
    with sqlite3.connect(db) as conn:
        for table in ("runs", "steps", "events", "messages"):
            rows += [row[0] for row in conn.execute(f"SELECT data FROM {table}")]
    written = {
        "state": state.model_dump_json(),
        "events": json.dumps([e.model_dump(mode="json") for e in stored]),
        "rows": "\n".join(rows),
        "logs": logs.getvalue(),
    }
    assert "login failed" in written["rows"] and "using" in written["events"]
    assert "cannot handle" in written["logs"]  # the hook's failure, quoting the output
    for where, text in written.items():
        for key in (params_key, env_key, partial, env_key[:8], params_key[:10]):
            assert key not in text, (where, key)


# -- one run per thread -----------------------------------------------------------------------


async def test_a_second_run_on_a_busy_thread_gets_thread_busy(scripted_model, make):
    started = asyncio.Event()
    release = asyncio.Event()

    class Slow(art.IToolExecutor):
        schema = art.ToolSchema(name="slow", description="waits")

        async def execute(self, input, context):
            started.set()
            await release.wait()
            return art.ToolResult(
                call_id=context.call_id, tool_name="slow", status="success", output="ok"
            )

    model = scripted_model(planning={"steps": [{"id": "s1", "tool": "slow"}]}, synthesis="ok")
    inst = make([Slow()], model=model)
    first = asyncio.create_task(inst.aprocess("long", "busy"))
    async with asyncio.timeout(GUARD_S):
        await started.wait()
    second = await inst.aprocess("another", "busy")
    release.set()
    assert second.status == "error"
    assert second.metadata.error.code == "THREAD_BUSY"
    assert (await first).status == "success"
    runs = (await inst.aget_state("busy")).runs
    assert [r.query for r in runs] == ["long"]  # never a second run


# -- idempotent retry -----------------------------------------------------------------------------


async def _crashed_run(inst: art.ArtInstance, query: str) -> RunRecord:
    """Store a run as a killed process leaves it: s1 completed, s2 in progress."""
    storage = inst.storage
    await storage.open()
    plan = art.Plan.model_validate(
        {
            "steps": [
                {"id": "s1", "tool": "add", "args": {"a": 1, "b": 2}},
                {"id": "s2", "tool": "add", "args": {"a": "{{s1.output}}", "b": 4}},
            ]
        }
    )
    record = RunRecord(
        run_id="crashed", thread_id="t", trace_id="a" * 32, query=query, plan=plan, llm_calls=1
    )
    await storage.create_run(record)
    await storage.save_step(
        "crashed",
        StepRecord(
            step_id="s1",
            tool="add",
            status="completed",
            attempts=1,
            result=art.ToolResult(call_id="x", tool_name="add", status="success", output=3),
        ),
    )
    await storage.save_step(
        "crashed", StepRecord(step_id="s2", tool="add", status="in_progress", attempts=1)
    )
    return record


async def test_the_same_query_continues_an_interrupted_run(scripted_model, make):
    model = scripted_model(synthesis="7")  # no planning reply: the plan is reused
    add = Add()
    inst = make([add], model=model)
    await _crashed_run(inst, "q")
    response = await inst.aprocess("q", "t")
    assert response.status == "success"
    assert [c.phase for c in model.calls] == ["synthesis"]
    assert add.calls == [({"a": 3, "b": 4}, 2)]  # s1 reused, s2 rerun as attempt 2
    assert response.metadata.run_id == "crashed"
    assert response.metadata.llm_calls == 2  # the planning call of the first attempt counts
    assert response.steps[1].attempts == 2


async def test_a_different_query_abandons_the_interrupted_run(scripted_model, make):
    model = scripted_model(planning={"steps": []}, synthesis="hello")
    inst = make([Add()], model=model)
    await _crashed_run(inst, "old question")
    response = await inst.aprocess("new question", "t")
    assert response.status == "success"
    runs = (await inst.aget_state("t")).runs
    assert [(r.query, r.status) for r in runs] == [
        ("old question", "abandoned"),
        ("new question", "completed"),
    ]


# -- options, events, spans ------------------------------------------------------------------------


async def test_the_stored_step_events_are_the_same_whether_or_not_anything_listens(
    scripted_model, make
):
    # A step's span is only ids until a listener needs its SpanContext: the stored log
    # holds the same events either way, with the span ids the listener saw.
    def stored_form(events):
        return [
            (e.name, {k: v for k, v in e.data.items() if k not in ("duration_ms", "model")})
            for e in events
            if e.name not in ("session:start", "session:end", "message:after")
        ]

    quiet = make([Add()], model=scripted_model(planning=ADD_PLAN, synthesis="ten"))
    await quiet.aprocess("go", "t-quiet")
    listened = make([Add()], model=scripted_model(planning=ADD_PLAN, synthesis="ten"))
    seen: list = []
    listened.on("step:status", lambda data, context: seen.append((dict(data), context.span)))
    response = await listened.aprocess("go", "t-listened")

    quiet_log = await quiet.storage.query_events("t-quiet")
    listened_log = await listened.storage.query_events("t-listened")
    assert stored_form(quiet_log) == stored_form(listened_log)
    assert [e.name for e in quiet_log].count("step:status") == 3
    root = next(e for e in listened_log if e.name == "session:start").span_id
    stored_steps = [e for e in listened_log if e.name == "step:status"]
    finished = [(data, span) for data, span in seen if data["status"] != "in_progress"]
    assert [(e.data["step_id"], e.data["status"]) for e in stored_steps] == [
        (data["step_id"], data["status"]) for data, _ in finished
    ]
    for event, (data, span) in zip(stored_steps, finished, strict=True):
        assert (event.trace_id, event.span_id, event.parent_span_id) == (
            span.trace_id,
            span.span_id,
            span.parent_span_id,
        )
        assert span.parent_span_id == root and event.trace_id == response.metadata.trace_id
        assert event.data["output"] == str(data["output"])  # stored as text
    for event in (e for e in quiet_log if e.name == "step:status"):
        assert event.parent_span_id == quiet_log[0].span_id and event.span_id


async def test_per_call_options_override_the_instance_config(scripted_model, make):
    plan = {"steps": [{"id": "s1", "tool": "fail", "args": {}}]}
    model = scripted_model(planning=plan, synthesis="x")
    inst = make([Fail()], model=model)
    response = await inst.aprocess(
        "go",
        "t",
        {"execution_config": {"on_step_failure": "fail"}, "user_id": "u-7", "session_id": "sess"},
    )
    assert response.metadata.error.code == "STEP_FAILED"
    assert response.metadata.user_id == "u-7"
    with pytest.raises(ConfigurationError):
        await inst.aprocess("go", "t2", {"execution_config": {"no_such_field": 1}})


async def test_every_event_carries_a_span_of_the_one_run_tree(scripted_model, make):
    model = scripted_model(planning=ADD_PLAN, synthesis="ten")
    inst = make([Add()], model=model)
    events: list = []
    inst.events.subscribe(events.append)
    response = await inst.aprocess("go", "t")
    assert all(e.span is not None for e in events)
    assert {e.span.trace_id for e in events} == {response.metadata.trace_id}
    roots = {e.span.span_id for e in events if e.span.parent_span_id is None}
    assert len(roots) == 1
    root = roots.pop()
    assert events[0].name == "session:start" and events[-1].name == "session:end"
    assert events[0].span.span_id == root
    step_spans = {e.data["step_id"]: e.span for e in events if e.name == "step:status"}
    for update in (e for e in events if e.name == "tool:update"):
        assert update.span.parent_span_id == step_spans[update.data["step_id"]].span_id
    assert all(s.parent_span_id == root for s in step_spans.values())
    llm_spans = [e.span for e in events if e.name == "message:before"]
    assert all(s.parent_span_id == root for s in llm_spans)


async def test_the_event_log_keeps_the_compact_form_of_bulky_events(scripted_model, make):
    model = scripted_model(planning=ADD_PLAN, synthesis="the sum is " + "ten " * 1000)
    inst = make([Add()], model=model)
    await inst.aprocess("go", "t")
    stored = {event.name: event.data for event in await inst.storage.query_events("t")}
    assert set(stored["message:before"]) == {"phase", "model", "messages", "prompt_chars"}
    assert stored["message:before"]["messages"] >= 1 and stored["message:before"]["prompt_chars"]
    assert len(stored["message:after"]["content"]) < 4000  # the answer's, clipped
    assert "response" not in stored["session:end"]
    assert stored["plan:created"]["plan"]["steps"][0]["dependsOn"] == []  # the wire form
    (run,) = await inst.storage.list_runs("t")
    assert run.plan is not None and stored["plan:created"]["plan"] == run.plan.to_wire()


async def test_the_run_events_are_stored_without_token_chunks(scripted_model, make):
    model = scripted_model(planning=ADD_PLAN, synthesis="the sum is ten")
    inst = make([Add()], model=model)
    await inst.aprocess("go", "t")
    names = [e.name for e in await inst.storage.query_events("t")]
    assert names[0] == "session:start" and names[-1] == "session:end"
    assert "plan:created" in names and "message:after" in names
    assert names.count("step:status") == 3  # one outcome per step
    assert not any(n.startswith("chunk:") for n in names)


async def test_stream_yields_the_runs_events_ending_with_session_end(scripted_model, make):
    model = scripted_model(planning=ADD_PLAN, synthesis="the sum is ten")
    inst = make([Add()], model=model)
    seen = [event async for event in inst.stream("go", "t")]
    names = [e.name for e in seen]
    assert names[0] == "session:start" and names[-1] == "session:end"
    chunks = "".join(e.data["chunk"] for e in seen if e.name == "chunk:after")
    assert chunks == "the sum is ten"
    response = seen[-1].data["response"]
    assert response.content == "the sum is ten"
    assert {e.run_id for e in seen} == {response.metadata.run_id}


async def test_cancel_stops_a_running_run(scripted_model, make):
    started = asyncio.Event()
    seen = []

    class Wait(art.IToolExecutor):
        schema = art.ToolSchema(name="wait", description="waits")

        async def execute(self, input, context):
            started.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                seen.append(context.cancelled)
                raise

    model = scripted_model(planning={"steps": [{"id": "s1", "tool": "wait"}]}, synthesis="x")
    inst = make([Wait()], model=model)
    task = asyncio.create_task(inst.aprocess("go", "t"))
    async with asyncio.timeout(GUARD_S):
        await started.wait()
    assert inst.cancel("t", "user pressed stop")
    response = await task
    assert response.metadata.error.code == "CANCELLED"
    assert response.steps[0].status == "cancelled"
    assert seen == [True]
    assert not inst.cancel("t")


async def test_a_run_cancelled_by_a_tool_before_hook_never_runs_the_tool(scripted_model, make):
    ran = []

    class Instant(art.IToolExecutor):
        schema = art.ToolSchema(name="instant", description="returns at once")

        async def execute(self, input, context):
            ran.append(context.step_id)
            return self.ok(context, "done")

    model = scripted_model(planning={"steps": [{"id": "s1", "tool": "instant"}]}, synthesis="x")
    inst = make([Instant()], model=model)
    updates = []
    inst.events.on("tool:before", lambda data, context: inst.cancel(context.thread_id, "stop now"))
    inst.events.on("tool:update", lambda data, context: updates.append(data["stage"]))
    response = await inst.aprocess("go", "t")
    assert response.metadata.error.code == "CANCELLED"
    assert [(s.status, s.reason) for s in response.steps] == [("cancelled", "cancelled: stop now")]
    assert ran == []
    assert updates == ["start", "end"]  # the call still starts and ends once


# -- configuration ---------------------------------------------------------------------------------


def test_configuration_mistakes_raise_at_construction(scripted_model):
    model = scripted_model()
    with pytest.raises(ConfigurationError):
        art.create_art_instance(model=model.model, tools=[object()], storage="memory://")
    with pytest.raises(ConfigurationError, match="storage URL"):
        art.create_art_instance(model=model.model, storage="ftp://nowhere")
    with pytest.raises(ConfigurationError):
        art.create_art_instance(model=model.model, storage="memory://", no_such_field=1)


def test_no_model_says_how_to_install_the_local_model_or_set_art_model(monkeypatch):
    import art.adapters.local

    monkeypatch.delenv("ART_MODEL", raising=False)
    # Whether the local extra is installed is the machine's, not the test's.
    monkeypatch.setattr(art.adapters.local, "available", lambda: False)
    with pytest.raises(ConfigurationError) as caught:
        art.create_art_instance(storage="memory://")
    message = str(caught.value)
    assert 'pip install -c constraints.txt -e ".[local]"' in message
    assert "-DGGML_NATIVE=OFF" in message
    assert "openai/gpt-4o-mini" in message and "OPENAI_API_KEY" in message
    assert "anthropic/claude-3-5-haiku-latest" in message and "ollama/llama3.2" in message


def test_the_model_comes_from_art_model_else_the_local_demo_model(monkeypatch):
    import art.adapters.local

    monkeypatch.setenv("ART_MODEL", "openai/gpt-4o-mini")
    with art.create_art_instance(storage="memory://") as inst:
        assert inst.model == "openai/gpt-4o-mini"
    monkeypatch.delenv("ART_MODEL")
    # As above, the local extra is taken as installed.
    monkeypatch.setattr(art.adapters.local, "available", lambda: True)
    with art.create_art_instance(storage="memory://") as inst:
        assert inst.model == "local/smollm2"


async def test_sync_methods_and_context_managers(scripted_model):
    model = scripted_model(planning=ADD_PLAN, synthesis="ten")
    with art.create_art_instance(model=model.model, tools=[Add()], storage="memory://") as inst:
        response = await asyncio.to_thread(inst.process, "go", "t")
        assert response.content == "ten"
        plan = await asyncio.to_thread(inst.plan, "go")
        assert plan.title == "Add things"
    with pytest.raises(ConfigurationError, match="closed"):
        inst.process("go", "t")
    async with art.create_art_instance(
        model=model.model, tools=[Add()], storage="memory://"
    ) as other:
        assert (await other.aprocess("go", "t")).content == "ten"


def test_cancel_from_another_thread_stops_a_sync_run(scripted_model):
    import concurrent.futures
    import threading

    started = threading.Event()
    seen: list[bool] = []

    class Wait(art.IToolExecutor):
        schema = art.ToolSchema(name="wait", description="waits for cancellation")

        def execute(self, input, context):
            started.set()
            seen.append(context.cancellation.wait(GUARD_S))
            return art.ToolResult(
                call_id=context.call_id, tool_name="wait", status="success", output="done"
            )

    plan = {
        "steps": [{"id": "s1", "tool": "wait"}, {"id": "s2", "tool": "wait", "dependsOn": ["s1"]}]
    }
    model = scripted_model(planning=plan, synthesis="x")
    inst = art.create_art_instance(model=model.model, tools=[Wait()], storage="memory://")
    with inst, concurrent.futures.ThreadPoolExecutor(1) as pool:
        future = pool.submit(inst.process, "go", "t")
        assert started.wait(GUARD_S)
        assert inst.cancel("t", "stop from the UI thread")
        response = future.result(GUARD_S)
    assert response.metadata.error.code == "CANCELLED"
    assert seen == [True]  # the sync tool saw the signal
    assert [s.status for s in response.steps] == ["cancelled", "pending"]


async def test_a_cancelled_aprocess_is_left_for_the_same_query_to_continue(scripted_model, make):
    started = asyncio.Event()
    hang = {"on": True}

    class Maybe(art.IToolExecutor):
        schema = art.ToolSchema(name="maybe", description="hangs the first time")

        async def execute(self, input, context):
            started.set()
            if hang["on"]:
                await asyncio.Event().wait()
            return art.ToolResult(
                call_id=context.call_id, tool_name="maybe", status="success", output="done"
            )

    model = scripted_model(planning={"steps": [{"id": "s1", "tool": "maybe"}]}, synthesis="ok")
    inst = make([Maybe()], model=model)
    task = asyncio.create_task(inst.aprocess("go", "t"))
    async with asyncio.timeout(GUARD_S):
        await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    state = await inst.aget_state("t")
    assert state.active_run.status == "running"
    assert state.active_run.steps["s1"].status == "in_progress"
    stored = [e.name for e in await inst.storage.query_events("t")]
    assert stored[0] == "session:start" and "plan:created" in stored  # the log was kept

    hang["on"] = False
    response = await inst.aprocess("go", "t")
    assert response.status == "success"
    assert response.metadata.run_id == state.active_run.run_id
    assert response.steps[0].attempts == 2
    assert [c.phase for c in model.calls] == ["planning", "synthesis"]


async def test_blocking_tools_run_on_threads_that_serve_every_run_of_the_instance(
    scripted_model, make
):
    seen: list[threading.Thread] = []
    # Eight at once: more than the event loop's default pool has on a small machine
    # (min(32, cores + 4)), which `def` tools must not be limited to.
    all_eight = threading.Barrier(8, timeout=GUARD_S)

    @art.tool
    def where(n: int) -> int:
        """Record the thread the call runs on, once eight calls run at once."""
        all_eight.wait()
        seen.append(threading.current_thread())
        return n

    plan = {"steps": [{"id": f"s{i}", "tool": "where", "args": {"n": i}} for i in range(8)]}
    model = scripted_model(planning=plan, synthesis="ok")
    inst = make([where], model=model, execution_config={"max_concurrency": 8})
    first = await inst.aprocess("go", "t1")
    threads_of_first = set(seen)
    seen.clear()
    second = await inst.aprocess("go", "t2")
    assert first.status == second.status == "success"
    assert len(threads_of_first) == 8 and threading.main_thread() not in threads_of_first
    assert set(seen) == threads_of_first  # started once, used again by the next run
    await inst.aclose()
    for thread in threads_of_first:  # closing the instance stops its tool threads
        await asyncio.to_thread(thread.join, 10)
    assert not any(thread.is_alive() for thread in threads_of_first)


async def test_a_blocking_tool_registered_later_runs_on_the_instance_threads(scripted_model, make):
    @art.tool
    def late(n: int) -> str:
        """Name the thread the call runs on."""
        return threading.current_thread().name

    plan = {"steps": [{"id": "s1", "tool": "late", "args": {"n": 1}}]}
    inst = make([], model=scripted_model(planning=plan, synthesis="ok"))
    # private: whether the instance made its threads has no public view.
    assert not inst._runtime.has_tool_threads  # no `def` tool yet: no threads
    inst.registry.register(late)

    response = await inst.aprocess("go", "t")

    assert response.status == "success"
    assert response.steps[0].output.startswith("art-tool")
    assert inst._runtime.has_tool_threads  # the instance's threads, not a pool of the run's


async def test_runs_use_the_storage_the_instance_holds_when_they_start(scripted_model, make):
    # The server wraps an instance's storage after building it (its event journal).
    inst = make([Add()], model=scripted_model(planning=ADD_PLAN, synthesis="ten"))
    first, later = inst.storage, MemoryStorage()
    await later.open()
    inst.storage = later

    response = await inst.aprocess("go", "t")

    assert response.content == "ten"
    assert [r.status for r in await later.list_runs("t")] == ["completed"]
    assert await first.list_runs("t") == []


async def test_the_event_log_is_written_while_the_run_waits_for_its_tools(scripted_model, make):
    release = asyncio.Event()

    class Slow(art.IToolExecutor):
        schema = art.ToolSchema(name="slow", description="waits until released")

        async def execute(self, input, context):
            await release.wait()
            return art.ToolResult(
                call_id=context.call_id, tool_name="slow", status="success", output="done"
            )

    plan = {"steps": [{"id": "s1", "tool": "slow"}, {"id": "s2", "tool": "slow"}]}
    inst = make([Slow()], model=scripted_model(planning=plan, synthesis="ok"))
    run = asyncio.create_task(inst.aprocess("go", "t-idle"))
    stored: list[Any] = []
    async with asyncio.timeout(GUARD_S):
        while not stored:  # both steps wait for their tool: the log is written meanwhile
            await asyncio.sleep(0.01)
            stored = await inst.storage.query_events("t-idle", names=["plan:created"])
    assert not run.done()
    assert [s["id"] for s in stored[0].data["plan"]["steps"]] == ["s1", "s2"]  # wire form
    release.set()
    response = await run
    assert response.status == "success"
    names = [e.name for e in await inst.storage.query_events("t-idle")]
    assert names.count("plan:created") == 1 and names[-1] == "session:end"
    assert names.count("step:status") == 2  # written once each, in order, after the idle write


class _LoggedBatches(MemoryStorage):
    """Memory storage that records each append_events batch, or fails every one."""

    def __init__(self, *, fail: bool = False) -> None:
        super().__init__()
        self.batches: list[list[str]] = []
        self.fail = fail

    async def append_events(self, events):
        if self.fail:
            raise OSError("the event log's disk is full")
        self.batches.append([e.name for e in events])
        await super().append_events(events)


def _yielding_steps(count: int) -> tuple[dict[str, Any], art.IToolExecutor]:
    class Tick(art.IToolExecutor):
        schema = art.ToolSchema(name="tick", description="returns at once, after a yield")

        async def execute(self, input, context):
            await asyncio.sleep(0)
            return art.ToolResult(
                call_id=context.call_id, tool_name="tick", status="success", output=1
            )

    plan = {"steps": [{"id": f"s{i}", "tool": "tick"} for i in range(count)]}
    return plan, Tick()


async def test_a_long_run_writes_its_event_log_in_batches_beside_the_steps(scripted_model, make):
    plan, tick = _yielding_steps(600)
    storage = _LoggedBatches()
    inst = make([tick], model=scripted_model(planning=plan, synthesis="ok"), storage=storage)

    response = await inst.aprocess("go", "t-batches")

    assert response.status == "success"
    assert len(storage.batches) >= 3  # written as the batches filled, and the rest at the end
    names = [e.name for e in await inst.storage.query_events("t-batches")]
    assert [n for batch in storage.batches for n in batch] == names  # in order, each once
    assert names.count("step:status") == 600 and names[-1] == "session:end"


async def test_a_failing_event_log_write_is_raised_at_the_end_of_the_run(scripted_model, make):
    plan, tick = _yielding_steps(300)
    storage = _LoggedBatches(fail=True)
    inst = make([tick], model=scripted_model(planning=plan, synthesis="ok"), storage=storage)

    with pytest.raises(OSError, match="disk is full"):
        await inst.aprocess("go", "t-log-fails")

    (run,) = await storage.list_runs("t-log-fails")
    assert run.status == "completed"  # the run itself is stored, every step with it
    assert len(run.steps) == 300 and {s.status for s in run.steps.values()} == {"completed"}
