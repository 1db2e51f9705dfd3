"""art.llm.client over real HTTP: litellm's client against art.testing.FakeProvider on 127.0.0.1.

Retries, Retry-After, time limits, error codes, streaming faults, structured-output
fallback and proxy metadata, each from a real response of a real server.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from art.errors import ModelError, ModelErrorCode
from art.llm.client import LLMClient
from art.testing import Answer, FakeProvider, Hang, HTTPStatus, Malformed, make_run_context

USER = [{"role": "user", "content": "What is 2 + 2?"}]
JSON_FORMAT = {"type": "json_object"}


def client(provider: FakeProvider, **params) -> LLMClient:
    return LLMClient({"api_base": provider.openai_base, "api_key": "test-key", **params})


def since_first_request(provider: FakeProvider) -> float:
    """Seconds since the provider got its first request (client set-up left out)."""
    return time.monotonic() - provider.requests[0].received_at


def run_for(**config):
    return make_run_context(retry_backoff_s=0, **config)


def listened(run) -> list:
    """Subscribe to every event (a listener also makes a stream-asking call stream)."""
    events: list = []
    run.events.subscribe(events.append)
    return events


async def call(llm: LLMClient, run, *, model="openai/fake", stream=False, **kwargs):
    return await llm.complete(
        run, phase="step", model=model, messages=USER, span=run.span, stream=stream, **kwargs
    )


async def warmed(llm: LLMClient, provider: FakeProvider) -> LLMClient:
    """`llm` after one answered call, with the provider's log emptied: litellm's first call
    in a process loads its client, which a test timing retries must not count."""
    provider.queue(Answer())
    await call(llm, run_for())
    provider.requests.clear()
    return llm


async def failure(llm: LLMClient, run, **kwargs) -> ModelError:
    with pytest.raises(ModelError) as info:
        await call(llm, run, **kwargs)
    return info.value


# -- answers ------------------------------------------------------------------------------


async def test_an_answer_carries_usage_finish_reason_and_the_answering_model(fake_provider):
    fake_provider.model = "served-model-7b"
    fake_provider.queue(Answer("four", finish_reason="length"))
    run = run_for()
    result = await call(client(fake_provider), run)
    assert result.content == "four"
    assert result.finish_reason == "length"
    assert result.model == "served-model-7b"
    assert result.usage.completion_tokens == 1 and result.usage.prompt_tokens == 5
    [request] = fake_provider.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer test-key"
    assert request.body["messages"] == USER
    assert run.stats.llm_calls == 1


async def test_a_streamed_answer_arrives_chunk_by_chunk_with_usage(fake_provider):
    fake_provider.queue(Answer("two plus two is four"))
    run = run_for()
    events = listened(run)
    result = await call(client(fake_provider), run, stream=True)
    assert result.content == "two plus two is four"
    assert result.finish_reason == "stop"
    assert [e.data["chunk"] for e in events if e.name == "chunk:after"] == [
        "two ",
        "plus ",
        "two ",
        "is ",
        "four",
        "",  # the closing chunk, with the usage
    ]
    assert result.usage.completion_tokens == 5
    assert events[-2].name == "chunk:after" and events[-2].data["done"]
    assert events[-2].data["usage"] == result.usage.model_dump()
    assert fake_provider.requests[0].body["stream"] is True


async def test_a_stream_that_closes_without_a_finish_reason_reports_none(fake_provider):
    fake_provider.queue(Answer("17 x 2", finish_reason=None))
    run = run_for()
    listened(run)
    result = await call(client(fake_provider), run, stream=True)
    assert result.content == "17 x 2" and result.finish_reason is None


@pytest.mark.parametrize("stream", [False, True])
async def test_an_anthropic_server_answers_through_the_messages_api(fake_provider, stream):
    fake_provider.queue(Answer("cut short", finish_reason="length"))
    run = run_for()
    listened(run)
    llm = LLMClient({"api_base": fake_provider.url, "api_key": "test-key"})
    result = await call(llm, run, model="anthropic/claude-test", stream=stream)
    assert result.content == "cut short"
    assert result.finish_reason == "length"  # Anthropic's max_tokens
    assert result.usage.completion_tokens == 2
    [request] = fake_provider.requests
    assert request.path == "/v1/messages" and request.headers["x-api-key"] == "test-key"


# -- rate limits --------------------------------------------------------------------------


async def test_retry_after_ms_sets_the_wait_before_the_retry(fake_provider):
    fake_provider.queue(HTTPStatus(429, {"retry-after-ms": "200"}))
    run = run_for()
    events = listened(run)
    result = await call(client(fake_provider), run)
    assert result.content == "ok"
    first, second = fake_provider.requests
    assert second.received_at - first.received_at >= 0.2
    [retry] = [e.data for e in events if e.name == "error"]
    assert retry["code"] == "RATE_LIMITED" and retry["retry_in_s"] == pytest.approx(0.2)


@pytest.mark.slow
async def test_retry_after_in_seconds_sets_the_wait_before_the_retry(fake_provider):
    fake_provider.queue(HTTPStatus(429, {"Retry-After": "1"}))
    await call(client(fake_provider), run_for())
    first, second = fake_provider.requests
    assert second.received_at - first.received_at >= 1.0


async def test_retry_after_as_an_http_date_is_read(fake_provider):
    later = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    fake_provider.queue(HTTPStatus(429, {"Retry-After": later}))
    error = await failure(client(fake_provider), run_for(llm_retry_budget_s=10))
    assert error.code == ModelErrorCode.RATE_LIMITED
    assert 25 < error.retry_after_s <= 30


async def test_a_wait_beyond_the_retry_budget_fails_at_once_with_retry_after(fake_provider):
    fake_provider.queue(HTTPStatus(429, {"Retry-After": "20"}))
    run = run_for(llm_retry_budget_s=5)
    error = await failure(client(fake_provider), run)
    assert since_first_request(fake_provider) < 2
    assert error.code == ModelErrorCode.RATE_LIMITED and error.retry_after_s == 20
    assert len(fake_provider.requests) == 1
    assert run.stats.llm_calls == 1  # the request was made


async def test_the_wait_is_capped_by_llm_max_retry_delay_s(fake_provider):
    fake_provider.queue(HTTPStatus(429, {"Retry-After": "20"}))
    run = run_for(llm_max_retry_delay_s=0.1)
    result = await call(client(fake_provider), run)
    assert result.content == "ok"
    first, second = fake_provider.requests
    assert 0.1 <= second.received_at - first.received_at < 2


async def test_the_retry_budget_bounds_the_whole_call(fake_provider):
    llm = await warmed(client(fake_provider), fake_provider)
    fake_provider.default = HTTPStatus(429, {"retry-after-ms": "300"})
    run = run_for(llm_max_retries=10, llm_retry_budget_s=0.5)
    error = await failure(llm, run)
    assert error.code == ModelErrorCode.RATE_LIMITED and error.retry_after_s == 0.3
    # A retry starts at about 0.3 s; a second at 0.6 s would pass the budget, though
    # its wait alone would not.
    assert len(fake_provider.requests) == 2
    assert run.stats.llm_calls == 2
    assert since_first_request(fake_provider) < 1.5  # ten retries would take 3 s


async def test_the_retry_budget_counts_attempts_that_time_out(fake_provider):
    llm = await warmed(client(fake_provider), fake_provider)
    fake_provider.default = Hang(30)
    run = run_for(llm_timeout_s=0.2, llm_max_retries=10, llm_retry_budget_s=0.38)
    error = await failure(llm, run)
    assert error.code == ModelErrorCode.TIMEOUT
    # Attempts at 0 and 0.2 s; a third at 0.4 s would start after the budget.
    assert len(fake_provider.requests) == 2
    assert since_first_request(fake_provider) < 0.38 + 0.2 + 0.5


# -- server errors and bodies -------------------------------------------------------------


@pytest.mark.parametrize("status", [500, 502, 503])
async def test_a_server_error_is_a_retryable_provider_error(fake_provider, status):
    fake_provider.queue(HTTPStatus(status))
    run = run_for()
    events = listened(run)
    result = await call(client(fake_provider), run)
    assert result.content == "ok" and len(fake_provider.requests) == 2
    assert [e.data["code"] for e in events if e.name == "error"] == ["PROVIDER_ERROR"]
    assert run.stats.llm_calls == 2


async def test_every_failed_attempt_counts_as_an_llm_call(fake_provider):
    fake_provider.default = HTTPStatus(500, message="internal failure")
    run = run_for(llm_max_retries=3)
    error = await failure(client(fake_provider), run)
    assert error.code == ModelErrorCode.PROVIDER_ERROR and error.retryable
    assert "internal failure" in error.message
    assert len(fake_provider.requests) == 4 and run.stats.llm_calls == 4


@pytest.mark.parametrize("body", ["this is not JSON", '{"id": "x", "choices": null}'])
async def test_an_unparseable_body_is_an_invalid_response_not_retried(fake_provider, body):
    fake_provider.queue(Malformed(body))
    run = run_for()
    error = await failure(client(fake_provider), run)
    assert error.code == ModelErrorCode.INVALID_RESPONSE and not error.retryable
    assert len(fake_provider.requests) == 1 and run.stats.llm_calls == 1


async def test_a_bad_key_is_an_authentication_error_and_the_echoed_key_is_masked():
    key = "sk-wrong-KEY-1234567890abcdef"
    with FakeProvider(api_key="the-right-key") as provider:
        run = run_for()
        events = listened(run)
        error = await failure(LLMClient({"api_base": provider.openai_base, "api_key": key}), run)
        assert error.code == ModelErrorCode.AUTHENTICATION_ERROR
        assert "Incorrect API key provided" in error.message
        # The provider echoed the key's last 20 characters; none of it is shown.
        assert "1234567890abcdef" not in error.message
        assert all("1234567890abcdef" not in str(e.data) for e in events)
        assert len(provider.requests) == 1


# -- time limits --------------------------------------------------------------------------


async def test_a_hanging_server_times_out_per_attempt_and_is_retried(fake_provider):
    fake_provider.queue(Hang(30), Hang(30))
    run = run_for(llm_timeout_s=0.2, llm_max_retries=1)
    error = await failure(client(fake_provider), run)
    assert since_first_request(fake_provider) < 3
    assert error.code == ModelErrorCode.TIMEOUT and error.retryable
    assert len(fake_provider.requests) == 2 and run.stats.llm_calls == 2


async def test_a_timeout_in_llm_params_takes_precedence(fake_provider):
    fake_provider.queue(Hang(30))
    run = run_for(llm_timeout_s=100, llm_max_retries=0)
    error = await failure(client(fake_provider, timeout=0.2), run)
    assert error.code == ModelErrorCode.TIMEOUT and since_first_request(fake_provider) < 3


async def test_a_hang_shorter_than_the_timeout_is_answered(fake_provider):
    fake_provider.queue(Hang(0.1, then=Answer("late but fine")))
    result = await call(client(fake_provider), run_for(llm_timeout_s=5))
    assert result.content == "late but fine"


async def test_a_silent_stream_times_out_before_its_first_chunk_and_is_retried(fake_provider):
    fake_provider.queue(Answer("never", chunk_delay_s=30), Answer("fine"))
    run = run_for(llm_stream_idle_timeout_s=0.2)
    events = listened(run)
    result = await call(client(fake_provider), run, stream=True)
    assert result.content == "fine" and len(fake_provider.requests) == 2
    [retry] = [e.data for e in events if e.name == "error"]
    assert retry["code"] == "TIMEOUT" and "llm_stream_idle_timeout_s" in retry["message"]


async def test_a_slow_stream_within_the_idle_limit_completes(fake_provider):
    fake_provider.queue(Answer("slow but steady", chunk_delay_s=0.05))
    run = run_for(llm_stream_idle_timeout_s=1)
    listened(run)
    result = await call(client(fake_provider), run, stream=True)
    assert result.content == "slow but steady"


async def test_a_stream_that_goes_silent_after_chunks_fails_without_a_retry(fake_provider):
    fake_provider.queue(Answer("a b c d", stall_after_chunks=2))
    run = run_for(llm_stream_idle_timeout_s=0.2)
    events = listened(run)
    error = await failure(client(fake_provider), run, stream=True)
    assert error.code == ModelErrorCode.TIMEOUT
    assert [e.data["chunk"] for e in events if e.name == "chunk:after"] == ["a ", "b "]
    assert len(fake_provider.requests) == 1  # a retry would repeat the delivered chunks


async def test_a_stream_cut_off_mid_body_is_a_network_error_without_a_retry(fake_provider):
    fake_provider.queue(Answer("a b c d e f", cut_after_chunks=2))
    run = run_for()
    events = listened(run)
    error = await failure(client(fake_provider), run, stream=True)
    assert error.code == ModelErrorCode.NETWORK_ERROR
    assert [e.data["chunk"] for e in events if e.name == "chunk:after"] == ["a ", "b "]
    assert len(fake_provider.requests) == 1 and run.stats.llm_calls == 1


# -- structured output and metadata ------------------------------------------------------


async def test_a_server_refusing_response_format_gets_the_call_again_without_it():
    with FakeProvider(rejects_response_format=True) as provider:
        llm = client(provider)
        run = run_for()
        result = await call(llm, run, response_format=JSON_FORMAT)
        assert result.content == "ok"
        first, second = provider.requests
        assert first.body["response_format"] == JSON_FORMAT
        assert "response_format" not in second.body
        await call(llm, run, response_format=JSON_FORMAT)  # not offered again
        assert "response_format" not in provider.requests[2].body
        assert run.stats.llm_calls == 3


async def test_a_server_taking_response_format_gets_it(fake_provider):
    await call(client(fake_provider), run_for(), response_format=JSON_FORMAT)
    assert fake_provider.requests[0].body["response_format"] == JSON_FORMAT


async def test_a_litellm_proxy_receives_art_metadata_in_the_request_body(fake_provider):
    run = run_for()
    llm = client(fake_provider, metadata={"team": "search"})
    await call(llm, run, model="litellm_proxy/fake")
    metadata = fake_provider.requests[0].body["metadata"]
    assert metadata["art_phase"] == "step" and metadata["team"] == "search"
    assert metadata["thread_id"] == run.thread_id and metadata["trace_id"] == run.trace_id


# -- error codes ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "message", "code"),
    [
        (429, "slow down", ModelErrorCode.RATE_LIMITED),
        (401, "invalid api key", ModelErrorCode.AUTHENTICATION_ERROR),
        (403, "not allowed", ModelErrorCode.AUTHENTICATION_ERROR),
        (404, "The model `fake` does not exist", ModelErrorCode.MODEL_NOT_FOUND),
        (
            400,
            "This model's maximum context length is 8192 tokens. However, your messages "
            "resulted in 9000 tokens. Please reduce the length of the messages.",
            ModelErrorCode.CONTEXT_LENGTH_EXCEEDED,
        ),
        (400, "bad request", ModelErrorCode.UNKNOWN),
        (500, "oops", ModelErrorCode.PROVIDER_ERROR),
        (503, "overloaded", ModelErrorCode.PROVIDER_ERROR),
    ],
)
async def test_http_statuses_map_to_codes(fake_provider, status, message, code):
    fake_provider.queue(HTTPStatus(status, message=message))
    error = await failure(client(fake_provider), run_for(llm_max_retries=0))
    assert error.code == code
    assert error.retryable == (code in {"RATE_LIMITED", "PROVIDER_ERROR"})
    assert error.message.startswith("openai/fake: ")


async def test_a_closed_port_is_a_retryable_network_error():
    with FakeProvider() as provider:
        base = provider.openai_base
    llm = LLMClient({"api_base": base, "api_key": "test-key"})
    error = await failure(llm, run_for(llm_max_retries=1))
    assert error.code == ModelErrorCode.NETWORK_ERROR and error.retryable


async def test_a_missing_key_says_how_to_configure_the_provider(fake_provider, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    run = run_for()
    error = await failure(LLMClient({"api_base": fake_provider.openai_base}), run)
    assert error.code == ModelErrorCode.PROVIDER_NOT_CONFIGURED
    assert "API key" in error.message
    assert fake_provider.requests == [] and run.stats.llm_calls == 0


async def test_rate_limits_are_retried_then_succeed_with_an_event_per_retry(fake_provider):
    fake_provider.queue(HTTPStatus(429), HTTPStatus(429))
    run = run_for()
    events = listened(run)
    result = await call(client(fake_provider), run)
    assert result.content == "ok" and len(fake_provider.requests) == 3
    retries = [e.data for e in events if e.name == "error"]
    assert [r["attempt"] for r in retries] == [1, 2]
    assert all(r["code"] == "RATE_LIMITED" and r["recoverable"] for r in retries)
    assert run.stats.llm_calls == 3
    assert run.stats.usage.total_tokens == result.usage.total_tokens


async def test_an_unreadable_retry_after_is_ignored(fake_provider):
    fake_provider.queue(HTTPStatus(429, {"Retry-After": "soon"}))
    error = await failure(client(fake_provider), run_for(llm_max_retries=0))
    assert error.code == ModelErrorCode.RATE_LIMITED and error.retry_after_s is None


async def test_a_stream_refused_before_any_chunk_is_retried(fake_provider):
    fake_provider.queue(HTTPStatus(429), Answer("fine"))
    run = run_for()
    listened(run)
    result = await call(client(fake_provider), run, stream=True)
    assert result.content == "fine"
    assert [r.body["stream"] for r in fake_provider.requests] == [True, True]


async def test_a_secret_llm_param_echoed_in_an_error_is_masked(fake_provider):
    token = "custom-token-value-1234"
    fake_provider.queue(HTTPStatus(400, message=f"bad header x-auth {token}"))
    llm = client(fake_provider, extra_headers={"X-Auth-Token": token})
    error = await failure(llm, run_for())
    assert fake_provider.requests[0].headers["x-auth-token"] == token
    assert token not in error.message and "***" in error.message
    assert token not in repr(llm)


@pytest.mark.parametrize(
    ("status", "code"),
    [(429, ModelErrorCode.RATE_LIMITED), (529, ModelErrorCode.PROVIDER_ERROR)],
)
async def test_anthropic_errors_map_to_codes_with_retry_after(fake_provider, status, code):
    fake_provider.queue(HTTPStatus(status, {"retry-after": "7"}, message="busy"))
    llm = LLMClient({"api_base": fake_provider.url, "api_key": "test-key"})
    error = await failure(llm, run_for(llm_max_retries=0), model="anthropic/claude-test")
    assert error.code == code and error.retryable and error.retry_after_s == 7
