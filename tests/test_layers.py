"""The package's layering (docs/architecture.md): the contracts in pyproject.toml's
[tool.importlinter] hold, and no module imports another that imports it back."""

from __future__ import annotations

import ast
from pathlib import Path

import grimp
import networkx as nx
from importlinter import configuration
from importlinter.application.use_cases import lint_imports

ROOT = Path(__file__).resolve().parent.parent


def test_the_import_linter_contracts_are_kept(capsys):
    configuration.configure()  # what the lint-imports command does first
    kept = lint_imports(str(ROOT / "pyproject.toml"), cache_dir=None, no_logo=True)
    assert kept, capsys.readouterr().out


def test_no_module_imports_one_that_imports_it_back():
    # Imports under TYPE_CHECKING and inside functions count: a cycle they close is a cycle.
    graph = grimp.build_graph("art", cache_dir=None)
    imports = nx.DiGraph(
        (module, imported)
        for module in graph.modules
        for imported in graph.find_modules_directly_imported_by(module)
    )
    cycles = [sorted(c) for c in nx.strongly_connected_components(imports) if len(c) > 1]
    assert cycles == []


def test_no_module_imports_another_modules_private_name():
    borrowed = []
    for path in sorted((ROOT / "art").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("art"):
                borrowed += [
                    f"{path.relative_to(ROOT)}:{node.lineno}: {node.module}.{alias.name}"
                    for alias in node.names
                    if alias.name.startswith("_") and not alias.name.startswith("__")
                ]
    assert borrowed == []
