"""An evaluation's report: per-case results, totals, tables, comparison, HTML, baseline.

The scores (`SCORES`) are shares of the cases a check applies to, from 0 to 1; a
baseline gate fails when any of them is lower than in the stored report.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field, computed_field

from art.core.json import JsonObject
from art.evaluation.results import CaseResult

if TYPE_CHECKING:
    from rich.table import Table

__all__ = [
    "SCORES",
    "EvalReport",
    "Totals",
    "baseline_drops",
    "comparison_table",
    "load_reports",
    "report_html",
    "report_table",
    "write_reports",
]

#: Score name -> what the tables call it. Each is a share of the cases it applies to.
SCORES = {
    "passed": "passed",
    "valid_first": "valid plan 1st",
    "right_tools": "right tools",
    "right_args": "right args",
    "right_values": "right values",
}


class Totals(BaseModel):
    """The figures of every case together."""

    cases: int
    scores: dict[str, float | None]  # SCORES' names; None when no case asks for it
    counts: dict[str, tuple[int, int]]  # score -> (cases meeting it, cases it applies to)
    repairs: int
    errors: int
    timeouts: int
    llm_calls: int
    tokens: int
    cost_usd: float | None
    latency_p50_s: float
    latency_p95_s: float


class EvalReport(BaseModel):
    """What `art.evaluate` returns and `art eval --json` writes."""

    dataset: str = ""
    label: str = ""
    plan_only: bool = False
    cases: list[CaseResult] = Field(default_factory=list)

    @computed_field  # type: ignore[prop-decorator]  # pydantic's documented form
    @property
    def totals(self) -> Totals:
        return _totals(self.cases)

    def case(self, name: str) -> CaseResult:
        """The result of the case called `name`."""
        for result in self.cases:
            if result.case == name:
                return result
        raise KeyError(name)


def _share(met: int, of: int) -> float | None:
    return met / of if of else None


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(math.ceil(q * len(ordered)) - 1, 0)  # nearest rank
    return ordered[rank]


def _totals(cases: list[CaseResult]) -> Totals:
    counts: dict[str, tuple[int, int]] = {
        "passed": (sum(c.passed for c in cases), len(cases)),
        "valid_first": (sum(c.valid_first for c in cases), len(cases)),
    }
    for check in ("right_tools", "right_args", "right_values"):
        applied = [c.checks[check] for c in cases if c.checks.get(check) is not None]
        counts[check] = (sum(bool(v) for v in applied), len(applied))
    costs = [c.cost_usd for c in cases if c.cost_usd is not None]
    latencies = [c.latency_s for c in cases]
    return Totals(
        cases=len(cases),
        scores={name: _share(*counts[name]) for name in SCORES},
        counts=counts,
        repairs=sum(c.repairs for c in cases),
        errors=sum(c.status == "error" for c in cases),
        timeouts=sum(c.status == "timeout" for c in cases),
        llm_calls=sum(c.llm_calls for c in cases),
        tokens=sum(c.tokens for c in cases),
        cost_usd=sum(costs) if costs else None,
        latency_p50_s=_percentile(latencies, 0.5),
        latency_p95_s=_percentile(latencies, 0.95),
    )


# -- files --------------------------------------------------------------------------------
def write_reports(path: str | Path, reports: list[EvalReport]) -> None:
    """Write `{"runs": [report, ...]}` (what --json writes and --baseline reads)."""
    document = {"runs": [report.model_dump(mode="json") for report in reports]}
    Path(path).write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")


def load_reports(path: str | Path) -> list[EvalReport]:
    """The reports in a file `write_reports` wrote (or one report on its own)."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    runs = data["runs"] if isinstance(data, dict) and "runs" in data else [data]
    return [EvalReport.model_validate(_without_totals(run)) for run in runs]


def _without_totals(run: JsonObject) -> JsonObject:
    return {key: value for key, value in run.items() if key != "totals"}


def baseline_drops(report: EvalReport, baseline: EvalReport) -> list[str]:
    """Each score of `report` lower than `baseline`'s, as a sentence (empty: no drop)."""
    drops = []
    now, before = report.totals.scores, baseline.totals.scores
    for name, title in SCORES.items():
        score, earlier = now.get(name), before.get(name)
        if score is not None and earlier is not None and score < earlier - 1e-9:
            drops.append(f"{title}: {_pct(score)} < baseline {_pct(earlier)}")
    return drops


# -- tables -------------------------------------------------------------------------------
def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.0f} %"


def _mark(value: bool | None) -> str:
    return {True: "✓", False: "✗", None: "-"}[value]


def _money(value: float | None) -> str:
    return "n/a" if value is None else f"${value:.4f}"


def _case_row(result: CaseResult) -> list[str]:
    status = "✓" if result.passed else ("⏱" if result.status == "timeout" else "✗")
    return [
        result.case,
        status,
        _mark(result.valid_first),
        str(result.repairs),
        _mark(result.checks.get("right_tools")),
        _mark(result.checks.get("right_args")),
        _mark(result.checks.get("right_values")),
        str(result.llm_calls),
        f"{result.tokens:,}",
        _money(result.cost_usd),
        f"{result.latency_s:.2f} s",
    ]


_CASE_COLUMNS = (
    "case", "passed", "valid 1st", "repairs", "tools", "args", "values", "LLM calls",
    "tokens", "cost", "latency",
)  # fmt: skip


def _total_row(report: EvalReport) -> list[str]:
    totals = report.totals
    return [
        f"total ({totals.cases})",
        _fraction(totals, "passed"),
        _fraction(totals, "valid_first"),
        str(totals.repairs),
        _fraction(totals, "right_tools"),
        _fraction(totals, "right_args"),
        _fraction(totals, "right_values"),
        str(totals.llm_calls),
        f"{totals.tokens:,}",
        _money(totals.cost_usd),
        f"p50 {totals.latency_p50_s:.2f} s · p95 {totals.latency_p95_s:.2f} s",
    ]


