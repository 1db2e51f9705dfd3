"""Plan and Step: the DAG the planner writes and the executor runs.

Wire format (what the LLM writes; camelCase emitted, snake_case also accepted)::

    {"intent": "...", "title": "...", "steps": [
      {"id": "s1", "description": "...", "tool": "calculator",
       "args": {"expression": "17*23"}, "dependsOn": []},
      {"id": "s2", "description": "...", "tool": "calculator",
       "args": {"expression": "{{s1.output}} + 12"}, "dependsOn": ["s1"]}]}

A reference `{{sN.output...}}` in a step's arguments implies a dependency on sN.
`validate_plan` reports every problem of a plan at once; `Plan.dumps` is deterministic.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from art.core.json import JsonValue
from art.core.models import ArtModel
from art.core.serialization import storable_problem
from art.planning.output_schemas import output_path_problem, step_output_schema
from art.planning.references import STEP_ID_PATTERN, reference_paths, references_by_argument
from art.tooling.registry import passes_fast_check

if TYPE_CHECKING:
    import networkx as nx
    from jsonschema.exceptions import ValidationError
    from jsonschema.protocols import Validator

    from art.tooling.registry import FastCheck

__all__ = ["Plan", "Step", "ToolCatalog", "validate_plan"]


class ToolCatalog(Protocol):
    """What plan validation needs of a registry: the tool names. `ToolRegistry` also
    offers `get`, `validator` and `fast_check`, used when a catalog has them."""

    def names(self) -> Iterable[str]: ...


# What LLMs write instead of the wire names; mapped before validation.
_STEP_ALIASES: dict[str, str] = {
    "step_id": "id",
    "stepId": "id",
    "arguments": "args",
    "parameters": "args",
    "params": "args",
    "input": "args",
    "dependencies": "depends_on",
    "deps": "depends_on",
    "depends": "depends_on",
    "tool_name": "tool",
    "toolName": "tool",
}
# (alias, field name, field alias): an alias is used only when neither spelling is there.
_STEP_RENAMES = tuple((alias, name, to_camel(name)) for alias, name in _STEP_ALIASES.items())
_STEP_FIELD_KEYS = frozenset({"id", "description", "tool", "args", "depends_on", "dependsOn"})
_NO_TOOL = frozenset({"", "none", "null", "reasoning", "llm"})
_REFERENCE_CACHE = "_art_reference_index"


class Step(ArtModel):
    """One node of the plan: a tool call with arguments, or (tool=None) a reasoning step."""

    id: str
    description: str = ""
    tool: str | None = None
    args: dict[str, Any] = Field(default_factory=dict)
    depends_on: list[str] = Field(default_factory=list)

    # The validators below run for every step of plans of thousands of steps: each
    # checks the type first and does nothing more for the values an LLM usually writes.
    @model_validator(mode="before")
    @classmethod
    def _llm_spellings(cls, value: object) -> object:
        if type(value) is dict and value.keys() <= _STEP_FIELD_KEYS:
            return value  # nothing to rename (pydantic does not change its input)
        if not isinstance(value, Mapping):
            return value
        data = dict(value)
        for alias, name, camel in _STEP_RENAMES:
            if alias in data and name not in data and camel not in data:
                data[name] = data.pop(alias)
        return data

    @field_validator("id", mode="before")
    @classmethod
    def _id_text(cls, value: object) -> object:
        return value if type(value) is str else _int_as_text(value)

    @field_validator("description", mode="before")
    @classmethod
    def _description_text(cls, value: object) -> object:
        return value if type(value) is str else _as_text(value)

    @field_validator("tool", mode="before")
    @classmethod
    def _no_tool(cls, value: object) -> object:
        if isinstance(value, str) and value.strip().lower() in _NO_TOOL:
            return None
        return value

    @field_validator("args", mode="before")
    @classmethod
    def _none_args(cls, value: object) -> object:
        return {} if value is None else value

    @field_validator("depends_on", mode="before")
    @classmethod
    def _none_deps(cls, value: object) -> object:
        return _dependency_ids(value)

    @property
    def references(self) -> list[str]:
        """Step ids referenced in `args`, in order of first appearance."""
        return list(self._reference_index()[1])

    @property
    def all_dependencies(self) -> list[str]:
        """`depends_on` plus every referenced step, without repeats, in a stable order."""
        references = self._reference_index()[1]
        depends_on = self.depends_on
        if not references:
            return list(dict.fromkeys(depends_on))
        # References come without repeats, and a planner usually lists the same steps in
        # `dependsOn` in the same order (a step's inputs): no merge to make then, which
        # a step waiting for dozens of others would otherwise pay while the plan starts.
        if not depends_on or tuple(depends_on) == references:
            return list(references)
        return list(dict.fromkeys([*depends_on, *references]))

    @property
    def referencing_args(self) -> frozenset[str]:
        """Names of the arguments that hold at least one reference."""
        return self._reference_index()[2]

    def _reference_index(self) -> tuple[Mapping[str, object], tuple[str, ...], frozenset[str]]:
        """(args, referenced ids, names of referencing args), worked out once per `args`.

        Validation, the graph and the executor all ask; walking the arguments once
        matters for plans of thousands of steps. Kept in the instance's `vars()` the way
        `functools.cached_property` is (pydantic leaves it out of dumps and equality),
        and recomputed when `args` is replaced (arguments are not edited in place).
        """
        args = self.args
        cache = vars(self)
        cached: tuple[Mapping[str, object], tuple[str, ...], frozenset[str]] | None = cache.get(
            _REFERENCE_CACHE
        )
        if cached is not None and cached[0] is args:
            return cached
        cached = (args, *references_by_argument(args))
        cache[_REFERENCE_CACHE] = cached
        return cached

    @property
    def is_reasoning(self) -> bool:
        return self.tool is None


def _as_text(value: object) -> object:
    """Labels an LLM wrote as null or a number become text; anything else is validated."""
    if value is None:
        return ""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return value


def _int_as_text(value: object) -> object:
    """An id an LLM wrote as a number becomes text; anything else is validated."""
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _dependency_ids(value: object) -> object:
    """`dependsOn` as a list of ids: null is none, one id is a list of one, numbers are text."""
    if isinstance(value, list):
        try:
            "".join(value)  # raises TypeError unless every item is text, the usual case
        except TypeError:
            return [_int_as_text(item) for item in value]
        return value
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return value


class Plan(ArtModel):
    """What the planner wrote: an intent, a title and the steps."""

    intent: str = ""
    title: str = ""
    steps: list[Step] = Field(default_factory=list)

    @field_validator("steps", mode="before")
    @classmethod
    def _none_steps(cls, value: object) -> object:
        return [] if value is None else value

    @field_validator("intent", "title", mode="before")
    @classmethod
    def _label_text(cls, value: object) -> object:
        return _as_text(value)

    # -- lookup -----------------------------------------------------------------------
    def step(self, step_id: str) -> Step:
        """The step with id `step_id`; KeyError naming the known ids otherwise."""
        for step in self.steps:
            if step.id == step_id:
                return step
        known = ", ".join(s.id for s in self.steps) or "none"
        raise KeyError(f"no step {step_id!r} in the plan (steps: {known})")

    @property
    def step_ids(self) -> list[str]:
        return [step.id for step in self.steps]

    # -- graph ------------------------------------------------------------------------
    @property
    def graph(self) -> nx.DiGraph[str]:
        """The DAG: a node per step (attribute `step`), an edge from each dependency.

        Dependencies on steps outside the plan (finished steps of an earlier plan) are
        not nodes; `validate_plan` reports unknown ones.
        """
        import networkx as nx

        graph: nx.DiGraph[str] = nx.DiGraph()
        for step in self.steps:
            if step.id not in graph:
                graph.add_node(step.id, step=step)
        for step in self.steps:
            for dependency in step.all_dependencies:
                if dependency in graph:
                    graph.add_edge(dependency, step.id)
        return graph

    def to_mermaid(self) -> str:
        """The DAG as a Mermaid flowchart (top-down), in step order."""
        lines = ["flowchart TD"]
        node_ids: dict[str, str] = {}
        for index, step in enumerate(self.steps):
            if step.id in node_ids:
                continue
            node_ids[step.id] = _mermaid_id(step.id, index)
            what = step.tool if step.tool is not None else "reasoning"
            label = f"{step.id}: {what}"
            if step.description:
                label = f"{label}<br/>{_shorten(step.description, 60)}"
            lines.append(f'    {node_ids[step.id]}["{_mermaid_text(label)}"]')
        external = sorted({d for s in self.steps for d in s.all_dependencies if d not in node_ids})
        for index, dependency in enumerate(external):
            node_ids[dependency] = _mermaid_id(dependency, len(self.steps) + index)
            lines.append(
                f'    {node_ids[dependency]}(["{_mermaid_text(dependency)}: finished earlier"])'
            )
        seen: set[tuple[str, str]] = set()
        for step in self.steps:
            for dependency in step.all_dependencies:
                edge = (node_ids[dependency], node_ids[step.id])
                if edge not in seen:
                    seen.add(edge)
                    lines.append(f"    {edge[0]} --> {edge[1]}")
        return "\n".join(lines)

    # -- serialization ----------------------------------------------------------------
    def dumps(self) -> str:
        """Deterministic JSON (camelCase, sorted keys): the same plan gives the same bytes."""
        return json.dumps(
            self.model_dump(mode="json", by_alias=True),
            sort_keys=True,
            indent=2,
            ensure_ascii=False,
        )

    @classmethod
    def loads(cls, text: str | bytes) -> Plan:
        """The plan in `text` (what `dumps` wrote, or any wire-format JSON)."""
        return cls.model_validate_json(text)


_MERMAID_SAFE = re.compile(r"[^A-Za-z0-9_]")


def _mermaid_id(step_id: str, index: int) -> str:
    safe = _MERMAID_SAFE.sub("_", step_id)
    # Mermaid reserves some words ("end", "graph", ...); a prefix keeps every id a plain node.
    return f"n_{safe}" if safe == step_id else f"n{index}_{safe}"


def _mermaid_text(text: str) -> str:
    return text.replace('"', "#quot;").replace("\n", " ")


def _shorten(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# -- validation ---------------------------------------------------------------------------


def validate_plan(
    plan: Plan, registry: ToolCatalog, *, completed: Iterable[str] = frozenset()
) -> list[str]:
    """Every problem that stops `plan` from running; empty when it is valid.

    Checks unknown tools, duplicate ids, dependencies on missing steps or on the step
    itself, cycles, references to unknown steps, references into a step's output that
    the tool's `output_schema` says it cannot have (`art.planning.output_schemas`), and arguments
    that break the tool's `input_schema` (arguments built from references are checked
    when the step runs).
    `completed` holds ids of steps that finished in an earlier plan (replanning): they
    may be depended on and referenced, but not defined again.
    """
    done = frozenset(completed)
    problems: list[str] = []
    steps = plan.steps
    defined = {step.id for step in steps}
    tool_names = list(registry.names())
    known_tools = set(tool_names)
    # Each tool's (validator, fast check), looked up once per plan rather than per step.
    checks: dict[str, tuple[Validator | None, FastCheck | None]] = {}
    # Ids a step may depend on with nothing to report: earlier steps, and finished steps
    # the plan does not define again. While every step depends on such ids only, the
    # steps are in running order and cannot form a cycle, so the cycle search is skipped.
    # With duplicate ids no step takes this shortcut (one id would name two steps).
    earlier = set(done - defined) if len(defined) == len(steps) else None
    in_order = earlier is not None

    first_seen: dict[str, int] = {}
    for position, step in enumerate(steps, start=1):
        step_id = step.id
        if not step_id.strip():
            problems.append(f"step {position} has an empty id; give every step an id like 's1'")
        elif step_id in first_seen:
            problems.append(
                f"duplicate step id {step_id!r} (steps {first_seen[step_id]} and {position}); "
                "every step needs its own id"
            )
        else:
            first_seen[step_id] = position
            if STEP_ID_PATTERN.fullmatch(step_id) is None:
                problems.append(
                    f"step {position} has the id {step_id!r}, which a reference "
                    "{{<id>.output}} cannot name; use only letters, digits, '_' and '-' "
                    "(like 's1')"
                )
        if step_id in done:
            problems.append(
                f"step {step_id!r} is already finished in the earlier plan; do not define it "
                f"again (refer to its output as {{{{{step_id}.output}}}} and use a new id)"
            )

        problem = storable_problem(step.args) if step.args else None
        if problem is not None:
            problems.append(f"step {step_id!r}: its args {problem}")

        tool = step.tool
        if tool is not None and tool not in known_tools:
            known = ", ".join(tool_names) if tool_names else "none"
            problems.append(
                f"step {step_id!r} uses unknown tool {tool!r}; known tools: {known} "
                "(use tool null for a reasoning step)"
            )

        _, references, from_references = step._reference_index()
        if earlier is None or not (
            earlier.issuperset(step.depends_on) and earlier.issuperset(references)
        ):
            in_order = False
            problems.extend(_dependency_problems(step, references, defined, done))
        if earlier is not None:
            earlier.add(step_id)

        if tool is not None and tool in known_tools:
            check = checks.get(tool)
            if check is None:
                check = checks[tool] = (_validator(registry, tool), _fast_check(registry, tool))
            validator, fast_check = check
            if validator is not None:
                # Arguments built from references are checked when the step runs.
                static_args = (
                    {k: v for k, v in step.args.items() if k not in from_references}
                    if from_references
                    else step.args
                )
                if not passes_fast_check(fast_check, static_args):
                    problems.extend(_argument_problems(step, validator, static_args))

    if not in_order:
        problems.extend(_cycle_problems(plan))
    problems.extend(_output_reference_problems(plan, registry))
    return problems


def _output_reference_problems(plan: Plan, registry: ToolCatalog) -> list[str]:
    """References into the output of a step whose tool declares what it outputs
    (`art.planning.output_schemas`), to a field or index that output cannot have."""
    get = getattr(registry, "get", None)
    if not callable(get):
        return []
    described: dict[str, tuple[str, Any]] = {}  # step id -> (tool name, output schema)
    for step in plan.steps:
        tool = get(step.tool) if step.tool is not None else None
        if tool is None:
            continue
        schema = step_output_schema(tool.schema)
        if schema:
            described.setdefault(step.id, (tool.schema.name, schema))
    if not described:
        return []

    problems = []
    for step in plan.steps:
        if described.keys().isdisjoint(step._reference_index()[1]):
            continue
        for step_id, path, reference in dict.fromkeys(reference_paths(step.args)):
            if step_id not in described or not path:
                continue
            tool_name, schema = described[step_id]
            problem = output_path_problem(schema, path)
            if problem is not None:
                problems.append(
                    f"step {step.id!r} references {reference}, but {tool_name}'s {problem}"
                )
    return problems


def _dependency_problems(
    step: Step, references: Iterable[str], defined: set[str], done: frozenset[str]
) -> list[str]:
    """Dependencies and references of `step` on itself or on steps that do not exist."""
    problems = []
    label = f"step {step.id!r}"
    for dependency in dict.fromkeys(step.depends_on):
        if dependency == step.id:
            problems.append(f"{label} depends on itself")
        elif dependency not in defined and dependency not in done:
            problems.append(f"{label} depends on {dependency!r}, which is not a step of the plan")
    for reference in references:
        if reference == step.id:
            problems.append(f"{label} references its own output {{{{{step.id}.output}}}}")
        elif reference not in defined and reference not in done:
            problems.append(
                f"{label} references {{{{{reference}.output}}}}, but there is no step {reference!r}"
            )
    return problems


def _cycle_problems(plan: Plan) -> list[str]:
    """A problem per dependency cycle; networkx is asked only once one is known to exist."""
    if _acyclic(plan):
        return []
    import networkx as nx

    graph = plan.graph
    graph.remove_edges_from(list(nx.selfloop_edges(graph)))  # reported as self-dependencies
    problems = []
    order = {step_id: index for index, step_id in enumerate(plan.step_ids)}
    components = [c for c in nx.strongly_connected_components(graph) if len(c) > 1]
    components.sort(key=lambda c: min(order.get(n, 0) for n in c))
    for component in components:
        start = min(component, key=lambda n: order.get(n, 0))
        cycle = nx.find_cycle(graph.subgraph(component), source=start)
        # Edges run from a dependency to its dependent; read backwards, "waits for".
        path = [*(edge[0] for edge in cycle), cycle[0][0]][::-1]
        problems.append(
            "dependency cycle: " + " -> ".join(path) + " (each step waits for the next one, "
            "so none can start; remove one of these dependencies)"
        )
    return problems


def _acyclic(plan: Plan) -> bool:
    """No cycle among the plan's own steps (self-dependencies are reported apart)."""
    dependents: dict[str, set[str]] = {step.id: set() for step in plan.steps}
    for step in plan.steps:
        for dependency in step.all_dependencies:
            if dependency in dependents and dependency != step.id:
                dependents[dependency].add(step.id)
    waiting = dict.fromkeys(dependents, 0)
    for targets in dependents.values():
        for target in targets:
            waiting[target] += 1
    return not never_ready(waiting, dependents)


