"""art.testing: the scripted model, the run-context helper, the fixtures and the plan snapshots."""

from __future__ import annotations

import asyncio
import gc
import http.client
import json
import socket
import threading
import time
import weakref
from urllib.parse import urlsplit

import pytest

from art.config import ExecutionConfig
from art.errors import ModelError, ModelErrorCode
from art.llm.client import LLMClient
from art.llm.model import ModelRequest
from art.observe.events import EventBus
from art.testing import (
    Answer,
    FakeProvider,
    Hang,
    ScriptedModel,
    ScriptError,
    make_run_context,
    replies,
)

pytest_plugins = ["pytester"]

USER = [{"role": "user", "content": "hello"}]


async def ask(model: ScriptedModel, phase: str = "step", messages=USER, **kwargs):
    run = make_run_context(retry_backoff_s=0)
    run.events.subscribe(lambda event: None)  # a listener: calls asked to stream do stream
    result = await LLMClient().complete(
        run, phase=phase, model=model.model, messages=messages, span=run.span, **kwargs
    )
    return result.content


# -- registration ---------------------------------------------------------------------------


async def test_each_model_has_its_own_name_that_reaches_it_until_unregistered():
    first, second = ScriptedModel(step="one"), ScriptedModel(step="two")
    assert first.provider != second.provider
    assert first.model == f"{first.provider}/scripted"
    assert (await ask(first), await ask(second)) == ("one", "two")
    first.unregister()
    second.unregister()
    for model in (first, second):
        with pytest.raises(ModelError) as info:
            await ask(model)
        assert info.value.code == ModelErrorCode.PROVIDER_NOT_SUPPORTED
    first.unregister()  # idempotent


async def test_a_name_reaches_its_model_after_the_maker_drops_it_until_unregistered():
    def make() -> str:  # an application factory passing on only the name
        return ScriptedModel(step="from a factory").model

    name = make()
    gc.collect()
    run = make_run_context(retry_backoff_s=0)
    result = await LLMClient().complete(run, phase="step", model=name, messages=USER, span=run.span)
    assert result.content == "from a factory"
    model = LLMClient().model_for(name)
    alive = weakref.ref(model)
    model.unregister()
    del model
    gc.collect()
    assert alive() is None  # unregistered: art keeps no reference


async def test_a_model_works_as_a_context_manager_and_not_after_it():
    with ScriptedModel(step="inside") as model:
        assert await ask(model) == "inside"
    with pytest.raises(ModelError) as info:
        await ask(model)
    assert info.value.code == ModelErrorCode.PROVIDER_NOT_SUPPORTED


def test_pytest_does_not_collect_it():
    assert ScriptedModel.__test__ is False


# -- replies ----------------------------------------------------------------------------------


async def test_replies_of_every_kind_become_text(scripted_model):
    from art.planning.plans import Plan, Step

    plan = Plan(title="t", steps=[Step(id="s1", tool="calc", depends_on=[])])
    model = scripted_model(planning=plan, synthesis={"answer": 4}, step=[1, 2], replan="plain text")
    assert json.loads(await ask(model, "planning"))["steps"][0]["dependsOn"] == []
    assert json.loads(await ask(model, "synthesis")) == {"answer": 4}
    assert json.loads(await ask(model, "step")) == [1, 2]  # a list is JSON, not a sequence
    assert await ask(model, "replan") == "plain text"


async def test_a_tuple_or_iterator_is_consumed_in_order_and_the_last_repeats(scripted_model):
    model = scripted_model(step=("one", "two"), synthesis=iter(["a", "b"]))
    assert [await ask(model) for _ in range(3)] == ["one", "two", "two"]
    assert [await ask(model, "synthesis") for _ in range(3)] == ["a", "b", "b"]
    assert replies("x", "y") == ("x", "y")


async def test_a_callable_reply_sees_the_messages_and_metadata(scripted_model):
    seen = []

    def echo(messages, metadata):
        seen.append(metadata["art_phase"])
        return messages[-1]["content"].upper()

    async def later(messages, metadata):
        await asyncio.sleep(0)
        return {"n": len(messages)}

    model = scripted_model(step=echo, synthesis=later)
    assert await ask(model) == "HELLO"
    assert json.loads(await ask(model, "synthesis")) == {"n": 1}
    assert seen == ["step"]


async def test_a_scripted_exception_reaches_art_as_a_model_error(scripted_model):
    model = scripted_model(step=ScriptError("the script refuses"))
    with pytest.raises(ModelError) as info:
        await ask(model)
    assert info.value.code == ModelErrorCode.UNKNOWN
    assert "the script refuses" in info.value.message


