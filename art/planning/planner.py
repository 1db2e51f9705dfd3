"""The planner: one LLM call turns a request into a validated Plan, repaired when needed.

`Planner.plan` renders the planning prompt (tool schemas, the thread's earlier turns,
the persona's guidance, the wire format), makes one `art_phase="planning"` call, reads
the plan from the reply (structured output where the model supports it, otherwise JSON
found in the text: code fences, prose, `<think>` blocks and minor damage are handled),
and validates it. Problems go back to the LLM in a repair call, up to
`max_plan_attempts` calls in total; then `PlanError` lists every problem. Bad LLM output
never raises anything else.

`Planner.replan` does the same with `art_phase="replan"` after steps failed: the new
plan holds only the steps still to run and may use the finished steps' outputs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from pydantic import ValidationError
from pydantic_core import from_json

from art.config import ExecutionConfig, Persona
from art.core.json import JsonObject, JsonValue
from art.core.log import get_logger
from art.core.serialization import context_text, escape_unencodable_data, safe_stringify
from art.errors import PlanError
from art.llm.client import LLMClient, LLMPhase
from art.observe.errors import error_data
from art.planning.output_schemas import output_sketch, step_output_schema
from art.planning.plans import Plan, validate_plan

if TYPE_CHECKING:
    from art.engine.context import RunContext
    from art.planning.stream import StepArrivals
    from art.responses import ConversationMessage, StepRecord
    from art.tooling.contract import ToolExample, ToolSchema
    from art.tooling.registry import ToolRegistry

__all__ = [
    "PLAN_JSON_SCHEMA",
    "Planner",
    "extract_plan_data",
    "numbers_in",
    "parse_plan",
    "plan_json_schema",
    "plan_response_format",
    "questions",
    "render_demonstrations",
    "render_planning_messages",
    "render_replan_messages",
    "repair_message",
]

log = get_logger(__name__)

# Labels are short; the bound also stops a small model from writing prose into one.
_LABEL_CHARS = 80


def _label() -> JsonObject:
    return {"type": "string", "maxLength": _LABEL_CHARS}


PLAN_JSON_SCHEMA: JsonObject = {
    "type": "object",
    "properties": {
        "intent": _label(),
        "title": _label(),
        "steps": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "string"},
                    "description": _label(),
                    "tool": {"type": ["string", "null"]},
                    "args": {"type": "object"},
                    "dependsOn": {"type": "array", "items": {"type": "string"}},
                },
                "required": ["id", "description", "tool", "args", "dependsOn"],
            },
        },
    },
    "required": ["intent", "title", "steps"],
}


# What a reference to a step's output looks like in a plan schema: `_ANY_STEP` stands for
# any step id (the plan validator checks that the step exists); a positional schema
# lists the earlier steps' ids instead.
_ANY_STEP = r"[A-Za-z0-9_\-]+"
_PATH = r"([.][A-Za-z0-9_]+)*"
_SCALAR_TYPES = frozenset({"number", "integer", "boolean", "null"})
# The longest plain string argument of a positional (grammar) plan schema.
_STRICT_STRING_CHARS = 100
# More stated numbers than this leave a positional schema's numbers free: each is a
# grammar alternative in every argument of every step.
_STATED_NUMBERS = 64
# Keywords of a scalar's schema a constrained decoder can honour.
_SCALAR_KEYWORDS = ("type", "enum", "const", "minimum", "maximum")


def _reference(steps: str, path: str = _PATH) -> str:
    return r"\{\{(" + steps + r")[.]output" + path + r"\}\}"


def _whole_reference(steps: str, path: str) -> JsonObject:
    """A string that is exactly one reference: it keeps the referenced value's type."""
    return {"type": "string", "pattern": "^" + _reference(steps, path) + "$"}


def _argument_value_schema(
    schema: object,
    steps: str | None = _ANY_STEP,
    path: str = _PATH,
    *,
    strict: bool = False,
    numbers: Collection[str] | None = None,
) -> JsonObject:
    """What a constrained decoder may write for one argument: the tool's type (with its
    enum, bounds, item and property types), or, where `steps` can be referenced, a
    `{{sN.output}}` reference standing for the whole value.

    `strict` makes plain strings unable to hold braces other than references to
    `steps` (a positional schema: a grammar then cannot write an unknown reference).
    With `numbers` (strict only), a number argument is one of them or a single digit,
    and so is every number written in a plain string (see `numbers_in`).
    A schema this cannot read (`$ref`, combinators) allows any value; the plan
    validator checks it.
    """
    if not isinstance(schema, Mapping):
        return {}
    typed = _typed_value_schema(schema, steps, path, strict=strict, numbers=numbers)
    if typed is None:
        return {}
    if steps is None or _is_plain_string(schema):
        return typed  # a plain string holds references inline
    return {"anyOf": [typed, _whole_reference(steps, path)]}


def _is_plain_string(schema: Mapping[str, JsonValue]) -> bool:
    return schema.get("type") == "string" and not ({"enum", "const", "pattern"} & schema.keys())


