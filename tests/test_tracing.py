"""enable_tracing: art's span tree becomes OpenTelemetry spans with the right parents."""

from __future__ import annotations

import asyncio
import builtins
import sys
from types import SimpleNamespace

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import art
from art.core.spans import SpanContext
from art.errors import ConfigurationError
from art.observe.events import EventBus
from art.observe.tracing import enable_tracing


@pytest.fixture
def exporter():
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter):
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


def _by_name(spans):
    return {span.name: span for span in spans}


def _parent_id(span):
    return span.parent.span_id if span.parent else None


class FakeRun:
    """Emits events the way the engine does: run → plan LLM call, steps → tools, synthesis."""

    def __init__(self, bus: EventBus, thread_id: str = "t1", run_id: str = "r1") -> None:
        self.bus = bus
        self.thread_id = thread_id
        self.run_id = run_id
        self.span = SpanContext.root()

    async def emit(self, name, data, span):
        await self.bus.emit(name, data, thread_id=self.thread_id, run_id=self.run_id, span=span)

    async def llm(self, phase, parent, usage=(10, 5)):
        span = parent.child()
        await self.emit("message:before", {"phase": phase, "model": "scripted/m"}, span)
        await asyncio.sleep(0)
        usage_dict = {"prompt_tokens": usage[0], "completion_tokens": usage[1]}
        await self.emit(
            "message:after", {"phase": phase, "model": "scripted/m", "usage": usage_dict}, span
        )

    async def step(self, step_id, tool, started: asyncio.Event, other: asyncio.Event | None):
        span = self.span.child()
        status = {"step_id": step_id, "tool": tool, "attempt": 1}
        await self.emit("step:status", {**status, "status": "in_progress"}, span)
        tool_span = span.child()
        call = {"step_id": step_id, "call_id": f"c-{step_id}", "tool": tool}
        await self.emit("tool:update", {**call, "stage": "start"}, tool_span)
        started.set()
        if other is not None:  # each step waits until the other one has started
            await asyncio.wait_for(other.wait(), 2)
        await self.emit("tool:update", {**call, "stage": "running", "title": "working"}, tool_span)
        await self.emit("tool:update", {**call, "stage": "end", "status": "success"}, tool_span)
        await self.emit("step:status", {**status, "status": "completed"}, span)

    async def run_two_concurrent_steps(self):
        await self.emit("session:start", {"query": "q"}, self.span)
        await self.llm("planning", self.span)
        await self.emit("plan:created", {"plan": {"title": "T", "steps": [{}, {}]}}, self.span)
        a, b = asyncio.Event(), asyncio.Event()
        await asyncio.gather(self.step("s1", "calculator", a, b), self.step("s2", "clock", b, a))
        await self.llm("synthesis", self.span, usage=(30, 7))
        await self.emit(
            "session:end", {"status": "success", "llm_calls": 2, "tool_calls": 2}, self.span
        )


async def test_one_span_per_run_plan_step_tool_and_llm_call(provider, exporter):
    bus = EventBus()
    enable_tracing(SimpleNamespace(events=bus), provider)
    await FakeRun(bus).run_two_concurrent_steps()

    spans = exporter.get_finished_spans()
    names = sorted(span.name for span in spans)
    assert names == sorted(
        [
            "art.run",
            "art.plan",
            "art.llm planning",
            "art.step s1",
            "art.step s2",
            "art.tool calculator",
            "art.tool clock",
            "art.llm synthesis",
        ]
    )
    by_name = _by_name(spans)
    run = by_name["art.run"]
    assert run.parent is None
    assert run.attributes["art.thread_id"] == "t1"
    assert run.attributes["art.status"] == "success"
    assert run.attributes["art.llm_calls"] == 2
    assert "art.query" not in run.attributes  # content capture is off by default
    assert len({span.context.trace_id for span in spans}) == 1

    plan = by_name["art.plan"]
    assert _parent_id(plan) == run.context.span_id
    assert plan.attributes["art.plan.steps"] == 2
    planning = by_name["art.llm planning"]
    assert _parent_id(planning) == plan.context.span_id
    assert planning.attributes["gen_ai.request.model"] == "scripted/m"
    assert planning.attributes["gen_ai.usage.input_tokens"] == 10
    synthesis = by_name["art.llm synthesis"]
    assert _parent_id(synthesis) == run.context.span_id
    assert synthesis.attributes["gen_ai.usage.output_tokens"] == 7