async def test_a_reply_can_set_the_finish_reason(scripted_model):
    from art.testing import Reply

    model = scripted_model(step=Reply("cut", finish_reason="length"))
    run = make_run_context()
    for stream in (False, True):
        result = await LLMClient().complete(
            run, phase="step", model=model.model, messages=USER, span=run.span, stream=stream
        )
        assert (result.content, result.finish_reason) == ("cut", "length")


async def test_built_in_defaults(scripted_model):
    model = scripted_model()
    prompt = [{"role": "user", "content": "Question: sum?\ns1 (calculator): 391\ns2: 403\nend"}]
    synthesis = await ask(model, "synthesis", messages=prompt)
    assert "391" in synthesis and "403" in synthesis
    results = "Question: q\n\n[s1] Add (tool calculator): completed. Output:\n391\n\nWrite it."
    synthesis = await ask(model, "synthesis", messages=[{"role": "user", "content": results}])
    assert synthesis == "Answer (scripted) from the step outputs: 391"
    assert "sum?" in await ask(model, "step", messages=[{"role": "user", "content": "sum?"}])
    with pytest.raises(ModelError, match=r"ScriptedModel\(planning=\.\.\.\)"):
        await ask(model, "planning")
    with pytest.raises(ModelError, match=r"ScriptedModel\(replan=\.\.\.\)"):
        await ask(model, "replan")


async def test_default_answers_every_unscripted_phase(scripted_model):
    model = scripted_model(synthesis="S", default="D")
    assert await ask(model, "planning") == "D"
    assert await ask(model, "synthesis") == "S"


async def test_calls_are_recorded(scripted_model):
    model = scripted_model(planning="{}", step="x")
    await ask(model, "planning", response_format={"type": "json_object"})
    await ask(model, "step", stream=True)
    assert [c.phase for c in model.calls] == ["planning", "step"]
    assert model.call_count == 2
    planning = model.calls_for("planning")[0]
    assert planning.response_format == {"type": "json_object"}
    assert planning.messages == USER and planning.reply == "{}" and not planning.stream
    assert model.calls_for("step")[0].stream
    assert "planning" in repr(model) and "calls=2" in repr(model)


async def test_latency_delays_each_reply(scripted_model):
    model = scripted_model(step="x", latency_s=0.05)
    started = time.perf_counter()
    await ask(model)
    assert time.perf_counter() - started >= 0.05


async def test_the_model_answers_requests_itself(scripted_model):
    model = scripted_model(step="plain reply", cost_per_token=(0.5, 1.0))
    request = ModelRequest(messages=USER, metadata={"art_phase": "step"})
    response = await model.request(request)
    assert (response.content, response.finish_reason, response.model) == (
        "plain reply",
        "stop",
        model.model,
    )
    assert response.usage.total_tokens == 3 and response.cost == 0.5 + 2 * 1.0


async def test_streaming_sends_word_chunks_with_usage_on_the_last(scripted_model):
    model = scripted_model(synthesis="one two three")
    stream = await model.request_stream(
        ModelRequest(messages=USER, metadata={"art_phase": "synthesis"})
    )
    chunks = [chunk async for chunk in stream]
    assert [chunk.text for chunk in chunks] == ["one ", "two ", "three"]
    assert [chunk.usage for chunk in chunks[:-1]] == [None, None]
    assert chunks[-1].usage.completion_tokens == 3 and chunks[-1].usage.prompt_tokens == 1
    assert chunks[-1].finish_reason == "stop"


async def test_closing_a_stream_ends_it_before_the_next_chunk(scripted_model):
    model = scripted_model(default="one two three", chunk_delay_s=0.01)
    stream = await model.request_stream(ModelRequest(messages=USER))
    chunks = stream.__aiter__()
    assert (await anext(chunks)).text == "one "
    await stream.aclose()
    with pytest.raises(StopAsyncIteration):
        await anext(chunks)


# -- make_run_context -------------------------------------------------------------------------


def test_make_run_context_defaults_and_overrides():
    run = make_run_context()
    assert run.thread_id == "test-thread" and len(run.trace_id) == 32
    assert isinstance(run.events, EventBus) and run.config == ExecutionConfig()
    bus = EventBus()
    custom = make_run_context(thread_id="t", events=bus, max_plan_attempts=5)
    assert custom.thread_id == "t" and custom.events is bus
    assert custom.config.max_plan_attempts == 5
    assert make_run_context(config={"max_replans": 3}).config.max_replans == 3
    with pytest.raises(ValueError, match="no_such_field"):
        make_run_context(no_such_field=1)


