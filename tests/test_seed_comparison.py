"""docs/seed-comparison.md tells the truth row by row: every row that says art keeps,
changes or adds something names the tests that show it, and every named test exists."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "seed-comparison.md"
HEADER = ["seed", "art", "status", "why", "tested by"]
STATUSES = {"kept", "changed", "added", "not kept", "not yet"}
CLAIMS = {"kept", "changed", "added"}
NAMED_TEST = re.compile(r"`(?:tests/)?(?P<file>[\w/]+\.py)::(?P<name>\w+)`")


def _cells(line: str) -> list[str]:
    # Split on pipes that are not escaped (`\|` stands for a pipe inside a cell).
    inner = line.strip().removeprefix("|").removesuffix("|")
    return [cell.replace("\\|", "|").strip() for cell in re.split(r"(?<!\\)\|", inner)]


def rows() -> list[tuple[int, dict[str, str]]]:
    """(line number, cells by column) of every row of the page's seed tables."""
    found = []
    header: list[str] | None = None
    for number, line in enumerate(PAGE.read_text().splitlines(), start=1):
        if not line.startswith("|"):
            header = None
            continue
        cells = _cells(line)
        if header is None:
            header = cells
        elif header == HEADER and not set(line) <= set("|- "):
            assert len(cells) == len(HEADER), f"line {number}: {len(cells)} cells: {line}"
            found.append((number, dict(zip(HEADER, cells, strict=True))))
    return found


@cache
def functions_in(file: str) -> frozenset[str]:
    tree = ast.parse((ROOT / "tests" / file).read_text())
    return frozenset(
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.name.startswith("test_")
    )


def test_every_row_has_a_status_and_every_claim_names_a_test():
    found = rows()
    assert len(found) > 60  # the page's tables were read
    for number, row in found:
        status = row["status"]
        assert status in STATUSES, f"line {number}: unknown status {status!r}"
        named = NAMED_TEST.findall(row["tested by"])
        if status in CLAIMS:
            assert named, f"line {number}: a {status!r} row names no test: {row['seed']}"
        if status == "not kept":
            assert row["why"], f"line {number}: a 'not kept' row says not why: {row['seed']}"


def test_every_named_test_exists():
    text = PAGE.read_text()
    named = [(m["file"], m["name"]) for m in NAMED_TEST.finditer(text)]
    assert named
    missing = [
        f"{file}::{name}"
        for file, name in named
        if not (ROOT / "tests" / file).is_file() or name not in functions_in(file)
    ]
    assert not missing, f"docs/seed-comparison.md names tests that do not exist: {missing}"
