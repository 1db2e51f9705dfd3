"""Per-call control (seed 004): the run's tools, system context and metadata, the
`run:before` hook, the run's fields in hook and tool contexts, hook management, and
a thread's history."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import art
from art.errors import ConfigurationError, ThreadBusyError


class Add(art.IToolExecutor):
    schema = art.ToolSchema(
        name="add",
        description="Add two numbers.",
        input_schema={
            "type": "object",
            "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            "required": ["a", "b"],
        },
        output_schema={"type": "number"},
    )

    def __init__(self) -> None:
        self.contexts: list[art.ExecutionContext] = []

    async def execute(self, input, context):
        self.contexts.append(context)
        return art.ToolResult(
            call_id=context.call_id,
            tool_name="add",
            status="success",
            output=input["a"] + input["b"],
        )


class Shout(art.IToolExecutor):
    schema = art.ToolSchema(
        name="shout",
        description="Say something loudly.",
        input_schema={"type": "object", "properties": {"text": {"type": "string"}}},
    )

    def execute(self, input, context):  # a plain def: runs on a worker thread
        return art.ToolResult(
            call_id=context.call_id,
            tool_name="shout",
            status="success",
            output=input["text"].upper(),
        )


class Banner(art.IToolExecutor):
    schema = art.ToolSchema(
        name="banner", description="Show a banner to the user.", execution_mode="display"
    )

    async def execute(self, input, context):
        return art.ToolResult(
            call_id=context.call_id, tool_name="banner", status="success", output={"text": "hi"}
        )


ADD = {"steps": [{"id": "s1", "tool": "add", "args": {"a": 1, "b": 2}}]}
SHOUT = {"steps": [{"id": "s1", "tool": "shout", "args": {"text": "hey"}}]}


@pytest.fixture
def make(scripted_model):
    made: list[art.ArtInstance] = []

    def factory(plan: Any = ADD, synthesis: Any = "done", tools=None, **fields: Any):
        model = scripted_model(planning=plan, synthesis=synthesis)
        inst = art.create_art_instance(
            model=model.model,
            tools=[Add()] if tools is None else tools,
            storage=fields.pop("storage", "memory://"),
            **fields,
        )
        made.append(inst)
        return inst, model

    yield factory
    for inst in made:
        inst.close()


def tool_lines(model) -> list[str]:
    system = model.calls_for("planning")[0].messages[0]["content"]
    return [line for line in system.splitlines() if line.startswith("- ")]


# -- tools per call -----------------------------------------------------------------------


async def test_the_tools_option_narrows_the_run_to_the_named_tools(make):
    inst, model = make(
        plan=SHOUT, tools=[Add(), Shout()], execution_config={"max_plan_attempts": 1}
    )
    resp = await inst.aprocess("add", "t", {"tools": ["add"]})
    assert [line.split(":")[0] for line in tool_lines(model)] == ["- add"]
    assert resp.metadata.error.code == "PLAN_INVALID"  # shout is not this run's tool
    assert "unknown tool 'shout'" in resp.metadata.error.problems[0]
    # The next call without the option has every registered tool again.
    resp = await inst.aprocess("shout", "t2")
    assert resp.steps[0].output == "HEY"


async def test_the_tools_option_adds_tools_for_one_call(make):
    plan = {
        "steps": [
            {"id": "s1", "tool": "shout", "args": {"text": "hey"}},
            {"id": "s2", "tool": "banner", "args": {}},
            {"id": "s3", "tool": "add", "args": {"a": 1, "b": 2}},
        ]
    }
    inst, model = make(plan=plan)
    resp = await inst.aprocess("all", "t", {"tools": ["*", Shout(), Banner()]})
    assert resp.status == "success"
    assert [line.split(":")[0] for line in tool_lines(model)] == ["- add", "- shout", "- banner"]
    assert [s.output for s in resp.steps] == ["HEY", {"text": "hi"}, 3]
    assert [(d.tool_name, d.output) for d in resp.display] == [("banner", {"text": "hi"})]
    assert inst.registry.names() == ["add"]  # the instance's tools are unchanged


async def test_a_function_is_a_tool_of_the_call(make):
    def double(x: int) -> int:
        """Double a number."""
        return 2 * x

    inst, _ = make(plan={"steps": [{"id": "s1", "tool": "double", "args": {"x": 21}}]})
    resp = await inst.aprocess("double 21", "t", {"tools": [double]})
    assert resp.steps[0].output == 42


async def test_a_wrong_tools_option_raises_a_configuration_error(make):
    inst, _ = make()
    with pytest.raises(ConfigurationError, match=r"unknown tool 'nope'.*registered tools: add"):
        await inst.aprocess("x", "t", {"tools": ["nope"]})
    with pytest.raises(art.ToolRegistrationError, match="already registered"):
        await inst.aprocess("x", "t", {"tools": ["*", Add()]})
    assert await inst.storage.list_runs("t") == []  # nothing started


async def test_seed_004_run_options_point_to_their_art_form(make):
    inst, _ = make()
    for name, fix in [
        ("stream", "inst.stream"),
        ("temperature", "llm_params"),
        ("maxTokens", "llm_params"),
        ("conversationId", "thread_id"),
    ]:
        with pytest.raises(ConfigurationError, match=fix):
            await inst.aprocess("x", "t", {name: 1})


# -- system context and metadata ----------------------------------------------------------


async def test_system_context_reaches_the_planning_and_synthesis_prompts(make):
    inst, model = make()
    context = {"locale": "de-CH", "user": {"name": "Ada"}}
    await inst.aprocess("add", "t", {"system_context": context})
    planning = model.calls_for("planning")[0].messages[0]["content"]
    synthesis = model.calls_for("synthesis")[0].messages[0]["content"]
    for prompt in (planning, synthesis):
        assert 'Context from the application:\n- locale: de-CH\n- user: {"name": "Ada"}' in prompt
    await inst.aprocess("again", "t2")
    assert (
        "Context from the application" not in model.calls_for("planning")[1].messages[0]["content"]
    )


async def test_metadata_reaches_hooks_and_tools_but_no_llm(make):
    add = Add()
    inst, model = make(tools=[add], persona={"name": "calc-bot"})
    contexts: list[art.EventContext] = []
    inst.on("*", lambda data, ctx: contexts.append(ctx))
    resp = await inst.aprocess("add", "t", {"metadata": {"tenant": "acme"}, "session_id": "sess-1"})
    (context,) = add.contexts
    assert context.extra == {"tenant": "acme"}
    assert context.agent == "calc-bot"
    assert context.message_id == resp.response.message_id
    assert context.session_id == "sess-1"
    assert {c.name for c in contexts} >= {"run:before", "session:start", "tool:before"}
    for ctx in contexts:
        assert ctx.metadata == {"tenant": "acme"}
        assert ctx.message_id == resp.response.message_id
        assert ctx.session_id == "sess-1"
    assert all("acme" not in str(call.messages) for call in model.calls)
    (run,) = await inst.storage.list_runs("t")
    assert run.metadata == {"tenant": "acme"} and run.message_id == resp.response.message_id


async def test_a_continued_run_keeps_its_system_context_and_metadata(make, scripted_model):
    inst, model = make()
    crashed = art.storage.contract.RunRecord(
        run_id="r1",
        thread_id="t",
        trace_id="0" * 32,
        query="add",
        system_context={"locale": "fr"},
        metadata={"tenant": "acme"},
    )
    await inst.aopen()
    await inst.storage.create_run(crashed)
    add = Add()
    resp = await inst.aprocess("add", "t", {"tools": [add]})
    assert resp.status == "success" and resp.metadata.run_id == "r1"
    assert "- locale: fr" in model.calls_for("planning")[0].messages[0]["content"]
    assert add.contexts[0].extra == {"tenant": "acme"}
    assert resp.response.message_id == crashed.message_id


async def test_resume_execution_takes_the_calls_tools_and_metadata(make):
    class Ask(art.IToolExecutor):
        schema = art.ToolSchema(name="ask", description="Ask.", execution_mode="blocking")

        async def execute(self, input, context):
            return art.ToolResult(
                call_id=context.call_id, tool_name="ask", status="suspended", output="ok?"
            )

    plan = {
        "steps": [
            {"id": "s1", "tool": "ask"},
            {"id": "s2", "tool": "add", "args": {"a": 1, "b": 2}, "dependsOn": ["s1"]},
        ]
    }
    inst, model = make(plan=plan, tools=[Ask()])
    options = {"tools": ["*", Add()], "system_context": {"locale": "fr"}}
    waiting = await inst.aprocess("go", "t", {**options, "metadata": {"tenant": "acme"}})
    assert waiting.status == "suspended"
    add = Add()  # a call's tools are objects: the resuming call brings its own
    resp = await inst.aresume_execution(
        "t", waiting.metadata.suspension_id, True, {"tools": ["*", add], "metadata": {"v": 2}}
    )
    assert resp.status == "success" and resp.steps[1].output == 3
    assert [context.extra for context in add.contexts] == [{"v": 2}]
    # The run's system context is the one it started with.
    assert "- locale: fr" in model.calls_for("synthesis")[0].messages[0]["content"]


# -- run:before ---------------------------------------------------------------------------


async def test_a_run_before_hook_changes_the_tools_context_and_metadata(make):
    inst, model = make(plan=SHOUT, tools=[Add()])
    seen: dict[str, Any] = {}

    def setup(data, ctx):
        seen.update(data)
        return {
            **data,
            "tools": [*data["tools"], Shout()],
            "system_context": {**data["system_context"], "tone": "loud"},
            "metadata": {"checked": True},
        }

    inst.on("run:before", setup)
    names: list[str] = []
    async for event in inst.stream("shout hey", "t", {"system_context": {"locale": "en"}}):
        names.append(event.name)
        if event.name == "session:start":
            assert event.data["tools"] == ["add", "shout"]
    resp = event.data["response"]
    assert seen["tools"] == ["add"] and seen["query"] == "shout hey" and not seen["continued"]
    assert seen["system_context"] == {"locale": "en"}
    assert names[0] == "session:start"  # run:before reaches hooks, not streams
    assert resp.steps[0].output == "HEY"
    assert "- tone: loud" in model.calls_for("synthesis")[0].messages[0]["content"]
    (run,) = await inst.storage.list_runs("t")
    assert run.metadata == {"checked": True}


async def test_a_run_before_hook_that_raises_vetoes_the_run_before_it_starts(make):
    inst, model = make()

    def refuse(data, ctx):
        raise PermissionError("no runs on Sundays")

    errors: list[dict] = []
    inst.on("run:before", refuse).on("error", lambda data, ctx: errors.append(data))
    resp = await inst.aprocess("add", "t")
    assert resp.status == "error" and resp.metadata.error.code == "VETOED"
    assert "no runs on Sundays" in resp.metadata.error.message
    assert model.calls == [] and await inst.storage.list_runs("t") == []
    assert errors[0]["source"] == "hook" and errors[0]["event"] == "run:before"


# -- hooks --------------------------------------------------------------------------------


async def test_on_chains_and_off_without_an_event_or_with_star_removes_every_hook(make):
    inst, _ = make()
    seen: list[str] = []

    def named(data, ctx):
        seen.append(ctx.name)

    def everything(data, ctx):
        seen.append("*")

    assert inst.on("session:start", named).once("session:end", named).on("*", everything) is inst
    inst.off()
    await inst.aprocess("add", "t1")
    assert seen == []

    inst.on("session:start", named).on("*", everything)
    inst.off("*")  # every event, named hooks included
    await inst.aprocess("add", "t2")
    assert seen == []

    inst.on("session:start", named).on("session:end", named).on("*", everything)
    inst.off("*", named)  # that function wherever it was added
    await inst.aprocess("add", "t3")
    assert "session:start" not in seen and "*" in seen


# -- history ------------------------------------------------------------------------------


async def test_load_clear_history_and_delete_thread(make):
    inst, model = make()
    await inst.aload_history(
        "t",
        [
            {"role": "user", "content": "my name is Ada"},
            art.ConversationMessage(thread_id="elsewhere", role="assistant", content="Hi Ada!"),
        ],
    )
    history = (await inst.aget_state("t")).history
    assert [(m.thread_id, m.role, m.content) for m in history] == [
        ("t", "user", "my name is Ada"),
        ("t", "assistant", "Hi Ada!"),
    ]
    await inst.aprocess("add", "t")
    assert "User: my name is Ada" in model.calls_for("planning")[0].messages[-1]["content"]

    await inst.aclear_history("t")
    assert (await inst.aget_state("t")).history == []
    assert len((await inst.aget_state("t")).runs) == 1  # runs stay
    await inst.aprocess("add again", "t")
    assert (
        "Earlier in this conversation" not in model.calls_for("planning")[1].messages[-1]["content"]
    )

    assert await inst.adelete_thread("t") is True
    state = await inst.aget_state("t")
    assert state.runs == [] and state.history == []
    assert await inst.storage.query_events("t") == []
    assert await inst.adelete_thread("t") is False
    with pytest.raises(ConfigurationError, match="history message 1"):
        await inst.aload_history("t", [{"role": "robot", "content": "beep"}])


def test_history_methods_are_sync_too_and_refuse_a_busy_thread(make):
    inst, _ = make()
    inst.load_history("t", [{"role": "user", "content": "hello"}])
    assert [m.content for m in inst.get_state("t").history] == ["hello"]

    async def while_leased() -> None:
        async with inst.storage.lease("t"):
            with pytest.raises(ThreadBusyError):
                await inst.aclear_history("t")
            with pytest.raises(ThreadBusyError):
                await inst.adelete_thread("t")

    asyncio.run(while_leased())
    inst.clear_history("t")
    assert inst.get_state("t").history == []
    assert inst.delete_thread("t") is True