def _fraction(totals: Totals, name: str) -> str:
    met, of = totals.counts[name]
    return f"{met}/{of}" if of else "-"


def report_table(report: EvalReport) -> Table:
    """One row per case and a total row."""
    from rich.table import Table

    title = f"{report.dataset or 'dataset'} · {report.label}" + (
        " · plan only" if report.plan_only else ""
    )
    table = Table(title=title, title_justify="left", header_style="bold", show_footer=False)
    for column in _CASE_COLUMNS:
        table.add_column(column, justify="left" if column == "case" else "right")
    for result in report.cases:
        table.add_row(*_case_row(result))
    table.add_section()
    table.add_row(*_total_row(report), style="bold")
    return table


def comparison_table(first: EvalReport, second: EvalReport) -> Table:
    """Both runs side by side, per case and in total; `◆` marks a difference."""
    from rich.table import Table

    table = Table(
        title=f"{first.label}  vs  {second.label}", title_justify="left", header_style="bold"
    )
    columns = ("case", "passed", "valid 1st", "tools", "args", "values", "LLM calls", "latency")
    for column in columns:
        table.add_column(column, justify="left" if column == "case" else "center")
    picks = (1, 2, 4, 5, 6, 7)  # of _case_row: the columns compared
    others = {result.case: result for result in second.cases}
    for result in first.cases:
        other = others.get(result.case)
        left = _case_row(result)
        right = _case_row(other) if other is not None else ["-"] * len(left)
        cells = [_pair(left[i], right[i]) for i in picks]
        cells.append(f"{left[10]} | {right[10]}")
        table.add_row(result.case, *cells)
    table.add_section()
    left, right = _total_row(first), _total_row(second)
    cells = [_pair(left[i], right[i]) for i in picks]
    latency = f"{first.totals.latency_p50_s:.2f} | {second.totals.latency_p50_s:.2f} s p50"
    table.add_row("total", *cells, latency, style="bold")
    return table


def _pair(left: str, right: str) -> str:
    return f"{left} | {right}" + ("" if left == right else " ◆")


# -- HTML ---------------------------------------------------------------------------------
_STYLE = """
body{font:14px system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:1em 0}
td,th{border:1px solid #ccc;padding:.3em .6em;text-align:right}
td:first-child,th:first-child{text-align:left}
tr.total{font-weight:bold;background:#f4f4f4}
.fail{color:#b00}.pass{color:#070}.diff{background:#fff3c4}
details{margin:.5em 0}pre{background:#f7f7f7;padding:.6em;overflow:auto}
"""


def report_html(reports: list[EvalReport]) -> str:
    """One self-contained HTML page: each run's table, then every case with its plan
    (as a Mermaid flowchart's text), answer and failures; with two runs, the cells that
    differ are highlighted."""
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>art eval · {html.escape(reports[0].dataset if reports else '')}</title>",
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>art eval · {html.escape(reports[0].dataset if reports else '')}</h1>",
    ]
    others = reports[1:] if len(reports) == 2 else []
    for index, report in enumerate(reports):
        against = reports[1 - index] if len(reports) == 2 else None
        parts.append(f"<h2>{html.escape(report.label)}{' · plan only' * report.plan_only}</h2>")
        parts.append(_html_table(report, against))
    parts.append("<h2>Cases</h2>")
    for result in reports[0].cases if reports else []:
        parts.append(f"<details><summary>{html.escape(result.case)}: ")
        parts.append(f"{html.escape(result.query)}</summary>")
        for report in [reports[0], *others]:
            shown = next((r for r in report.cases if r.case == result.case), None)
            if shown is not None:
                parts.append(_html_case(report.label, shown))
        parts.append("</details>")
    parts.append("</body></html>")
    return "\n".join(parts)


def _html_table(report: EvalReport, against: EvalReport | None) -> str:
    other_rows = {r.case: _case_row(r) for r in against.cases} if against else {}
    rows = ["<table><tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in _CASE_COLUMNS) + "</tr>"]
    for result in report.cases:
        row = _case_row(result)
        other = other_rows.get(result.case)
        cells = []
        for i, cell in enumerate(row):
            differs = other is not None and 0 < i < 7 and other[i] != cell
            css = "diff" if differs else ("pass" if cell == "✓" else "fail" if cell == "✗" else "")
            cells.append(f"<td class='{css}'>{html.escape(cell)}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    total = "".join(f"<td>{html.escape(cell)}</td>" for cell in _total_row(report))
    rows.append(f"<tr class='total'>{total}</tr></table>")
    return "\n".join(rows)


def _html_case(label: str, result: CaseResult) -> str:
    parts = [f"<h3>{html.escape(label)} · {'passed' if result.passed else 'failed'}</h3>"]
    if result.error:
        parts.append(f"<p class='fail'>{html.escape(result.error)}</p>")
    if result.failures:
        items = "".join(f"<li>{html.escape(f)}</li>" for f in result.failures)
        parts.append(f"<ul class='fail'>{items}</ul>")
    if result.mermaid:
        parts.append(f"<pre class='mermaid'>{html.escape(result.mermaid)}</pre>")
    if result.plan:
        plan = json.dumps(result.plan, indent=2, ensure_ascii=False)
        parts.append(
            f"<details><summary>plan JSON</summary><pre>{html.escape(plan)}</pre></details>"
        )
    if result.answer is not None:
        parts.append(f"<p><b>answer:</b> {html.escape(result.answer)}</p>")
    return "\n".join(parts)