def _typed_value_schema(
    schema: Mapping[str, JsonValue],
    steps: str | None,
    path: str,
    *,
    strict: bool,
    numbers: Collection[str] | None = None,
) -> JsonObject | None:
    if {"$ref", "anyOf", "oneOf", "allOf", "not"} & schema.keys():
        return None
    if "enum" in schema or "const" in schema:
        return {key: schema[key] for key in ("enum", "const") if key in schema}
    kind = schema.get("type")
    if isinstance(kind, list):
        alternatives = [
            _typed_value_schema({"type": t}, steps, path, strict=strict, numbers=numbers)
            for t in kind
        ]
        return {"anyOf": [alternative or {} for alternative in alternatives]}
    if kind in ("number", "integer") and strict and numbers is not None:
        stated = _numbers_within(schema, numbers)
        if stated:
            return {"enum": stated}
    if kind in _SCALAR_TYPES:
        return {key: schema[key] for key in _SCALAR_KEYWORDS if key in schema}
    if kind == "string":
        if "pattern" in schema or "format" in schema:
            return {"type": "string"}  # the validator checks the pattern
        if not strict:
            return {"type": "string"}
        # No braces but references, no quote, backslash or control character (JSON
        # would need escapes, which small models get wrong).
        text = r'[^{}"\\\x00-\x1F]'
        inline = f"({text}|{_reference(steps, path)})" if steps else text
        least = 1 if schema.get("minLength", 0) else 0
        if numbers is not None:
            # Digits only as whole numbers the conversation states (or single digits),
            # each followed by a character that is not a digit.
            # A dot as `[.]`: llama.cpp's pattern converter misreads an escaped one.
            spelled = [written.replace(".", "[.]") for written in _by_length(numbers)]
            number = "(" + "|".join([*spelled, "[0-9]"]) + ")"
            words = r'[^{}"\\\x00-\x1F0-9]'
            unit = f"({words}|{_reference(steps, path)})" if steps else words
            pattern = f"({number}?{unit}){{{least},{_STRICT_STRING_CHARS}}}{number}?"
            if least:
                pattern = f"{pattern}|{number}"  # a number alone is not empty either
            return {"type": "string", "pattern": f"^({pattern})$"}
        # Bounded: a small model can repeat one character until its token limit, and a
        # reply cut there is not a plan.
        return {"type": "string", "pattern": f"^{inline}{{{least},{_STRICT_STRING_CHARS}}}$"}
    if kind == "array":
        items = schema.get("items")
        shown: JsonObject = {"type": "array"}
        if isinstance(items, Mapping):
            shown["items"] = _argument_value_schema(
                items, steps, path, strict=strict, numbers=numbers
            )
        return shown
    if kind == "object" or "properties" in schema:
        return _arguments_schema(schema, steps, path, strict=strict, numbers=numbers)
    return None


def _arguments_schema(
    input_schema: Mapping[str, JsonValue],
    steps: str | None = _ANY_STEP,
    path: str = _PATH,
    *,
    strict: bool = False,
    numbers: Collection[str] | None = None,
) -> JsonObject:
    """The argument names a tool declares, each with its type; any names when it
    explicitly allows more."""
    properties = input_schema.get("properties")
    if not isinstance(properties, Mapping) or input_schema.get("additionalProperties") not in (
        None,
        False,
    ):
        return {"type": "object"}
    declared = input_schema.get("required", ())
    required: list[JsonValue] = (
        [name for name in declared if name in properties]
        if isinstance(declared, list | tuple)
        else []
    )
    return {
        "type": "object",
        "properties": {
            name: _argument_value_schema(sub, steps, path, strict=strict, numbers=numbers)
            for name, sub in properties.items()
        },
        "required": required,
        "additionalProperties": False,
    }


def _step_schema(
    tool: JsonObject,
    args: JsonObject,
    step_id: JsonObject | None = None,
    depends_on: JsonObject | None = None,
    description: JsonObject | None = None,
) -> JsonObject:
    # Every key required, in this order: constrained decoders write required keys first,
    # so an optional description would come after the arguments, where small models ramble.
    return {
        "type": "object",
        "properties": {
            "id": step_id or {"type": "string"},
            "description": description or _label(),
            "tool": tool,
            "args": args,
            "dependsOn": depends_on or {"type": "array", "items": {"type": "string"}},
        },
        "required": ["id", "description", "tool", "args", "dependsOn"],
        "additionalProperties": False,
    }


def _step_variants(
    registry: ToolRegistry,
    steps: str | None = _ANY_STEP,
    path: str = _PATH,
    *,
    step_id: JsonObject | None = None,
    depends_on: JsonObject | None = None,
    description: JsonObject | None = None,
    strict: bool = False,
    numbers: Collection[str] | None = None,
) -> JsonObject:
    variants: list[JsonObject] = [
        _step_schema(
            {"const": schema.name},
            _arguments_schema(
                schema.input_schema or {}, steps, path, strict=strict, numbers=numbers
            ),
            step_id,
            depends_on,
            description,
        )
        for schema in registry.schemas()
    ]
    reasoning_args: JsonObject = {"const": {}} if strict else {"type": "object"}
    variants.append(
        _step_schema({"type": "null"}, reasoning_args, step_id, depends_on, description)
    )
    return variants[0] if len(variants) == 1 else {"anyOf": [*variants]}