# -- the pytest plugin ------------------------------------------------------------------------


@pytest.mark.slow  # imports every installed pytest plugin afresh, as a user's pytest does
def test_the_plugin_is_loaded_by_entry_point_and_its_fixtures_clean_up(pytester, monkeypatch):
    # The inner run is a user's plain run: under pytest-xdist this variable would make the
    # autoloaded pytest-benchmark warn that xdist is active, an error with our filters.
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(
        """
        from art.llm.model import registered_model

        seen = []

        def test_factory(scripted_model, run_context):
            model = scripted_model(step="x")
            seen.append(model)
            assert registered_model(model.model) is model
            assert run_context.thread_id == "test-thread"

        def test_unregistered_afterwards():
            assert seen
            assert registered_model(seen[0].model) is None
        """
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)


def test_the_plugin_module_imports_nothing_heavy():
    import subprocess
    import sys

    code = (
        "import sys, art.testing.plugin\n"
        "print(','.join(m for m in ('litellm', 'networkx', 'jsonschema', 'syrupy')"
        " if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


# -- plan snapshots ---------------------------------------------------------------------------

SNAPSHOT_PLAN = {
    "intent": "compare temperatures",
    "title": "Paris vs Rome",
    "steps": [
        {"id": "s1", "tool": "get_weather", "args": {"city": "Paris"}, "dependsOn": []},
        {"id": "s2", "tool": "get_weather", "args": {"city": "Rome"}, "dependsOn": []},
        {
            "id": "s3",
            "description": "Difference",
            "tool": "calculator",
            "args": {"expression": "{{s1.output.temp}} - {{s2.output.temp}}"},
            "dependsOn": [],
        },
    ],
}


def test_render_plan_text_is_readable_and_deterministic():
    from art.planning.plans import Plan
    from art.testing import render_plan_text

    plan = Plan.model_validate(SNAPSHOT_PLAN)
    text = render_plan_text(plan)
    assert text.startswith("# Paris vs Rome\n\nintent: compare temperatures\n")
    assert "## s3 · calculator\n\ndescription: Difference\ndepends on: s1, s2\n" in text
    assert '"expression": "{{s1.output.temp}} - {{s2.output.temp}}"' in text
    assert "```mermaid\nflowchart TD\n" in text and "n_s1 --> n_s3" in text
    assert render_plan_text(Plan.loads(plan.dumps())) == text
    assert "(no steps" in render_plan_text(Plan())


def test_a_plan_matches_its_snapshot(plan_snapshot):
    from art.planning.plans import Plan

    assert Plan.model_validate(SNAPSHOT_PLAN) == plan_snapshot


def test_plan_snapshots_are_written_compared_and_diffed(pytester, monkeypatch):
    # Only the two plugins this needs, so each inner run starts quickly.
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    plugins = ("-p", "no:cacheprovider", "-p", "syrupy", "-p", "art.testing.plugin")
    pytester.makepyfile(
        test_plan="""
        import os
        from art.planning.plans import Plan

        def test_plan(plan_snapshot):
            tool = os.environ.get("PLAN_TOOL", "calculator")
            plan = Plan.model_validate(
                {"title": "T", "steps": [{"id": "s1", "tool": tool, "args": {"x": 1}}]}
            )
            assert plan == plan_snapshot
        """
    )
    pytester.runpytest_inprocess(*plugins, "--snapshot-update").assert_outcomes(passed=1)
    [stored] = list(pytester.path.glob("__snapshots__/test_plan/*.plan.md"))
    assert "## s1 · calculator" in stored.read_text()

    pytester.runpytest_inprocess(*plugins).assert_outcomes(passed=1)

    monkeypatch.setenv("PLAN_TOOL", "http_get")
    changed = pytester.runpytest_inprocess(*plugins)
    changed.assert_outcomes(failed=1)
    changed.stdout.fnmatch_lines(["*- ## s1 · calculator*", "*+ ## s1 · http_get*"])


def test_a_snapshot_diff_shows_every_change_under_its_step_at_default_verbosity(
    pytester, monkeypatch
):
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    for ci in ("CI", "BUILD_NUMBER"):  # pytest shows whole diffs on CI only
        monkeypatch.delenv(ci, raising=False)
    plugins = ("-p", "no:cacheprovider", "-p", "syrupy", "-p", "art.testing.plugin")
    pytester.makepyfile(
        test_plan="""
        import os
        from art.planning.plans import Plan

        def test_plan(plan_snapshot):
            changed = bool(os.environ.get("PLAN_CHANGED"))
            order = {"order_id": "A-1", **({"tax_percent": 8} if changed else {})}
            plan = Plan.model_validate({"title": "Order", "steps": [
                {"id": "s1", "tool": "http_get" if changed else "calculator",
                 "args": {"expression": "1 + 1"}, "description": "first"},
                {"id": "s2", "tool": "order_total", "args": order, "description": "total"},
                {"id": "s3", "tool": "calculator", "args": {"expression": "{{s2.output}} * 2"}},
            ]})
            assert plan == plan_snapshot
        """
    )
    pytester.runpytest_inprocess(*plugins, "--snapshot-update").assert_outcomes(passed=1)
    monkeypatch.setenv("PLAN_CHANGED", "1")
    changed = pytester.runpytest_inprocess(*plugins)
    changed.assert_outcomes(failed=1)
    changed.stdout.fnmatch_lines(
        [
            "E *- ## s1 · calculator",
            "E *+ ## s1 · http_get",
            "E *  ## s2 · order_total",
            'E *+   "tax_percent": 8',
        ]
    )
    assert "truncated" not in changed.stdout.str()


async def test_a_json_reply_is_rendered_once_when_the_model_is_made():
    plan = {"title": "t", "steps": [{"id": "s1", "tool": "calc", "args": {"x": "1"}}]}
    rendered = json.dumps(plan)
    with ScriptedModel(planning=plan) as model:
        plan["title"] = "changed after the model was made"
        assert await ask(model, "planning") == await ask(model, "planning") == rendered


# -- the fake provider's lifecycle ----------------------------------------------------------


def _posted(provider: FakeProvider, *, stream: bool = False) -> http.client.HTTPConnection:
    """A connection to `provider` that has sent it one chat completions request."""
    connection = http.client.HTTPConnection("127.0.0.1", urlsplit(provider.url).port, timeout=60)
    body = json.dumps({"model": "fake", "messages": USER, "stream": stream})
    connection.request("POST", "/v1/chat/completions", body, {"content-type": "application/json"})
    return connection


def _content(connection: http.client.HTTPConnection) -> str:
    return json.loads(connection.getresponse().read())["choices"][0]["message"]["content"]


def test_closing_the_provider_ends_a_hanging_request_without_waiting_for_it():
    provider = FakeProvider(Hang(3600)).start()
    connection = _posted(provider)
    deadline = time.monotonic() + 10
    while not provider.requests and time.monotonic() < deadline:
        time.sleep(0.001)
    assert provider.requests  # the server has read the request and hangs on it
    closer = threading.Thread(target=provider.close)
    closer.start()
    # close() neither waits for the hang nor for a poll of the serving loop; the client
    # sees the connection end instead of an answer an hour later.
    with pytest.raises(http.client.RemoteDisconnected):
        connection.getresponse()
    closer.join(timeout=30)
    assert not closer.is_alive()
    connection.close()


def test_closing_the_provider_shuts_its_keep_alive_connections():
    provider = FakeProvider(Answer("first")).start()
    connection = _posted(provider)
    assert _content(connection) == "first"
    assert connection.sock is not None  # kept open for the next request
    provider.close()
    assert connection.sock.recv(1) == b""  # the server ended it: no client waits on it
    connection.close()


def test_a_closed_provider_refuses_connections_and_can_be_started_again():
    provider = FakeProvider(Answer("first"), Answer("second")).start()
    old = urlsplit(provider.url)
    provider.close()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((old.hostname, old.port), timeout=60).close()
    with provider:
        connection = _posted(provider)
        assert _content(connection) == "first"
        connection.close()
    assert len(provider.requests) == 1


@pytest.mark.parametrize("reply", [Hang(3600), Answer("a slow answer", chunk_delay_s=3600)])
def test_the_provider_notes_a_client_that_hangs_up_before_the_reply_ends(reply):
    with FakeProvider(Answer("whole"), reply) as provider:
        connection = _posted(provider)
        assert _content(connection) == "whole"
        connection.close()
        stream = isinstance(reply, Answer)
        connection = _posted(provider, stream=stream)
        deadline = time.monotonic() + 10
        while len(provider.requests) < 2 and time.monotonic() < deadline:
            time.sleep(0.001)
        response = connection.getresponse() if stream else None  # a stream's headers came
        closed_at = time.monotonic()
        if response is not None:
            response.close()
        connection.close()
        while provider.requests[1].dropped_at is None and time.monotonic() < deadline:
            time.sleep(0.001)
    finished, hung_up = provider.requests
    assert finished.dropped_at is None
    assert 0 <= hung_up.dropped_at - closed_at < 0.5
    assert provider.dropped == [hung_up]
