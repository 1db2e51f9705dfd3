"""Tests use art's public API. Where one needs a private name, it says why.

The rule, checked over every file under tests/: an import of a private art name, that is
one of whose module path or imported names has a part starting with a single underscore
(`from art.api import _reset_default_instance`, `from art.testing._serving import
ServerThread`, `import art.core._x`), and a `setattr(obj, "_name", ...)` call (a
monkeypatch of a private attribute, whatever its owner), carry a comment
`# private: <why>` on one of the statement's lines or on the line just above it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
MARKER = re.compile(r"#\s*private:\s*\S")


def private(name: str) -> bool:
    return any(part.startswith("_") and not part.startswith("__") for part in name.split("."))


def private_uses(tree: ast.AST) -> list[ast.stmt | ast.expr]:
    """The private art imports and private-attribute setattr calls in `tree`."""
    found: list[ast.stmt | ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "art":
            names = [node.module or "", *(alias.name for alias in node.names)]
            if any(private(name) for name in names):
                found.append(node)
        elif isinstance(node, ast.Import):
            if any(a.name.split(".")[0] == "art" and private(a.name) for a in node.names):
                found.append(node)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "setattr"
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and private(node.args[1].value)
        ):
            found.append(node)
    return found


def unexplained(source: str) -> list[int]:
    """The line numbers of the private uses in `source` without a `# private:` reason."""
    lines = source.splitlines()
    missing = []
    for node in private_uses(ast.parse(source)):
        first, last = node.lineno, node.end_lineno or node.lineno
        around = lines[max(first - 2, 0) : last]  # the line above, then the statement's
        if not any(MARKER.search(line) for line in around):
            missing.append(first)
    return sorted(missing)


def test_every_private_name_a_test_uses_says_why():
    missing = [
        f"{path.relative_to(TESTS.parent)}:{line}"
        for path in sorted(TESTS.rglob("*.py"))
        for line in unexplained(path.read_text())
    ]
    assert missing == [], "add a `# private: <why>` comment, or use the public API"


def test_the_rule_sees_private_imports_and_monkeypatches_and_accepts_a_reason():
    source = (
        "from art.api import _reset_default_instance\n"
        "from art.testing._serving import ServerThread\n"
        "import art.core._hidden\n"
        "from art import ArtInstance, __version__\n"
        "from other._lib import _thing\n"
        'monkeypatch.setattr(module, "_flag", True)\n'
        'monkeypatch.setattr(module, "flag", True)\n'
        "# private: the reason\n"
        "from art.api import _default\n"
        'monkeypatch.setattr(module, "_flag", True)  # private: the reason\n'
    )
    assert unexplained(source) == [1, 2, 3, 6]