def plan_json_schema(
    registry: ToolRegistry,
    *,
    max_steps: int | None = None,
    descriptions: Sequence[str] = (),
    numbers: Collection[str] | None = None,
) -> JsonObject:
    """The plan schema for the tools in `registry`: one step shape per tool.

    A step names a registered tool (or null, a reasoning step) and writes that tool's
    arguments with their types, enums and required names, or a `{{sN.output}}`
    reference where a value may come from another step, so a constrained decoder cannot
    invent a tool, an argument or a type; small local models otherwise do exactly that.

    With `max_steps`, the schema is positional, for decoders that enforce all of it (the
    in-process models' grammars): at most `max_steps` steps with the ids s1, s2, ... in
    order, each depending on and referencing earlier steps only (the whole output, no
    field path), so every plan it allows passes validation. With `descriptions` too (the
    questions of a request that asks several), the first steps are described by them, one
    each, in order: the model then writes one step per question. With `numbers` too (the
    numbers the conversation states, see `numbers_in`), the numbers a step writes are
    these or single digits: a small model otherwise copies them from its demonstrations.
    A step described by a question takes that question's numbers, not another's (with
    the `numbers` no question states, such as an earlier turn's); more than 64 numbers
    leave them free. `PLAN_JSON_SCHEMA` is the shape without the tools.
    """
    if numbers is not None and len(set(numbers)) > _STATED_NUMBERS:
        numbers = None
    asked = [set(numbers_in(question)) for question in descriptions]
    if max_steps is None:
        steps: JsonObject = {"type": "array", "items": _step_variants(registry)}
    else:
        positions: list[JsonValue] = []
        for index in range(1, max_steps + 1):
            earlier = [f"s{n}" for n in range(1, index)]
            allowed: list[JsonValue] = list(earlier)
            positions.append(
                _step_variants(
                    registry,
                    "|".join(earlier) or None,
                    "",
                    step_id={"const": f"s{index}"},
                    description=(
                        {"const": _clip(descriptions[index - 1], _LABEL_CHARS)}
                        if index <= len(descriptions)
                        else None
                    ),
                    depends_on=(
                        {"type": "array", "items": {"enum": allowed}, "maxItems": len(earlier)}
                        if earlier
                        else {"const": []}
                    ),
                    strict=True,
                    numbers=_step_numbers(numbers, asked, index),
                )
            )
        # Any prefix of the positions: art.adapters.local turns this into a grammar.
        steps = {
            "type": "array",
            "prefixItems": positions,
            "items": False,
            "minItems": min(len(descriptions), max_steps),
        }
    return {
        "type": "object",
        "properties": {"intent": _label(), "title": _label(), "steps": steps},
        "required": ["intent", "title", "steps"],
        "additionalProperties": False,
    }


def _step_numbers(
    numbers: Collection[str] | None, asked: Sequence[set[str]], index: int
) -> Collection[str] | None:
    """The numbers step `index` (from 1) may write: a step that answers one of the
    questions takes that question's, and those no question states."""
    if numbers is None or index > len(asked):
        return numbers
    elsewhere = set().union(*asked)
    return asked[index - 1] | (set(numbers) - elsewhere)


_NUMBER = re.compile(r"\d+(?:,\d{3})*(?:\.\d+)?")


def numbers_in(text: str) -> list[str]:
    """The numbers `text` states, as written and without thousands separators
    ("1,200.5 and 3" gives ["1,200.5", "1200.5", "3"])."""
    found: list[str] = []
    for match in _NUMBER.finditer(text):
        for written in (match.group(), match.group().replace(",", "")):
            if written not in found:
                found.append(written)
    return found


def _by_length(numbers: Collection[str]) -> list[str]:
    """Longest first, so a regular expression tries `1764` before `17`."""
    return sorted(set(numbers), key=lambda n: (-len(n), n))


def _numbers_within(schema: Mapping[str, JsonValue], numbers: Collection[str]) -> list[JsonValue]:
    """The stated `numbers` and single digits that `schema` (number or integer, with its
    bounds) accepts, as JSON numbers."""
    minimum, maximum = schema.get("minimum"), schema.get("maximum")
    values: list[JsonValue] = []
    for written in [*_by_length(numbers), *map(str, range(10))]:
        plain = written.replace(",", "")
        value: int | float = float(plain) if "." in plain else int(plain)
        if schema.get("type") == "integer" and isinstance(value, float):
            continue
        if isinstance(minimum, int | float) and value < minimum:
            continue
        if isinstance(maximum, int | float) and value > maximum:
            continue
        if value not in values:
            values.append(value)
    return values


def plan_response_format(
    registry: ToolRegistry,
    *,
    max_steps: int | None = None,
    descriptions: Sequence[str] = (),
    numbers: Collection[str] | None = None,
) -> JsonObject:
    """The `response_format` of a planning call over the tools in `registry` (positional
    with `max_steps`, see `plan_json_schema`)."""
    schema = plan_json_schema(
        registry, max_steps=max_steps, descriptions=descriptions, numbers=numbers
    )
    return {
        "type": "json_schema",
        "json_schema": {"name": "plan", "schema": schema, "strict": False},
    }


# Prompt budgets: earlier turns and failed replies are clipped so small models keep room.
_HISTORY_TURNS = 10
_HISTORY_CHARS = 600
_REPLY_ECHO_CHARS = 4000
_PROBLEMS_SHOWN = 30
# Schema keywords that cost tokens and do not change which arguments a planner writes.
_SCHEMA_NOISE = frozenset(
    {"title", "$schema", "additionalProperties", "examples", "default", "minLength",
     "maxLength", "minItems", "maxItems", "uniqueItems"}
)  # fmt: skip
# Dropped as well when the prompt must shrink to fit a small context window.
_COMPACT_NOISE = _SCHEMA_NOISE | {"description", "pattern", "format"}
_SHORT_DESCRIPTION_CHARS = 160
# A tool's examples without a description are shown in its entry (the compact prompt
# keeps the first); those with one (the request they answer) are candidates for the
# demonstration turns, at most _DEMONSTRATIONS of them (see render_demonstrations).
_EXAMPLES_SHOWN = 3
_DEMONSTRATIONS = 4
_EXAMPLE_OUTPUT_CHARS = 120

_INSTRUCTIONS = """\
You plan how to answer the user's request with the tools below. Reply with one JSON \
object, the plan, and nothing else. Do not answer the request yourself: the answer is \
written from the step outputs after the plan has run."""

_FORMAT = """\
Plan format (an example; its tools are only an illustration):
{"intent":"compare two prices","title":"Total price","steps":[
{"id":"s1","description":"Price of A","tool":"get_price","args":{"item":"A"},"dependsOn":[]},
{"id":"s2","description":"Price of B","tool":"get_price","args":{"item":"B"},"dependsOn":[]},
{"id":"s3","description":"Add them","tool":"calculator",\
"args":{"expression":"{{s1.output}} + {{s2.output}}"},"dependsOn":["s1","s2"]}]}"""

