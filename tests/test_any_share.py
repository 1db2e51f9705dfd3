"""`Any` stays at the JSON boundaries: under 15 % of the function signatures in art/
mention it (httpx's share is about 13 %). A signature mentions `Any` when a parameter's or
the return annotation does; parsed JSON is typed `art.core.json.JsonValue`/`JsonObject`,
values only passed on are `object`."""

from __future__ import annotations

import ast
from pathlib import Path

import art

LIMIT = 0.15


def _mentions_any(annotation: ast.expr) -> bool:
    for node in ast.walk(annotation):
        if isinstance(node, ast.Name) and node.id == "Any":
            return True
        if isinstance(node, ast.Attribute) and node.attr == "Any":
            return True
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "Any" in node.value:
            return True  # a quoted annotation
    return False


def signatures(root: Path) -> tuple[int, list[str]]:
    """How many functions are defined under `root`, and those whose signature mentions Any."""
    total, with_any = 0, []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            args = node.args
            parameters = [*args.posonlyargs, *args.args, *args.kwonlyargs]
            parameters += [a for a in (args.vararg, args.kwarg) if a is not None]
            annotations = [p.annotation for p in parameters if p.annotation is not None]
            if node.returns is not None:
                annotations.append(node.returns)
            total += 1
            if any(_mentions_any(a) for a in annotations):
                with_any.append(f"{path.relative_to(root.parent)}:{node.lineno} {node.name}")
    return total, with_any


def test_under_fifteen_percent_of_signatures_mention_any() -> None:
    total, with_any = signatures(Path(art.__file__).parent)
    assert total > 1000  # the whole package was read
    share = len(with_any) / total
    assert share < LIMIT, f"{share:.1%} of {total} signatures mention Any:\n" + "\n".join(with_any)


def test_the_count_sees_every_spelling_of_any(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "m.py").write_text(
        "import typing\nfrom typing import Any\n"
        "def a(x: Any) -> None: ...\n"
        "def b(x: int) -> typing.Any: ...\n"
        "def c(*args: 'dict[str, Any]') -> None: ...\n"
        "async def d(x: object) -> dict[str, object]: ...\n"
        "def e(x): ...\n"
    )
    total, with_any = signatures(package)
    assert total == 5
    assert [entry.split()[1] for entry in with_any] == ["a", "b", "c"]
