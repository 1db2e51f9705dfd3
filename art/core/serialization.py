"""Turning tool outputs into text for LLM context, and into JSON-compatible data.

`safe_stringify` never raises: it renders anything (cycles, bytes, datetimes, sets,
pydantic models, dataclasses, arbitrary objects) as JSON text where it can, and cuts
the result with `truncate`, whose marker says how many characters were cut.
`to_jsonable` is the strict counterpart the invocation path uses to normalize a
successful output (bytes are kept, see `art.core.binary`): it raises a TypeError naming
what could not be converted.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import TypeVar, cast, overload

from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from art.core.binary import JSON_SCALARS, JsonWithBytes, describe_bytes, has_bytes
from art.core.json import JsonValue

T = TypeVar("T")

__all__ = [
    "DEFAULT_MAX_LENGTH",
    "MAX_DATA_DEPTH",
    "context_text",
    "escape_unencodable",
    "escape_unencodable_data",
    "own_copy",
    "safe_stringify",
    "storable_problem",
    "to_jsonable",
    "truncate",
]

DEFAULT_MAX_LENGTH = 10_000
# Deeper structures are cut (a plain recursive walk would hit Python's recursion limit).
_MAX_DEPTH = 64
# Python refuses to print ints with more digits than sys.get_int_max_str_digits().
_MAX_INT_BITS = 14_000
_MAX_REPR = 2_000
# json.dumps(..., ensure_ascii=False) builds an encoder per call; `_plain` has already
# broken every cycle, so the encoder's own circular check is not needed either.
_ENCODER = json.JSONEncoder(ensure_ascii=False, check_circular=False)


#: How deep the data a door accepts (a tool's output, a decision, a plan's arguments, a
#: run's context) may nest. Storage must read back what it writes, and pydantic's JSON
#: parser stops at 200 levels; a stored record wraps a value in a few levels of its own.
MAX_DATA_DEPTH = 100


def storable_problem(value: object, *, max_depth: int = MAX_DATA_DEPTH) -> str | None:
    """Why JSON data `value` could not be stored and read back equal, or None: nested
    deeper than `max_depth` levels, or holding NaN or an infinite number (JSON has none).

    Walks dicts, lists and tuples without recursion, so any depth is measured safely."""
    if type(value) is float:
        return None if math.isfinite(value) else _NOT_FINITE
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children: Iterable[object]
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth > max_depth:
            return f"is nested more than {max_depth} levels deep (art stores at most {max_depth})"
        for child in children:
            if isinstance(child, dict | list | tuple):
                stack.append((child, depth + 1))
            elif type(child) is float and not math.isfinite(child):
                return _NOT_FINITE
    return None


def _has_cycle(value: object) -> bool:
    """Whether a dict, list or tuple in `value` holds itself, found without recursion."""
    path: set[int] = set()
    stack: list[tuple[object, Iterator[object] | None]] = [(value, None)]
    while stack:
        item, children = stack[-1]
        if children is None:
            if not isinstance(item, dict | list | tuple):
                stack.pop()
                continue
            if id(item) in path:
                return True
            path.add(id(item))
            children = iter(item.values() if isinstance(item, dict) else item)
            stack[-1] = (item, children)
        child = next((c for c in children if isinstance(c, dict | list | tuple)), None)
        if child is None:
            path.discard(id(item))
            stack.pop()
        else:
            stack.append((child, None))
    return False


_NOT_FINITE = "holds NaN or an infinite number, which JSON cannot carry (use null or a string)"


# A lone surrogate (a file name that is not UTF-8, half of a pair from a bad JSON escape):
# no UTF-8 text, JSON document, database or terminal can carry one.
_SURROGATE = re.compile("[\ud800-\udfff]")


def escape_unencodable(text: str) -> str:
    """`text` as UTF-8 can carry it: each lone surrogate becomes the six characters of its
    escape (`\\udcff`), a pair of surrogates the character they stand for. Other text is
    returned as it is (the same object)."""
    if text.isascii() or _SURROGATE.search(text) is None:
        return text
    # A pair (e.g. an emoji split across two streamed chunks) is one character again.
    text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    return _SURROGATE.sub(_escape_surrogate, text)


def _escape_surrogate(match: re.Match[str]) -> str:
    return f"\\u{ord(match[0]):04x}"


def escape_unencodable_data(value: T) -> T:
    """`value` with `escape_unencodable` applied to every string in its dicts (keys too),
    lists and tuples; `value` itself, not a copy, when none needed it."""
    return cast(T, _escaped(value))  # only strings change: each value keeps its type


def _escaped(value: object) -> object:
    if isinstance(value, str):
        return escape_unencodable(value)
    if isinstance(value, dict):
        changed = False
        items = []
        for key, item in value.items():
            new_key, new_item = _escaped(key), _escaped(item)
            changed = changed or new_key is not key or new_item is not item
            items.append((new_key, new_item))
        return dict(items) if changed else value
    if isinstance(value, list | tuple):
        new = [_escaped(item) for item in value]
        if all(a is b for a, b in zip(new, value, strict=True)):
            return value
        return tuple(new) if isinstance(value, tuple) else new
    return value


def truncate(text: str, max_length: int) -> str:
    """`text` itself if it fits, else its head plus a marker counting the cut characters.

    The whole result, marker included, is at most `max_length` characters. When
    `max_length` is too small to hold the marker the text is cut without one.
    """
    if max_length < 0:
        raise ValueError(f"max_length must be >= 0, got {max_length}")
    if len(text) <= max_length:
        return text
    cut = len(text) - max_length
    # The marker's length depends on the number it prints; two rounds settle it.
    for _ in range(3):
        marker = _marker(cut)
        kept = max_length - len(marker)
        if kept < 0:
            return text[:max_length]
        if len(text) - kept == cut:
            return text[:kept] + marker
        cut = len(text) - kept
    return text[:kept] + _marker(len(text) - kept)  # pragma: no cover - settles in two rounds


def _marker(cut: int) -> str:
    return f"...[truncated {cut} characters]"


def safe_stringify(value: object, max_length: int = DEFAULT_MAX_LENGTH) -> str:
    """Render `value` as text for an LLM prompt, at most `max_length` characters; never raises.

    Strings are returned as they are (not JSON-quoted); everything else becomes JSON
    text: None is `null`, bytes are described, never shown (`<binary data: 2,048 bytes,
    image/png>`, see `art.core.binary`), datetimes are ISO strings, sets are sorted lists,
    pydantic models and dataclasses are objects, a circular reference is
    `"<circular reference>"`, and anything else falls back to its `repr` (as a JSON
    string).
    """
    try:
        if isinstance(value, str):
            text = value
        elif isinstance(value, bytes | bytearray | memoryview):
            text = describe_bytes(value)
        elif type(value) is int and value.bit_length() <= _MAX_INT_BITS:
            text = str(value)  # what the encoder writes, without its setup (one per step)
        else:
            text = _ENCODER.encode(_plain(value, 0, set()))
    except Exception:  # a pathological object; the walk above already guards the usual ones
        text = _safe_repr(value)
    return truncate(text, max_length)


# One system context value is cut to this many characters in a prompt.
_CONTEXT_VALUE_CHARS = 2_000


def context_text(system_context: Mapping[str, object]) -> str:
    """A run's system context as a prompt section ("" when empty): a line per variable."""
    if not system_context:
        return ""
    lines = ["Context from the application:"]
    for name, value in system_context.items():
        shown = value if isinstance(value, str) else safe_stringify(value, _CONTEXT_VALUE_CHARS)
        lines.append(f"- {name}: {truncate(shown, _CONTEXT_VALUE_CHARS)}")
    return "\n".join(lines)


