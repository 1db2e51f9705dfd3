"""Step references in plan arguments: `{{s1.output}}`, `{{s1.output.field}}`, `{{s1.output.0}}`.

A string that is exactly one reference resolves to the referenced value with its type
kept (a list stays a list); a reference inside a longer string is replaced by the value
as text (strings as-is, anything else as compact JSON). Outputs that are JSON text may
be indexed into: `{{s1.output.items.0}}` works when step s1 returned '{"items": [...]}'.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import cast, overload

from art.core.binary import describe_bytes

__all__ = [
    "REFERENCE_PATTERN",
    "STEP_ID_PATTERN",
    "UnresolvedReferenceError",
    "find_references",
    "has_references",
    "iter_references",
    "reference_paths",
    "references_by_argument",
    "resolve_references",
]

# {{ <step id> .output [.segment ...] }} with whitespace tolerated inside the braces.
_STEP_ID = r"[A-Za-z0-9_\-]+"
_PATH = r"(?:\.[^\s.{}]+)*"
#: What a step id must be for a reference to name it (letters, digits, `_` and `-`).
STEP_ID_PATTERN = re.compile(_STEP_ID)
REFERENCE_PATTERN = re.compile(
    r"\{\{\s*(?P<step>" + _STEP_ID + r")\.output(?P<path>" + _PATH + r")\s*\}\}"
)
# The same references with the step id as the only group: `findall` returns the ids
# themselves, without a match object each (plans have thousands of references).
_REFERENCED_ID = re.compile(r"\{\{\s*(" + _STEP_ID + r")\.output" + _PATH + r"\s*\}\}")
_MARKER = "{{"
_SCALARS = frozenset({int, float, bool, type(None)})
_MISSING = object()


class UnresolvedReferenceError(ValueError):
    """A reference names a step without an output, or a path the output does not have."""

    def __init__(self, message: str, *, step_id: str, path: tuple[str, ...]) -> None:
        super().__init__(message)
        self.step_id = step_id
        self.path = path


@functools.lru_cache(maxsize=4096)
def _ids_in(text: str) -> tuple[str, ...]:
    """The step ids `text` references; cached, as plans repeat their reference strings."""
    return tuple(_REFERENCED_ID.findall(text))


# Joins a list of strings into one text to scan: one regex scan and one cache entry
# instead of one per string (a step may list dozens of references). No reference can
# span the separator: one starts with {{ and ends with }}, and inside it a space is
# followed by a space, an id character or a brace, never by a dot.
_SEPARATOR = " ."
_TEXT_ONLY = {str}
_NO_REFERENCES: tuple[tuple[str, ...], frozenset[str]] = ((), frozenset())


def _collect(value: object, found: list[str]) -> None:
    # Strings inside containers are handled in the loops, without a call each: a plan of
    # thousands of steps with dozens of references per step walks here once per step.
    # Exact types are tested before the (slower) isinstance checks.
    if type(value) is str:
        if _MARKER in value:
            found.extend(_ids_in(value))
        return
    if type(value) in _SCALARS:
        return
    items: Iterable[object]
    if type(value) is dict:
        items = value.values()
    elif type(value) is list or type(value) is tuple:
        items = value
    elif isinstance(value, str):  # a str subclass
        _collect(str(value), found)
        return
    elif isinstance(value, Mapping):
        items = value.values()
    elif isinstance(value, list | tuple):
        items = value
    else:
        return
    # Exact strings only: a str subclass is read through its str(). A short list (a
    # step's one or two inputs, the usual case) is cheaper to walk in the loop below.
    if items is value and len(value) >= _MANY and set(map(type, value)) == _TEXT_ONLY:
        text = _SEPARATOR.join(cast("list[str] | tuple[str, ...]", value))  # all str: checked
        if _MARKER in text:
            found.extend(_ids_in(text))
        return
    for item in items:
        if type(item) is str:
            if _MARKER in item:
                found.extend(_ids_in(item))
        elif type(item) not in _SCALARS:
            _collect(item, found)


def references_by_argument(args: Mapping[str, object]) -> tuple[tuple[str, ...], frozenset[str]]:
    """The step ids `args` references (in order of first appearance, without repeats) and
    the names of the arguments that hold at least one reference."""
    found: list[str] = []
    names: list[str] = []
    for name, value in args.items():
        if type(value) in _SCALARS:
            continue
        before = len(found)
        _collect(value, found)
        if len(found) > before:
            names.append(name)
    if not found:
        return _NO_REFERENCES
    if len(found) == 1:  # one reference, the usual step: nothing to deduplicate
        return (found[0],), frozenset(names)
    return tuple(dict.fromkeys(found)), frozenset(names)


def iter_references(value: object) -> Iterator[str]:
    """Referenced step ids in order of appearance (repeats included), anywhere in `value`."""
    found: list[str] = []
    _collect(value, found)
    return iter(found)


def find_references(value: object) -> set[str]:
    """The ids of every step referenced anywhere in `value` (nested args included)."""
    return set(iter_references(value))


def reference_paths(value: object) -> list[tuple[str, tuple[str, ...], str]]:
    """Every reference anywhere in `value` as (step id, path, the reference's text)."""
    found: list[tuple[str, tuple[str, ...], str]] = []
    pending: list[object] = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if _MARKER in item:
                found.extend(_parts(match) for match in REFERENCE_PATTERN.finditer(item))
        elif isinstance(item, Mapping):
            pending.extend(reversed(list(item.values())))
        elif isinstance(item, list | tuple):
            pending.extend(reversed(item))
    return found


def has_references(value: object) -> bool:
    """True when `value` contains at least one reference."""
    return next(iter_references(value), None) is not None


@overload
def resolve_references(
    value: dict[str, object], outputs: Mapping[str, object]
) -> dict[str, object]: ...
@overload
def resolve_references(value: object, outputs: Mapping[str, object]) -> object: ...
def resolve_references(value: object, outputs: Mapping[str, object]) -> object:
    """`value` with every reference replaced by the output it names.

    Containers are copied only where something changed. Raises UnresolvedReferenceError
    naming the step, the path and what was found when a reference cannot be resolved.
    """
    if type(value) is str or isinstance(value, str):
        if _MARKER not in value:
            return value
        return _resolve_string(value, outputs)
    if type(value) in _SCALARS:
        return value
    new: object
    if type(value) is dict or isinstance(value, Mapping):
        resolved: dict[object, object] | None = None
        for key, item in value.items():
            if type(item) in _SCALARS:
                continue
            new = resolve_references(item, outputs)
            if new is not item:
                if resolved is None:
                    resolved = dict(value)
                resolved[key] = new
        return value if resolved is None else resolved
    if isinstance(value, list | tuple):
        if len(value) >= _MANY and (ids := _whole_reference_ids(value)) is not None:
            # A list of plain `{{sN.output}}` references (a step's inputs): the ids were
            # read once for the whole list.
            try:
                found = [outputs[step_id] for step_id in ids]
            except KeyError:
                pass  # the loop below words the error
            else:
                return tuple(found) if isinstance(value, tuple) else found
        # Strings, the usual item, are handled here without a call each.
        items = []
        changed = False
        for item in value:
            if type(item) is str:
                if _MARKER not in item:
                    new = item
                elif (whole := _whole_reference(item)) is not None and not whole[1]:
                    # `{{sN.output}}` alone, the usual list item (e.g. a step's inputs):
                    # _lookup's first case inlined, a call saved per item; _lookup words
                    # the error when the output is missing.
                    step_id = whole[0]
                    new = outputs[step_id] if step_id in outputs else _lookup(*whole, outputs)
                else:
                    new = _resolve_string(item, outputs)
            elif type(item) in _SCALARS:
                new = item
            else:
                new = resolve_references(item, outputs)
            changed = changed or new is not item
            items.append(new)
        if not changed:
            return value
        return tuple(items) if isinstance(value, tuple) else items
    return value


# Lists at least this long are read as a whole: scanned as one text (`_collect`) and
# resolved through one cached lookup (`_referenced_ids`); shorter ones item by item.
_MANY = 4


def _whole_reference_ids(items: list[object] | tuple[object, ...]) -> tuple[str, ...] | None:
    """The step ids of `items` when every item is a plain `{{sN.output}}`, else None."""
    try:
        return _referenced_ids(tuple(items))
    except TypeError:  # an unhashable item (a dict or a list): not all references
        return None


@functools.lru_cache(maxsize=1024)
def _referenced_ids(items: tuple[object, ...]) -> tuple[str, ...] | None:
    """Cached by the whole list: every step of a layer may list the same references."""
    ids = []
    for item in items:
        if type(item) is not str or _MARKER not in item:
            return None
        whole = _whole_reference(item)
        if whole is None or whole[1]:
            return None
        ids.append(whole[0])
    return tuple(ids)


@functools.lru_cache(maxsize=4096)
def _whole_reference(text: str) -> tuple[str, tuple[str, ...], str] | None:
    """(step id, path, reference) when `text` is one reference and nothing else.

    Cached: a plan repeats its reference strings (every step of a layer may name the
    same outputs), and each is resolved once per step that holds it.
    """
    whole = REFERENCE_PATTERN.fullmatch(text.strip())
    if whole is None:
        return None
    return _parts(whole)


def _parts(match: re.Match[str]) -> tuple[str, tuple[str, ...], str]:
    raw_path = match.group("path")
    return match.group("step"), tuple(raw_path[1:].split(".")) if raw_path else (), match[0]


def _resolve_string(text: str, outputs: Mapping[str, object]) -> object:
    whole = _whole_reference(text)
    if whole is not None:
        return _lookup(*whole, outputs)
    if REFERENCE_PATTERN.search(text) is None:
        return text
    return REFERENCE_PATTERN.sub(lambda m: _as_text(_lookup(*_parts(m), outputs)), text)


def _as_text(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return describe_bytes(value)  # bytes have no text form: a longer string names them
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


def _describe(value: object) -> str:
    """A short description of what a path step found, for error messages."""
    if isinstance(value, Mapping):
        keys = ", ".join(repr(k) for k in list(value)[:8])
        more = ", ..." if len(value) > 8 else ""
        return f"an object with keys [{keys}{more}]" if value else "an empty object"
    if isinstance(value, str):
        shown = value if len(value) <= 60 else value[:57] + "..."
        return f"the text {shown!r}"
    if isinstance(value, Sequence):
        return f"a list of {len(value)} item{'s' if len(value) != 1 else ''}"
    if value is None:
        return "null"
    return f"{type(value).__name__} {value!r}"[:80]


def _maybe_json(value: str) -> object:
    """Parse `value` when it is JSON text for an object or a list; otherwise _MISSING."""
    stripped = value.lstrip()
    if not stripped or stripped[0] not in "[{":
        return _MISSING
    try:
        return json.loads(value)
    except ValueError:
        return _MISSING


def _step(current: object, segment: str) -> object:
    """`current[segment]`, or _MISSING."""
    if isinstance(current, str):
        parsed = _maybe_json(current)
        if parsed is _MISSING:
            return _MISSING
        current = parsed
    if isinstance(current, Mapping):
        if segment in current:
            return current[segment]
        if segment.lstrip("-").isdigit() and int(segment) in current:
            return current[int(segment)]
        return _MISSING
    if isinstance(current, Sequence):
        if segment.lstrip("-").isdigit():
            index = int(segment)
            if -len(current) <= index < len(current):
                return current[index]
        return _MISSING
    if hasattr(current, "model_dump") or hasattr(current, "__dataclass_fields__"):
        return getattr(current, segment, _MISSING)
    return _MISSING


def _lookup(
    step_id: str, path: tuple[str, ...], reference: str, outputs: Mapping[str, object]
) -> object:
    if not path and step_id in outputs:
        return outputs[step_id]
    if step_id not in outputs:
        raise UnresolvedReferenceError(
            f"{reference}: step {step_id!r} has no output (it is not a finished dependency)",
            step_id=step_id,
            path=path,
        )
    current = outputs[step_id]
    for depth, segment in enumerate(path):
        found = _step(current, segment)
        if found is _MISSING:
            where = ".".join(("output", *path[:depth]))
            raise UnresolvedReferenceError(
                f"{reference}: step {step_id!r} {where} has no {segment!r}; "
                f"it is {_describe(current)}",
                step_id=step_id,
                path=path,
            )
        current = found
    return current
