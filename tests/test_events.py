"""Events through a real instance: names, before-hook edits and vetoes, failing hooks, stages."""

from __future__ import annotations

import pytest

import art
from art.observe.events import EVENT_NAMES, EventBus, RunEvents

PLAN = {
    "title": "Greet",
    "steps": [
        {"id": "s1", "tool": "greet", "args": {"name": "Ada"}},
        {"id": "s2", "tool": "greet", "args": {"name": "{{s1.output}}"}, "dependsOn": ["s1"]},
    ],
}


class Greet(art.IToolExecutor):
    schema = art.ToolSchema(
        name="greet",
        description="Greet someone.",
        input_schema={
            "type": "object",
            "properties": {"name": {"type": "string"}},
            "required": ["name"],
        },
    )

    def __init__(self) -> None:
        self.seen: list[str] = []

    def execute(self, input, context):  # sync: runs in a worker thread
        self.seen.append(input["name"])
        context.progress("looking up the name", {"letters": len(input["name"])})
        context.progress("writing", output="Hel")
        return art.ToolResult(
            call_id=context.call_id,
            tool_name="greet",
            status="success",
            output=f"Hello {input['name']}",
        )


@pytest.fixture
def instance(scripted_model):
    made = []

    def factory(plan=PLAN, synthesis="Said hello.", **fields):
        model = scripted_model(planning=plan, synthesis=synthesis)
        greet = Greet()
        inst = art.create_art_instance(
            model=model.model, tools=[greet], storage="memory://", **fields
        )
        events: list = []
        inst.events.subscribe(events.append)
        made.append(inst)
        return inst, model, greet, events

    yield factory
    for inst in made:
        inst.close()


async def test_every_emitted_event_has_a_designed_name(instance):
    inst, _model, _greet, events = instance()
    await inst.aprocess("greet Ada", "t")
    names = {e.name for e in events}
    assert names <= EVENT_NAMES
    expected = {
        "session:start",
        "session:end",
        "plan:created",
        "message:before",
        "message:after",
        "chunk:before",
        "chunk:after",
        "buffer:flush",
        "tool:before",
        "tool:after",
        "tool:update",
        "tool:loop:before",
        "tool:loop:after",
        "step:status",
    }
    assert expected <= names


async def test_tool_update_has_one_start_and_one_end_per_execution_in_order(instance):
    inst, _model, _greet, events = instance()
    await inst.aprocess("greet Ada", "t")
    for step_id in ("s1", "s2"):
        stages = [
            e.data["stage"]
            for e in events
            if e.name == "tool:update" and e.data["step_id"] == step_id
        ]
        assert stages == ["start", "running", "streaming", "end"]
    updates = [e for e in events if e.name == "tool:update"]
    assert all("is_running" not in e.data and "isRunning" not in e.data for e in updates)
    start = next(u for u in updates if u.data["stage"] == "start")
    assert start.data["args"] == {"name": "Ada"} and start.data["tool"] == "greet"
    running = next(u for u in updates if u.data["stage"] == "running")
    assert running.data["title"] == "looking up the name"
    assert running.data["metadata"] == {"letters": 3}
    end = next(u for u in updates if u.data["stage"] == "end")
    assert end.data["result"] == "Hello Ada" and end.data["status"] == "success"


async def test_a_tool_before_hook_edits_the_arguments(instance):
    inst, _model, greet, _events = instance()

    def shout(data, context):
        assert context.name == "tool:before" and context.span is not None
        return {**data, "args": {"name": data["args"]["name"].upper()}}

    inst.on("tool:before", shout)
    response = await inst.aprocess("greet Ada", "t")
    assert greet.seen == ["ADA", "HELLO ADA"]
    assert response.steps[0].args == {"name": "ADA"}


async def test_a_tool_before_hook_vetoes_by_raising(instance):
    inst, _model, greet, events = instance()

    async def no_greetings(data, context):
        if data["step_id"] == "s1":
            raise PermissionError("greetings are forbidden today")

    inst.on("tool:before", no_greetings)
    response = await inst.aprocess("greet Ada", "t")
    assert greet.seen == []
    assert response.status == "partial"
    assert response.steps[0].status == "failed"
    assert "greetings are forbidden today" in response.steps[0].reason
    assert response.steps[1].status == "skipped"
    errors = [e for e in events if e.name == "error"]
    assert errors[0].data["source"] == "hook" and errors[0].data["event"] == "tool:before"


async def test_a_message_before_hook_edits_the_outgoing_messages(instance):
    inst, model, _greet, _events = instance()

    def add_rule(data, context):
        if data["phase"] != "synthesis":
            return None
        messages = [dict(m) for m in data["messages"]]
        messages[0]["content"] += "\nAlways answer in French."
        return {**data, "messages": messages}

    inst.on("message:before", add_rule)
    await inst.aprocess("greet Ada", "t")
    assert (
        model.calls_for("synthesis")[0].messages[0]["content"].endswith("Always answer in French.")
    )
    assert "French" not in model.calls_for("planning")[0].messages[0]["content"]


async def test_a_message_before_veto_fails_the_run_with_vetoed(instance):
    inst, model, _greet, _events = instance()

    def block(data, context):
        raise RuntimeError("no LLM calls allowed")

    inst.on("message:before", block)
    response = await inst.aprocess("greet Ada", "t")
    assert response.status == "error"
    assert response.metadata.error.code == "VETOED"
    assert model.calls == []