async def test_concurrent_steps_keep_their_own_parents(provider, exporter):
    bus = EventBus()
    enable_tracing(SimpleNamespace(events=bus), provider)
    await FakeRun(bus).run_two_concurrent_steps()

    by_name = _by_name(exporter.get_finished_spans())
    run = by_name["art.run"]
    s1, s2 = by_name["art.step s1"], by_name["art.step s2"]
    assert _parent_id(s1) == run.context.span_id
    assert _parent_id(s2) == run.context.span_id
    assert _parent_id(by_name["art.tool calculator"]) == s1.context.span_id
    assert _parent_id(by_name["art.tool clock"]) == s2.context.span_id
    # They really overlapped: each started before the other ended.
    assert s1.start_time < s2.end_time and s2.start_time < s1.end_time
    tool = by_name["art.tool calculator"]
    assert tool.attributes["gen_ai.tool.name"] == "calculator"
    assert tool.attributes["art.call_id"] == "c-s1"
    assert [e.name for e in tool.events] == ["art.tool.update"]
    assert s1.attributes["art.step.status"] == "completed"


async def test_two_runs_at_once_stay_in_separate_traces(provider, exporter):
    bus = EventBus()
    enable_tracing(SimpleNamespace(events=bus), provider)
    await asyncio.gather(
        FakeRun(bus, "t1", "r1").run_two_concurrent_steps(),
        FakeRun(bus, "t2", "r2").run_two_concurrent_steps(),
    )
    spans = exporter.get_finished_spans()
    assert len(spans) == 16
    roots = [s for s in spans if s.name == "art.run"]
    assert {r.attributes["art.thread_id"] for r in roots} == {"t1", "t2"}
    for root in roots:
        family = [s for s in spans if s.context.trace_id == root.context.trace_id]
        assert len(family) == 8


async def test_failed_step_and_error_status(provider, exporter):
    bus = EventBus()
    enable_tracing(SimpleNamespace(events=bus), provider)
    run = FakeRun(bus)
    await run.emit("session:start", {}, run.span)
    step = run.span.child()
    base = {"step_id": "s1", "tool": "calculator"}
    await run.emit("step:status", {**base, "status": "in_progress"}, step)
    await run.emit("step:status", {**base, "status": "failed", "reason": "division by zero"}, step)
    skipped = run.span.child()
    await run.emit(
        "step:status", {"step_id": "s2", "status": "skipped", "reason": "s1 failed"}, skipped
    )
    error = {"code": "X", "message": "m"}
    await run.emit("session:end", {"status": "error", "error": error}, run.span)

    by_name = _by_name(exporter.get_finished_spans())
    failed = by_name["art.step s1"]
    assert failed.status.status_code == trace.StatusCode.ERROR
    assert failed.status.description == "division by zero"
    assert by_name["art.step s2"].attributes["art.step.status"] == "skipped"
    assert by_name["art.run"].status.status_code == trace.StatusCode.ERROR


async def test_session_end_closes_spans_left_open(provider, exporter):
    bus = EventBus()
    enable_tracing(SimpleNamespace(events=bus), provider)
    run = FakeRun(bus)
    await run.emit("session:start", {}, run.span)
    llm = run.span.child()
    await run.emit("message:before", {"phase": "synthesis", "model": "m"}, llm)
    await run.emit("session:end", {"status": "error"}, run.span)  # the call never came back
    assert sorted(s.name for s in exporter.get_finished_spans()) == ["art.llm synthesis", "art.run"]


async def test_run_inside_an_application_span_becomes_its_child(provider, exporter):
    bus = EventBus()
    enable_tracing(SimpleNamespace(events=bus), provider)
    tracer = provider.get_tracer("app")
    with tracer.start_as_current_span("http request") as request:
        await FakeRun(bus).run_two_concurrent_steps()
    run = _by_name(exporter.get_finished_spans())["art.run"]
    assert _parent_id(run) == request.get_span_context().span_id


async def test_tool_span_is_current_while_the_tool_runs(provider, exporter):
    """Spans a tool opens itself (an HTTP client, a database driver) nest under its tool span."""
    bus = EventBus()
    enable_tracing(SimpleNamespace(events=bus), provider)
    run = FakeRun(bus)
    await run.emit("session:start", {}, run.span)
    tool_span = run.span.child().child()
    call = {"step_id": "s1", "call_id": "c1", "tool": "http_get", "stage": "start"}
    await run.emit("tool:update", call, tool_span)
    with provider.get_tracer("client").start_as_current_span("GET example.org"):
        pass
    await run.emit("tool:update", {**call, "stage": "end"}, tool_span)
    current = trace.get_current_span()  # the run's span again after the tool
    await run.emit("session:end", {}, run.span)
    assert trace.get_current_span() is trace.INVALID_SPAN  # and nothing after the run
    by_name = _by_name(exporter.get_finished_spans())
    assert current.get_span_context() == by_name["art.run"].context
    assert _parent_id(by_name["GET example.org"]) == by_name["art.tool http_get"].context.span_id


