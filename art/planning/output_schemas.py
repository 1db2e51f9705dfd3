"""A tool's `output_schema`: the compact sketch the planner sees, and the check of
`{{sN.output.path}}` references against it.

The sketch keeps what a planner needs to write a reference and drops the rest: an
object becomes `{field: sketch}`, a list `[sketch]`, a scalar its type name
(`"number"`, `"string|null"`, an enum's values as `"a|b"`). A path is checked field by
field: an object whose schema lists its `properties` has those fields only, unless it
allows more (`additionalProperties` true or a schema, or `patternProperties`); a list
takes an index; a number, boolean or null takes nothing. Where the schema cannot tell
(a string, which may hold JSON; `$ref`s outside the schema; no type), the path is
accepted: the reference is resolved when the step runs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from art.core.json import JsonObject, JsonValue

if TYPE_CHECKING:
    from art.tooling.contract import ToolSchema

__all__ = ["DECISION_SCHEMA", "output_path_problem", "output_sketch", "step_output_schema"]

_SKETCH_DEPTH = 6
_SKETCH_FIELDS = 40
_SCALARS = frozenset({"number", "integer", "boolean", "null"})
_COMBINATORS = ("anyOf", "oneOf", "allOf")

#: A blocking step's output: the reviewer's decision (art.engine.suspension.Decision, which
#: keeps any further fields a reviewer sends).
DECISION_SCHEMA: JsonObject = {
    "type": "object",
    "properties": {
        "approved": {"type": "boolean"},
        "reason": {"type": ["string", "null"]},
        "modified_args": {"type": ["object", "null"]},
    },
    "additionalProperties": True,
}


def step_output_schema(tool: ToolSchema) -> Mapping[str, object] | None:
    """The schema of what a step of `tool` outputs: a blocking tool's step outputs the
    reviewer's decision (unless the tool runs on approval), any other the tool's
    declared `output_schema` (or None)."""
    if tool.mode == "blocking" and not tool.runs_on_approval:
        return DECISION_SCHEMA
    return tool.output_schema


def output_sketch(schema: Mapping[str, object]) -> JsonValue:
    """The compact form of an output schema (see the module docstring)."""
    return _sketch(schema, schema, 0)


def _sketch(schema: object, root: Mapping[str, object], depth: int) -> JsonValue:
    schema = _resolved(schema, root)
    if not isinstance(schema, Mapping):
        return "any"
    if "enum" in schema and isinstance(schema["enum"], list):
        return "|".join(_literal(value) for value in schema["enum"][:10])
    if "const" in schema:
        return _literal(schema["const"])
    for keyword in _COMBINATORS:
        branches = schema.get(keyword)
        if isinstance(branches, list) and branches:
            sketches = [_sketch(branch, root, depth) for branch in branches]
            objects = [s for s in sketches if isinstance(s, dict)]
            if keyword == "allOf" and len(objects) == len(sketches):
                return {k: v for sketch in objects for k, v in sketch.items()}
            names = [s for s in sketches if isinstance(s, str)]
            if len(names) == len(sketches):
                return "|".join(dict.fromkeys(names))
            return sketches[0] if len(sketches) == 1 else {"anyOf": sketches}
    types = _types(schema)
    properties = schema.get("properties")
    if isinstance(properties, Mapping) and properties:
        if depth >= _SKETCH_DEPTH:
            return "object"
        shown = dict(list(properties.items())[:_SKETCH_FIELDS])
        sketch: JsonObject = {
            str(name): _sketch(sub, root, depth + 1) for name, sub in shown.items()
        }
        if len(properties) > _SKETCH_FIELDS:
            sketch["..."] = f"{len(properties) - _SKETCH_FIELDS} more fields"
        return sketch
    if "array" in types or "items" in schema:
        items = schema.get("items")
        if isinstance(items, Mapping) and depth < _SKETCH_DEPTH:
            return [_sketch(items, root, depth + 1)]
        return ["any"]
    return "|".join(types) if types else "any"


def output_path_problem(schema: Mapping[str, object], path: Sequence[str]) -> str | None:
    """Why `path` cannot be in an output that follows `schema`, or None when it can (or
    the schema cannot tell)."""
    return _path_problem(schema, schema, tuple(path), ())


def _path_problem(
    schema: object, root: Mapping[str, object], path: tuple[str, ...], walked: tuple[str, ...]
) -> str | None:
    for depth, segment in enumerate(path):
        schema = _resolved(schema, root)
        if not isinstance(schema, Mapping):
            return None
        here = (*walked, *path[:depth])
        for keyword in _COMBINATORS:
            branches = schema.get(keyword)
            if isinstance(branches, list) and branches:
                rest = path[depth:]
                # Fine when one branch has the path (an allOf branch may describe
                # only part of the value, so the same rule holds there).
                problems = [_path_problem(branch, root, rest, here) for branch in branches]
                return None if None in problems else problems[0]
        types = _types(schema)
        properties = schema.get("properties")
        if isinstance(properties, Mapping) and ("object" in types or not types):
            if segment in properties:
                schema = properties[segment]
                continue
            patterns = schema.get("patternProperties")
            if isinstance(patterns, Mapping):
                matched = next((sub for p, sub in patterns.items() if _matches(p, segment)), None)
                if matched is not None:
                    schema = matched
                    continue
            more = schema.get("additionalProperties")
            if more is True or (isinstance(more, Mapping) and not more):
                return None
            if isinstance(more, Mapping):
                schema = more
                continue
            fields = ", ".join(str(name) for name in properties)
            return f"{_where(here)} has no field {segment!r} (its fields: {fields})"
        if "array" in types or ("items" in schema and not types):
            if not segment.lstrip("-").isdigit():
                return f"{_where(here)} is a list: use an index such as .0, not {segment!r}"
            items = schema.get("items")
            if not isinstance(items, Mapping):
                return None
            schema = items
            continue
        if types and set(types) <= _SCALARS:
            return f"{_where(here)} is {'|'.join(types)}: it has no {segment!r}"
        return None  # a string (may hold JSON), an open object, or no type: cannot tell
    return None


def _where(walked: tuple[str, ...]) -> str:
    return ".".join(("output", *walked))


def _types(schema: Mapping[str, object]) -> list[str]:
    kind = schema.get("type")
    if isinstance(kind, str):
        return [kind]
    if isinstance(kind, list):
        return [str(k) for k in kind]
    return []


def _resolved(schema: object, root: Mapping[str, object]) -> object:
    """`schema` with a local `$ref` (`#/$defs/...`) followed, a few levels deep."""
    for _ in range(8):
        if not isinstance(schema, Mapping) or not isinstance(schema.get("$ref"), str):
            return schema
        reference = schema["$ref"]
        if not reference.startswith("#/"):
            return None  # elsewhere: cannot tell
        target: object = root
        for part in reference[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            target = target.get(part) if isinstance(target, Mapping) else None
        schema = target
    return None


def _matches(pattern: str, name: str) -> bool:
    try:
        return re.search(pattern, name) is not None
    except re.error:
        return False


def _literal(value: object) -> str:
    return value if isinstance(value, str) else repr(value)
