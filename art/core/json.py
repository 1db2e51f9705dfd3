"""The type of JSON data once parsed: what `json.loads` returns, with no `Any` in it.

Use `JsonValue` where a value is JSON (a parsed request body, a stored document, a schema);
values that may also hold bytes or other Python objects (a tool's output) are `object`.
A parameter that only reads a JSON object takes `Mapping[str, object]`: dicts are
invariant, so a `dict[str, str]` is not a `JsonObject`.
"""

from __future__ import annotations

from typing import TypeAlias

__all__ = ["JsonObject", "JsonScalar", "JsonValue"]

JsonScalar: TypeAlias = str | int | float | bool | None
#: Any JSON value: a scalar, an array or an object of JSON values.
JsonValue: TypeAlias = JsonScalar | list["JsonValue"] | dict[str, "JsonValue"]
#: A JSON object.
JsonObject: TypeAlias = dict[str, JsonValue]