_RULES = """\
Rules:
1. Use only the tools listed, with args that match their parameters.
2. Steps that do not need each other's output must not depend on each other: they run \
at the same time. dependsOn lists only the steps whose output a step needs.
3. To pass a step's output on, write "{{s1.output}}" in the argument \
("{{s1.output.field}}" or "{{s1.output.0}}" for a part) and list s1 in dependsOn. \
Never add a step just to copy, compute or format a value that a reference can carry.
4. "tool":null is a reasoning step (an LLM reads its dependencies' outputs). Use it only \
when real judgment is needed, never to write the final answer.
5. If no tool is needed, reply {"intent":"...","title":"...","steps":[]}."""


# -- prompt -------------------------------------------------------------------------------


def _compact_schema(value: JsonValue, noise: frozenset[str] = _SCHEMA_NOISE) -> JsonValue:
    """The schema without keywords in `noise` (property names are kept, whatever they are)."""
    if isinstance(value, Mapping):
        return _compact_object(value, noise)
    if isinstance(value, list):
        return [_compact_schema(item, noise) for item in value]
    return value


def _compact_object(value: Mapping[str, JsonValue], noise: frozenset[str]) -> JsonObject:
    """`_compact_schema` of a schema object."""
    compact: JsonObject = {}
    for key, item in value.items():
        if key in ("properties", "patternProperties", "$defs", "definitions") and isinstance(
            item, Mapping
        ):
            compact[key] = {name: _compact_schema(sub, noise) for name, sub in item.items()}
        elif key not in noise:
            compact[key] = _compact_schema(item, noise)
    return compact


def _short(description: str) -> str:
    """The first sentence of a description, at most _SHORT_DESCRIPTION_CHARS long."""
    first = re.split(r"(?<=[.!?])\s", description, maxsplit=1)[0]
    return _clip(first, _SHORT_DESCRIPTION_CHARS)


def _compact_json(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


_ON_APPROVAL_NOTE = " [asks a human to approve, then runs with the approved arguments]"
_MODE_NOTES = {
    "blocking": " [asks a human to approve; the run waits for the decision]",
    "display": " [shows its output to the user; the output is not in the answer's context]",
}


def render_tools(registry: ToolRegistry, *, compact: bool = False) -> str:
    """One entry per tool: name, description, parameters as compact JSON, and what a
    step of the tool outputs when that is known (see `art.planning.output_schemas`).

    `compact` keeps only each description's first sentence and drops parameter
    descriptions, for models with a small context window.
    """
    lines = []
    for schema in registry.schemas():
        description = " ".join(schema.description.split())
        if compact:
            description = _short(description)
        note = _ON_APPROVAL_NOTE if schema.runs_on_approval else _MODE_NOTES.get(schema.mode, "")
        lines.append(f"- {schema.name}: {description}{note}")
        noise = _COMPACT_NOISE if compact else _SCHEMA_NOISE
        parameters = _compact_object(schema.input_schema or {}, noise)
        properties = parameters.get("properties") or {}
        required = parameters.get("required")
        extra = {k: v for k, v in parameters.items() if k not in ("type", "properties", "required")}
        args = _compact_json(properties) if properties else "{}"
        line = f"  args: {args}"
        if isinstance(required, list | tuple) and required:
            line += f"; required: {', '.join(str(r) for r in required)}"
        if extra:
            line += f"; schema: {_compact_json(extra)}"
        lines.append(line)
        returns = step_output_schema(schema)
        if returns:
            lines.append(f"  returns: {_compact_json(output_sketch(returns))}")
        plain = [example for example in schema.examples if not example.description]
        for example in plain[: 1 if compact else _EXAMPLES_SHOWN]:
            shown = f"  example: args {_compact_json(example.input)}"
            if example.output is not None:
                shown += f" -> output {_clip(_compact_json(example.output), _EXAMPLE_OUTPUT_CHARS)}"
            lines.append(shown)
    return "\n".join(lines) if lines else "(no tools: every plan has no tool steps)"


def _history_text(history: Sequence[ConversationMessage]) -> str:
    turns = [m for m in history if m.role in ("user", "assistant") and m.content]
    lines = []
    for message in turns[-_HISTORY_TURNS:]:
        content = " ".join(message.content.split())
        if len(content) > _HISTORY_CHARS:
            content = content[: _HISTORY_CHARS - 1] + "…"
        lines.append(f"{'User' if message.role == 'user' else 'Assistant'}: {content}")
    return "\n".join(lines)


def _system_prompt(
    registry: ToolRegistry,
    persona: Persona | None,
    now: datetime | None,
    compact: bool = False,
    context: Mapping[str, object] | None = None,
) -> str:
    persona = persona or Persona()
    today = (now or datetime.now(UTC)).strftime("%Y-%m-%d")
    parts = [
        _INSTRUCTIONS,
        "Tools:\n" + render_tools(registry, compact=compact),
        _FORMAT,
        _RULES,
    ]
    if persona.planning.strip():
        parts.append("Guidance:\n" + persona.planning.strip())
    if context:
        parts.append(context_text(context))
    parts.append(f"Today is {today}.")
    return "\n\n".join(parts)


_WORD = re.compile(r"[^\W_]+|[-+*/^%=<>]")
# Words too common to tell two requests apart.
_COMMON_WORDS = frozenset(
    {"a", "an", "and", "are", "as", "at", "be", "by", "can", "do", "does", "for", "from",
     "how", "i", "in", "is", "it", "me", "my", "of", "on", "or", "please", "the", "then",
     "to", "what", "which", "with", "you"}
)  # fmt: skip


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _COMMON_WORDS}


def _likeness(query_words: set[str], schema: ToolSchema, example: ToolExample) -> int:
    text = f"{example.description} {schema.name} {_compact_json(example.input)}"
    return len(query_words & _words(text))


