"""Evaluate an agent over a dataset of questions (docs/evaluation.md).

`art.evaluate(dataset, instance)` runs every case and returns an `EvalReport`;
`art eval DATASET` does the same from the terminal; the pytest plugin turns a dataset
into one test per case (`@pytest.mark.art_dataset(path)` and the `eval_case` argument).
"""

from art.evaluation.dataset import (
    ArgExpectation,
    Case,
    Dataset,
    DatasetError,
    Expectations,
    HistoryMessage,
    Judge,
    load_dataset,
)
from art.evaluation.report import (
    SCORES,
    EvalReport,
    Totals,
    baseline_drops,
    comparison_table,
    load_reports,
    report_html,
    report_table,
    write_reports,
)
from art.evaluation.results import CHECKS, CaseResult
from art.evaluation.run import (
    aevaluate,
    aevaluate_case,
    answer_holds,
    answer_holds_values,
    evaluate,
)

__all__ = [
    "CHECKS",
    "SCORES",
    "ArgExpectation",
    "Case",
    "CaseResult",
    "Dataset",
    "DatasetError",
    "EvalReport",
    "Expectations",
    "HistoryMessage",
    "Judge",
    "Totals",
    "aevaluate",
    "aevaluate_case",
    "answer_holds",
    "answer_holds_values",
    "baseline_drops",
    "comparison_table",
    "evaluate",
    "load_dataset",
    "load_reports",
    "report_html",
    "report_table",
    "write_reports",
]
