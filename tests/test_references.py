"""art.planning.references: finding and resolving {{sN.output...}} references."""

from __future__ import annotations

import pytest

from art.planning.references import (
    UnresolvedReferenceError,
    find_references,
    has_references,
    iter_references,
    references_by_argument,
    resolve_references,
)

OUTPUTS = {
    "s1": 391,
    "s2": {"city": "Paris", "temps": [12.5, 14.0], "meta": {"unit": "C"}},
    "s3": ["a", "b", "c"],
    "s4": '{"items": [{"name": "x"}, {"name": "y"}]}',
    "s5": "plain text",
    "s6": None,
}


def test_find_references_anywhere_in_nested_args():
    args = {
        "a": "{{s1.output}}",
        "b": ["x {{ s2.output.city }} y", {"c": "{{s3.output.0}}"}],
        "d": 5,
        "e": ("{{s1.output}}",),
    }
    assert find_references(args) == {"s1", "s2", "s3"}
    assert list(iter_references(args)) == ["s1", "s2", "s3", "s1"]
    assert has_references(args) and not has_references({"a": "no refs", "b": [1, None]})


@pytest.mark.parametrize(
    "text", ["{{s1}}", "{{s1.outputs}}", "{ {s1.output} }", "{{s1.output.}}", "{{}}", "{{ x y }}"]
)
def test_things_that_are_not_references(text):
    assert find_references(text) == set()
    assert resolve_references(text, OUTPUTS) == text


def test_a_whole_string_reference_keeps_the_type():
    assert resolve_references("{{s1.output}}", OUTPUTS) == 391
    assert resolve_references("  {{ s2.output }} ", OUTPUTS) is OUTPUTS["s2"]
    assert resolve_references("{{s3.output}}", OUTPUTS) == ["a", "b", "c"]
    assert resolve_references("{{s6.output}}", OUTPUTS) is None


def test_paths_go_into_objects_lists_and_json_text():
    assert resolve_references("{{s2.output.city}}", OUTPUTS) == "Paris"
    assert resolve_references("{{s2.output.temps.1}}", OUTPUTS) == 14.0
    assert resolve_references("{{s2.output.meta.unit}}", OUTPUTS) == "C"
    assert resolve_references("{{s3.output.-1}}", OUTPUTS) == "c"
    assert resolve_references("{{s4.output.items.1.name}}", OUTPUTS) == "y"
    # The whole JSON text stays text: only a path parses it.
    assert resolve_references("{{s4.output}}", OUTPUTS) == OUTPUTS["s4"]


def test_embedded_references_are_stringified():
    assert resolve_references("{{s1.output}} + 12", OUTPUTS) == "391 + 12"
    assert resolve_references("in {{s2.output.city}}!", OUTPUTS) == "in Paris!"
    assert resolve_references("t={{s2.output.temps}}", OUTPUTS) == "t=[12.5,14.0]"
    assert resolve_references("m={{s2.output.meta}}", OUTPUTS) == 'm={"unit":"C"}'
    assert resolve_references("{{s1.output}}{{s5.output}}", OUTPUTS) == "391plain text"
    assert resolve_references("v: {{s6.output}}", OUTPUTS) == "v: null"


def test_nested_values_are_resolved_and_untouched_containers_are_kept():
    args = {"a": ["{{s1.output}}", {"b": "{{s3.output.0}}"}], "c": ("{{s1.output}}",)}
    assert resolve_references(args, OUTPUTS) == {"a": [391, {"b": "a"}], "c": (391,)}
    plain = {"a": ["x", {"b": 1}], "c": "no {{ reference"}
    assert resolve_references(plain, OUTPUTS) is plain


def test_a_step_without_output_is_named():
    with pytest.raises(UnresolvedReferenceError) as info:
        resolve_references({"x": "{{s9.output.a}}"}, OUTPUTS)
    assert "s9" in str(info.value) and "no output" in str(info.value)
    assert info.value.step_id == "s9" and info.value.path == ("a",)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("reference", "expected"),
    [
        ("{{s2.output.country}}", "output has no 'country'; it is an object with keys ['city'"),
        ("{{s2.output.temps.5}}", "output.temps has no '5'; it is a list of 2 items"),
        ("{{s3.output.x}}", "output has no 'x'; it is a list of 3 items"),
        ("{{s1.output.a}}", "output has no 'a'; it is int 391"),
        ("{{s5.output.a}}", "output has no 'a'; it is the text 'plain text'"),
        ("{{s6.output.a}}", "output has no 'a'; it is null"),
    ],
)
def test_a_missing_path_says_what_was_there(reference, expected):
    with pytest.raises(UnresolvedReferenceError) as info:
        resolve_references(f"x {reference}", OUTPUTS)
    message = str(info.value)
    assert message.startswith(reference)
    assert expected in message