async def test_a_chunk_before_hook_edits_the_streamed_answer(instance):
    inst, _model, _greet, _events = instance(synthesis="quiet words")
    inst.on("chunk:before", lambda data, context: {**data, "chunk": data["chunk"].upper()})
    response = await inst.aprocess("greet Ada", "t")
    assert response.content == "QUIET WORDS"


async def test_a_hook_that_raises_is_reported_and_the_run_goes_on(instance):
    inst, _model, _greet, events = instance()

    def broken(data, context):
        raise ValueError("bug in a hook")

    inst.on("step:status", broken)
    response = await inst.aprocess("greet Ada", "t")
    assert response.status == "success"
    errors = [e for e in events if e.name == "error"]
    assert errors and all(e.data["message"] == "bug in a hook" for e in errors)
    assert errors[0].data["event"] == "step:status" and errors[0].data["recoverable"]


async def test_on_once_and_off(instance):
    inst, _model, _greet, _events = instance()
    every, first = [], []

    def count(data, context):
        every.append(context.name)

    inst.on("session:start", count)
    inst.once("session:start", lambda data, context: first.append(data["query"]))
    await inst.aprocess("one", "t1")
    await inst.aprocess("two", "t2")
    inst.off("session:start", count)
    await inst.aprocess("three", "t3")
    assert every == ["session:start", "session:start"]
    assert first == ["one"]
    with pytest.raises(ValueError, match="unknown event"):
        inst.on("tool:started", count)


async def test_buffer_flush_groups_synthesis_chunks(instance):
    inst, _model, _greet, events = instance(
        synthesis="one two three four five six seven",
        execution_config={"buffer": {"max_size": 3, "strategy": "size"}},
    )
    await inst.aprocess("greet Ada", "t")
    flushes = [e.data for e in events if e.name == "buffer:flush"]
    assert [len(f["chunks"]) for f in flushes] == [3, 3, 1]
    assert [f["flush_reason"] for f in flushes] == ["size", "size", "completion"]
    assert "".join(c for f in flushes for c in f["chunks"]) == "one two three four five six seven"


async def test_emitting_with_nobody_listening_builds_nothing():
    bus = EventBus()
    data = {"x": 1}
    assert not bus.wants("step:status")
    assert await bus.emit("step:status", data) is data
    run = RunEvents(bus)
    assert not run.wants("step:status")
    await run.emit("step:status", data)
    assert run.log == []
    logged = RunEvents(bus, logged=frozenset({"step:status"}))
    assert logged.wants("step:status") and not logged.wants("tool:update")
    await logged.emit("step:status", data)
    assert [name for name, *_ in logged.drain()] == ["step:status"]
    assert logged.drain() == []


async def test_a_run_sees_hooks_and_subscribers_added_or_removed_while_it_runs():
    # A run remembers what it asked `wants`/`listened` until the bus changes.
    bus = EventBus()
    run = RunEvents(bus, logged=frozenset({"step:status"}))
    assert not run.listened("tool:after") and not run.wants("tool:after")
    assert run.wants("step:status") and not run.listened("step:status")

    seen: list[str] = []

    def hook(data, ctx):
        seen.append(ctx.name)

    bus.on("tool:after", hook)
    assert run.wants("tool:after") and run.listened("tool:after")
    bus.off("tool:after", hook)
    assert not run.wants("tool:after")

    bus.once("step:status", lambda data, ctx: seen.append(ctx.name))
    assert run.listened("step:status")
    await run.emit("step:status", {"status": "completed"})
    assert seen == ["step:status"]
    assert not run.listened("step:status")  # the once-hook is used up

    unsubscribe = bus.subscribe(lambda event: seen.append(event.name))
    assert run.listened("tool:update")
    unsubscribe()
    assert not run.listened("tool:update")


def test_the_logged_events_are_stored_from_copies_of_their_data() -> None:
    # Storage may keep an event's values unwritten (MemoryStorage does): what a hook or
    # the run edits after the log was drained must not change what is stored.
    from datetime import UTC, datetime

    from art.core.spans import SpanContext
    from art.observe.event_log import stored_events

    span = SpanContext.root()
    moment = datetime(2026, 1, 1, tzinfo=UTC)
    resumed = {"suspension_id": "x", "decision": {"approved": True, "notes": ["a"]}}
    status = {"step_id": "s1", "tool": "t", "status": "failed", "attempt": 1, "reason": "r"}
    done = {"step_id": "s2", "tool": "t", "status": "completed", "attempt": 1, "output": [1]}
    batch = [
        ("resumed", resumed, span, moment),
        ("step:status", status, span, moment),
        ("step:status", done, span, moment),
    ]

    stored = stored_events(batch, "t-1", "r-1", span.trace_id, lambda data: data)
    resumed["decision"]["notes"].append("b")
    status["reason"] = "edited"
    done["output"].append(2)

    assert [s.data for s in stored] == [
        {"suspension_id": "x", "decision": {"approved": True, "notes": ["a"]}},
        {"step_id": "s1", "tool": "t", "status": "failed", "attempt": 1, "reason": "r"},
        {"step_id": "s2", "tool": "t", "status": "completed", "attempt": 1, "output": "[1]"},
    ]
    assert [(s.span_id, s.parent_span_id, s.timestamp) for s in stored] == [
        (span.span_id, None, moment)
    ] * 3
