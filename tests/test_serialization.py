import dataclasses
import datetime as dt
import json
import re
import uuid
from decimal import Decimal
from enum import Enum

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from art.core.serialization import safe_stringify, to_jsonable, truncate

MARKER = re.compile(r"\.\.\.\[truncated (\d+) characters\]$")


class Color(Enum):
    RED = "red"


class Point(BaseModel):
    x: int
    y: int


@dataclasses.dataclass
class Node:
    name: str
    children: list = dataclasses.field(default_factory=list)


class Opaque:
    def __repr__(self) -> str:
        return "<Opaque thing>"


class BrokenRepr:
    def __repr__(self) -> str:
        raise RuntimeError("no repr for you")


# --- truncate ---------------------------------------------------------------------------


def test_truncate_leaves_short_text_alone():
    assert truncate("hello", 5) == "hello"
    assert truncate("", 0) == ""


def test_truncate_marker_counts_the_cut_characters():
    text = "a" * 1000
    result = truncate(text, 100)
    assert len(result) <= 100
    cut = int(MARKER.search(result).group(1))
    kept = result[: MARKER.search(result).start()]
    assert kept == "a" * len(kept)
    assert len(kept) + cut == 1000


def test_truncate_too_small_for_marker_cuts_plainly():
    assert truncate("abcdefghij", 3) == "abc"


def test_truncate_rejects_negative_length():
    with pytest.raises(ValueError, match="max_length"):
        truncate("abc", -1)


@given(st.text(), st.integers(min_value=0, max_value=300))
def test_truncate_properties(text, max_length):
    result = truncate(text, max_length)
    assert len(result) <= max_length
    if len(text) <= max_length:
        assert result == text
        return
    match = MARKER.search(result)
    if match is None:  # only when the marker itself does not fit
        assert result == text[:max_length]
        assert max_length < len("...[truncated 1 characters]") + len(str(len(text)))
        return
    kept = result[: match.start()]
    assert text.startswith(kept)
    assert len(kept) + int(match.group(1)) == len(text)


# --- safe_stringify ---------------------------------------------------------------------


def test_strings_are_returned_as_is():
    assert safe_stringify("plain text") == "plain text"
    assert safe_stringify('{"a": 1}') == '{"a": 1}'


def test_json_for_common_values():
    assert safe_stringify(None) == "null"
    assert safe_stringify(42) == "42"
    assert json.loads(safe_stringify({"a": [1, 2.5, True, None]})) == {"a": [1, 2.5, True, None]}
    assert safe_stringify(b"bytes \xff") == "<binary data: 7 bytes, application/octet-stream>"
    assert json.loads(safe_stringify({"png": b"\x89PNG\r\n\x1a\n"})) == {
        "png": "<binary data: 8 bytes, image/png>"
    }
    assert safe_stringify(dt.datetime(2024, 5, 1, 12, 30)) == '"2024-05-01T12:30:00"'
    assert safe_stringify(dt.date(2024, 5, 1)) == '"2024-05-01"'
    assert json.loads(safe_stringify({3, 1, 2})) == [1, 2, 3]
    assert json.loads(safe_stringify(Point(x=1, y=2))) == {"x": 1, "y": 2}
    assert json.loads(safe_stringify(Node("root", [Node("leaf")]))) == {
        "name": "root",
        "children": [{"name": "leaf", "children": []}],
    }
    assert safe_stringify(Color.RED) == '"red"'
    assert safe_stringify(Decimal("1.5")) == '"1.5"'
    u = uuid.UUID(int=1)
    assert safe_stringify(u) == json.dumps(str(u))
    assert json.loads(safe_stringify({1: "int key", (1, 2): "tuple key"})) == {
        "1": "int key",
        "[1, 2]": "tuple key",
    }


def test_non_finite_floats_and_huge_ints():
    assert json.loads(safe_stringify([float("nan"), float("inf")])) == ["nan", "inf"]
    text = safe_stringify(10**10000)
    assert "digits" in text


def test_circular_references_are_marked():
    loop: dict = {"name": "loop"}
    loop["self"] = loop
    assert json.loads(safe_stringify(loop)) == {"name": "loop", "self": "<circular reference>"}

    items: list = [1]
    items.append(items)
    assert json.loads(safe_stringify(items)) == [1, "<circular reference>"]

    node = Node("a")
    node.children.append(node)
    assert json.loads(safe_stringify(node)) == {
        "name": "a",
        "children": ["<circular reference>"],
    }


def test_shared_but_not_circular_values_are_repeated():
    shared = [1, 2]
    assert json.loads(safe_stringify({"a": shared, "b": shared})) == {"a": [1, 2], "b": [1, 2]}


def test_arbitrary_objects_fall_back_to_repr():
    assert json.loads(safe_stringify(Opaque())) == "<Opaque thing>"
    assert json.loads(safe_stringify({"x": Opaque()})) == {"x": "<Opaque thing>"}
    assert json.loads(safe_stringify(BrokenRepr())) == "<BrokenRepr object>"


def test_deep_nesting_does_not_overflow():
    deep: list = []
    for _ in range(5000):
        deep = [deep]
    text = safe_stringify(deep, max_length=100_000)
    assert "nested deeper than" in text


def test_safe_stringify_truncates_with_marker():
    text = safe_stringify("x" * 20_000)
    assert len(text) <= 10_000
    assert MARKER.search(text)
    assert len(safe_stringify(list(range(10_000)), max_length=50)) <= 50


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: st.lists(children) | st.dictionaries(st.text(), children),
    max_leaves=20,
)
odd_values = st.one_of(
    json_values,
    st.binary(),
    st.datetimes(),
    st.sets(st.integers()),
    st.frozensets(st.text()),
    st.tuples(st.integers(), st.text()),
    st.builds(Opaque),
    st.builds(BrokenRepr),
    st.builds(Point, x=st.integers(), y=st.integers()),
    st.floats(),
    st.decimals(),
)


@pytest.mark.slow
@given(json_values)
def test_json_values_round_trip(value):
    if isinstance(value, str):
        assert safe_stringify(value, max_length=10**6) == value
    else:
        assert json.loads(safe_stringify(value, max_length=10**6)) == value


@given(st.lists(odd_values, max_size=5) | odd_values, st.integers(min_value=0, max_value=500))
def test_safe_stringify_never_raises_and_respects_the_limit(value, max_length):
    text = safe_stringify(value, max_length=max_length)
    assert isinstance(text, str)
    assert len(text) <= max_length


# --- to_jsonable ------------------------------------------------------------------------


def test_to_jsonable_normalizes():
    assert to_jsonable((1, 2)) == [1, 2]
    assert to_jsonable({"raw": b"\xff\xfe", "pair": (1, b"x")}) == {
        "raw": b"\xff\xfe",
        "pair": [1, b"x"],
    }  # bytes are kept (art.core.binary carries them through JSON)
    assert to_jsonable({"when": dt.date(2024, 1, 2)}) == {"when": "2024-01-02"}
    assert to_jsonable(Point(x=1, y=2)) == {"x": 1, "y": 2}
    assert to_jsonable(Node("a")) == {"name": "a", "children": []}


@pytest.mark.parametrize(
    "value",
    [Opaque(), pytest.param("circular", id="circular")],
)
def test_to_jsonable_raises_a_clear_type_error(value):
    if value == "circular":
        value = []
        value.append(value)
    with pytest.raises(TypeError, match="cannot be converted to JSON"):
        to_jsonable(value)