def test_repeated_reference_strings_resolve_against_each_calls_outputs():
    # What a string references is cached; the values never are.
    args = {"inputs": ["{{s1.output}}", "{{s1.output.items.1}}", "x {{s1.output.n}}"]}
    first = {"s1": {"n": 1, "items": [10, 11]}}
    second = {"s1": {"n": 2, "items": [20, 21]}}
    assert resolve_references(args, first) == {"inputs": [first["s1"], 11, "x 1"]}
    assert resolve_references(args, second) == {"inputs": [second["s1"], 21, "x 2"]}
    with pytest.raises(UnresolvedReferenceError, match="step 's1' has no output"):
        resolve_references(args, {})
    assert find_references(args) == {"s1"}


def test_whole_references_in_a_list_keep_their_types_and_name_what_is_missing():
    items = ["{{s2.output}}", " {{ s3.output }} ", "{{s6.output}}", 7, "{{s1.output}}"]
    assert resolve_references(items, OUTPUTS) == [OUTPUTS["s2"], OUTPUTS["s3"], None, 7, 391]
    with pytest.raises(UnresolvedReferenceError) as info:
        resolve_references(["{{s1.output}}", "{{s9.output}}"], OUTPUTS)
    assert str(info.value).startswith("{{s9.output}}: step 's9' has no output")
    assert info.value.step_id == "s9" and info.value.path == ()


def test_lists_and_tuples_are_copied_only_when_something_changed():
    plain = ["a", 1, None, {"k": "v"}]
    assert resolve_references(plain, OUTPUTS) is plain
    resolved = resolve_references(("{{s1.output}}", "b"), {"s1": 5})
    assert resolved == (5, "b") and isinstance(resolved, tuple)


def test_the_cached_id_scan_finds_what_the_full_pattern_finds():
    from art.planning.references import REFERENCE_PATTERN

    texts = [
        "a {{s1.output}} b {{ s-2.output.x.0 }} {{s3.outputs}} {{s_4.output.}}",
        "{{s1.output.items.0.name}}{{s2.output}}",
        "{{ bad id.output }} {{s5.output . x}} {{s6.output.a}}",
    ]
    for text in texts:
        expected = [m.group("step") for m in REFERENCE_PATTERN.finditer(text)]
        assert list(iter_references({"k": [text, {"n": text}], "t": text})) == expected * 3


class Text(str):
    pass


class Shown(str):
    def __str__(self) -> str:
        return "{{s9.output}}"


@pytest.mark.parametrize(
    "items",
    [
        # Pieces of a reference in neighbouring strings never make one.
        ["{{s1.output", "}}", "{{s2.", "output}}", "{", "{s3.output}}", "{{s4.output.a", " }}"],
        ["{{ s1.output .", "x}}", "{{s2.output.a }}", " .{{s3.output}}", "{{s4.output }"],
        [
            "{{s1.output}}",
            "{{s1.output}} and {{ s2.output.0 }}",
            "",
            "no reference",
            "{{s3.output}}",
        ],
        # With anything but exact strings in the list, each item is read on its own.
        ["{{s1.output}}", Text("{{s2.output}}"), 1, None, ["{{s3.output}}"]],
        [Shown("{{s1.output}}"), "{{s2.output}}"],
    ],
)
def test_a_list_of_strings_holds_the_references_its_strings_hold(items):
    def one_by_one(value):
        if isinstance(value, list):
            return [step for item in value for step in one_by_one(item)]
        return list(iter_references(str(value))) if isinstance(value, str) else []

    expected = one_by_one(items)
    assert list(iter_references(items)) == expected
    assert list(iter_references(tuple(items))) == expected
    assert list(iter_references({"k": items})) == expected


def test_references_by_argument_names_the_arguments_that_hold_them():
    args = {"n": 1, "a": ["{{s2.output}}", "{{s1.output}}"], "b": {"c": "{{s2.output.x}}"}}
    assert references_by_argument(args) == (("s2", "s1"), frozenset({"a", "b"}))
    assert references_by_argument({"n": 1, "t": "text"}) == ((), frozenset())


def test_a_long_list_of_references_resolves_like_a_short_one():
    # Lists of four or more plain references take a cached path; results must not differ.
    outputs = {f"s{i}": {"v": i} for i in range(1, 7)}
    refs = [f"{{{{s{i}.output}}}}" for i in range(1, 7)]
    resolved = resolve_references({"inputs": refs}, outputs)["inputs"]
    assert resolved == [outputs[f"s{i}"] for i in range(1, 7)]
    assert resolve_references(tuple(refs), outputs) == tuple(resolved)
    assert resolve_references([*refs, "{{s1.output.v}}"], outputs)[-1] == 1
    assert resolve_references([*refs, "total"], outputs)[-1] == "total"
    with pytest.raises(UnresolvedReferenceError, match="s6"):
        resolve_references(refs, {k: v for k, v in outputs.items() if k != "s6"})
