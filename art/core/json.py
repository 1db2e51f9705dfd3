"""JSON values as Python types: what `json.loads` returns, and what a JSON document holds.

Parameters that only walk data with isinstance checks take `object`; these aliases say
what a value is once it is known to be JSON (a parsed reply, a JSON Schema, a stored record).
They are real type aliases, so pydantic and FastAPI can use them at runtime too.
"""

from __future__ import annotations

from typing import TypeAlias

from typing_extensions import TypeAliasType

__all__ = ["JsonObject", "JsonScalar", "JsonValue"]

#: A JSON scalar: string, number, boolean or null.
JsonScalar: TypeAlias = str | int | float | bool | None
#: Any JSON value: a scalar, an array of values or an object of values.
JsonValue = TypeAliasType("JsonValue", "JsonScalar | list[JsonValue] | dict[str, JsonValue]")
#: A JSON object.
JsonObject = TypeAliasType("JsonObject", dict[str, JsonValue])
