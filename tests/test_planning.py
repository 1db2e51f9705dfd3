"""art.planning.planner: the prompt, reading plans from replies, validate-and-repair, replanning."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from art.config import Persona
from art.errors import ModelError, ModelErrorCode, PlanError
from art.llm.client import LLMClient, count_tokens
from art.planning.planner import (
    PLAN_JSON_SCHEMA,
    Planner,
    extract_plan_data,
    parse_plan,
    plan_json_schema,
    plan_response_format,
    render_demonstrations,
    render_planning_messages,
    render_replan_messages,
)
from art.planning.plans import Plan
from art.responses import ConversationMessage, StepRecord
from art.testing import HTTPStatus, ScriptedModel, make_run_context
from art.tooling.contract import IToolExecutor, ToolExample, ToolResult, ToolSchema
from art.tooling.registry import ToolExampleWarning, ToolRegistry

NOW = datetime(2025, 3, 14, 12, 0, tzinfo=UTC)


class Tool(IToolExecutor):
    def __init__(
        self, name: str, description: str, input_schema: dict, mode="functional", examples=()
    ):
        self.schema = ToolSchema(
            name=name,
            description=description,
            input_schema=input_schema,
            execution_mode=mode,
            examples=list(examples),
        )

    async def execute(self, input, context):
        return ToolResult(call_id=context.call_id, tool_name=self.schema.name, status="success")


def obj(properties: dict, required: list[str]) -> dict:
    return {"type": "object", "properties": properties, "required": required}


CALCULATOR = Tool(
    "calculator",
    "Evaluate an arithmetic expression.",
    obj({"expression": {"type": "string", "title": "Expression"}}, ["expression"]),
)
WEATHER = Tool(
    "get_weather",
    "Current weather for a city: {temp, conditions}.",
    obj(
        {"city": {"type": "string", "description": "City name"}, "unit": {"enum": ["C", "F"]}},
        ["city"],
    ),
)
HTTP_GET = Tool("http_get", "Fetch a URL.", obj({"url": {"type": "string"}}, ["url"]))
ASK_HUMAN = Tool(
    "ask_human", "Ask a person.", obj({"question": {"type": "string"}}, ["question"]), "blocking"
)
SHOW = Tool("show", "Show a table.", obj({"rows": {"type": "array"}}, ["rows"]), "display")


@pytest.fixture
def registry() -> ToolRegistry:
    return ToolRegistry([CALCULATOR, WEATHER, HTTP_GET])


def message(role: str, content: str) -> ConversationMessage:
    return ConversationMessage(thread_id="t", role=role, content=content)


HISTORY = [message("user", "What is 17*23?"), message("assistant", "17*23 is 391.")]

GOOD = {
    "intent": "multiply",
    "title": "Product",
    "steps": [
        {"id": "s1", "tool": "calculator", "args": {"expression": "17*23"}, "dependsOn": []},
        {
            "id": "s2",
            "tool": "calculator",
            "args": {"expression": "{{s1.output}} * 2"},
            "dependsOn": ["s1"],
        },
    ],
}


def planner_for(model: ScriptedModel, registry, **kwargs) -> Planner:
    return Planner(LLMClient(), registry, model=model.model, **kwargs)


# -- the prompt -------------------------------------------------------------------------------


def test_the_planning_prompt(registry, snapshot):
    registry.register(ASK_HUMAN)
    registry.register(SHOW)
    persona = Persona(name="helper", planning="Prefer metric units.")
    messages = render_planning_messages("now double it", registry, HISTORY, persona, now=NOW)
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages == snapshot


def test_the_prompt_carries_tools_history_guidance_and_the_format(registry):
    system, user = render_planning_messages(
        "now double it", registry, HISTORY, Persona(planning="Prefer metric units."), now=NOW
    )
    assert (
        '- calculator: Evaluate an arithmetic expression.\n  args: {"expression":'
        in (system["content"])
    )
    assert '"title"' not in system["content"].split("Plan format")[0]  # schema noise dropped
    assert "Prefer metric units." in system["content"]
    assert "{{s1.output}}" in system["content"] and "dependsOn" in system["content"]
    assert "Today is 2025-03-14." in system["content"]
    assert "User: What is 17*23?\nAssistant: 17*23 is 391." in user["content"]
    assert user["content"].endswith("Request: now double it")


def test_the_prompt_without_history_or_guidance(registry):
    system, user = render_planning_messages("hi", registry, [], None, now=NOW)
    assert user["content"] == "Request: hi"
    assert "Guidance" not in system["content"]


def test_the_prompt_fits_a_small_local_model(registry):
    tools = [
        CALCULATOR,
        WEATHER,
        HTTP_GET,
        ASK_HUMAN,
        Tool(
            "read_file",
            "Read a text file from the workspace.",
            obj({"path": {"type": "string"}, "max_bytes": {"type": "integer"}}, ["path"]),
        ),
    ]
    messages = render_planning_messages(
        "What is the weather in Paris and Rome, and the difference?",
        ToolRegistry(tools),
        HISTORY,
        Persona(planning="Be precise."),
        now=NOW,
    )
    # A 2k-token window must hold this prompt and leave room for the plan.
    assert count_tokens("gpt-4o-mini", messages) < 1000


def test_schema_noise_is_dropped_but_property_names_are_kept():
    tool = Tool(
        "show",
        "Shows a titled table. Use it for comparisons.",
        {
            "type": "object",
            "title": "ShowInput",
            "properties": {
                "title": {"type": "string", "title": "Title", "maxLength": 80},
                "pattern": {"type": "string", "pattern": "^x", "description": "A glob."},
            },
            "required": ["title"],
            "additionalProperties": False,
        },
    )
    registry = ToolRegistry([tool])
    full = render_planning_messages("q", registry, [], None, now=NOW)[0]["content"]
    assert (
        '- show: Shows a titled table. Use it for comparisons.\n  args: {"title":{"type":"string"},'
        '"pattern":{"type":"string","pattern":"^x","description":"A glob."}}; required: title'
    ) in full
    compact = render_planning_messages("q", registry, [], None, now=NOW, compact=True)
    assert (
        '- show: Shows a titled table.\n  args: {"title":{"type":"string"},'
        '"pattern":{"type":"string"}}; required: title'
    ) in compact[0]["content"]


async def test_a_small_context_window_gets_the_compact_prompt(scripted_model, registry):
    long_description = "Evaluate an arithmetic expression. " + "More detail. " * 400
    registry = ToolRegistry([Tool("calculator", long_description, CALCULATOR.schema.input_schema)])
    small = scripted_model(planning=GOOD, context_window=2048)
    large = scripted_model(planning=GOOD, context_window=200_000)
    unknown = scripted_model(planning=GOOD)
    for model in (small, large, unknown):
        await planner_for(model, registry).plan(make_run_context(), "q", [])
    assert "More detail." not in small.calls[0].messages[0]["content"]
    assert "More detail." in large.calls[0].messages[0]["content"]
    assert "More detail." in unknown.calls[0].messages[0]["content"]


def test_long_history_is_clipped(registry):
    history = [message("user", f"question {i} " + "x" * 2000) for i in range(30)]
    _, user = render_planning_messages("q", registry, history, None, now=NOW)
    assert "question 19 " not in user["content"] and "question 29 " in user["content"]
    assert len(user["content"]) < 10 * 700


def test_the_replan_prompt(registry, snapshot):
    previous = Plan.model_validate(
        {
            "title": "Weather gap",
            "steps": [
                {"id": "s1", "tool": "get_weather", "args": {"city": "Paris"}},
                {"id": "s2", "tool": "get_weather", "args": {"city": "Atlantis"}},
                {"id": "s3", "tool": "calculator", "dependsOn": ["s1", "s2"]},
            ],
        }
    )
    records = {
        "s1": StepRecord(
            step_id="s1",
            tool="get_weather",
            status="completed",
            result=ToolResult(
                call_id="c1", tool_name="get_weather", status="success", output={"temp": 18}
            ),
        ),
        "s2": StepRecord(step_id="s2", tool="get_weather", status="failed", reason="unknown city"),
        "s3": StepRecord(step_id="s3", tool="calculator", status="skipped", reason="s2 failed"),
    }
    messages = render_replan_messages(
        "How much warmer is Paris than Atlantis?", registry, [], None, previous, records, now=NOW
    )
    assert messages == snapshot
    user = messages[1]["content"]
    assert '- s1 (get_weather): {"temp": 18}' in user
    assert "- s2 (get_weather) failed: unknown city" in user
    assert "- s3 (calculator): not run (s2 failed)" in user


def test_replan_outputs_are_cut_to_the_configured_length(registry):
    previous = Plan.model_validate({"steps": [{"id": "s1", "tool": "http_get"}]})
    big = ToolResult(call_id="c", tool_name="http_get", status="success", output="y" * 5000)
    records = {"s1": StepRecord(step_id="s1", tool="http_get", status="completed", result=big)}
    _, user = render_replan_messages(
        "q", registry, [], None, previous, records, max_output_length=200, now=NOW
    )
    assert "y" * 150 in user["content"] and "y" * 300 not in user["content"]


# -- reading replies --------------------------------------------------------------------------

PLAN_TEXT = json.dumps(GOOD)


@pytest.mark.parametrize(
    "reply",
    [
        PLAN_TEXT,
        f"```json\n{PLAN_TEXT}\n```",
        f"Here is the plan:\n```\n{PLAN_TEXT}\n```\nLet me know!",
        f"Sure! {PLAN_TEXT} That should do it.",
        f"<think>The user wants {{x}}. Let me plan.</think>\n{PLAN_TEXT}",
        f"I reasoned about it.</think>{PLAN_TEXT}",  # opening tag was in the chat template
        '{"plan": ' + PLAN_TEXT + "}",
        PLAN_TEXT.replace('"', "'"),  # single quotes
        PLAN_TEXT[:-1] + ",}",  # trailing comma
        PLAN_TEXT.replace('"dependsOn"', '"depends_on"'),
        f"```json\n{PLAN_TEXT}",  # unclosed fence
    ],
)
def test_plans_are_read_from_messy_replies(reply, registry):
    plan, problems = parse_plan(reply, registry)
    assert problems == []
    assert plan == Plan.model_validate(GOOD)


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        ("", "the reply was empty"),
        ("   ", "the reply was empty"),
        ("I cannot help with that.", "found no JSON at all"),
        ("{}", "found an empty object {}"),
        ('{"answer": 42}', "found an object with keys ['answer']"),
        ("[1, 2, 3]", "found a JSON list of 3 items"),
        ("42", "found the JSON value 42"),
        ("<think>still thinking about {", "only thinking"),
    ],
)
def test_replies_without_a_plan_object_are_problems_not_empty_plans(reply, problem, registry):
    plan, problems = parse_plan(reply, registry)
    assert plan is None
    assert len(problems) == 1 and problem in problems[0]


def test_an_empty_steps_list_is_a_valid_plan(registry):
    plan, problems = parse_plan('{"title": "Chat", "steps": []}', registry)
    assert problems == [] and plan.steps == []


def test_wrong_types_are_problems_that_name_the_step(registry):
    reply = json.dumps(
        {"steps": [{"id": "s1", "tool": "calculator", "args": "17*23"}, {"tool": "x"}]}
    )
    plan, problems = parse_plan(reply, registry)
    assert plan is None
    assert problems == [
        "steps[0].args (step 's1'): Input should be a valid dictionary (got '17*23')",
        "steps[1].id: Field required (got {'tool': 'x'})",
    ]


def test_validation_problems_come_with_the_parsed_plan(registry):
    plan, problems = parse_plan('{"steps": [{"id": "s1", "tool": "nope"}]}', registry)
    assert plan is not None and plan.steps[0].tool == "nope"
    assert problems and "unknown tool 'nope'" in problems[0]


def test_deeply_nested_replies_do_not_crash(registry):
    deep = '{"steps": [{"id": "s1", "tool": null, "args": {"a": ' + "[" * 5000 + "]" * 5000 + "}}]}"
    plan, problems = parse_plan(deep, registry)
    assert plan is None or problems == []
    assert extract_plan_data("{" * 10000)[1]


# -- the planner: calls, repair and errors ----------------------------------------------------


async def test_a_valid_plan_takes_exactly_one_call(scripted_model, registry):
    model = scripted_model(planning=GOOD)
    run = make_run_context()
    plan = await planner_for(model, registry).plan(run, "double 17*23", HISTORY)
    assert plan == Plan.model_validate(GOOD)
    assert len(model.calls) == 1 and run.stats.llm_calls == 1
    call = model.calls[0]
    assert call.phase == "planning" and call.response_format is None
    assert call.metadata["thread_id"] == run.thread_id
    assert call.messages[-1]["content"].endswith("Request: double 17*23")


async def test_structured_output_is_requested_where_the_model_supports_it(scripted_model, registry):
    model = scripted_model(planning=GOOD, response_schema=True)
    planner = planner_for(model, registry)
    await planner.plan(make_run_context(), "q", [])
    assert model.calls[0].response_format == plan_response_format(registry)
    schema = model.calls[0].response_format["json_schema"]["schema"]
    jsonschema.validate(Plan.model_validate(GOOD).model_dump(by_alias=True), schema)

    # A tool registered later is in the next call's schema.
    registry.register(ASK_HUMAN)
    await planner.plan(make_run_context(), "q", [])
    assert model.calls[1].response_format == plan_response_format(registry)
    assert model.calls[1].response_format != model.calls[0].response_format


def _step(tool, args, **extra):
    return {"id": "s1", "description": "d", "tool": tool, "args": args, "dependsOn": [], **extra}


def _plan(*steps):
    return {"intent": "i", "title": "t", "steps": list(steps)}


def test_the_plan_schema_allows_only_registered_tools_and_their_argument_names(registry):
    validator = jsonschema.Draft202012Validator(plan_json_schema(registry))
    accepted = [
        _plan(),
        _plan(_step("calculator", {"expression": "17*23"})),
        # A reference may stand for any value, whatever the argument's type.
        _plan(_step("get_weather", {"city": "Oslo", "unit": "{{s0.output}}"})),
        _plan(_step(None, {})),  # a reasoning step
        Plan.model_validate(GOOD).model_dump(by_alias=True),
    ]
    refused = [
        _plan(_step("calc", {"expression": "1"})),  # unknown tool
        _plan(_step("calculator", {"expr": "1"})),  # unknown argument name
        _plan(_step("calculator", {})),  # required argument missing
        _plan(_step("calculator", {"expression": 4})),  # a string argument stays a string
        _plan(_step("calculator", {"expression": "1"}, extra=1)),
        _plan(_step("calculator", {"expression": "1"}) | {"description": "x" * 81}),
    ]
    assert [validator.is_valid(plan) for plan in accepted] == [True] * len(accepted)
    assert [validator.is_valid(plan) for plan in refused] == [False] * len(refused)


def test_the_plan_schema_for_tools_with_open_or_no_arguments():
    open_args = Tool("tag", "Tag things.", {"type": "object", "additionalProperties": True})
    no_schema = Tool("ping", "Ping.", {"type": "object", "properties": {}})
    schema = plan_json_schema(ToolRegistry([open_args, no_schema]))
    validator = jsonschema.Draft202012Validator(schema)
    assert validator.is_valid(_plan(_step("tag", {"any": [1, 2], "thing": True})))
    assert validator.is_valid(_plan(_step("ping", {})))
    assert not validator.is_valid(_plan(_step("ping", {"x": 1})))
    # With no tools, only reasoning steps fit.
    only_reasoning = jsonschema.Draft202012Validator(plan_json_schema(ToolRegistry()))
    assert only_reasoning.is_valid(_plan(_step(None, {})))
    assert not only_reasoning.is_valid(_plan(_step("calculator", {"expression": "1"})))
    # The tool-independent schema accepts any tool name.
    assert jsonschema.Draft202012Validator(PLAN_JSON_SCHEMA).is_valid(
        _plan(_step("anything", {"x": 1}))
    )


async def test_problems_go_back_to_the_llm_in_a_repair_call(scripted_model, registry):
    bad = {"steps": [{"id": "s1", "tool": "calc", "args": {}}, {"id": "s1", "tool": None}]}
    model = scripted_model(planning=(bad, GOOD))
    run = make_run_context()
    plan = await planner_for(model, registry).plan(run, "q", [])
    assert plan == Plan.model_validate(GOOD)
    assert len(model.calls) == 2 and run.stats.llm_calls == 2
    first, repair = model.calls
    assert repair.phase == "planning"
    assert repair.messages[: len(first.messages)] == first.messages
    assert repair.messages[-2] == {"role": "assistant", "content": json.dumps(bad)}
    feedback = repair.messages[-1]["content"]
    assert feedback.startswith("That plan cannot run. Problems:\n1. step 's1' uses unknown tool")
    assert "\n2. duplicate step id 's1'" in feedback


async def test_an_id_references_cannot_name_is_repaired_like_any_problem(scripted_model, registry):
    bad = {
        "steps": [
            {"id": "step.1", "tool": "calculator", "args": {"expression": "1+1"}},
            {"id": "s2", "tool": None, "description": "Double {{step.1.output}}"},
        ]
    }
    model = scripted_model(planning=(bad, GOOD))
    plan = await planner_for(model, registry).plan(make_run_context(), "q", [])
    assert plan == Plan.model_validate(GOOD)
    feedback = model.calls[1].messages[-1]["content"]
    assert "step 1 has the id 'step.1', which a reference {{<id>.output}} cannot name" in feedback


async def test_after_max_plan_attempts_a_plan_error_lists_every_problem(scripted_model, registry):
    bad = {"steps": [{"id": "s1", "tool": "calc"}, {"id": "s2", "dependsOn": ["s9"]}]}
    model = scripted_model(planning=bad)
    run = make_run_context(max_plan_attempts=4)
    with pytest.raises(PlanError) as info:
        await planner_for(model, registry).plan(run, "q", [])
    assert len(model.calls) == 4
    assert info.value.problems == [
        "step 's1' uses unknown tool 'calc'; known tools: calculator, get_weather, http_get "
        "(use tool null for a reasoning step)",
        "step 's2' depends on 's9', which is not a step of the plan",
    ]
    assert "no valid plan after 4 attempts" in str(info.value)
    assert all(p in str(info.value) for p in info.value.problems)


async def test_a_cut_off_reply_is_not_accepted_even_if_it_repairs(scripted_model, registry):
    from art.testing import Reply

    truncated = Reply(PLAN_TEXT[: PLAN_TEXT.index('{"id": "s2"')], finish_reason="length")
    model = scripted_model(planning=(truncated, GOOD))
    plan = await planner_for(model, registry).plan(make_run_context(), "q", [])
    assert len(plan.steps) == 2 and len(model.calls) == 2
    assert "the reply was cut off" in model.calls[1].messages[-1]["content"]


async def test_one_attempt_means_no_repair(scripted_model, registry):
    model = scripted_model(planning="no plan here")
    with pytest.raises(PlanError, match="after 1 attempt;"):
        await planner_for(model, registry).plan(make_run_context(max_plan_attempts=1), "q", [])
    assert len(model.calls) == 1


async def test_provider_errors_are_not_plan_errors(fake_provider, registry):
    fake_provider.queue(HTTPStatus(401, message="bad key"))
    llm = LLMClient({"api_base": fake_provider.openai_base, "api_key": "test-key"})
    planner = Planner(llm, registry, model="openai/served")
    with pytest.raises(ModelError) as info:
        await planner.plan(make_run_context(), "q", [])
    assert info.value.code == ModelErrorCode.AUTHENTICATION_ERROR


async def test_the_persona_guides_the_planner(scripted_model, registry):
    model = scripted_model(planning={"steps": []})
    persona = Persona(planning="Never use http_get.")
    await planner_for(model, registry, persona=persona).plan(make_run_context(), "q", [])
    assert "Never use http_get." in model.calls[0].messages[0]["content"]


# -- replanning -------------------------------------------------------------------------------


def _records(*records: StepRecord) -> dict[str, StepRecord]:
    return {r.step_id: r for r in records}


def _done(step_id: str, output) -> StepRecord:
    result = ToolResult(call_id=step_id, tool_name="calculator", status="success", output=output)
    return StepRecord(step_id=step_id, tool="calculator", status="completed", result=result)


async def test_replan_uses_finished_outputs_and_rejects_redefining_them(scripted_model, registry):
    previous = Plan.model_validate(GOOD)
    records = _records(
        _done("s1", 391),
        StepRecord(step_id="s2", tool="calculator", status="failed", reason="bad expression"),
    )
    redefines = {"steps": [{"id": "s1", "tool": "calculator", "args": {"expression": "1"}}]}
    fixed = {
        "title": "Retry",
        "steps": [
            {"id": "s3", "tool": "calculator", "args": {"expression": "{{s1.output}} * 2"}},
        ],
    }
    model = scripted_model(replan=(redefines, fixed))
    run = make_run_context()
    plan = await planner_for(model, registry).replan(run, "double it", HISTORY, previous, records)
    assert plan.step_ids == ["s3"] and plan.steps[0].all_dependencies == ["s1"]
    assert [c.phase for c in model.calls] == ["replan", "replan"]
    prompt = model.calls[0].messages[-1]["content"]
    assert "- s1 (calculator): 391" in prompt
    assert "- s2 (calculator) failed: bad expression" in prompt
    assert "already finished in the earlier plan" in model.calls[1].messages[-1]["content"]


async def test_replan_gives_up_with_a_plan_error(scripted_model, registry):
    model = scripted_model(replan="{}")
    with pytest.raises(PlanError):
        await planner_for(model, registry).replan(
            make_run_context(max_plan_attempts=2), "q", [], Plan.model_validate(GOOD), {}
        )
    assert len(model.calls) == 2


# -- adversarial planner output ---------------------------------------------------------------

_ids = st.sampled_from(["s1", "s2", "s3", "s4", "s5", "", "s1 ", "x-y", "S1"])
_tools = st.one_of(
    st.none(),
    st.sampled_from(["calculator", "get_weather", "http_get", "calc", "", "none"]),
    st.integers(),
)
_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=20)
)
_references = st.builds(
    lambda step, path: "{{" + step + ".output" + "".join("." + p for p in path) + "}}",
    _ids,
    st.lists(st.sampled_from(["a", "0", "items", "-1", "x" * 40]), max_size=30),
)
_values = st.recursive(
    st.one_of(_scalars, _references),
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
_steps = st.fixed_dictionaries(
    {
        "id": st.one_of(_ids, st.integers()),
        "tool": _tools,
        "args": st.one_of(st.dictionaries(st.text(max_size=10), _values, max_size=4), _scalars),
    },
    optional={
        "dependsOn": st.one_of(st.lists(st.one_of(_ids, st.integers()), max_size=4), _scalars),
        "depends_on": st.lists(_ids, max_size=3),
        "description": _scalars,
    },
)
_plans = st.fixed_dictionaries(
    {"steps": st.one_of(st.lists(_steps, max_size=8), _scalars)},
    optional={"title": _scalars, "intent": _scalars},
)


def _damage(text: str, how: int, cut: float) -> str:
    if how == 0:
        return text
    if how == 1:
        return text[: int(len(text) * cut)]  # truncated
    if how == 2:
        return f"Here is my plan:\n```json\n{text}\n```\nHope it helps."
    if how == 3:
        return f"<think>{text[:20]}</think>{text}"
    if how == 4:
        return text.replace('"', "'")
    return text.replace(",", ",,", 1)


_replies = st.one_of(
    st.builds(
        lambda plan, how, cut: _damage(json.dumps(plan), how, cut),
        _plans,
        st.integers(0, 5),
        st.floats(0, 1),
    ),
    st.text(max_size=200),
    st.binary(max_size=100).map(lambda b: b.decode("latin-1")),
    st.sampled_from(["{}", "[]", "null", '{"steps": []}', "{{{{", "```", "</think>", "<think>"]),
)


# Hypothesis's failure report imports mypy_extensions, which warns on import; without this
# filter a failing example would end in an INTERNALERROR instead of its report.
_report_cleanly = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.mark.slow
@_report_cleanly
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reply=_replies)
def test_any_reply_parses_to_a_valid_plan_or_problems(reply):
    registry = ToolRegistry([CALCULATOR, WEATHER, HTTP_GET])
    started = time.perf_counter()
    plan, problems = parse_plan(reply, registry)
    if not problems:
        assert plan is not None and validate_plan_is_clean(plan, registry)
    else:
        assert all(isinstance(p, str) and p for p in problems)
    assert time.perf_counter() - started < 2.0


@pytest.mark.slow
@_report_cleanly
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(replies=st.lists(_replies, min_size=1, max_size=3))
async def test_any_planner_output_ends_in_a_valid_plan_or_a_clean_plan_error(replies):
    registry = ToolRegistry([CALCULATOR, WEATHER, HTTP_GET])
    attempts = 3
    with ScriptedModel(planning=tuple(replies)) as model:
        run = make_run_context(max_plan_attempts=attempts)
        started = time.perf_counter()
        try:
            plan = await planner_for(model, registry).plan(run, "q", [])
        except PlanError as error:
            assert error.problems, "a PlanError always says what was wrong"
            assert len(model.calls) == attempts
        else:
            assert validate_plan_is_clean(plan, registry)
            assert 1 <= len(model.calls) <= attempts
        assert time.perf_counter() - started < 5.0


def validate_plan_is_clean(plan: Plan, registry) -> bool:
    from art.planning.plans import validate_plan

    return validate_plan(plan, registry) == [] and Plan.loads(plan.dumps()) == plan


def _chain(length: int) -> dict:
    steps = [{"id": "s0", "tool": "calculator", "args": {"expression": "1"}, "dependsOn": []}]
    for i in range(1, length):
        steps.append(
            {
                "id": f"s{i}",
                "tool": "calculator",
                "args": {"expression": f"{{{{s{i - 1}.output}}}} + 1"},
                "dependsOn": [],
            }
        )
    return {"title": "chain", "steps": steps}


async def test_huge_plans_are_read_and_validated_quickly(scripted_model, registry):
    huge = _chain(2000)
    model = scripted_model(planning=huge)
    started = time.perf_counter()
    plan = await planner_for(model, registry).plan(make_run_context(), "q", [])
    assert len(plan.steps) == 2000 and len(model.calls) == 1
    assert plan.steps[-1].all_dependencies == ["s1998"]
    assert time.perf_counter() - started < 5.0


async def test_a_huge_cyclic_plan_fails_cleanly(scripted_model, registry):
    cyclic = _chain(1500)
    cyclic["steps"][0]["dependsOn"] = ["s1499"]
    model = scripted_model(planning=cyclic)
    started = time.perf_counter()
    with pytest.raises(PlanError) as info:
        await planner_for(model, registry).plan(make_run_context(), "q", [])
    assert (
        len(info.value.problems) == 1 and "dependency cycle: s0 -> s1499" in info.value.problems[0]
    )
    assert time.perf_counter() - started < 10.0


# -- demonstrations -----------------------------------------------------------------------------

SQUARE = Tool(
    "square",
    "Square a number.",
    obj({"x": {"type": "number"}}, ["x"]),
    examples=[
        ToolExample(input={"x": 3}, output=9),  # no description: shown in the tool's entry
        ToolExample(input={"x": "three"}, description="What is three squared?"),  # invalid
        ToolExample(input={"x": 12}, output=144, description="What is 12 squared?"),
    ],
)
FORECAST = Tool(
    "forecast",
    "Weather forecast.",
    obj({"city": {"type": "string"}}, ["city"]),
    examples=[
        ToolExample(input={"city": "Oslo"}, description="Will it rain in Oslo tomorrow?"),
        ToolExample(input={"city": "Rome"}, description="How warm will Rome be this weekend?"),
    ],
)


def test_described_examples_become_demonstration_turns_with_the_likest_last():
    with pytest.warns(ToolExampleWarning, match=r"'square': examples\[1\] is left out"):
        registry = ToolRegistry([SQUARE, FORECAST])
    turns = render_demonstrations(registry, "How warm will Paris be this weekend?")
    assert [t["role"] for t in turns] == ["user", "assistant"] * 2
    assert turns[0]["content"] == "Request: What is 12 squared?"
    assert json.loads(turns[1]["content"]) == {
        "intent": "What is 12 squared?",
        "title": "What is 12 squared?",
        "steps": [
            {
                "id": "s1",
                "description": "What is 12 squared?",  # the question: not copied as is
                "tool": "square",
                "args": {"x": 12},
                "dependsOn": [],
            }
        ],
    }
    # Of forecast's two examples, the one most like the request; it comes last.
    assert turns[2]["content"] == "Request: How warm will Rome be this weekend?"
    assert render_demonstrations(registry, "What is 7 squared?")[-2]["content"] == (
        "Request: What is 12 squared?"
    )
    # Every demonstrated plan is a valid plan for the registry.
    for turn in turns[1::2]:
        assert parse_plan(turn["content"], registry) == (
            Plan.model_validate_json(turn["content"]),
            [],
        )


def test_demonstrations_sit_between_the_instructions_and_the_request():
    with pytest.warns(ToolExampleWarning):
        registry = ToolRegistry([SQUARE, FORECAST, CALCULATOR])
    messages = render_planning_messages("What is 5 squared?", registry, [], None, now=NOW)
    assert [m["role"] for m in messages] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
    ]
    assert messages[-1]["content"] == "Request: What is 5 squared?"
    system = messages[0]["content"]
    assert '  example: args {"x":3} -> output 9' in system  # the undescribed example
    assert "three" not in system and "12 squared" not in system


def test_demonstrations_are_capped_and_need_a_description(registry):
    assert render_demonstrations(registry, "q") == []  # no tool has a described example
    many = ToolRegistry(
        Tool(
            f"tool{i}",
            "A tool.",
            obj({"n": {"type": "integer"}}, ["n"]),
            examples=[ToolExample(input={"n": i}, description=f"Request number {i}")],
        )
        for i in range(6)
    )
    turns = render_demonstrations(many, "Request number 4")
    assert len(turns) == 8
    assert turns[-2]["content"] == "Request: Request number 4"


def test_the_built_in_tools_demonstrate_valid_plans(tmp_path):
    from art.tools import builtin_tools

    registry = ToolRegistry(builtin_tools(tmp_path))
    turns = render_demonstrations(registry, "What is 2 + 2?")
    assert len(turns) == 8
    assert '"tool":"calculator"' in turns[-1]["content"]
    for turn in turns[1::2]:
        plan, problems = parse_plan(turn["content"], registry)
        assert plan is not None and problems == []


def test_a_request_of_two_questions_is_demonstrated_with_a_step_each(tmp_path):
    from art.tools import Calculator

    registry = ToolRegistry([Calculator()])
    one = render_demonstrations(registry, "What is 17 * 23 + 12?")
    assert all(len(json.loads(t["content"])["steps"]) == 1 for t in one[1::2])
    for query, expressions in [
        ("What is 17 * 23 + 12, and what is the square root of 1764?", ["12 * 7 + 5", "sqrt(144)"]),
        ("What is the square root of 1764? What is 17 * 23 + 12?", ["sqrt(144)", "12 * 7 + 5"]),
    ]:  # fmt: skip
        two = render_demonstrations(registry, query)
        request, plan = two[-2]["content"], json.loads(two[-1]["content"])
        # A step per question, each the example most like its question, in the same order.
        assert [step["args"]["expression"] for step in plan["steps"]] == expressions
        assert [step["id"] for step in plan["steps"]] == ["s1", "s2"]
        # Each step is described by its own question, which leads to its arguments.
        described = [step["description"] for step in plan["steps"]]
        assert request.endswith(f"\nSteps:\ns1: {described[0]}\ns2: {described[1]}")
        assert parse_plan(two[-1]["content"], registry)[1] == []


@pytest.mark.parametrize(
    ("request_text", "asked"),
    [
        ("What is 17 * 23 + 12, and what is the square root of 1764?",
         ["What is 17 * 23 + 12?", "What is the square root of 1764?"]),
        ("Weather in Oslo? How warm is Rome?", ["Weather in Oslo?", "How warm is Rome?"]),
        ("What are the prices of ACME and GLOBEX?", ["What are the prices of ACME and GLOBEX?"]),
        ("Convert 250 dollars to euros.", ["Convert 250 dollars to euros."]),
    ],
)  # fmt: skip
def test_a_request_is_listed_as_its_questions(request_text, asked):
    from art.planning.planner import questions

    assert questions(request_text) == asked
    messages = render_planning_messages(request_text, ToolRegistry(), [], None, now=NOW)
    listed = "".join(f"\ns{n}: {q}" for n, q in enumerate(asked, 1))
    expected = f"Request: {request_text}" + (f"\nSteps:{listed}" if len(asked) > 1 else "")
    assert messages[-1]["content"] == expected


def test_the_plan_schema_types_each_argument_or_takes_a_reference(registry):
    typed = Tool(
        "order_total",
        "Total of an order.",
        obj(
            {
                "quantity": {"type": "integer", "minimum": 1},
                "tax_percent": {"type": "number"},
                "currency": {"enum": ["EUR", "USD"]},
                "lines": {"type": "array", "items": {"type": "number"}},
            },
            ["quantity"],
        ),
    )
    validator = jsonschema.Draft202012Validator(plan_json_schema(ToolRegistry([typed])))
    accepted = [
        {"quantity": 3, "tax_percent": 8.5, "currency": "EUR", "lines": [1, 2.5]},
        {"quantity": "{{s1.output}}", "lines": ["{{s2.output.0}}", 4]},
    ]
    refused = [
        {"quantity": 3, "tax_percent": {"type": "number", "description": "Tax"}},  # a schema
        {"quantity": "3"},  # a number written as text
        {"quantity": 0},  # below the minimum
        {"quantity": 3, "currency": "GBP"},  # not one of the enum
        {"quantity": 3, "lines": ["x"]},
        {"tax_percent": 8},  # the required argument missing
    ]
    assert [validator.is_valid(_plan(_step("order_total", a))) for a in accepted] == [True] * 2
    assert [validator.is_valid(_plan(_step("order_total", a))) for a in refused] == [False] * 6


def test_every_plan_the_positional_schema_allows_is_valid(registry):
    validator = jsonschema.Draft202012Validator(plan_json_schema(registry, max_steps=3))

    def step(number, tool, args, depends=()):
        return {"id": f"s{number}", "description": "d", "tool": tool, "args": args,
                "dependsOn": list(depends)}  # fmt: skip

    first = step(1, "get_weather", {"city": "Oslo", "unit": "C"})
    accepted = [
        _plan(),
        _plan(first),
        _plan(first, step(2, "calculator", {"expression": "{{s1.output}} * 9 / 5 + 32"}, ["s1"])),
        _plan(first, step(2, "get_weather", {"city": "Rome"}), step(3, None, {}, ["s1", "s2"])),
    ]
    refused = [
        _plan(step(2, "get_weather", {"city": "Oslo"})),  # ids go s1, s2, ... in order
        _plan(step(1, "calculator", {"expression": "{{s1.output}} + 1"})),  # itself
        _plan(first, step(2, "calculator", {"expression": "{{s3.output}}"})),  # a later step
        _plan(first, step(2, "calculator", {"expression": "{{s1.output.temp}}"})),  # a path
        _plan(first, step(2, "calculator", {"expression": "1"}, ["s2"])),  # depends on itself
        _plan(first, step(2, "calculator", {"expression": "{ 1 }"})),  # braces: no reference
        _plan(step(1, "calculator", {"expression": 5})),
        _plan(step(1, None, {"x": 1})),
        _plan(first, first, first, step(4, "calculator", {"expression": "1"})),  # over max_steps
        _plan(step(1, "calculator", {"expression": "1" + "0" * 100})),  # a string over 100
    ]
    assert [validator.is_valid(plan) for plan in accepted] == [True] * len(accepted)
    assert [validator.is_valid(plan) for plan in refused] == [False] * len(refused)
    for plan in accepted:
        assert parse_plan(json.dumps(plan), registry)[1] == []


def test_a_positional_schema_with_questions_gives_each_question_its_step(registry):
    asked = ["What is 17 * 23 + 12?", "What is the square root of 1764?"]
    schema = plan_json_schema(registry, max_steps=3, descriptions=asked)
    validator = jsonschema.Draft202012Validator(schema)

    def step(number, description, expression):
        return {"id": f"s{number}", "description": description, "tool": "calculator",
                "args": {"expression": expression}, "dependsOn": []}  # fmt: skip

    both = [step(1, asked[0], "17 * 23 + 12"), step(2, asked[1], "sqrt(1764)")]
    assert validator.is_valid(_plan(*both))
    assert validator.is_valid(_plan(*both, step(3, "Add them", "{{s1.output}} + 1")))
    assert not validator.is_valid(_plan(both[0]))  # the second question left out
    assert not validator.is_valid(_plan(both[0], step(2, asked[0], "17 * 23 + 12")))
    assert not validator.is_valid(_plan(step(1, asked[1], "sqrt(1764)"), both[1]))


def test_a_positional_schema_writes_only_the_numbers_the_conversation_states():
    from art.planning.planner import numbers_in

    order = Tool(
        "order_total",
        "Total of an order.",
        obj({"quantity": {"type": "integer", "minimum": 1}, "unit_price": {"type": "number"}},
            ["quantity", "unit_price"]),
    )  # fmt: skip
    registry = ToolRegistry([CALCULATOR, order])
    asked = ["What is 17 * 23 + 12?", "What is the square root of 1764?"]
    earlier = "One share costs 1,250.5 dollars."
    assert numbers_in(earlier) == ["1,250.5", "1250.5"]
    stated = numbers_in(f"{earlier} {' '.join(asked)}")
    validator = jsonschema.Draft202012Validator(
        plan_json_schema(registry, max_steps=3, descriptions=asked, numbers=stated)
    )

    def plan(*steps):
        return _plan(*[
            {"id": f"s{n}", "description": asked[n - 1] if n <= 2 else "d", "tool": tool,
             "args": args, "dependsOn": []}
            for n, (tool, args) in enumerate(steps, 1)
        ])  # fmt: skip

    def calc(expression):
        return ("calculator", {"expression": expression})

    right = calc("17 * 23 + 12"), calc("sqrt(1764)")
    assert validator.is_valid(plan(*right))
    # A step's numbers: its question's, an earlier turn's, single digits.
    assert validator.is_valid(plan(right[0], calc("1764 ** 0.5 + 1,250.5 - 1250.5")))
    # Neither another question's number, nor one the conversation never stated
    # (a demonstration's), nor two numbers run together.
    for copied in ["17 * 17 + 12", "sqrt(144)", "sqrt(17641764)", "1764"[:3]]:
        assert not validator.is_valid(plan(right[0], calc(copied))), copied
    # A step after the questions may use any stated number, and references.
    assert validator.is_valid(plan(*right, calc("{{s1.output}} + 12 + 1764")))
    # Number arguments are stated numbers of their type and bounds, or a reference.
    order_args = [({"quantity": 23, "unit_price": 1250.5}, True),
                  ({"quantity": 7, "unit_price": "{{s1.output}}"}, True),
                  ({"quantity": 24, "unit_price": 3}, False),
                  ({"quantity": 1250.5, "unit_price": 3}, False),
                  ({"quantity": 0, "unit_price": 3}, False)]  # fmt: skip
    for args, valid in order_args:
        assert validator.is_valid(plan(*right, ("order_total", args))) is valid, args
    # Without `numbers`, or with more than a grammar should spell out, any number goes.
    many = [str(n) for n in range(100, 165)]
    free = jsonschema.Draft202012Validator(plan_json_schema(registry, max_steps=3))
    assert jsonschema.Draft202012Validator(
        plan_json_schema(registry, max_steps=3, numbers=many)
    ).is_valid(plan(calc("12 * 7 + 5")))
    assert not jsonschema.Draft202012Validator(
        plan_json_schema(registry, max_steps=3, numbers=many[:64])
    ).is_valid(plan(calc("12 * 7 + 5")))
    assert free.is_valid(
        plan(calc("12 * 7 + 5"), ("order_total", {"quantity": 24, "unit_price": 3}))
    )


@pytest.mark.parametrize("note", ["a < b", "<b>bold</b>", "`code`", 'tab\tquote"', "café"])
def test_tag_fence_and_escape_characters_inside_a_plan_are_read_as_written(note):
    # Replies without tags, fences or escapes take shortcuts; these must not change a thing.
    for ensure_ascii in (True, False):
        reply = json.dumps(
            {"steps": [{"id": "s1", "tool": None, "args": {"note": note}}]},
            ensure_ascii=ensure_ascii,
        )
        data, problems = extract_plan_data(reply)
        assert problems == [] and data["steps"][0]["args"]["note"] == note


# -- text that UTF-8 cannot store -----------------------------------------------------------


@pytest.mark.parametrize(
    ("written", "read"),
    [
        (r"\ud83d\ude00 ok", "\U0001f600 ok"),  # an escaped surrogate pair is one character
        (r"half \ud83d", "half \\ud83d"),  # a lone escaped surrogate is shown escaped
        ("raw \ud83d", "raw \\ud83d"),  # a lone surrogate in the reply text itself
        ("plain é", "plain é"),
    ],
)
def test_plan_text_is_always_storable_as_utf8(written, read):
    reply = '{"steps": [{"id": "s1", "tool": null, "args": {"note": "NOTE"}}]}'
    reply = reply.replace("NOTE", written)
    data, problems = extract_plan_data(reply)
    assert problems == []
    note = data["steps"][0]["args"]["note"]
    assert note == read
    note.encode("utf-8")
