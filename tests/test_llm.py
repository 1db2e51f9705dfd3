"""art.llm.client: the one LLM path (events, streaming buffer, retries, error codes, usage,
redaction)."""

from __future__ import annotations

import pytest

from art.config import BufferConfig
from art.errors import ModelError, ModelErrorCode
from art.llm.client import (
    LLMClient,
    StreamBuffer,
    context_window,
    count_tokens,
    retry_delay_s,
    supports_response_schema,
)
from art.observe.events import HookVeto
from art.testing import make_run_context

USER = [{"role": "user", "content": "What is 2 + 2?"}]
SECRET = "sk-test-abcdefghijklmnopqrstuvwxyz"


def collect(run) -> list:
    events: list = []
    run.events.subscribe(events.append)
    return events


# -- StreamBuffer ---------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_size_strategy_flushes_every_max_size_chunks():
    buffer = StreamBuffer(BufferConfig(strategy="size", max_size=2))
    assert buffer.add("a") is None
    flush = buffer.add("b")
    assert flush is not None and flush.chunks == ["a", "b"] and flush.reason == "size"
    assert buffer.add("c") is None
    assert buffer.due_in() is None  # size strategy never flushes on time
    final = buffer.finish()
    assert final is not None and final.chunks == ["c"] and final.reason == "completion"


def test_time_strategy_flushes_when_the_oldest_chunk_is_old_enough():
    clock = FakeClock()
    buffer = StreamBuffer(BufferConfig(strategy="time", max_time_ms=100, max_size=1), clock=clock)
    assert buffer.add("a") is None  # max_size is ignored by the time strategy
    clock.now = 0.04
    assert buffer.due_in() == pytest.approx(0.06)
    assert buffer.add("b") is None
    clock.now = 0.1
    flush = buffer.add("c")
    assert flush is not None and flush.chunks == ["a", "b", "c"] and flush.reason == "time"
    assert flush.duration_ms == pytest.approx(100.0)
    assert buffer.due_in() is None


def test_hybrid_strategy_flushes_on_size_or_time():
    clock = FakeClock()
    buffer = StreamBuffer(BufferConfig(strategy="hybrid", max_time_ms=50, max_size=3), clock=clock)
    buffer.add("a")
    buffer.add("b")
    assert buffer.add("c").reason == "size"
    buffer.add("d")
    clock.now = 1.0
    assert buffer.flush_if_due().chunks == ["d"]


def test_finish_without_auto_flush_drops_the_rest():
    buffer = StreamBuffer(BufferConfig(auto_flush=False, max_size=10))
    buffer.add("a")
    assert buffer.finish() is None
    assert len(buffer) == 0


# -- complete: plain calls --------------------------------------------------------------------


async def test_complete_returns_content_usage_and_counts_the_call(scripted_model):
    model = scripted_model(step="four")
    run = make_run_context()
    result = await LLMClient().complete(
        run, phase="step", model=model.model, messages=USER, span=run.span.child()
    )
    assert result.content == "four"
    assert result.finish_reason == "stop"
    assert result.usage.prompt_tokens == 5 and result.usage.completion_tokens == 1  # words
    assert result.usage.total_tokens == 6
    assert result.cost is None  # no price known for the scripted model
    assert run.stats.llm_calls == 1 and run.stats.usage.total_tokens == 6
    assert run.stats.llm_cost is None


async def test_metadata_names_the_phase_and_the_run(scripted_model):
    model = scripted_model(planning='{"steps": []}')
    run = make_run_context(thread_id="t-1")
    await LLMClient().complete(
        run, phase="planning", model=model.model, messages=USER, span=run.span.child()
    )
    assert model.calls[0].metadata == {
        "art_phase": "planning",
        "thread_id": "t-1",
        "trace_id": run.trace_id,
        "run_id": run.run_id,
    }


