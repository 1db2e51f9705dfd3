"""The seed contracts' last rows (docs/seed-comparison.md names each test): a blocking
tool's own suspension id, chat refusing function calling, the whole thread history, the
session id on the response, chunk hooks that see and flush the buffer, and the spinner
after the agent starts."""

from __future__ import annotations

from typing import Any

import pytest

import art
from art.errors import ConfigurationError
from art.testing import Answer, FakeProvider

ECHO_PLAN = {"title": "Echo", "steps": [{"id": "s1", "tool": "echo", "args": {"text": "hi"}}]}


class Echo(art.IToolExecutor):
    schema = art.ToolSchema(
        name="echo",
        description="echoes its text",
        input_schema={"type": "object", "properties": {"text": {"type": "string"}}},
    )

    async def execute(self, input: dict[str, Any], context: art.ExecutionContext) -> art.ToolResult:
        return self.ok(context, input.get("text"))


class Ticket(art.IToolExecutor):
    """A blocking tool that names its suspension as seed 003 writes it (`suspensionId`)."""

    schema = art.ToolSchema(
        name="ticket", description="opens a ticket for a human", execution_mode="blocking"
    )

    async def execute(self, input: dict[str, Any], context: art.ExecutionContext) -> art.ToolResult:
        return art.ToolResult(
            call_id=context.call_id,
            tool_name="ticket",
            status="suspended",
            output="approve the refund?",
            metadata={"suspensionId": "ticket-42"},
        )


async def test_a_blocking_tools_own_suspension_id_is_kept_in_the_seeds_spelling(scripted_model):
    model = scripted_model(planning={"steps": [{"id": "s1", "tool": "ticket"}]}, synthesis="ok")
    async with art.create_art_instance(
        model=model.model, tools=[Ticket()], storage="memory://"
    ) as inst:
        suspended = await inst.aprocess("refund", "t")
        assert suspended.status == "suspended"
        assert suspended.metadata.suspension_id == "ticket-42"
        assert (await inst.acheck_for_suspended_state("t")).suspension_id == "ticket-42"
        done = await inst.aresume_execution("t", "ticket-42", {"approved": True})
    assert done.status == "success"
    assert done.steps[0].status == "completed"


@pytest.mark.parametrize("where", ["call", "instance"])
async def test_chat_refuses_function_calling_instead_of_dropping_tool_calls(
    fake_provider: FakeProvider, where
):
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
    base = {"api_base": fake_provider.openai_base, "api_key": "k"}
    instance_params = {**base, "tools": tools} if where == "instance" else base
    call_params = {"tools": tools, "tool_choice": "auto"} if where == "call" else None
    async with art.create_art_instance(
        model="openai/fake", storage="memory://", llm_params=instance_params
    ) as inst:
        with pytest.raises(ConfigurationError, match="does not do function calling"):
            await inst.achat("weather in Paris?", llm_params=call_params)
        with pytest.raises(ConfigurationError, match="tools"):
            async for _ in inst.chat_stream("weather in Paris?", llm_params=call_params):
                pass
    assert fake_provider.requests == []  # refused before anything was sent


async def test_the_whole_history_reads_back_past_the_twenty_messages_runs_see():
    messages = [
        {"role": "user" if n % 2 else "assistant", "content": f"message {n}"} for n in range(1, 46)
    ]
    async with art.create_art_instance(model="openai/fake", storage="memory://") as inst:
        await inst.aload_history("t", messages)
        assert len((await inst.aget_state("t")).history) == 20  # what a run plans with
        everything = await inst.aget_history("t")
        newest = await inst.aget_history("t", limit=20)
        second = await inst.aget_history("t", limit=20, before=20)
        oldest = await inst.aget_history("t", limit=20, before=40)
        with pytest.raises(ConfigurationError):
            await inst.aget_history("t", limit=-1)
    assert [m.content for m in everything] == [m["content"] for m in messages]
    assert [m.content for m in newest] == [f"message {n}" for n in range(26, 46)]
    assert [m.content for m in second] == [f"message {n}" for n in range(6, 26)]
    assert [m.content for m in oldest] == [f"message {n}" for n in range(1, 6)]
    assert oldest + second + newest == everything


async def test_the_response_carries_the_session_id(scripted_model):
    model = scripted_model(planning=ECHO_PLAN, synthesis="hi")
    async with art.create_art_instance(
        model=model.model, tools=[Echo()], storage="memory://"
    ) as inst:
        response = await inst.aprocess("echo", "t", {"session_id": "tab-7"})
        plain = await inst.aprocess("echo again", "t")
    assert response.metadata.session_id == "tab-7"
    assert plain.metadata.session_id is None


async def test_chunk_hooks_see_the_buffer_and_can_flush_it_by_hand(fake_provider: FakeProvider):
    import json

    fake_provider.queue(Answer(json.dumps(ECHO_PLAN)), Answer("one two three four five six"))
    async with art.create_art_instance(
        model="openai/fake",
        tools=[Echo()],
        storage="memory://",
        llm_params={"api_base": fake_provider.openai_base, "api_key": "k"},
        execution_config={"buffer": {"max_size": 10, "max_time_ms": 60000}},
    ) as inst:
        seen: list[dict[str, Any]] = []

        def before(data, context):
            seen.append(data["buffer"])
            return {**data, "flush": data["sequence"] == 1}  # flush after the second chunk

        inst.on("chunk:before", before)
        after = []
        inst.on("chunk:after", lambda data, context: after.append(data.get("buffer")))
        flushes = []
        inst.on("buffer:flush", lambda data, context: flushes.append(data))
        response = await inst.aprocess("echo", "t")
    assert response.content == "one two three four five six"
    assert [s["size"] for s in seen] == [0, 1, 0, 1, 2, 3]
    assert seen[1]["chunks"] == ["one "] and seen[1]["strategy"] == "hybrid"
    assert seen[0]["last_flush"] is None and seen[2]["last_flush"] is not None
    assert after[1]["size"] == 0  # flushed by hand
    assert [(f["flush_reason"], f["chunks"]) for f in flushes] == [
        ("manual", ["one ", "two "]),
        ("completion", ["three ", "four ", "five ", "six"]),
    ]


async def test_the_agent_starts_before_its_spinner(scripted_model):
    calls: list[str] = []

    class Ui:
        def on_agent_start(self, ctx, query):
            calls.append("agent_start")

        def on_spinner_start(self, message):
            calls.append(f"spinner_start {message}")

        def on_spinner_stop(self):
            calls.append("spinner_stop")

        def on_agent_end(self, ctx, answer):
            calls.append("agent_end")

    model = scripted_model(planning=ECHO_PLAN, synthesis="hi")
    async with art.create_art_instance(
        model=model.model, tools=[Echo()], storage="memory://", callbacks=Ui()
    ) as inst:
        await inst.aprocess("echo", "t")
    assert calls[:2] == ["agent_start", "spinner_start Planning"]
    assert calls[-2:] == ["spinner_stop", "agent_end"]