async def test_capture_content_records_query_and_args(provider, exporter):
    bus = EventBus()
    enable_tracing(SimpleNamespace(events=bus), provider, capture_content=True)
    run = FakeRun(bus)
    await run.emit("session:start", {"query": "what is 2+2"}, run.span)
    tool_span = run.span.child()
    call = {"call_id": "c1", "tool": "calculator", "args": {"expression": "2+2"}}
    await run.emit("tool:update", {**call, "stage": "start"}, tool_span)
    await run.emit("tool:update", {**call, "stage": "end"}, tool_span)
    await run.emit("session:end", {}, run.span)
    by_name = _by_name(exporter.get_finished_spans())
    assert by_name["art.run"].attributes["art.query"] == "what is 2+2"
    assert "2+2" in by_name["art.tool calculator"].attributes["art.tool.args"]


async def test_disable_stops_recording_and_ends_open_spans(provider, exporter):
    bus = EventBus()
    handle = enable_tracing(SimpleNamespace(events=bus), provider)
    run = FakeRun(bus)
    await run.emit("session:start", {}, run.span)
    handle.disable()
    assert [s.name for s in exporter.get_finished_spans()] == ["art.run"]
    await FakeRun(bus).run_two_concurrent_steps()
    assert len(exporter.get_finished_spans()) == 1