def never_ready(waiting: Mapping[str, int], dependents: Mapping[str, Iterable[str]]) -> list[str]:
    """Kahn's count: the steps that never become ready, because they are on a cycle or
    wait for one. `waiting` is each step's number of unfinished dependencies,
    `dependents` the steps waiting for each step."""
    counts = dict(waiting)
    ready = [step_id for step_id, count in counts.items() if count == 0]
    while ready:
        for target in dependents.get(ready.pop(), ()):
            counts[target] -= 1
            if counts[target] == 0:
                ready.append(target)
    return [step_id for step_id, count in counts.items() if count > 0]


def _argument_problems(
    step: Step, validator: Validator, static_args: Mapping[str, JsonValue]
) -> list[str]:
    """Schema violations of `static_args`, the arguments of `step` without references."""
    from_references = step.referencing_args
    problems = []
    for error in sorted(
        validator.iter_errors(static_args), key=lambda e: ([str(p) for p in e.path], e.message)
    ):
        if error.validator == "required" and not error.path:
            missing = _missing_required(error)
            if missing in from_references:
                continue  # produced at run time by a reference
        where = "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}" for p in error.path)
        place = f"argument {where[1:]!r}" if where else "arguments"
        message = error.message
        if len(message) > 300:
            message = message[:297] + "..."
        problems.append(f"step {step.id!r} ({step.tool}) {place}: {message}")
    return problems


def _missing_required(error: ValidationError) -> str | None:
    # jsonschema's message is "'name' is a required property"
    match = re.match(r"'(?P<name>.+)' is a required property", error.message)
    return match.group("name") if match else None


def _fast_check(registry: ToolCatalog, name: str) -> FastCheck | None:
    get_fast_check = getattr(registry, "fast_check", None)
    found: FastCheck | None = get_fast_check(name) if callable(get_fast_check) else None
    return found


def _validator(registry: ToolCatalog, name: str) -> Validator | None:
    get_validator = getattr(registry, "validator", None)
    if callable(get_validator):
        validator: Validator | None = get_validator(name)
        if validator is not None:
            return validator
    tool = registry.get(name) if hasattr(registry, "get") else None
    schema = getattr(getattr(tool, "schema", None), "input_schema", None)
    if not isinstance(schema, dict):
        return None
    import jsonschema

    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema)
