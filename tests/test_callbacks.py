"""AgentCallbacks (seed 000) over the event stream: order, arguments and span parents."""

from __future__ import annotations

import asyncio

import pytest

import art
from art.errors import ConfigurationError
from art.observe.callbacks import AgentCallbacks

PLAN = {
    "steps": [
        {"id": "s1", "tool": "meet", "args": {"me": "a", "other": "b"}},
        {"id": "s2", "tool": "meet", "args": {"me": "b", "other": "a"}},
    ]
}


class Meet(art.IToolExecutor):
    """Two calls that each wait for the other to start: they must run concurrently."""

    schema = art.ToolSchema(
        name="meet",
        description="Meet the other step.",
        input_schema={
            "type": "object",
            "properties": {"me": {"type": "string"}, "other": {"type": "string"}},
        },
    )

    def __init__(self) -> None:
        self.started = {"a": asyncio.Event(), "b": asyncio.Event()}

    async def execute(self, input, context):
        self.started[input["me"]].set()
        async with asyncio.timeout(5):
            await self.started[input["other"]].wait()
        return art.ToolResult(
            call_id=context.call_id, tool_name="meet", status="success", output=input["me"]
        )


class Recorder(AgentCallbacks):
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def on_agent_start(self, ctx, query):
        self.calls.append(("agent_start", ctx, query))

    def on_agent_end(self, ctx, answer):
        self.calls.append(("agent_end", ctx, answer))

    def on_llm_start(self, ctx, model, messages):
        self.calls.append(("llm_start", ctx, model, messages))

    def on_llm_stream(self, ctx, chunk):
        self.calls.append(("llm_stream", ctx, chunk))

    def on_llm_end(self, ctx, response, usage):
        self.calls.append(("llm_end", ctx, response, usage))

    def on_tool_start(self, ctx, tool_name, args):
        self.calls.append(("tool_start", ctx, tool_name, args))

    def on_tool_end(self, ctx, tool_name, result):
        self.calls.append(("tool_end", ctx, tool_name, result))

    def on_error(self, ctx, error):
        self.calls.append(("error", ctx, error))

    def on_debug(self, message, data=None):
        self.calls.append(("debug", message, data))


def kinds(recorder: Recorder) -> list[str]:
    return [c[0] for c in recorder.calls if c[0] not in ("debug", "llm_stream")]


async def test_callbacks_arrive_in_lifecycle_order_with_their_arguments(scripted_model):
    model = scripted_model(planning=PLAN, synthesis="They met.")
    recorder = Recorder()
    async with art.create_art_instance(
        model=model.model, tools=[Meet()], storage="memory://", callbacks=recorder
    ) as inst:
        response = await inst.aprocess("let them meet", "t")
    assert response.status == "success"
    order = kinds(recorder)
    assert order[:3] == ["agent_start", "llm_start", "llm_end"]  # planning
    assert order[3:5] == ["tool_start", "tool_start"]  # both start before either ends
    assert sorted(order[5:7]) == ["tool_end", "tool_end"]
    assert order[7:] == ["llm_start", "llm_end", "agent_end"]  # synthesis
    start = recorder.calls[0]
    assert start[2] == "let them meet"
    assert recorder.calls[-1][2] == "They met."
    llm_start = next(c for c in recorder.calls if c[0] == "llm_start")
    assert llm_start[2] == model.model and llm_start[3][0]["role"] == "system"
    llm_end = next(c for c in recorder.calls if c[0] == "llm_end")
    assert isinstance(llm_end[3], art.TokenUsage) and llm_end[3].total_tokens > 0
    tool_start = next(c for c in recorder.calls if c[0] == "tool_start")
    assert tool_start[2] == "meet" and set(tool_start[3]) == {"me", "other"}
    tool_end = next(c for c in recorder.calls if c[0] == "tool_end")
    assert isinstance(tool_end[3], art.ToolResult) and tool_end[3].status == "success"
    streamed = "".join(c[2] for c in recorder.calls if c[0] == "llm_stream")
    assert streamed == "They met."
    debug_names = {c[1] for c in recorder.calls if c[0] == "debug"}
    assert {"plan:created", "step:status", "tool:loop:before"} <= debug_names