async def test_llm_params_and_response_format_reach_the_provider(scripted_model):
    model = scripted_model(planning="{}")
    run = make_run_context()
    response_format = {"type": "json_object"}
    client = LLMClient({"temperature": 0.2, "metadata": {"team": "a"}})
    await client.complete(
        run,
        phase="planning",
        model=model.model,
        messages=USER,
        span=run.span,
        response_format=response_format,
    )
    call = model.calls[0]
    assert call.params["temperature"] == 0.2
    assert call.response_format == response_format
    assert call.metadata["team"] == "a" and call.metadata["art_phase"] == "planning"


async def test_cost_is_summed_when_the_price_is_known(scripted_model):
    model = scripted_model(step="one two", cost_per_token=(0.001, 0.002))
    run = make_run_context()
    result = await LLMClient().complete(
        run, phase="step", model=model.model, messages=USER, span=run.span
    )
    assert result.cost == pytest.approx(5 * 0.001 + 2 * 0.002)
    assert run.stats.llm_cost == pytest.approx(result.cost)


async def test_message_events_carry_phase_model_content_and_usage(scripted_model):
    model = scripted_model(synthesis="The answer is 4.")
    run = make_run_context()
    events = collect(run)
    span = run.span.child()
    await LLMClient().complete(run, phase="synthesis", model=model.model, messages=USER, span=span)
    assert [e.name for e in events] == ["message:before", "message:after"]
    before, after = events
    assert before.data == {"phase": "synthesis", "model": model.model, "messages": USER}
    assert after.data["content"] == "The answer is 4."
    assert after.data["usage"]["total_tokens"] == 9
    assert after.data["finish_reason"] == "stop"
    assert after.data["duration_ms"] >= 0
    assert {e.span.span_id for e in events} == {span.span_id}


async def test_a_message_before_hook_edits_what_is_sent(scripted_model):
    model = scripted_model(step="ok")
    run = make_run_context()

    def add_system(data, context):
        return {**data, "messages": [{"role": "system", "content": "Be brief."}, *data["messages"]]}

    run.events.on("message:before", add_system)
    await LLMClient().complete(run, phase="step", model=model.model, messages=USER, span=run.span)
    assert [m["role"] for m in model.calls[0].messages] == ["system", "user"]


async def test_a_message_before_veto_stops_the_call(scripted_model):
    model = scripted_model(step="ok")
    run = make_run_context()

    def refuse(data, context):
        raise RuntimeError("not today")

    run.events.on("message:before", refuse)
    with pytest.raises(HookVeto, match="not today"):
        await LLMClient().complete(
            run, phase="step", model=model.model, messages=USER, span=run.span
        )
    assert model.calls == [] and run.stats.llm_calls == 0


# -- complete: streaming ----------------------------------------------------------------------


async def test_streaming_emits_chunks_in_order_and_flushes_on_size(scripted_model):
    model = scripted_model(synthesis="one two three four five")
    run = make_run_context(buffer={"strategy": "size", "max_size": 2})
    events = collect(run)
    result = await LLMClient().complete(
        run, phase="synthesis", model=model.model, messages=USER, span=run.span, stream=True
    )
    assert result.content == "one two three four five"
    assert result.usage.completion_tokens == 5  # usage arrives through include_usage
    assert model.calls[0].stream is True
    chunks = [e.data for e in events if e.name == "chunk:after"]
    assert [c["sequence"] for c in chunks] == [0, 1, 2, 3, 4, 5]
    assert "".join(c["chunk"] for c in chunks) == result.content
    # The last chunk event closes the stream with its usage (seed 002).
    assert chunks[-1]["done"] and chunks[-1]["chunk"] == ""
    assert chunks[-1]["usage"] == result.usage.model_dump()
    flushes = [e.data for e in events if e.name == "buffer:flush"]
    assert [f["flush_reason"] for f in flushes] == ["size", "size", "completion"]
    assert [len(f["chunks"]) for f in flushes] == [2, 2, 1]
    assert all(f["phase"] == "synthesis" for f in flushes)
    assert events[-1].name == "message:after"
    assert run.stats.llm_calls == 1