@overload
def to_jsonable(value: Mapping[str, object]) -> dict[str, JsonWithBytes]: ...
@overload
def to_jsonable(value: object) -> JsonWithBytes: ...
def to_jsonable(value: object) -> JsonWithBytes:
    """`value` as JSON-compatible Python data (dicts, lists, str, numbers, bool, None),
    and bytes, which are kept as they are (`art.core.binary` carries them through JSON).

    Tuples and sets become lists, datetimes ISO strings, pydantic models and
    dataclasses dicts. Raises TypeError when something cannot be converted (an
    arbitrary object, a circular reference, ...) or could not be read back once stored
    (`storable_problem`: nested too deep, NaN).
    """
    try:
        if has_bytes(value):
            converted = _jsonable_keeping_bytes(value)
        else:
            converted = to_jsonable_python(value)
    except Exception as exc:
        # Deeper than the converter goes (it says "circular reference"): say so.
        problem = None if _has_cycle(value) else storable_problem(value)
        if problem is not None:
            raise TypeError(f"the value {problem}") from exc
        raise TypeError(
            f"a value of type {type(value).__name__} cannot be converted to JSON: {exc}; "
            "use dicts, lists, strings, numbers, booleans and None "
            "(or pydantic models / dataclasses made of them)"
        ) from exc
    problem = storable_problem(converted)
    if problem is not None:
        raise TypeError(f"the value {problem}")
    return converted