def render_demonstrations(registry: ToolRegistry, query: str = "") -> list[dict[str, str]]:
    """Worked examples as chat turns: a request, then the one-step plan that answers it.

    Built from the tools' examples that have a description (the request they answer)
    and an input the tool's schema accepts: for each tool the one most like `query`,
    for the `_DEMONSTRATIONS` tools whose example is most like it, the likest last.
    Small models follow a demonstrated turn far better than a written format, and
    copy the nearest one most.
    """
    query_words = _words(query)
    candidates: list[tuple[int, int, ToolSchema, ToolExample]] = []
    for position, schema in enumerate(registry.schemas()):
        scored = [
            (_likeness(query_words, schema, example), example)
            for example in schema.examples
            if example.description and not registry.validate_input(schema.name, example.input)
        ]
        if scored:
            score, example = max(scored, key=lambda item: item[0])
            # Ties keep registration order: an earlier tool comes later, nearer the query.
            candidates.append((score, -position, schema, example))
    candidates.sort(key=lambda item: (item[0], item[1]))
    messages: list[dict[str, str]] = []
    for _score, _position, schema, example in candidates[-_DEMONSTRATIONS:]:
        messages += _demonstration([(schema, example)])
    asked = questions(query)
    if len(asked) > 1:
        # A request of several questions gets one step per question: small models copy
        # the shape of the nearest demonstration, so the nearest has a step per question,
        # each an example like that question, in the request's order.
        examples = [
            (schema, example)
            for schema in registry.schemas()
            for example in schema.examples
            if example.description and not registry.validate_input(schema.name, example.input)
        ]
        chosen: list[tuple[ToolSchema, ToolExample]] = []
        for question in asked[:_DEMONSTRATIONS]:
            words = _words(question)
            unused = [pair for pair in examples if all(pair[1] is not c[1] for c in chosen)]
            if unused:  # ties keep registration order
                chosen.append(max(unused, key=lambda pair: _likeness(words, *pair)))
        if len(chosen) >= 2:
            messages += _demonstration(chosen)
    return messages


# "..., and what is ...", "...? How ...": where a request holding several questions
# moves on to the next one.
_NEXT_QUESTION = re.compile(
    r"(?:[,;]\s*and\s+|\?\s+)(?=(?:what|how|which|who|where|when|is|are|do|does)\b)",
    re.IGNORECASE,
)


def questions(request: str) -> list[str]:
    """The questions a request asks, each on its own ("What is 17 * 23 + 12, and what
    is the square root of 1764?" asks two); a request of one question gives one."""
    parts = [part.strip(" ,;") for part in _NEXT_QUESTION.split(request.strip())]
    parts = [part for part in parts if part]
    if len(parts) < 2:
        return [request.strip()]
    return [part[:1].upper() + part[1:].rstrip("?") + "?" for part in parts]


def _request_text(request: str) -> str:
    """The request as the planner reads it: several questions are listed one a line,
    each after the id of the step that answers it, so that a small model writes one
    step per question (after `"id":"s2","description":"` it copies what follows `s2:`)."""
    asked = questions(request)
    if len(asked) < 2:
        return f"Request: {request}"
    listed = "\n".join(f"s{number}: {question}" for number, question in enumerate(asked, 1))
    return f"Request: {request}\nSteps:\n{listed}"


def _demonstration(examples: Sequence[tuple[ToolSchema, ToolExample]]) -> list[dict[str, str]]:
    """A request made of the examples' requests, and the plan of one step per example."""
    requests = [" ".join((example.description or "").split()) for _, example in examples]
    request = requests[0]
    for more in requests[1:]:
        request = f"{request.rstrip('?.!')}, and {more[:1].lower()}{more[1:]}"
    plan = {
        "intent": _clip(request, _LABEL_CHARS),
        "title": _clip(request, _LABEL_CHARS),
        "steps": [
            {
                "id": f"s{index}",
                # The question the step answers: a model writes the description before
                # the arguments, and a description of its own question leads to them.
                "description": _clip(question, _LABEL_CHARS),
                "tool": schema.name,
                "args": example.input,
                "dependsOn": [],
            }
            for index, ((schema, example), question) in enumerate(
                zip(examples, requests, strict=True), start=1
            )
        ],
    }
    return [
        {"role": "user", "content": _request_text(request)},
        {"role": "assistant", "content": _compact_json(plan)},
    ]


def render_planning_messages(
    query: str,
    registry: ToolRegistry,
    history: Sequence[ConversationMessage] = (),
    persona: Persona | None = None,
    *,
    now: datetime | None = None,
    compact: bool = False,
    context: Mapping[str, object] | None = None,
) -> list[dict[str, str]]:
    """The messages of the planning call: instructions and tools, the demonstrations
    (see `render_demonstrations`), then the request.

    `compact` shortens the tool descriptions (see `render_tools`); `context` is the
    run's system context.
    """
    user_parts = []
    earlier = _history_text(history)
    if earlier:
        user_parts.append(
            "Earlier in this conversation (use it to understand follow-ups):\n" + earlier
        )
    user_parts.append(_request_text(query))
    return [
        {"role": "system", "content": _system_prompt(registry, persona, now, compact, context)},
        *render_demonstrations(registry, query),
        {"role": "user", "content": "\n\n".join(user_parts)},
    ]


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _stringify(value: object, max_length: int) -> str:
    return safe_stringify(value, max_length=max_length)


