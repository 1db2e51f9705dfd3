"""art.chat / achat / chat_stream (seed 002) over real HTTP, and what the streamed calls of a
run gained with them: thinking from `reasoning_content` and usage on the last chunk event.

Every call is litellm's real client against art.testing.FakeProvider on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import time

import pytest

import art
import art.api
from art.errors import ConfigurationError, ModelError, ModelErrorCode
from art.llm.client import LLMClient
from art.testing import Answer, FakeProvider, Hang, HTTPStatus, make_run_context

KEY = "sk-chat-KEY-1234567890abcdef"


def instance(provider: FakeProvider, **fields) -> art.ArtInstance:
    fields.setdefault("execution_config", {"retry_backoff_s": 0})
    return art.create_art_instance(
        model="openai/fake",
        storage="memory://",
        llm_params={"api_base": provider.openai_base, "api_key": KEY},
        **fields,
    )


async def collect(chunks) -> list[art.ChatStreamChunk]:
    return [chunk async for chunk in chunks]


# -- chat -----------------------------------------------------------------------------------


async def test_achat_returns_content_model_usage_finish_reason_and_thinking(fake_provider):
    fake_provider.model = "served-model-7b"
    fake_provider.queue(Answer("four", finish_reason="length", reasoning="two and two"))
    async with instance(fake_provider) as inst:
        response = await inst.achat("What is 2 + 2?", system_prompt="Answer in one word.")
    assert isinstance(response, art.ChatResponse)
    assert response.content == "four"
    assert response.thinking == "two and two"
    assert response.model == "served-model-7b"
    assert response.finish_reason == "length"
    assert response.usage.prompt_tokens == 9 and response.usage.completion_tokens == 1
    assert response.usage.total_tokens == 10
    [request] = fake_provider.requests
    assert request.body["messages"] == [
        {"role": "system", "content": "Answer in one word."},
        {"role": "user", "content": "What is 2 + 2?"},
    ]
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert "stream" not in request.body
    assert response.to_wire()["finishReason"] == "length"  # the seed's spelling on the wire


async def test_a_reply_without_reasoning_has_no_thinking_and_messages_pass_as_given(
    fake_provider,
):
    fake_provider.queue(Answer("Paris"))
    history = [
        {"role": "user", "content": "Capital of France?"},
        {"role": "assistant", "content": "Paris."},
        {"role": "user", "content": "Say it again."},
    ]
    async with instance(fake_provider) as inst:
        response = await inst.achat(history, model="openai/other", llm_params={"temperature": 0})
    assert response.content == "Paris" and response.thinking is None
    [request] = fake_provider.requests
    assert request.body["messages"] == history
    assert request.body["model"] == "other" and request.body["temperature"] == 0


def test_sync_chat_works_on_the_instance_and_the_default_instance(fake_provider, default_reset):
    fake_provider.queue(Answer("one"), Answer("two"))
    with instance(fake_provider) as inst:
        assert inst.chat("first").content == "one"
    art.configure(
        model="openai/fake",
        storage="memory://",
        llm_params={"api_base": fake_provider.openai_base, "api_key": KEY},
    )
    assert art.chat("second").content == "two"
    assert [r.body["messages"][0]["content"] for r in fake_provider.requests] == [
        "first",
        "second",
    ]


async def test_chat_retries_a_rate_limit_and_counts_the_usage_of_the_answer(fake_provider):
    fake_provider.queue(HTTPStatus(429, headers={"retry-after-ms": "10"}), Answer("fine"))
    async with instance(fake_provider) as inst:
        response = await inst.achat("hello")
    assert response.content == "fine" and response.usage.completion_tokens == 1
    assert len(fake_provider.requests) == 2


async def test_chat_errors_are_model_errors_with_codes_and_masked_keys():
    with FakeProvider(api_key="the-right-key") as provider:
        async with instance(provider) as inst:
            with pytest.raises(ModelError) as info:
                await inst.achat("hello")
    assert info.value.code == ModelErrorCode.AUTHENTICATION_ERROR
    assert "1234567890abcdef" not in info.value.message  # the provider echoed the key's end
    assert len(provider.requests) == 1  # not retried


async def test_chat_has_the_instances_time_limit_per_attempt(fake_provider):
    fake_provider.queue(Hang(30), Hang(30))
    config = {"llm_timeout_s": 0.2, "llm_max_retries": 1, "retry_backoff_s": 0}
    async with instance(fake_provider, execution_config=config) as inst:
        started = time.monotonic()
        with pytest.raises(ModelError) as info:
            await inst.achat("hello")
    assert info.value.code == ModelErrorCode.TIMEOUT
    assert time.monotonic() - started < 3
    assert len(fake_provider.requests) == 2


async def test_chat_events_stay_with_the_call(fake_provider):
    fake_provider.queue(Answer("quiet"), Answer("still quiet"))
    seen: list = []
    async with instance(fake_provider) as inst:
        inst.on("*", lambda data, ctx: seen.append(ctx.name))
        inst.events.subscribe(seen.append)
        await inst.achat("hello")
        await collect(inst.chat_stream("hello"))
    assert seen == []
    assert len(fake_provider.requests) == 2


@pytest.mark.parametrize(
    "messages",
    [[], [{"content": "no role"}], [{"role": "user"}], [{"role": "robot", "content": "hi"}]],
)
def test_messages_without_role_or_content_are_refused_before_any_request(fake_provider, messages):
    with instance(fake_provider) as inst, pytest.raises(ConfigurationError, match="chat"):
        inst.chat(messages)
    assert fake_provider.requests == []


# -- chat_stream ----------------------------------------------------------------------------


async def test_chat_stream_yields_thinking_then_content_and_ends_with_usage(fake_provider):
    fake_provider.queue(Answer("two plus two", reasoning="add them"))
    async with instance(fake_provider) as inst:
        chunks = await collect(inst.chat_stream("What is 2 + 2?"))
    *pieces, last = chunks
    assert [c.thinking for c in pieces if c.thinking] == ["add ", "them"]
    assert "".join(c.content for c in pieces) == "two plus two"
    assert not any(c.done or c.usage for c in pieces)
    assert pieces[0].thinking and not pieces[0].content  # thinking comes first
    assert last.done and last.content == "" and last.finish_reason == "stop"
    assert last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.completion_tokens) == (5, 3)
    assert last.model == "fake"
    [request] = fake_provider.requests
    assert request.body["stream"] is True
    assert request.body["stream_options"] == {"include_usage": True}


async def test_the_module_level_chat_stream_uses_the_default_instance(fake_provider, default_reset):
    fake_provider.queue(Answer("streamed"))
    art.configure(
        model="openai/fake",
        storage="memory://",
        llm_params={"api_base": fake_provider.openai_base, "api_key": KEY},
    )
    chunks = await collect(art.chat_stream("hi", system_prompt="Be brief."))
    response = await art.achat("again")
    assert "".join(c.content for c in chunks) == "streamed" and chunks[-1].done
    assert response.content == "ok"  # the provider's default reply
    assert fake_provider.requests[0].body["messages"][0] == {
        "role": "system",
        "content": "Be brief.",
    }


async def test_a_stream_cut_off_after_chunks_raises_after_them_without_a_retry(fake_provider):
    fake_provider.queue(Answer("a b c d", cut_after_chunks=2))
    received: list[str] = []
    async with instance(fake_provider) as inst:
        with pytest.raises(ModelError) as info:
            async for chunk in inst.chat_stream("hello"):
                received.append(chunk.content)
    assert received == ["a ", "b "]
    assert info.value.code == ModelErrorCode.NETWORK_ERROR
    assert len(fake_provider.requests) == 1  # a retry would repeat the delivered chunks


async def test_leaving_a_stream_early_ends_the_call(fake_provider):
    fake_provider.queue(Answer("one two three four", stall_after_chunks=1))
    async with instance(fake_provider) as inst:
        async for chunk in inst.chat_stream("hello"):
            assert chunk.content == "one "
            break
        # The abandoned call's task is cancelled, though its stream never ends.
        others = {t for t in asyncio.all_tasks() if t is not asyncio.current_task()}
        assert others  # the call's task, and the generator's closing
        _ended, running = await asyncio.wait(others, timeout=1)
        assert not running
        fake_provider.queue(Answer("next"))
        assert (await inst.achat("again")).content == "next"


# -- the streamed calls of a run ----------------------------------------------------------


async def test_a_runs_streamed_call_ends_with_a_done_chunk_carrying_usage(fake_provider):
    fake_provider.queue(Answer("the answer", reasoning="think first"))
    run = make_run_context(retry_backoff_s=0)
    events: list = []
    run.events.subscribe(events.append)
    streamed: list[str] = []

    class Callbacks:
        def on_llm_stream(self, ctx, chunk):
            streamed.append(chunk)

    from art.observe.callbacks import CallbackAdapter

    CallbackAdapter(Callbacks()).attach(run.events)
    llm = LLMClient({"api_base": fake_provider.openai_base, "api_key": KEY})
    result = await llm.complete(
        run,
        phase="synthesis",
        model="openai/fake",
        messages=[{"role": "user", "content": "go"}],
        span=run.span,
        stream=True,
    )
    chunks = [e.data for e in events if e.name == "chunk:after"]
    assert [c["sequence"] for c in chunks] == list(range(len(chunks)))
    assert [c["thinking"] for c in chunks if c.get("thinking")] == ["think ", "first"]
    assert "".join(c["chunk"] for c in chunks) == "the answer" == result.content
    last = chunks[-1]
    assert last["done"] and not any(c["done"] for c in chunks[:-1])
    assert last["usage"] == result.usage.model_dump() and result.usage.total_tokens == 3
    assert last["finish_reason"] == "stop" and last["model"] == "fake"
    assert result.thinking == "think first"
    [after] = [e.data for e in events if e.name == "message:after"]
    assert after["thinking"] == "think first"
    # Thinking and the closing chunk carry no answer text: the answer callback skips them.
    assert streamed == ["the ", "answer"]
    # chunk:before hooks edit the answer; thinking and the closing chunk are not theirs.
    assert [e.data["chunk"] for e in events if e.name == "chunk:before"] == ["the ", "answer"]