def test_missing_opentelemetry_is_a_configuration_error(monkeypatch):
    real_import = builtins.__import__

    def no_otel(name, *args, **kwargs):
        if name.startswith("opentelemetry"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    for name in [m for m in sys.modules if m.startswith("opentelemetry")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(builtins, "__import__", no_otel)
    with pytest.raises(ConfigurationError, match=r"pip install 'art-pes\[otel\]'"):
        enable_tracing(SimpleNamespace(events=EventBus()))


# -- with the real engine ----------------------------------------------------------------
class Rendezvous(art.IToolExecutor):
    """A tool whose two calls each wait until the other has started (so they overlap)."""

    schema = art.ToolSchema(
        name="rendezvous",
        description="Waits for its partner.",
        input_schema={
            "type": "object",
            "properties": {"name": {"type": "string"}},
            "required": ["name"],
        },
    )

    def __init__(self) -> None:
        self.started: dict[str, asyncio.Event] = {}

    async def execute(self, input, context):
        me = input["name"]
        other = "b" if me == "a" else "a"
        self.started.setdefault(me, asyncio.Event()).set()
        await asyncio.wait_for(self.started.setdefault(other, asyncio.Event()).wait(), 5)
        return art.ToolResult(
            call_id=context.call_id, tool_name="rendezvous", status="success", output=me
        )


async def test_real_run_concurrent_steps_reasoning_step_and_llm_calls(
    provider, exporter, scripted_model
):
    plan = {
        "title": "Meet, then think",
        "steps": [
            {"id": "s1", "tool": "rendezvous", "args": {"name": "a"}},
            {"id": "s2", "tool": "rendezvous", "args": {"name": "b"}},
            {"id": "s3", "tool": None, "description": "compare", "dependsOn": ["s1", "s2"]},
        ],
    }
    model = scripted_model(planning=plan, step="they met", synthesis="Both met.")
    async with art.create_art_instance(
        model=model.model, tools=[Rendezvous()], storage="memory://"
    ) as inst:
        enable_tracing(inst, provider)
        resp = await inst.aprocess("meet", "trace-t1")
    assert resp.status == "success"

    spans = exporter.get_finished_spans()
    by_name = _by_name(spans)
    run = by_name["art.run"]
    assert run.attributes["art.trace_id"] == resp.metadata.trace_id
    assert run.attributes["art.run_id"] == resp.metadata.run_id
    assert run.attributes["art.llm_calls"] == 3
    steps = {name: by_name[f"art.step {name}"] for name in ("s1", "s2", "s3")}
    for step in steps.values():
        assert _parent_id(step) == run.context.span_id
    s1, s2 = steps["s1"], steps["s2"]
    assert s1.start_time < s2.end_time and s2.start_time < s1.end_time  # they overlapped
    tools = [s for s in spans if s.name == "art.tool rendezvous"]
    assert sorted(_parent_id(t) for t in tools) == sorted([s1.context.span_id, s2.context.span_id])
    for tool in tools:
        parent_step = s1 if _parent_id(tool) == s1.context.span_id else s2
        assert tool.attributes["art.step_id"] == parent_step.attributes["art.step_id"]

    llm_spans = [s for s in spans if s.name.startswith("art.llm")]
    assert len(llm_spans) == model.call_count == 3  # one span per LLM call
    assert _parent_id(by_name["art.llm planning"]) == by_name["art.plan"].context.span_id
    assert _parent_id(by_name["art.plan"]) == run.context.span_id
    assert _parent_id(by_name["art.llm step"]) == steps["s3"].context.span_id
    assert _parent_id(by_name["art.llm synthesis"]) == run.context.span_id
    assert by_name["art.llm synthesis"].attributes["gen_ai.usage.output_tokens"] == 2
    assert len({s.context.trace_id for s in spans}) == 1


async def test_real_suspended_and_resumed_run_gives_two_run_spans(
    provider, exporter, scripted_model
):
    from art.tools import AskHuman, Calculator

    plan = {
        "title": "Ask first",
        "steps": [
            {"id": "s1", "tool": "ask_human", "args": {"question": "ok?"}},
            {"id": "s2", "tool": "calculator", "args": {"expression": "1+1"}, "dependsOn": ["s1"]},
        ],
    }
    model = scripted_model(planning=plan, synthesis="done")
    async with art.create_art_instance(
        model=model.model, tools=[AskHuman(), Calculator()], storage="memory://"
    ) as inst:
        enable_tracing(inst, provider)
        first = await inst.aprocess("q", "trace-t2")
        assert first.status == "suspended"
        second = await inst.aresume_execution("trace-t2", first.metadata.suspension_id, True)
    assert second.status == "success"

    runs = [s for s in exporter.get_finished_spans() if s.name == "art.run"]
    assert [r.attributes["art.status"] for r in runs] == ["suspended", "success"]
    assert runs[1].attributes.get("art.resumed") is True
    [link] = runs[1].links  # the resumed part points at the run's first part
    assert link.context.span_id == runs[0].context.span_id
    assert link.context.trace_id == runs[0].context.trace_id
    assert link.attributes["art.link"] == "resumes"
    assert not runs[0].links
    waiting = _by_name(exporter.get_finished_spans())["art.step s1"]
    assert waiting.attributes["art.step.status"] == "waiting"


def test_span_ids_are_16_hex_digits_unique_and_children_keep_the_trace():
    from art.core.spans import SpanContext

    root = SpanContext.root()
    children = [root.child() for _ in range(2000)]
    ids = {child.span_id for child in children}
    assert len(ids) == len(children)
    assert all(len(i) == 16 and int(i, 16) > 0 for i in ids)
    assert all(c.trace_id == root.trace_id and c.parent_span_id == root.span_id for c in children)
    grandchild = children[0].child()
    assert grandchild.parent_span_id == children[0].span_id
    assert grandchild == SpanContext.model_validate(grandchild.model_dump())  # a valid model


_ASK_THEN_ADD = {
    "title": "Ask first",
    "steps": [
        {"id": "s1", "tool": "ask_human", "args": {"question": "ok?"}},
        {"id": "s2", "tool": "calculator", "args": {"expression": "1+1"}, "dependsOn": ["s1"]},
    ],
}


def _traceparent(span):
    context = span.context
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


async def test_a_resume_by_another_instance_links_to_the_first_part_through_storage(
    tmp_path, scripted_model
):
    """Two instances with their own tracing share nothing but the database, as two
    processes do: the resumed part's span still links to the first part's."""
    from art.tools import AskHuman, Calculator

    model = scripted_model(planning=_ASK_THEN_ADD, synthesis="done")
    storage = f"sqlite:///{tmp_path / 'runs.db'}"
    exporters = []
    for part in ("first", "resume"):
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        exporters.append(exporter)
        async with art.create_art_instance(
            model=model, tools=[AskHuman(), Calculator()], storage=storage
        ) as inst:
            enable_tracing(inst, provider)
            if part == "first":
                first = await inst.aprocess("q", "trace-t3")
                assert first.status == "suspended"
                stored = await inst.storage.get_run(first.metadata.run_id)
            else:
                second = await inst.aresume_execution(
                    "trace-t3", first.metadata.suspension_id, True
                )
    assert second.status == "success"

    [first_span] = [s for s in exporters[0].get_finished_spans() if s.name == "art.run"]
    [second_span] = [s for s in exporters[1].get_finished_spans() if s.name == "art.run"]
    assert stored.trace_parent == _traceparent(first_span)
    [link] = second_span.links
    assert link.context.trace_id == first_span.context.trace_id
    assert link.context.span_id == first_span.context.span_id
    assert link.attributes["art.link"] == "resumes"
    assert second_span.attributes["art.trace_id"] == first_span.attributes["art.trace_id"]


async def test_a_run_span_is_current_during_the_run_and_not_after(
    provider, exporter, scripted_model
):
    """Spans the application opens during a run (in a hook here) nest under its run span;
    the caller's context is as it was once the call returns."""
    model = scripted_model(planning={"title": "nothing", "steps": []}, synthesis="done")
    opened = []

    async with art.create_art_instance(model=model, storage="memory://") as inst:
        enable_tracing(inst, provider)

        def on_plan(data, context):
            with provider.get_tracer("app").start_as_current_span("app work") as span:
                opened.append(span)

        inst.events.on("plan:created", on_plan)
        await inst.aprocess("q", "trace-t4")
        assert trace.get_current_span() is trace.INVALID_SPAN
    by_name = _by_name(exporter.get_finished_spans())
    assert _parent_id(by_name["app work"]) == by_name["art.run"].context.span_id


@pytest.mark.parametrize(
    "traceparent", ["", "00-xyz", "01-" + "1" * 32 + "-" + "2" * 16 + "-01", "00-" + "0" * 49, 7]
)
async def test_a_malformed_stored_traceparent_gives_no_link(provider, exporter, traceparent):
    bus = EventBus()
    enable_tracing(SimpleNamespace(events=bus), provider)
    run = FakeRun(bus)
    await run.emit("session:start", {"resumed": True, "trace_parent": traceparent}, run.span)
    await run.emit("session:end", {"status": "success"}, run.span)
    [span] = exporter.get_finished_spans()
    assert span.attributes["art.resumed"] is True
    assert not span.links


_FIRST_PART_IN_ANOTHER_PROCESS = """
import json, sys
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
import art
from art.testing import ScriptedModel
from art.tools import AskHuman, Calculator
from art.observe.tracing import enable_tracing

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
model = ScriptedModel(planning=json.loads(sys.argv[2]), synthesis="done")
with art.create_art_instance(
    model=model, tools=[AskHuman(), Calculator()], storage=sys.argv[1]
) as inst:
    tracing = enable_tracing(inst, provider)
    resp = inst.process("q", "trace-t5")
[span] = [s for s in exporter.get_finished_spans() if s.name == "art.run"]
print(json.dumps({
    "status": resp.status,
    "suspension_id": resp.metadata.suspension_id,
    "trace_id": span.context.trace_id,
    "span_id": span.context.span_id,
}))
"""


@pytest.mark.slow
async def test_a_run_resumed_in_another_process_links_to_its_first_part(
    tmp_path, provider, exporter, scripted_model
):
    import json
    import subprocess

    from art.tools import AskHuman, Calculator

    storage = f"sqlite:///{tmp_path / 'runs.db'}"
    argv = [
        sys.executable,
        "-c",
        _FIRST_PART_IN_ANOTHER_PROCESS,
        storage,
        json.dumps(_ASK_THEN_ADD),
    ]
    child = await asyncio.to_thread(
        subprocess.run, argv, capture_output=True, text=True, timeout=120, check=True
    )
    first = json.loads(child.stdout.strip().splitlines()[-1])
    assert first["status"] == "suspended"

    model = scripted_model(planning=_ASK_THEN_ADD, synthesis="done")
    async with art.create_art_instance(
        model=model, tools=[AskHuman(), Calculator()], storage=storage
    ) as inst:
        enable_tracing(inst, provider)
        resumed = await inst.aresume_execution("trace-t5", first["suspension_id"], True)
    assert resumed.status == "success"
    [span] = [s for s in exporter.get_finished_spans() if s.name == "art.run"]
    [link] = span.links
    assert (link.context.trace_id, link.context.span_id) == (first["trace_id"], first["span_id"])
    assert link.attributes["art.link"] == "resumes"


async def test_a_run_without_a_current_span_stores_no_traceparent(scripted_model):
    model = scripted_model(planning={"title": "nothing", "steps": []}, synthesis="done")
    async with art.create_art_instance(model=model, storage="memory://") as inst:
        resp = await inst.aprocess("q", "trace-t6")
        stored = await inst.storage.get_run(resp.metadata.run_id)
    assert stored.trace_parent is None