async def test_callback_spans_follow_run_step_tool_nesting_for_concurrent_steps(scripted_model):
    model = scripted_model(planning=PLAN, synthesis="ok")
    recorder = Recorder()
    async with art.create_art_instance(
        model=model.model, tools=[Meet()], storage="memory://", callbacks=recorder
    ) as inst:
        events: list = []
        inst.events.subscribe(events.append)
        await inst.aprocess("go", "t")
    run_span = recorder.calls[0][1]
    assert run_span.parent_span_id is None and len(run_span.trace_id) == 32
    step_spans = {e.data["step_id"]: e.span for e in events if e.name == "step:status"}
    assert {s.parent_span_id for s in step_spans.values()} == {run_span.span_id}
    tool_calls = [c for c in recorder.calls if c[0] in ("tool_start", "tool_end")]
    by_me = {}
    for call in tool_calls:
        me = call[3]["me"] if call[0] == "tool_start" else call[3].output
        by_me.setdefault(me, set()).add(call[1].span_id)
        assert call[1].trace_id == run_span.trace_id
    # each tool call has one span, child of its own step's span
    assert all(len(spans) == 1 for spans in by_me.values())
    step_of = {"a": "s1", "b": "s2"}
    for me, _spans in by_me.items():
        tool_span = next(c[1] for c in tool_calls if c[0] == "tool_start" and c[3]["me"] == me)
        assert tool_span.parent_span_id == step_spans[step_of[me]].span_id
    for call in recorder.calls:
        if call[0] in ("llm_start", "llm_end"):
            assert call[1].parent_span_id == run_span.span_id


async def test_an_object_with_some_callbacks_is_enough(scripted_model):
    class OnlyEnd:
        def __init__(self) -> None:
            self.answers: list[str] = []

        def on_agent_end(self, ctx, answer):
            self.answers.append(answer)

    only = OnlyEnd()
    model = scripted_model(planning={"steps": []}, synthesis="hi")
    async with art.create_art_instance(
        model=model.model, storage="memory://", callbacks=only
    ) as inst:
        await inst.aprocess("hello", "t")
    assert only.answers == ["hi"]
    with pytest.raises(ConfigurationError, match="on_agent_start"):
        art.create_art_instance(model=model.model, storage="memory://", callbacks=object())


async def test_a_failing_callback_is_reported_as_an_error_event(scripted_model):
    class Broken(AgentCallbacks):
        def on_llm_start(self, ctx, model, messages):
            raise RuntimeError("callback bug")

    model = scripted_model(planning={"steps": []}, synthesis="fine")
    async with art.create_art_instance(
        model=model.model, storage="memory://", callbacks=Broken()
    ) as inst:
        events: list = []
        inst.events.subscribe(events.append)
        response = await inst.aprocess("hello", "t")
    assert response.status == "success"  # never a veto: the LLM calls still went out
    errors = [e.data for e in events if e.name == "error"]
    assert errors and errors[0]["source"] == "callbacks"
    assert errors[0]["message"] == "callback bug"


async def test_run_errors_reach_on_error(scripted_model):
    recorder = Recorder()
    model = scripted_model(planning={"steps": [{"id": "s1", "tool": "nope"}]})
    async with art.create_art_instance(
        model=model.model,
        storage="memory://",
        callbacks=recorder,
        execution_config={"max_plan_attempts": 1},
    ) as inst:
        response = await inst.aprocess("hello", "t")
    assert response.metadata.error.code == "PLAN_INVALID"
    errors = [c for c in recorder.calls if c[0] == "error"]
    assert errors[-1][2]["code"] == "PLAN_INVALID"
    assert kinds(recorder)[-1] == "agent_end"