def _jsonable_keeping_bytes(value: object) -> JsonWithBytes:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, Mapping):
        return {str(to_jsonable_python(k)): _jsonable_keeping_bytes(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable_keeping_bytes(item) for item in value]
    converted: JsonWithBytes = to_jsonable_python(value)
    return converted


def _plain(value: object, depth: int, active: set[int]) -> JsonValue:
    """A JSON-dumpable copy of `value`; `active` holds the containers on the current path."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        if value.bit_length() > _MAX_INT_BITS:
            return f"<int with about {int(value.bit_length() * math.log10(2)) + 1} digits>"
        return int(value)
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return describe_bytes(value)
    if isinstance(value, enum.Enum):
        return _plain(value.value, depth, active)
    if depth >= _MAX_DEPTH:
        return f"<nested deeper than {_MAX_DEPTH} levels>"

    key = id(value)
    if key in active:
        return "<circular reference>"
    active.add(key)
    try:
        return _plain_container(value, depth + 1, active)
    finally:
        active.discard(key)


def _plain_container(value: object, depth: int, active: set[int]) -> JsonValue:
    if isinstance(value, Mapping):
        return {_key(k): _plain(v, depth, active) for k, v in list(value.items())}
    if isinstance(value, list | tuple):
        return [_plain(item, depth, active) for item in value]
    if isinstance(value, set | frozenset):
        items = [_plain(item, depth, active) for item in value]
        return sorted(items, key=lambda item: json.dumps(item, sort_keys=True, default=str))
    if isinstance(value, BaseModel):
        try:
            return _plain(value.model_dump(mode="json"), depth, active)
        except Exception:  # a field pydantic cannot serialize, or a cycle through models
            fields = type(value).model_fields
            return {name: _plain(getattr(value, name, None), depth, active) for name in fields}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            field.name: _plain(getattr(value, field.name, None), depth, active)
            for field in dataclasses.fields(value)
        }
    try:
        # datetimes, dates, Decimal, UUID, Path, timedelta, IP addresses, ...
        converted = to_jsonable_python(value)
    except Exception:
        return _safe_repr(value)
    return converted if converted is not value else _safe_repr(value)


def _key(key: object) -> str:
    if isinstance(key, str):
        return key
    plain = _plain(key, _MAX_DEPTH - 1, set())
    return plain if isinstance(plain, str) else json.dumps(plain, default=str)


def _safe_repr(value: object) -> str:
    try:
        return truncate(repr(value), _MAX_REPR)
    except Exception:
        return f"<{type(value).__name__} object>"


def own_copy(value: T) -> T:
    """A deep copy of `value` that shares nothing mutable with it: dicts and lists copied
    directly (the usual JSON data), JSON scalars shared, any other object by
    `copy.deepcopy`; an object that cannot be copied is returned as it is."""
    if type(value) in JSON_SCALARS:
        return value
    try:
        return cast(T, _json_copy(value))  # a copy has its original's type
    except RecursionError:  # a container holding itself: deepcopy keeps the cycle
        pass
    except Exception:  # an uncopyable object
        return value
    try:
        return copy.deepcopy(value)
    except Exception:
        return value


def _json_copy(value: object) -> object:
    if type(value) is dict:
        return {k: v if type(v) in JSON_SCALARS else _json_copy(v) for k, v in value.items()}
    if type(value) is list:
        return [v if type(v) in JSON_SCALARS else _json_copy(v) for v in value]
    return copy.deepcopy(value)
