"""Render a JSON report as the Markdown table docs/performance.md shows.

`python -m benchmarks.report [benchmarks/results/latest.json]`
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from benchmarks.harness import Figure, table_rows

HEADERS = ["figure", "workload", "art", "target", "pass", "vs", "LangGraph / baseline", "ratio"]


def figures_from(report: dict) -> list[Figure]:
    names = set(Figure.__dataclass_fields__)
    return [Figure(**{k: v for k, v in f.items() if k in names}) for f in report["figures"]]


def markdown(report: dict) -> str:
    rows = table_rows(figures_from(report))
    lines = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += ["| " + " | ".join(cell.replace("|", "/") for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("benchmarks/results/latest.json")
    print(markdown(json.loads(path.read_text())))


if __name__ == "__main__":
    main()