class Ui:
    """Only the UI callbacks of seed 000, every one an `async def`."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.answer = ""

    async def on_spinner_start(self, message):
        await asyncio.sleep(0)
        self.calls.append(("spinner_start", message))

    async def on_spinner_stop(self):
        await asyncio.sleep(0)
        self.calls.append(("spinner_stop",))

    async def on_answer_stream(self, stream):
        self.calls.append(("answer_stream",))
        async for chunk in stream:  # reads the whole answer while the run goes on
            self.answer += chunk
        self.calls.append(("answer_read",))


async def test_an_object_with_only_async_ui_callbacks_gets_spinner_and_answer_stream(
    scripted_model,
):
    model = scripted_model(planning=PLAN, synthesis="They met at noon.")
    ui = Ui()
    async with art.create_art_instance(
        model=model.model, tools=[Meet()], storage="memory://", callbacks=ui
    ) as inst:
        response = await inst.aprocess("let them meet", "t")
    assert response.status == "success"
    assert ui.answer == "They met at noon." == response.content
    assert ui.calls == [
        ("spinner_start", "Planning"),
        ("spinner_start", "Running 2 steps"),
        ("spinner_start", "Writing the answer"),
        ("answer_stream",),
        ("spinner_stop",),  # the first chunk of the answer
        ("answer_read",),  # awaited before the run ends
    ]


async def test_the_spinner_stops_once_when_a_run_ends_without_an_answer(scripted_model):
    model = scripted_model(planning={"steps": [{"id": "s1", "tool": "nope"}]})
    ui = Ui()
    async with art.create_art_instance(
        model=model.model,
        storage="memory://",
        callbacks=ui,
        execution_config={"max_plan_attempts": 1},
    ) as inst:
        response = await inst.aprocess("hello", "t")
    assert response.status == "error"
    assert ui.calls == [("spinner_start", "Planning"), ("spinner_stop",)]
    assert ui.answer == ""


async def test_async_lifecycle_callbacks_are_awaited_in_order(scripted_model):
    seen: list[str] = []

    class Slow:
        async def on_agent_start(self, ctx, query):
            await asyncio.sleep(0.01)
            seen.append("start")

        async def on_tool_end(self, ctx, tool_name, result):
            await asyncio.sleep(0.01)
            seen.append(f"tool {result.output}")

        async def on_agent_end(self, ctx, answer):
            await asyncio.sleep(0.01)
            seen.append(f"end {answer}")

    model = scripted_model(planning=PLAN, synthesis="done")
    async with art.create_art_instance(
        model=model.model, tools=[Meet()], storage="memory://", callbacks=Slow()
    ) as inst:
        await inst.aprocess("go", "t")
    assert seen[0] == "start" and seen[-1] == "end done"
    assert sorted(seen[1:3]) == ["tool a", "tool b"]


async def test_on_trace_sees_every_event_and_on_debug_the_quiet_ones_left_out(scripted_model):
    traced: list[str] = []
    debugged: list[str] = []

    class Logs:
        def on_trace(self, message, data=None):
            traced.append(message)

        def on_debug(self, message, data=None):
            debugged.append(message)

    model = scripted_model(planning=PLAN, synthesis="ok")
    async with art.create_art_instance(
        model=model.model, tools=[Meet()], storage="memory://", callbacks=Logs()
    ) as inst:
        events: list = []
        inst.events.subscribe(events.append)
        await inst.aprocess("go", "t")
    # on_trace also gets run:before, which only hooks see, ahead of the stream's events.
    assert traced == ["run:before", *(e.name for e in events)]
    assert {"chunk:before", "chunk:after", "buffer:flush", "tool:update"} <= set(traced)
    assert not {"chunk:before", "buffer:flush", "tool:update"} & set(debugged)
    assert {"plan:created", "step:status"} <= set(debugged)


async def test_callbacks_stay_when_every_hook_is_removed(scripted_model):
    recorder = Recorder()
    model = scripted_model(planning={"steps": []}, synthesis="hi")
    async with art.create_art_instance(
        model=model.model, storage="memory://", callbacks=recorder
    ) as inst:
        inst.on("*", lambda data, ctx: None).off()
        await inst.aprocess("hello", "t")
    assert kinds(recorder) == ["agent_start", "llm_start", "llm_end", "llm_start", "llm_end",
                               "agent_end"]  # fmt: skip
