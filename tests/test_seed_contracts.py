"""Seed contract rows that no other test file covers on its own (docs/seed-comparison.md
names the test behind each row it says art keeps)."""

from __future__ import annotations

import pytest

import art
from art.config import BufferConfig, ExecutionConfig
from art.core.usage import TokenUsage
from art.errors import (
    ArtError,
    ConfigurationError,
    ModelError,
    PlanError,
    ResponseError,
    SuspensionError,
    ThreadBusyError,
    ToolErrorCode,
    ToolRegistrationError,
)


def test_token_usage_is_normalized_from_openai_and_anthropic_shapes():
    openai = {
        "prompt_tokens": 10,
        "completion_tokens": 5,
        "total_tokens": 15,
        "prompt_tokens_details": {"cached_tokens": 4},
    }
    assert TokenUsage.from_provider(openai) == TokenUsage(
        prompt_tokens=10, completion_tokens=5, total_tokens=15, cached_tokens=4
    )
    anthropic = {"input_tokens": 7, "output_tokens": 3, "cache_read_input_tokens": 2}
    assert TokenUsage.from_provider(anthropic) == TokenUsage(
        prompt_tokens=7, completion_tokens=3, total_tokens=10, cached_tokens=2
    )
    assert TokenUsage.from_provider(None) == TokenUsage()
    assert TokenUsage(prompt_tokens=1).to_wire() == {
        "promptTokens": 1,
        "completionTokens": 0,
        "totalTokens": 0,
        "cachedTokens": 0,
    }


def test_the_tool_schema_and_result_keep_the_seed_fields_in_both_spellings():
    wire = {
        "name": "get_weather",
        "description": "Weather.",
        "inputSchema": {"type": "object", "properties": {}},
        "outputSchema": {"type": "number"},
        "executionMode": "immediate",
        "blockingConfig": {"prompt": "ok?"},
        "displayConfig": {"kind": "chart"},
        "examples": [{"input": {}, "output": 1, "description": "how warm?"}],
    }
    schema = art.ToolSchema.model_validate(wire)
    assert schema.mode == "functional"  # "immediate" is an alias
    assert schema.model_dump(by_alias=True, exclude_none=True) == wire
    result = art.ToolResult.model_validate(
        {
            "callId": "c1",
            "toolName": "get_weather",
            "status": "success",
            "output": 1,
            "metadata": {"sources": [{"sourceName": "met"}], "suspensionId": None},
        }
    )
    assert (result.call_id, result.tool_name, result.output) == ("c1", "get_weather", 1)
    context = art.ExecutionContext(threadId="t", traceId="0" * 32, callId="c1", userId="u")
    assert (context.thread_id, context.user_id) == ("t", "u")


async def test_an_immediate_tool_runs_as_a_functional_one(scripted_model):
    @art.tool(execution_mode="immediate")
    def now() -> str:
        """The time."""
        return "noon"

    model = scripted_model(planning={"steps": [{"id": "s1", "tool": "now"}]}, synthesis="noon")
    async with art.create_art_instance(model=model.model, tools=[now], storage="memory://") as inst:
        resp = await inst.aprocess("time?", "t")
    assert resp.status == "success" and resp.steps[0].output == "noon" and resp.display == []
    assert "noon" in model.calls_for("synthesis")[0].messages[-1]["content"]


def test_the_seed_defaults_are_kept():
    config = ExecutionConfig()
    assert config.tool_result_max_length == 60_000
    assert BufferConfig() == BufferConfig(
        max_size=10, max_time_ms=100, strategy="hybrid", auto_flush=True
    )
    assert art.safe_stringify("x" * 20_000).endswith("characters]")
    assert len(art.safe_stringify("x" * 20_000)) == 10_000
    assert {code.value for code in ToolErrorCode} >= {
        "VALIDATION_ERROR", "IO_ERROR", "CONFIG_ERROR", "PERMISSION_DENIED", "RATE_LIMITED",
        "NOT_FOUND", "LLM_ASSIST_REQUIRED", "TIMEOUT", "UNKNOWN",
    }  # fmt: skip


@pytest.mark.parametrize(
    "error",
    [
        ConfigurationError("x"),
        ToolRegistrationError("x"),
        PlanError("x", []),
        ModelError("x", "UNKNOWN"),
        ThreadBusyError("t"),
        SuspensionError("x", code="SUSPENSION_NOT_FOUND"),
        ResponseError("x", code="STEP_FAILED"),
    ],
)
def test_every_error_is_an_art_error_with_a_code_and_a_message(error):
    assert isinstance(error, ArtError)
    assert error.code and error.message