def render_replan_messages(
    query: str,
    registry: ToolRegistry,
    history: Sequence[ConversationMessage],
    persona: Persona | None,
    previous: Plan,
    records: Mapping[str, StepRecord],
    *,
    max_output_length: int = 60_000,
    now: datetime | None = None,
    compact: bool = False,
    context: Mapping[str, object] | None = None,
) -> list[dict[str, str]]:
    """The messages of the replanning call: the request, what finished, what failed."""
    steps = {step.id: step for step in previous.steps}
    finished, failed, not_run = [], [], []
    for step in previous.steps:
        record = records.get(step.id)
        tool = step.tool or "reasoning"
        head = f"- {step.id} ({tool})" + (f" {step.description}" if step.description else "")
        if record is not None and record.status == "completed":
            finished.append(f"{head}: {_stringify(record.output, max_output_length)}")
        elif record is not None and record.status == "failed":
            reason = record.reason or (record.result.error if record.result else None)
            failed.append(f"{head} failed: {reason or 'no reason recorded'}")
        else:
            status = record.status if record is not None else "pending"
            why = record.reason if record is not None and record.reason else status
            not_run.append(f"{head}: not run ({why})")
    for step_id, record in records.items():  # finished steps of plans before `previous`
        if step_id not in steps and record.status == "completed":
            output = _stringify(record.output, max_output_length)
            finished.append(f"- {step_id} ({record.tool or 'reasoning'}): {output}")

    parts = []
    earlier = _history_text(history)
    if earlier:
        parts.append("Earlier in this conversation (use it to understand follow-ups):\n" + earlier)
    parts += [
        f"Request: {query}",
        f"The earlier plan ({previous.title or 'untitled'}) did not finish.",
    ]
    if finished:
        parts.append(
            "Finished steps (use their outputs as {{id.output}}; do not run them again):\n"
            + "\n".join(finished)
        )
    if failed:
        parts.append("Failed steps:\n" + "\n".join(failed))
    if not_run:
        parts.append("Steps that did not run:\n" + "\n".join(not_run))
    parts.append(
        "Write a new plan with only the steps still needed to answer the request. New "
        "steps may depend on and reference the finished steps; do not reuse their ids. "
        "Do not repeat a failed step unchanged: fix its arguments or use another way."
    )
    return [
        {"role": "system", "content": _system_prompt(registry, persona, now, compact, context)},
        {"role": "user", "content": "\n\n".join(parts)},
    ]


def repair_message(problems: Sequence[str]) -> str:
    """The user message that sends a plan's problems back to the LLM."""
    shown = [f"{n}. {p}" for n, p in enumerate(problems[:_PROBLEMS_SHOWN], start=1)]
    if len(problems) > _PROBLEMS_SHOWN:
        shown.append(f"... and {len(problems) - _PROBLEMS_SHOWN} more problems")
    return (
        "That plan cannot run. Problems:\n"
        + "\n".join(shown)
        + "\n\nReply with the corrected plan: one JSON object in the same format, nothing else."
    )


# -- reading the reply --------------------------------------------------------------------

