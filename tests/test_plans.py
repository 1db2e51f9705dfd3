"""art.planning.plans: the wire format, implied dependencies, graph, Mermaid, dumps and
validation."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from art.planning.plans import Plan, Step, validate_plan
from art.tooling.contract import IToolExecutor, ToolResult, ToolSchema
from art.tooling.registry import ToolRegistry


class Tool(IToolExecutor):
    def __init__(self, name: str, input_schema: dict) -> None:
        self.schema = ToolSchema(
            name=name, description=f"The {name} tool.", input_schema=input_schema
        )

    async def execute(self, input, context):
        return ToolResult(call_id=context.call_id, tool_name=self.schema.name, status="success")


CALCULATOR = Tool(
    "calculator",
    {
        "type": "object",
        "properties": {"expression": {"type": "string"}},
        "required": ["expression"],
    },
)
WEATHER = Tool(
    "get_weather",
    {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "days": {"type": "integer", "minimum": 1},
            "options": {
                "type": "object",
                "properties": {"unit": {"enum": ["C", "F"]}},
            },
        },
        "required": ["city"],
    },
)


@pytest.fixture
def registry() -> ToolRegistry:
    return ToolRegistry([CALCULATOR, WEATHER])


def plan_of(*steps: dict, **fields) -> Plan:
    return Plan.model_validate({"title": "t", "intent": "i", **fields, "steps": list(steps)})


# -- wire format ------------------------------------------------------------------------------


def test_the_wire_format_is_camel_case_and_snake_case_is_accepted():
    step = Step.model_validate({"id": "s2", "tool": "calculator", "depends_on": ["s1"]})
    assert step.depends_on == ["s1"]
    assert Step.model_validate({"id": "s2", "dependsOn": ["s1"]}).depends_on == ["s1"]
    wire = step.model_dump(by_alias=True)
    assert wire["dependsOn"] == ["s1"] and "depends_on" not in wire


def test_common_llm_spellings_are_understood():
    step = Step.model_validate(
        {"step_id": 3, "tool": "none", "arguments": {"a": 1}, "dependencies": "s1"}
    )
    assert (step.id, step.tool, step.args, step.depends_on) == ("3", None, {"a": 1}, ["s1"])
    assert Step.model_validate({"id": "s1", "args": None, "dependsOn": None}).args == {}
    assert Step.model_validate({"id": "s1", "description": None}).description == ""
    labels = Plan.model_validate({"title": None, "intent": 42, "steps": None})
    assert (labels.title, labels.intent, labels.steps) == ("", "42", [])
    # The wire name wins when both are present.
    both = Step.model_validate({"id": "s1", "args": {"x": 1}, "arguments": {"y": 2}})
    assert both.args == {"x": 1}


class Text(str):
    pass


def test_ids_written_as_numbers_become_text_and_other_values_are_left_to_fail():
    step = Step.model_validate({"id": 7, "dependsOn": [1, "s2", Text("s3")]})
    assert (step.id, step.depends_on) == ("7", ["1", "s2", "s3"])
    assert Step.model_validate({"id": Text("s1"), "description": 2.5}).description == "2.5"
    with pytest.raises(ValidationError) as bad_id:
        Step.model_validate({"id": True, "dependsOn": ["s1", None]})
    assert [(e["loc"], e["input"]) for e in bad_id.value.errors()] == [
        (("id",), True),
        (("dependsOn", 1), None),
    ]


def test_a_missing_id_is_reported_with_the_step_as_written():
    with pytest.raises(ValidationError) as missing:
        Step.model_validate({"tool": "none", "deps": "s1", "description": None})
    (error,) = missing.value.errors()
    assert error["type"] == "missing"
    assert error["input"] == {"tool": "none", "depends_on": "s1", "description": None}
    # Without an alias to rename, too; and the caller's dict is left as it was.
    written = {"tool": "none", "dependsOn": [1], "args": None}
    with pytest.raises(ValidationError) as missing:
        Step.model_validate(written)
    (error,) = missing.value.errors()
    assert error["input"] == written == {"tool": "none", "dependsOn": [1], "args": None}
    step = {"id": 3, "tool": "none", "dependsOn": [1], "args": None}
    assert Step.model_validate(step) == Step(id="3", depends_on=["1"])
    assert step == {"id": 3, "tool": "none", "dependsOn": [1], "args": None}


def test_a_reference_implies_a_dependency_in_a_stable_order():
    step = Step(
        id="s4",
        tool="calculator",
        args={"expression": "{{s3.output}} + {{s1.output.a}}", "more": ["{{s2.output}}"]},
        depends_on=["s2", "s1"],
    )
    assert step.references == ["s3", "s1", "s2"]
    assert step.all_dependencies == ["s2", "s1", "s3"]
    assert Step(id="s1", tool=None).is_reasoning


def test_dependencies_listed_both_ways_are_merged_in_the_order_of_depends_on():
    inputs = {"inputs": ["{{s1.output}}", "{{s2.output}}"]}
    same_order = Step(id="s3", args=inputs, depends_on=["s1", "s2"])
    assert same_order.all_dependencies == ["s1", "s2"]
    assert Step(id="s3", args=inputs).all_dependencies == ["s1", "s2"]
    assert Step(id="s3", args=inputs, depends_on=["s2", "s1"]).all_dependencies == ["s2", "s1"]
    assert Step(id="s3", args=inputs, depends_on=["s2", "s2"]).all_dependencies == ["s2", "s1"]
    assert Step(id="s3", args=inputs, depends_on=["s0"]).all_dependencies == ["s0", "s1", "s2"]
    # A fresh list each time: the executor keeps it.
    same_order.all_dependencies.append("s9")
    assert same_order.all_dependencies == ["s1", "s2"]


def test_plan_step_lookup():
    plan = plan_of({"id": "s1"}, {"id": "s2"})
    assert plan.step("s2").id == "s2" and plan.step_ids == ["s1", "s2"]
    with pytest.raises(KeyError, match="steps: s1, s2"):
        plan.step("s9")


# -- graph and Mermaid ------------------------------------------------------------------------

DIAMOND = plan_of(
    {"id": "s1", "tool": "get_weather", "args": {"city": "Paris"}, "description": "Paris"},
    {"id": "s2", "tool": "get_weather", "args": {"city": "Rome"}, "description": "Rome"},
    {
        "id": "s3",
        "tool": "calculator",
        "args": {"expression": "{{s1.output.temp}} - {{s2.output.temp}}"},
        "description": 'Difference "in C"',
    },
    {"id": "end", "tool": None, "dependsOn": ["s3"]},
)


def test_graph_has_a_node_per_step_and_an_edge_per_dependency():
    graph = DIAMOND.graph
    assert list(graph.nodes) == ["s1", "s2", "s3", "end"]
    assert set(graph.edges) == {("s1", "s3"), ("s2", "s3"), ("s3", "end")}
    assert graph.nodes["s3"]["step"].tool == "calculator"


def test_mermaid_renders_the_dag():
    assert DIAMOND.to_mermaid() == "\n".join(
        [
            "flowchart TD",
            '    n_s1["s1: get_weather<br/>Paris"]',
            '    n_s2["s2: get_weather<br/>Rome"]',
            '    n_s3["s3: calculator<br/>Difference #quot;in C#quot;"]',
            '    n_end["end: reasoning"]',
            "    n_s1 --> n_s3",
            "    n_s2 --> n_s3",
            "    n_s3 --> n_end",
        ]
    )


def test_mermaid_shows_steps_finished_in_an_earlier_plan():
    plan = plan_of({"id": "s5", "tool": None, "args": {"x": "{{s1.output}}"}})
    assert '    n_s1(["s1: finished earlier"])' in plan.to_mermaid()
    assert "    n_s1 --> n_s5" in plan.to_mermaid()


def test_mermaid_ids_are_safe():
    plan = plan_of({"id": "fetch-data"}, {"id": "fetch_data", "dependsOn": ["fetch-data"]})
    lines = plan.to_mermaid().splitlines()
    assert lines[1].startswith('    n0_fetch_data["fetch-data')
    assert lines[2].startswith('    n_fetch_data["fetch_data')
    assert lines[3] == "    n0_fetch_data --> n_fetch_data"


# -- deterministic serialization --------------------------------------------------------------


def test_dumps_is_deterministic_and_round_trips():
    first = DIAMOND.dumps()
    reordered = Plan.model_validate(json.loads(json.dumps(DIAMOND.model_dump(), sort_keys=True)))
    assert reordered.dumps() == first == DIAMOND.dumps()
    data = json.loads(first)
    assert list(data) == sorted(data) and "dependsOn" in data["steps"][0]
    assert Plan.loads(first) == DIAMOND
    assert Plan.loads(first.encode()) == DIAMOND


def test_args_key_order_does_not_change_the_bytes():
    a = plan_of({"id": "s1", "args": {"x": 1, "y": 2}})
    b = plan_of({"id": "s1", "args": {"y": 2, "x": 1}})
    assert a.dumps() == b.dumps()


# -- validation -------------------------------------------------------------------------------


def test_a_valid_plan_has_no_problems(registry):
    assert validate_plan(DIAMOND, registry) == []
    assert validate_plan(Plan(), registry) == []  # no steps: the synthesis answers directly


def test_an_unknown_tool_names_the_known_ones(registry):
    plan = plan_of({"id": "s1", "tool": "calc", "args": {}})
    assert validate_plan(plan, registry) == [
        "step 's1' uses unknown tool 'calc'; known tools: calculator, get_weather "
        "(use tool null for a reasoning step)"
    ]


def test_duplicate_ids_and_empty_ids(registry):
    plan = plan_of({"id": "s1"}, {"id": "s2"}, {"id": "s1"}, {"id": " "})
    problems = validate_plan(plan, registry)
    assert "duplicate step id 's1' (steps 1 and 3); every step needs its own id" in problems
    assert "step 4 has an empty id; give every step an id like 's1'" in problems


@pytest.mark.parametrize("step_id", ["step.1", "step 2", "s{1}", "é1", "s1}}"])
def test_an_id_a_reference_cannot_name_is_a_problem(registry, step_id):
    plan = plan_of({"id": step_id}, {"id": "s2", "args": {"x": f"{{{{{step_id}.output}}}}"}})
    problems = validate_plan(plan, registry)
    assert (
        f"step 1 has the id {step_id!r}, which a reference {{{{<id>.output}}}} cannot name; "
        "use only letters, digits, '_' and '-' (like 's1')"
    ) in problems
    assert validate_plan(plan_of({"id": "Step_1-b"}), registry) == []


def test_missing_and_self_dependencies(registry):
    plan = plan_of({"id": "s1", "dependsOn": ["s1", "s7"]})
    assert validate_plan(plan, registry) == [
        "step 's1' depends on itself",
        "step 's1' depends on 's7', which is not a step of the plan",
    ]


def test_references_to_unknown_or_own_steps(registry):
    plan = plan_of(
        {"id": "s1", "tool": None, "args": {"a": "{{s9.output.x}}", "b": "{{s1.output}}"}}
    )
    assert validate_plan(plan, registry) == [
        "step 's1' references {{s9.output}}, but there is no step 's9'",
        "step 's1' references its own output {{s1.output}}",
    ]


def test_cycles_are_named(registry):
    plan = plan_of(
        {"id": "s1", "dependsOn": ["s3"]},
        {"id": "s2", "dependsOn": ["s1"]},
        {"id": "s3", "args": {"x": "{{s2.output}}"}},
        {"id": "s4", "dependsOn": ["s5"]},
        {"id": "s5", "dependsOn": ["s4"]},
    )
    problems = validate_plan(plan, registry)
    assert problems == [
        "dependency cycle: s1 -> s3 -> s2 -> s1 (each step waits for the next one, so none "
        "can start; remove one of these dependencies)",
        "dependency cycle: s4 -> s5 -> s4 (each step waits for the next one, so none "
        "can start; remove one of these dependencies)",
    ]


def test_arguments_are_checked_against_the_input_schema(registry):
    plan = plan_of(
        {"id": "s1", "tool": "get_weather", "args": {"days": 0, "options": {"unit": "K"}}},
        {"id": "s2", "tool": "calculator", "args": {"expression": 5}},
    )
    assert validate_plan(plan, registry) == [
        "step 's1' (get_weather) arguments: 'city' is a required property",
        "step 's1' (get_weather) argument 'days': 0 is less than the minimum of 1",
        "step 's1' (get_weather) argument 'options.unit': 'K' is not one of ['C', 'F']",
        "step 's2' (calculator) argument 'expression': 5 is not of type 'string'",
    ]


def test_arguments_from_references_are_checked_at_run_time(registry):
    plan = plan_of(
        {"id": "s1", "tool": "get_weather", "args": {"city": "Oslo"}},
        # `days` will be a number only once s1 ran; `city` is required and comes from s1.
        {
            "id": "s2",
            "tool": "get_weather",
            "args": {"city": "{{s1.output.city}}", "days": "{{s1.output.days}}"},
        },
    )
    assert validate_plan(plan, registry) == []


def test_finished_steps_of_an_earlier_plan_may_be_used_but_not_redefined(registry):
    plan = plan_of(
        {"id": "s3", "tool": "calculator", "args": {"expression": "{{s1.output}} * 2"}},
        {"id": "s4", "tool": None, "dependsOn": ["s2", "s3"]},
        {"id": "s1", "tool": "calculator", "args": {"expression": "1"}},
    )
    problems = validate_plan(plan, registry, completed={"s1", "s2"})
    assert problems == [
        "step 's1' is already finished in the earlier plan; do not define it again "
        "(refer to its output as {{s1.output}} and use a new id)"
    ]


def test_every_problem_is_reported_at_once(registry):
    plan = plan_of(
        {"id": "s1", "tool": "nope"},
        {"id": "s1", "dependsOn": ["s2"]},
        {"id": "s2", "dependsOn": ["s2", "s9"], "args": {"x": "{{s8.output}}"}},
        {"id": "s3", "tool": "calculator", "args": {}},
    )
    problems = validate_plan(plan, registry)
    assert len(problems) == 6
    assert any("unknown tool 'nope'" in p for p in problems)
    assert any("duplicate step id 's1'" in p for p in problems)
    assert any("'s2' depends on itself" in p for p in problems)
    assert any("depends on 's9'" in p for p in problems)
    assert any("no step 's8'" in p for p in problems)
    assert any("'expression' is a required property" in p for p in problems)


def test_a_registry_without_compiled_validators_works_too():
    class MinimalRegistry:
        def __init__(self, *tools):
            self._tools = {t.schema.name: t for t in tools}

        def names(self):
            return list(self._tools)

        def get(self, name):
            return self._tools.get(name)

    plan = plan_of({"id": "s1", "tool": "calculator", "args": {"expression": 1}})
    assert validate_plan(plan, MinimalRegistry(CALCULATOR)) == [
        "step 's1' (calculator) argument 'expression': 1 is not of type 'string'"
    ]


def test_references_are_worked_out_once_and_again_when_args_are_replaced():
    step = Step(id="s3", args={"a": "{{s1.output}}", "b": ["{{s2.output.x}}", 1], "c": 2})
    assert step.references == ["s1", "s2"]
    assert step.referencing_args == {"a", "b"}
    # private: the cache is what is tested (a plan of many steps reads it often).
    cached = step._reference_index()
    assert step._reference_index() is cached  # not walked again
    step.args = {"c": "{{s9.output}}"}
    assert step.references == ["s9"]
    assert step.all_dependencies == ["s9"]
    # The cache is invisible: dumps and equality see the fields only.
    fresh = Step(id="s3", args={"c": "{{s9.output}}"})
    assert step == fresh and fresh == step
    assert step.model_dump() == fresh.model_dump()


def test_an_acyclic_plan_never_builds_the_networkx_graph(registry, monkeypatch):
    def no_graph(self):
        raise AssertionError("the graph is built only to describe a cycle")

    monkeypatch.setattr(Plan, "graph", property(no_graph))
    plan = plan_of(
        {"id": "s1"},
        {"id": "s2", "dependsOn": ["s1"]},
        {"id": "s3", "args": {"x": "{{s2.output}} {{s1.output}}"}},
        {"id": "s4", "dependsOn": ["s4"]},  # a self-dependency is reported on its own
    )
    assert validate_plan(plan, registry) == ["step 's4' depends on itself"]


def test_steps_out_of_running_order_are_valid_and_cycles_through_any_of_them_are_found(
    registry,
):
    # Steps written in running order skip the cycle search; the others must not.
    assert (
        validate_plan(
            plan_of(
                {"id": "s3", "args": {"x": ["{{s2.output}}"]}},
                {"id": "s2", "dependsOn": ["s1", "s0"]},
                {"id": "s1"},
            ),
            registry,
            completed={"s0"},
        )
        == []
    )
    cycle = (
        "(each step waits for the next one, so none can start; remove one of these dependencies)"
    )
    # One id for two steps: "a" is defined before "b", and also after it, waiting for it.
    duplicated = plan_of(
        {"id": "a"}, {"id": "b", "dependsOn": ["a"]}, {"id": "a", "dependsOn": ["b"]}
    )
    assert validate_plan(duplicated, registry) == [
        "duplicate step id 'a' (steps 1 and 3); every step needs its own id",
        f"dependency cycle: b -> a -> b {cycle}",
    ]
    # A finished step defined again is a step of this plan, not an earlier one.
    redefined = plan_of({"id": "s2", "dependsOn": ["s1"]}, {"id": "s1", "dependsOn": ["s2"]})
    assert validate_plan(redefined, registry, completed={"s1"}) == [
        "step 's1' is already finished in the earlier plan; do not define it again "
        "(refer to its output as {{s1.output}} and use a new id)",
        f"dependency cycle: s2 -> s1 -> s2 {cycle}",
    ]
    # A step that repeats an earlier id and depends on it depends on itself.
    repeated = plan_of({"id": "s1"}, {"id": "s1", "dependsOn": ["s1"]})
    assert validate_plan(repeated, registry) == [
        "duplicate step id 's1' (steps 1 and 2); every step needs its own id",
        "step 's1' depends on itself",
    ]