async def test_streaming_flushes_on_time_while_the_provider_is_slow(scripted_model):
    model = scripted_model(synthesis="a b c", chunk_delay_s=0.05)
    run = make_run_context(buffer={"strategy": "time", "max_time_ms": 10})
    events = collect(run)
    await LLMClient().complete(
        run, phase="synthesis", model=model.model, messages=USER, span=run.span, stream=True
    )
    flushes = [e.data for e in events if e.name == "buffer:flush"]
    # Each chunk waits 50 ms for the next, so it leaves alone on the 10 ms timer; the last
    # one leaves on the timer or when the stream ends, whichever comes first.
    assert [f["flush_reason"] for f in flushes][:2] == ["time", "time"]
    assert flushes[2]["flush_reason"] in {"time", "completion"}
    assert [f["chunks"] for f in flushes] == [["a "], ["b "], ["c"]]
    assert all(f["duration_ms"] >= 9.9 for f in flushes if f["flush_reason"] == "time")


async def test_a_chunk_before_hook_edits_or_drops_chunks(scripted_model):
    model = scripted_model(synthesis="keep drop keep")
    run = make_run_context()

    def edit(data, context):
        if data["chunk"].startswith("drop"):
            raise ValueError("filtered")
        return {**data, "chunk": data["chunk"].upper()}

    run.events.on("chunk:before", edit)
    result = await LLMClient().complete(
        run, phase="synthesis", model=model.model, messages=USER, span=run.span, stream=True
    )
    assert result.content == "KEEP KEEP"


async def test_a_stream_nobody_listens_to_is_one_plain_call(scripted_model):
    model = scripted_model(synthesis="The answer is 391.")
    run = make_run_context()
    logged: list = []
    run.events.on("message:after", lambda data, context: logged.append(data))
    result = await LLMClient().complete(
        run, phase="synthesis", model=model.model, messages=USER, span=run.span, stream=True
    )
    assert model.calls[0].stream is False
    assert result.content == "The answer is 391."
    assert result.usage.total_tokens > 0
    assert logged[0]["content"] == "The answer is 391."


# -- retries and error codes ------------------------------------------------------------------


async def test_an_unknown_provider_is_not_supported_without_touching_the_network():
    run = make_run_context()
    with pytest.raises(ModelError) as info:
        await LLMClient().complete(
            run, phase="step", model="no-such-provider/x", messages=USER, span=run.span
        )
    assert info.value.code == ModelErrorCode.PROVIDER_NOT_SUPPORTED
    assert "openai/gpt-4o-mini" in info.value.message


async def test_a_missing_script_is_a_clear_non_retryable_error(scripted_model):
    model = scripted_model(synthesis="hi")
    run = make_run_context()
    with pytest.raises(ModelError, match=r"no reply for phase 'planning'") as info:
        await LLMClient().complete(
            run, phase="planning", model=model.model, messages=USER, span=run.span
        )
    assert not info.value.retryable and len(model.calls) == 1


def test_retry_delay_grows_exponentially_honours_retry_after_and_is_capped():
    assert retry_delay_s(1, 0.5, None, 60) == pytest.approx(0.5, rel=0.11)
    assert retry_delay_s(3, 0.5, None, 60) == pytest.approx(2.0, rel=0.11)
    assert retry_delay_s(1, 0.5, 4.0, 60) == 4.0
    assert retry_delay_s(1, 0.0, None, 60) == 0.0
    assert retry_delay_s(20, 0.5, None, 60) == 60
    assert retry_delay_s(1, 0.5, 3600.0, 30) == 30


# -- capabilities -----------------------------------------------------------------------------


def test_model_capabilities_come_from_litellm_with_safe_fallbacks(scripted_model):
    plain = scripted_model()
    rich = scripted_model(response_schema=True, context_window=2048)
    assert supports_response_schema(plain.model) is False
    assert supports_response_schema(rich.model) is True
    assert supports_response_schema("no-such-provider/x") is False
    assert context_window(rich.model) == 2048
    assert context_window(plain.model) is None
    assert context_window("gpt-4o-mini") == 128000
    assert count_tokens("gpt-4o-mini", USER) > 5
    assert count_tokens("no-such-provider/x", [{"content": None}]) >= 1