_THINK_BLOCK = re.compile(r"<(think|thinking|reasoning)>.*?</\1>", re.DOTALL | re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</(?:think|thinking|reasoning)>", re.IGNORECASE)
_THINK_OPEN = re.compile(r"<(?:think|thinking|reasoning)>", re.IGNORECASE)
_FENCE = re.compile(r"```[A-Za-z0-9_+-]*[ \t]*\n?(.*?)(?:```|\Z)", re.DOTALL)


def _strip_thinking(text: str) -> str:
    if "<" not in text:  # no tag: skips three case-blind scans of a long reply
        return text.strip()
    text = _THINK_BLOCK.sub("", text)
    closes = list(_THINK_CLOSE.finditer(text))
    if closes:  # the opening tag was in the chat template: keep what follows the last close
        text = text[closes[-1].end() :]
    opened = _THINK_OPEN.search(text)
    if opened:  # cut off while thinking: nothing after it is an answer
        text = text[: opened.start()]
    return text.strip()


def _candidates(text: str) -> Iterable[str]:
    """Pieces of the reply that may hold the plan, most likely first."""
    if "`" in text:  # a one-character `in` (memchr) is faster than the pattern's own scan
        for match in _FENCE.finditer(text):
            block = match.group(1).strip()
            if block:
                yield block
    yield text
    start = text.find("{")
    if start > 0:
        end = text.rfind("}")
        if end > start:
            yield text[start : end + 1]
        yield text[start:]


_TOO_DEEP = object()
# json_repair slows down sharply on deep nesting; no real plan comes close to this.
_MAX_REPAIR_DEPTH = 100
_BRACKETS = re.compile(r"[\[\]{}]")


def _nesting_depth(text: str) -> int:
    depth = deepest = 0
    for bracket in _BRACKETS.findall(text):
        if bracket in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth = max(0, depth - 1)
    return deepest


def _loads(candidate: str) -> object:
    """The JSON value in `candidate`, repaired if needed; None or _TOO_DEEP when hopeless."""
    try:
        # pydantic-core's parser is faster than json's; it refuses a few texts json reads
        # (lone surrogates, nesting deeper than 200), which the fallback below takes.
        return from_json(candidate)
    except (ValueError, TypeError):  # TypeError: a str that is not valid UTF-8
        pass
    try:
        return json.loads(candidate)
    except RecursionError:
        return _TOO_DEEP
    except ValueError:
        pass
    if _nesting_depth(candidate) > _MAX_REPAIR_DEPTH:
        return _TOO_DEEP
    import json_repair

    try:
        return json_repair.loads(candidate, skip_json_loads=True)
    except RecursionError:
        return _TOO_DEEP
    except Exception:  # the repair library gives up on some garbage
        return None


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _may_hold_surrogates(text: str) -> bool:
    """Whether JSON read from `text` can hold surrogates: a `\\ud800`-style escape, or a
    raw one in the text. Most replies have neither, and then the plan needs no walk."""
    # As in _candidates, `in` first: a one-character `in` is faster than the pattern scan.
    if "\\" in text and _SURROGATE_ESCAPE.search(text):
        return True
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _plan_object(value: object) -> JsonObject | None:
    if isinstance(value, dict):
        if "steps" in value:
            return value
        inner = value.get("plan")
        if isinstance(inner, dict) and "steps" in inner:
            return inner
    return None


def _describe(value: object) -> str:
    if value is None or value == "":
        return "no JSON at all"
    if isinstance(value, dict):
        keys = ", ".join(repr(k) for k in list(value)[:6])
        return f"an object with keys [{keys}]" if value else "an empty object {}"
    if isinstance(value, list):
        return f"a JSON list of {len(value)} items"
    return f"the JSON value {_clip(repr(value), 60)}"


def extract_plan_data(text: str) -> tuple[JsonObject | None, list[str]]:
    """The plan object in an LLM reply, or None and the problem that says why not."""
    if not text or not text.strip():
        return None, ["the reply was empty; expected a JSON plan object"]
    answer = _strip_thinking(text)
    if not answer:
        return None, ["the reply had only thinking, no JSON plan object after it"]
    first_value: object = None
    too_deep = False
    for candidate in _candidates(answer):
        value = _loads(candidate)
        if value is _TOO_DEEP:
            too_deep = True
            continue
        plan = _plan_object(value)
        if plan is not None:
            return (escape_unencodable_data(plan) if _may_hold_surrogates(candidate) else plan), []
        if first_value in (None, "") and value not in (None, ""):
            first_value = value
    if too_deep and first_value in (None, ""):
        return None, [
            f"the reply's JSON is nested too deeply (over {_MAX_REPAIR_DEPTH} levels) "
            "or is badly broken; write a flat plan object"
        ]
    return None, [
        f'the reply has no plan object: expected a JSON object with a "steps" list, '
        f"found {_describe(first_value)}"
    ]


def _validation_problems(error: ValidationError, data: Mapping[str, object]) -> list[str]:
    problems = []
    for item in error.errors()[:_PROBLEMS_SHOWN]:
        location = ""
        for part in item["loc"]:
            location += f"[{part}]" if isinstance(part, int) else f".{part}"
        location = location.lstrip(".") or "plan"
        if location.startswith("steps["):
            index = item["loc"][1]
            steps = data.get("steps")
            if isinstance(index, int) and isinstance(steps, list) and index < len(steps):
                step = steps[index]
                if isinstance(step, Mapping) and "id" in step:
                    location += f" (step {_clip(str(step['id']), 40)!r})"
        got = _clip(repr(item.get("input")), 80)
        problems.append(f"{location}: {item['msg']} (got {got})")
    return problems


def parse_plan(
    text: str,
    registry: ToolRegistry,
    *,
    completed: Iterable[str] = frozenset(),
    arrivals: StepArrivals | None = None,
    offer: bool = True,
) -> tuple[Plan | None, list[str]]:
    """Read and validate the plan in an LLM reply: (plan, []) or (plan or None, problems).

    With `arrivals` (a streamed reply) the steps already taken are kept in the plan and
    its steps not taken yet are offered to them first (unless `offer` is False).
    Never raises for bad input: anything wrong with the reply becomes a problem.
    """
    try:
        data, problems = extract_plan_data(text)
        if data is None:
            return None, problems
        try:
            plan = Plan.model_validate(data)
        except ValidationError as exc:
            return None, _validation_problems(exc, data)
        streamed: list[str] = []
        if arrivals is not None:
            plan, streamed = arrivals.finish(plan, offer=offer)
        return plan, streamed + validate_plan(plan, registry, completed=completed)
    except RecursionError:
        return None, ["the plan is nested too deeply to read; keep arguments flat"]
    except Exception as exc:  # a reply must never crash the planner
        log.warning("plan could not be read", error=repr(exc)[:200])
        return None, [f"the plan could not be read ({type(exc).__name__}); write plain JSON"]


# -- the planner --------------------------------------------------------------------------

_UNKNOWN = object()
# Providers whose decoder enforces the whole response schema as a grammar (the in-process
# models of art.adapters.local): they get the positional plan schema, in which every plan
# is valid, for plans of up to _GRAMMAR_STEPS steps. Hosted providers get the compact one.
_GRAMMAR_PROVIDERS = ("local/",)
_GRAMMAR_STEPS = 6
# Context windows up to this size are worth measuring the prompt against.
_SMALL_WINDOW = 16_384


class Planner:
    """Writes plans with one LLM call, repairing invalid ones with further calls."""

    def __init__(
        self,
        llm: LLMClient,
        registry: ToolRegistry,
        *,
        persona: Persona | None = None,
        model: str,
        structured_output: bool | None = None,
    ) -> None:
        self.llm = llm
        self.registry = registry
        self.persona = persona or Persona()
        self.model = model
        # None: ask the model on the first call.
        self._structured: bool | None = structured_output
        # (tool names, response_format): rebuilt only when tools are registered.
        self._format: tuple[tuple[str, ...], JsonObject] | None = None
        self._window: int | object | None = _UNKNOWN

    def _response_format(
        self, query: str | None = None, history: Sequence[ConversationMessage] = ()
    ) -> JsonObject | None:
        """The planning call's schema; `query` (and the thread's `history`) is given for
        a first plan (not a replan, whose steps follow finished ones)."""
        if self._structured is None:
            self._structured = self.llm.supports_response_schema(self.model)
        if not self._structured:
            return None
        if query is not None and self.model.startswith(_GRAMMAR_PROVIDERS):
            asked = questions(query)
            return plan_response_format(
                self.registry,
                max_steps=_GRAMMAR_STEPS,
                descriptions=asked if len(asked) > 1 else (),
                # The numbers of the conversation as the prompt shows it.
                numbers=numbers_in(f"{_history_text(history)}\n{query}"),
            )
        tools = tuple(self.registry.names())
        if self._format is None or self._format[0] != tools:
            self._format = (tools, plan_response_format(self.registry))
        return self._format[1]

    async def plan(
        self, run: RunContext, query: str, history: Sequence[ConversationMessage] = ()
    ) -> Plan:
        """A valid plan for `query`; raises PlanError (or ModelError from the provider)."""
        messages = self._planning_messages(run, query, history)
        return await self._plan_and_repair(
            run, "planning", messages, frozenset(), query=query, history=history
        )

    async def plan_streamed(
        self,
        run: RunContext,
        query: str,
        history: Sequence[ConversationMessage],
        arrivals: StepArrivals,
    ) -> Plan:
        """As `plan`, streaming the reply: each step is handed to `arrivals` as soon as
        its JSON object is complete and valid, and repairs keep the steps handed on."""
        messages = self._planning_messages(run, query, history)
        return await self._plan_and_repair(
            run, "planning", messages, frozenset(), arrivals, query=query, history=history
        )

    def _planning_messages(
        self, run: RunContext, query: str, history: Sequence[ConversationMessage]
    ) -> list[dict[str, str]]:
        def render(compact: bool) -> list[dict[str, str]]:
            return render_planning_messages(
                query,
                self.registry,
                history,
                self.persona,
                compact=compact,
                context=run.system_context,
            )

        return self._fit(render)

    async def replan(
        self,
        run: RunContext,
        query: str,
        history: Sequence[ConversationMessage],
        previous: Plan,
        records: Mapping[str, StepRecord],
    ) -> Plan:
        """A plan of the steps still to run after `previous` failed part-way.

        Its steps may depend on and reference the completed steps in `records`, and
        must not redefine them.
        """
        completed = frozenset(sid for sid, r in records.items() if r.status == "completed")

        def render(compact: bool) -> list[dict[str, str]]:
            return render_replan_messages(
                query,
                self.registry,
                history,
                self.persona,
                previous,
                records,
                max_output_length=run.config.tool_result_max_length,
                compact=compact,
                context=run.system_context,
            )

        return await self._plan_and_repair(run, "replan", self._fit(render), completed)

    def _fit(self, render: Callable[[bool], list[dict[str, str]]]) -> list[dict[str, str]]:
        """The full prompt, or the compact one when the full one would take more than
        half of a small model's context window (the plan and a repair turn need the rest)."""
        messages = render(False)
        if self._window is _UNKNOWN:
            self._window = self.llm.context_window(self.model)
        window = self._window
        if not isinstance(window, int) or window > _SMALL_WINDOW:
            return messages
        if self.llm.count_tokens(self.model, messages) <= window // 2:
            return messages
        return render(True)

    async def _plan_and_repair(
        self,
        run: RunContext,
        phase: LLMPhase,
        messages: list[dict[str, str]],
        completed: frozenset[str],
        arrivals: StepArrivals | None = None,
        *,
        query: str | None = None,
        history: Sequence[ConversationMessage] = (),
    ) -> Plan:
        attempts = run.config.max_plan_attempts
        response_format = self._response_format(query, history)
        conversation = messages
        problems: list[str] = []
        for attempt in range(1, attempts + 1):
            if arrivals is not None:
                arrivals.reader()  # a fresh reader for this reply
            result = await self.llm.complete(
                run,
                phase=phase,
                model=self.model,
                messages=conversation,
                span=run.span.child(),
                response_format=response_format,
                on_text=arrivals.feed if arrivals is not None else None,
            )
            plan, problems = parse_plan(
                result.content,
                self.registry,
                completed=completed,
                arrivals=arrivals,
                # A cut-off reply's last step may be cut short: only complete ones run.
                offer=result.finish_reason != "length",
            )
            if plan is not None:
                problems = [*problems, *_size_problems(plan, run.config)]
            if result.finish_reason == "length":
                problems = [
                    "the reply was cut off (the model hit its output limit); "
                    "write a shorter plan with fewer, simpler steps",
                    *problems,
                ]
            if plan is not None and not problems:
                return plan
            log.info("plan rejected", phase=phase, attempt=attempt, problems=problems)
            log.debug("rejected plan reply", phase=phase, attempt=attempt, reply=result.content)
            if attempt < attempts:  # the last rejection is the run's own PLAN_INVALID error
                await run.events.emit(
                    "error",
                    error_data(
                        "planning",
                        "PLAN_INVALID",
                        f"plan rejected (attempt {attempt} of {attempts}); "
                        f"asking for a repair: {'; '.join(problems[:5])}",
                        recoverable=True,
                        phase=phase,
                        suggestion="the planner is asked to repair its plan",
                        problems=problems,
                        attempt=attempt,
                    ),
                    thread_id=run.thread_id,
                    run_id=run.run_id,
                    span=run.span,
                )
            repair = repair_message(problems)
            if arrivals is not None and arrivals.taken:
                repair = f"{repair}\n{arrivals.repair_note()}"
            conversation = [
                *messages,
                {"role": "assistant", "content": _clip(result.content, _REPLY_ECHO_CHARS)},
                {"role": "user", "content": repair},
            ]
        listed = "\n".join(f"{n}. {p}" for n, p in enumerate(problems[:50], start=1))
        more = f"\n... and {len(problems) - 50} more" if len(problems) > 50 else ""
        # The model cannot shorten a plan the output limit cuts: the user must raise it.
        cut = (
            "; the last reply was cut off at the model's output limit: raise max_tokens "
            "in llm_params"
            if result.finish_reason == "length"
            else ""
        )
        raise PlanError(
            f"no valid plan after {attempts} attempt{'s' if attempts != 1 else ''}{cut}; "
            f"problems of the last one:\n{listed}{more}",
            problems,
        )


def _size_problems(plan: Plan, config: ExecutionConfig) -> list[str]:
    """What makes `plan` larger than the run's limits (`max_plan_steps`, `max_plan_title_chars`)."""
    problems = []
    if len(plan.steps) > config.max_plan_steps:
        problems.append(
            f"the plan has {len(plan.steps)} steps; at most {config.max_plan_steps} may run: "
            "write a plan with fewer steps"
        )
    if len(plan.title) > config.max_plan_title_chars:
        problems.append(
            f"the plan's title is {len(plan.title)} characters long; "
            f"keep it under {config.max_plan_title_chars}"
        )
    return problems
