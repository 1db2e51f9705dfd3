"""Whole runs against art.testing.FakeProvider over HTTP: how the answer ended, pointing an
instance or `art run` at a server (base URL, key variable, timeout), structured output."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

import art
from art.cli.app import EXIT_ERROR, EXIT_OK, EXIT_USAGE, app
from art.errors import ConfigurationError
from art.testing import Answer, FakeProvider, Hang, HTTPStatus
from art.tools import Calculator

PLAN = {
    "title": "Double 17*23",
    "steps": [
        {"id": "s1", "tool": "calculator", "args": {"expression": "17*23"}},
        {"id": "s2", "tool": "calculator", "args": {"expression": "{{s1.output}} * 2"}},
    ],
}
PLAN_TEXT = json.dumps(PLAN)
QUERY = "What is 17*23, doubled?"


def instance(provider: FakeProvider, *, model="openai/served", **fields) -> art.ArtInstance:
    fields.setdefault("llm_params", {"api_base": provider.openai_base, "api_key": "test-key"})
    return art.create_art_instance(model=model, tools=[Calculator()], storage="memory://", **fields)


async def run(inst: art.ArtInstance, *, stream: bool = False) -> art.AgentFinalResponse:
    async with inst:
        if stream:  # a chunk listener makes the synthesis a streamed call
            inst.on("chunk:after", lambda data, context: None)
        return await inst.aprocess(QUERY, "t")


# -- how the answer ended -------------------------------------------------------------------


async def test_a_normal_answer_is_success_with_its_finish_reason_and_model(fake_provider):
    fake_provider.model = "served-2024-06"
    fake_provider.queue(Answer(PLAN_TEXT), Answer("782."))
    resp = await run(instance(fake_provider))
    assert resp.status == "success" and resp.content == "782."
    assert resp.metadata.finish_reason == "stop"
    assert resp.metadata.model == "served-2024-06"
    assert resp.metadata.error is None


@pytest.mark.parametrize("stream", [False, True])
async def test_an_answer_cut_by_the_output_limit_is_partial(fake_provider, stream):
    fake_provider.queue(Answer(PLAN_TEXT), Answer("17 x 2", finish_reason="length"))
    resp = await run(instance(fake_provider), stream=stream)
    assert resp.status == "partial"
    assert resp.content == "17 x 2"
    assert resp.metadata.finish_reason == "length"
    assert resp.metadata.error.code == "ANSWER_INCOMPLETE"
    assert "raise max_tokens" in resp.metadata.error.message
    assert fake_provider.requests[-1].body.get("stream", False) is stream


async def test_a_filtered_answer_is_partial(fake_provider):
    fake_provider.queue(Answer(PLAN_TEXT), Answer("I can", finish_reason="content_filter"))
    resp = await run(instance(fake_provider))
    assert resp.status == "partial" and resp.metadata.finish_reason == "content_filter"
    assert "content filter" in resp.metadata.error.message


async def test_a_stream_ending_without_a_finish_reason_is_partial(fake_provider):
    fake_provider.queue(Answer(PLAN_TEXT), Answer("17 x 2", finish_reason=None))
    async with instance(fake_provider) as inst:
        inst.on("chunk:after", lambda data, context: None)
        resp = await inst.aprocess(QUERY, "t")
        [stored] = (await inst.aget_state("t")).runs
    assert resp.status == "partial" and resp.metadata.finish_reason is None
    assert "without a finish reason" in resp.metadata.error.message
    assert stored.status == "partial" and stored.error.code == "ANSWER_INCOMPLETE"


async def test_an_anthropic_end_turn_is_a_normal_stop(fake_provider):
    fake_provider.queue(Answer(PLAN_TEXT), Answer("782."))
    params = {"api_base": fake_provider.url, "api_key": "test-key"}
    resp = await run(instance(fake_provider, model="anthropic/claude-test", llm_params=params))
    assert resp.status == "success" and resp.metadata.finish_reason == "stop"
    assert [r.path for r in fake_provider.requests] == ["/v1/messages", "/v1/messages"]


async def test_a_plan_cut_by_the_output_limit_says_to_raise_max_tokens(fake_provider):
    fake_provider.default = Answer('{"title": "Double", "steps": [{"id": "s1", "to', "length")
    resp = await run(instance(fake_provider, execution_config={"max_plan_attempts": 2}))
    assert resp.status == "error" and resp.metadata.error.code == "PLAN_INVALID"
    assert "raise max_tokens" in resp.metadata.error.message
    assert resp.metadata.llm_calls == 2


# -- pointing an instance at a server ------------------------------------------------------


async def test_api_base_and_api_key_env_configure_the_provider(fake_provider, monkeypatch):
    monkeypatch.setenv("MY_SERVER_KEY", "key-from-the-environment")
    fake_provider.queue(Answer(PLAN_TEXT), Answer("782."))
    inst = instance(
        fake_provider,
        llm_params={},
        api_base=fake_provider.openai_base,
        api_key_env="MY_SERVER_KEY",
    )
    resp = await run(inst)
    assert resp.status == "success"
    assert fake_provider.requests[0].headers["authorization"] == "Bearer key-from-the-environment"


async def test_art_environment_variables_configure_the_provider(fake_provider, monkeypatch):
    monkeypatch.setenv("ART_API_BASE", fake_provider.openai_base)
    monkeypatch.setenv("ART_API_KEY_ENV", "MY_SERVER_KEY")
    monkeypatch.setenv("MY_SERVER_KEY", "env-key")
    monkeypatch.setenv("ART_TIMEOUT", "0.2")
    fake_provider.queue(Hang(30), Hang(30))
    config = {"llm_max_retries": 1, "retry_backoff_s": 0}
    inst = instance(fake_provider, llm_params={}, execution_config=config)
    assert inst.config.execution_config.llm_timeout_s == 0.2
    resp = await run(inst)
    assert resp.metadata.error.code == "TIMEOUT"
    assert len(fake_provider.requests) == 2
    assert fake_provider.requests[0].headers["authorization"] == "Bearer env-key"


async def test_the_timeout_can_be_set_for_one_call(fake_provider):
    fake_provider.queue(Hang(30))
    async with instance(fake_provider) as inst:
        options = {"execution_config": {"llm_timeout_s": 0.2, "llm_max_retries": 0}}
        resp = await inst.aprocess(QUERY, "t", options)
    assert inst.config.execution_config.llm_timeout_s is None  # the instance keeps its own
    assert resp.metadata.error.code == "TIMEOUT" and "0.2 s" in resp.metadata.error.message


def test_explicit_settings_win_over_the_environment(fake_provider, monkeypatch):
    monkeypatch.setenv("ART_API_BASE", "http://127.0.0.1:1/v1")
    monkeypatch.setenv("ART_TIMEOUT", "5")
    inst = instance(fake_provider, execution_config={"llm_timeout_s": 30})
    assert inst.config.llm_params["api_base"] == fake_provider.openai_base
    assert inst.config.execution_config.llm_timeout_s == 30
    inst.close()


def test_the_default_timeout_is_finite_and_suits_planning_calls():
    config = art.ExecutionConfig()
    attempt_s, idle_s = config.llm_time_limits("openai/gpt-4o-mini")
    assert 60 <= attempt_s <= 120
    assert idle_s > 0 and config.llm_retry_budget_s > 0


def test_an_in_process_model_has_no_default_time_limit_but_takes_an_explicit_one():
    assert art.ExecutionConfig().llm_time_limits("local/smollm2") == (None, None)
    explicit = art.ExecutionConfig(llm_timeout_s=300, llm_stream_idle_timeout_s=30)
    assert explicit.llm_time_limits("local/smollm2") == (300, 30)
    assert explicit.llm_time_limits("openai/gpt-4o-mini") == (300, 30)


@pytest.mark.parametrize(
    ("variables", "fields", "message"),
    [
        ({}, {"api_key_env": "NO_SUCH_KEY_VARIABLE"}, "NO_SUCH_KEY_VARIABLE"),
        ({"ART_TIMEOUT": "soon"}, {}, "ART_TIMEOUT"),
    ],
)
def test_a_missing_key_variable_or_a_bad_timeout_is_a_configuration_error(
    monkeypatch, variables, fields, message
):
    monkeypatch.delenv("NO_SUCH_KEY_VARIABLE", raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigurationError, match=message):
        art.create_art_instance(model="openai/served", storage="memory://", **fields)


# -- structured output ----------------------------------------------------------------------


async def test_structured_output_on_sends_the_plan_schema_to_a_model_litellm_does_not_know(
    fake_provider,
):
    fake_provider.queue(Answer(PLAN_TEXT), Answer("782."))
    resp = await run(instance(fake_provider, structured_output=True))
    assert resp.status == "success"
    response_format = fake_provider.requests[0].body["response_format"]
    assert response_format["type"] == "json_schema"
    assert "steps" in json.dumps(response_format["json_schema"])


async def test_structured_output_off_sends_none_even_where_litellm_says_it_works(
    fake_provider,
):
    fake_provider.queue(Answer(PLAN_TEXT), Answer("782."))
    resp = await run(instance(fake_provider, model="openai/gpt-4o-mini", structured_output=False))
    assert resp.status == "success"
    assert all("response_format" not in r.body for r in fake_provider.requests)


async def test_by_default_litellm_decides_and_a_refusing_server_gets_plain_json():
    with FakeProvider(Answer(PLAN_TEXT), rejects_response_format=True) as provider:
        provider.queue(Answer(PLAN_TEXT), Answer("782."))
        # litellm's map says gpt-4o-mini takes a JSON schema; this server does not.
        resp = await run(instance(provider, model="openai/gpt-4o-mini"))
        assert resp.status == "success" and resp.content == "782."
        refused, planned, _ = provider.requests
        assert "response_format" in refused.body and "response_format" not in planned.body
        assert resp.metadata.llm_calls == 3


# -- the command line -----------------------------------------------------------------------


@pytest.fixture
def invoke(restore_logging):
    runner = CliRunner()

    def call(*args: str, env: dict[str, str] | None = None):
        base = {"COLUMNS": "160", "NO_COLOR": "1", "ART_DEBUG": ""}
        return runner.invoke(app, list(args), env={**base, **(env or {})})

    return call


def test_art_run_takes_the_base_url_key_variable_and_timeout(invoke, fake_provider):
    fake_provider.queue(Answer(PLAN_TEXT), Answer("782."))
    result = invoke(
        "run", QUERY, "--model", "openai/served", "--storage", "memory://", "--json",
        "--api-base", fake_provider.openai_base, "--api-key-env", "CLI_KEY", "--timeout", "5",
        env={"CLI_KEY": "cli-key"},
    )  # fmt: skip
    assert result.exit_code == EXIT_OK, result.output
    assert json.loads(result.stdout)["response"]["content"] == "782."
    assert fake_provider.requests[0].headers["authorization"] == "Bearer cli-key"


@pytest.mark.slow  # four timed-out attempts and the backoff between them: about 5 s
def test_art_run_timeout_bounds_each_llm_call(invoke, fake_provider):
    fake_provider.default = Hang(30)
    result = invoke(
        "run", QUERY, "--model", "openai/served", "--storage", "memory://", "--json",
        "--api-base", fake_provider.openai_base, "--timeout", "0.3",
        env={"OPENAI_API_KEY": "test-key", "ART_API_KEY_ENV": ""},
    )  # fmt: skip
    assert result.exit_code == EXIT_ERROR
    assert json.loads(result.stdout)["metadata"]["error"]["code"] == "TIMEOUT"


def test_art_plan_reads_the_art_environment_variables(invoke, fake_provider):
    fake_provider.queue(Answer(PLAN_TEXT))
    result = invoke(
        "plan", QUERY, "--model", "openai/served", "--storage", "memory://", "--json",
        env={"ART_API_BASE": fake_provider.openai_base, "ART_API_KEY_ENV": "CLI_KEY",
             "CLI_KEY": "plan-key"},
    )  # fmt: skip
    assert result.exit_code == EXIT_OK, result.output
    assert [s["id"] for s in json.loads(result.stdout)["steps"]] == ["s1", "s2"]
    assert fake_provider.requests[0].headers["authorization"] == "Bearer plan-key"


def test_a_missing_key_variable_is_a_usage_error(invoke):
    result = invoke(
        "run", QUERY, "--model", "openai/served", "--storage", "memory://",
        "--api-key-env", "NO_SUCH_KEY_VARIABLE",
    )  # fmt: skip
    assert result.exit_code == EXIT_USAGE
    assert "NO_SUCH_KEY_VARIABLE" in result.output


# -- what a retried call prints ------------------------------------------------------------


@pytest.mark.slow  # the CLI waits out the 0.5 s backoff before its retry
@pytest.mark.parametrize(("flags", "shown"), [((), False), (("-v",), True)])
def test_art_run_is_quiet_about_retried_calls_unless_verbose(invoke, fake_provider, flags, shown):
    fake_provider.queue(HTTPStatus(429, {"retry-after-ms": "10"}), Answer(PLAN_TEXT))
    fake_provider.queue(Answer("782."))
    result = invoke(
        *flags, "run", QUERY, "--model", "openai/served", "--storage", "memory://",
        "--api-base", fake_provider.openai_base,
        env={"OPENAI_API_KEY": "test-key", "ART_API_KEY_ENV": ""},
    )  # fmt: skip
    assert result.exit_code == EXIT_OK, result.output
    assert ("llm call retried" in result.stderr) is shown
    assert "llm call failed" not in result.stderr


@pytest.mark.slow
def test_a_library_user_without_logging_sees_nothing_for_a_retried_call():
    script = f"""
import art
from art.testing import Answer, FakeProvider, HTTPStatus
from art.tools import Calculator
with FakeProvider(HTTPStatus(429, {{"retry-after-ms": "10"}}), HTTPStatus(500),
                  Answer({PLAN_TEXT!r}), Answer("782.")) as provider:
    inst = art.create_art_instance(
        model="openai/served", tools=[Calculator()], storage="memory://",
        llm_params={{"api_base": provider.openai_base, "api_key": "k"}},
        execution_config={{"retry_backoff_s": 0}},
    )
    resp = inst.process("{QUERY}", "t")
    inst.close()
print(resp.status, resp.metadata.llm_calls)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["success", "4"]
    assert done.stderr == ""


def test_the_resume_command_a_suspended_run_prints_keeps_the_provider_options():
    from art.cli.app import Launch

    launch = Launch("openai/served", None, None, None, "http://127.0.0.1:8000/v1", "VLLM_KEY", 120)
    assert launch.resume_command("t1", "s-1").endswith(
        "--approve --model openai/served --api-base http://127.0.0.1:8000/v1 "
        "--api-key-env VLLM_KEY --timeout 120"
    )
