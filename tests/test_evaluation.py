"""art.evaluate and `art eval`: each check passing and failing, first-attempt validity
and repairs, failing and timed-out cases counted, plan-only runs, the comparison, the
HTML report, the baseline gate, the dataset's door and the pytest plugin."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

import art
from art.cli.app import EXIT_ERROR, EXIT_OK, EXIT_USAGE, app, load_tools
from art.evaluation import DatasetError, answer_holds_values
from art.testing.snapshots import render_plan_text

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.usefixtures("restore_logging")

ROOT = Path(__file__).resolve().parent.parent
SHOP_TOOLS = f"{ROOT / 'examples' / 'eval' / 'shop_tools.py'}:TOOLS"

GOOD_PLANS = {
    "What does one GLOBEX share cost in euros?": {
        "title": "GLOBEX in euros",
        "steps": [
            {"id": "s1", "tool": "stock_price", "args": {"symbol": "GLOBEX"}},
            {
                "id": "s2",
                "tool": "convert_currency",
                "args": {"amount": "{{s1.output}}", "currency": "EUR"},
            },
        ],
    },
    "What is 48 times 25?": {
        "steps": [{"id": "s1", "tool": "calculator", "args": {"expression": "48 * 25"}}]
    },
}
WRONG_PLAN = {"steps": [{"id": "s1", "tool": "weather", "args": {"city": "Oslo"}}]}

DATASET = {
    "name": "checks",
    "cases": [
        {
            "name": "euros",
            "query": "What does one GLOBEX share cost in euros?",
            "expect": {
                "tools": ["stock_price", "convert_currency"],
                "tools_not": ["weather"],
                "args": [
                    {"tool": "stock_price", "arg": "symbol", "equals": "GLOBEX"},
                    {"tool": "convert_currency", "arg": "amount", "reference": True},
                    {"tool": "convert_currency", "contains": "EUR"},
                ],
                "values": [80.96],
                "max_llm_calls": 2,
                "max_latency_s": 60,
            },
        },
        {
            "name": "product",
            "query": "What is 48 times 25?",
            "expect": {
                "tools": ["calculator"],
                "tools_not": ["weather"],
                "args": [{"tool": "calculator", "arg": "expression", "contains": "48*25"}],
                "values": [1200],
                "max_llm_calls": 2,
            },
        },
    ],
}


def _plan_for(messages, metadata):
    request = messages[-1]["content"].rsplit("Request: ", 1)[-1]
    return GOOD_PLANS.get(request, WRONG_PLAN)


def _answer(messages, metadata):
    """Synthesis: the step outputs as the answer (the values a right run holds)."""
    return "Results: " + " ".join(re.findall(r"-?\d+(?:\.\d+)?", messages[-1]["content"])[-3:])


@pytest.fixture
def shop_tools():
    return load_tools([SHOP_TOOLS])


@pytest.fixture
def good_model(scripted_model):
    return scripted_model(planning=_plan_for, synthesis=_answer)


@pytest.fixture
def wrong_model(scripted_model):
    return scripted_model(planning=WRONG_PLAN, synthesis="I do not know.")


async def _report(model, tools, dataset=DATASET, **options):
    async with art.create_art_instance(model=model, tools=tools, storage="memory://") as inst:
        return await art.aevaluate(dataset, inst, **options)


# -- checks ---------------------------------------------------------------------------------
async def test_every_check_passes_on_the_right_run(good_model, shop_tools):
    report = await _report(good_model.model, shop_tools)
    for result in report.cases:
        assert result.passed, (result.case, result.failures, result.error)
        assert result.valid_first and result.repairs == 0
        assert result.llm_calls == 2 and result.tokens > 0
    euros = report.case("euros")
    assert euros.checks == {
        "right_tools": True,
        "right_args": True,
        "right_values": True,
        "max_llm_calls": True,
        "max_latency_s": True,
    }
    assert "80.96" in euros.answer
    assert report.totals.scores["passed"] == 1.0
    assert report.totals.counts["right_values"] == (2, 2)


async def test_every_check_fails_on_the_wrong_run_and_says_why(wrong_model, shop_tools):
    report = await _report(wrong_model.model, shop_tools)
    euros = report.case("euros")
    assert not euros.passed
    assert euros.valid_plan and euros.valid_first  # a valid plan, of the wrong tools
    assert euros.checks["right_tools"] is False
    assert euros.checks["right_args"] is False
    assert euros.checks["right_values"] is False
    assert "stock_price was not used" in euros.failures
    assert "weather was used" in euros.failures
    assert 'no step has stock_price.symbol = "GLOBEX"' in euros.failures
    assert "no step has convert_currency.amount holding a reference" in euros.failures
    assert "the answer lacks 80.96" in euros.failures
    assert report.totals.scores["right_tools"] == 0.0


async def test_budgets_fail_when_exceeded(good_model, shop_tools, scripted_model):
    priced = scripted_model(planning=_plan_for, synthesis=_answer, cost_per_token=(0.01, 0.02))
    tight = {
        "cases": [
            {
                "name": "product",
                "query": "What is 48 times 25?",
                "expect": {"max_llm_calls": 1, "max_cost_usd": 0.0001, "max_latency_s": 60},
            }
        ]
    }
    result = (await _report(priced.model, shop_tools, tight)).case("product")
    assert result.checks == {"max_llm_calls": False, "max_cost_usd": False, "max_latency_s": True}
    assert result.cost_usd is not None and result.cost_usd > 0.0001
    assert "llm_calls 2 over 1" in result.failures


async def test_a_plan_snapshot_matches_or_shows_the_diff(
    good_model, shop_tools, tmp_path, monkeypatch
):
    plan = art.Plan.model_validate(GOOD_PLANS["What is 48 times 25?"])
    (tmp_path / "product.plan.md").write_text(render_plan_text(plan))
    changed = plan.model_copy(update={"title": "Something else"})
    (tmp_path / "changed.plan.md").write_text(render_plan_text(changed))
    monkeypatch.setitem(GOOD_PLANS, "48 times 25", GOOD_PLANS["What is 48 times 25?"])
    (tmp_path / "snap.yaml").write_text(
        "cases:\n"
        "  - {name: same, query: 48 times 25, expect: {plan_snapshot: product.plan.md}}\n"
        "  - {name: other, query: 48 times 25, expect: {plan_snapshot: changed.plan.md}}\n"
        "  - {name: none, query: 48 times 25, expect: {plan_snapshot: missing.plan.md}}\n"
    )
    report = await _report(good_model.model, shop_tools, tmp_path / "snap.yaml")
    assert report.case("same").checks["snapshot"] is True
    other = report.case("other")
    assert other.checks["snapshot"] is False
    assert "- # Something else" in other.failures[0] and "+ # (untitled plan)" in other.failures[0]
    assert report.case("none").checks["snapshot"] is False
    assert "no plan snapshot at" in report.case("none").failures[0]


def test_numbers_in_an_answer_are_found_whatever_their_form():
    assert answer_holds_values("It costs $1,200.00.", [1200])
    assert answer_holds_values("about 80.96 EUR, and it is Sunny", [80.96, "sunny"])
    assert not answer_holds_values("It costs 120.", [1200])
    assert not answer_holds_values("rain", ["snow"])


# -- first attempt, repairs, failures and timeouts -------------------------------------------
async def test_a_repaired_plan_is_valid_but_not_at_the_first_attempt(scripted_model, shop_tools):
    from art.testing import replies

    model = scripted_model(
        planning=replies(
            {"steps": [{"id": "s1", "tool": "nope"}]}, GOOD_PLANS["What is 48 times 25?"]
        ),
        synthesis="1200",
    )
    product = {"cases": [DATASET["cases"][1]]}
    result = (await _report(model.model, shop_tools, product)).case("product")
    assert result.valid_plan and not result.valid_first and result.repairs == 1
    assert result.llm_calls == 3


async def test_failing_and_timed_out_cases_are_counted_and_the_others_still_run(
    scripted_model, shop_tools
):
    async def planning(messages, metadata):
        request = messages[-1]["content"]
        if "slow" in request:
            await asyncio.sleep(30)
        if "broken" in request:
            raise RuntimeError("the model fell over")
        return GOOD_PLANS["What is 48 times 25?"]

    model = scripted_model(planning=planning, synthesis="1200")
    dataset = {
        "cases": [
            {"name": "slow", "query": "a slow question"},
            {"name": "broken", "query": "a broken question"},
            {"name": "fine", "query": "What is 48 times 25?", "expect": {"values": [1200]}},
        ]
    }
    seen = []
    async with art.create_art_instance(
        model=model.model,
        tools=shop_tools,
        storage="memory://",
        execution_config={"llm_max_retries": 0},
    ) as inst:
        report = await art.aevaluate(
            dataset, inst, timeout_s=1.0, concurrency=3, on_result=seen.append
        )
    assert [r.status for r in report.cases] == ["timeout", "error", "ok"]
    assert report.case("slow").error == "no outcome within 1 s"
    assert "the model fell over" in report.case("broken").error
    assert report.case("fine").passed
    assert report.totals.timeouts == 1 and report.totals.errors == 1
    assert report.totals.counts["passed"] == (1, 3)
    assert sorted(r.case for r in seen) == ["broken", "fine", "slow"]  # progress, as they end


async def test_plan_only_runs_no_tool_and_leaves_the_values_unchecked(good_model, shop_tools):
    report = await _report(good_model.model, shop_tools, plan_only=True)
    euros = report.case("euros")
    assert euros.passed and euros.answer is None
    assert euros.checks["right_values"] is None and euros.checks["right_args"] is True
    assert euros.llm_calls == 1
    assert good_model.calls_for("synthesis") == []
    assert report.totals.counts["right_values"] == (0, 0)
    assert "flowchart TD" in euros.mermaid


async def test_history_reaches_the_planner(good_model, shop_tools):
    dataset = {
        "cases": [
            {
                "name": "follow-up",
                "history": [
                    {"role": "user", "content": "What is the price of one ACME share?"},
                    {"role": "assistant", "content": "One ACME share costs 123.45 dollars."},
                ],
                "query": "What is 48 times 25?",
            }
        ]
    }
    await _report(good_model.model, shop_tools, dataset, plan_only=True)
    [call] = good_model.calls_for("planning")
    assert "One ACME share costs 123.45 dollars." in json.dumps(call.messages)


async def test_the_judge_runs_only_when_asked(scripted_model, shop_tools):
    model = scripted_model(
        planning=_plan_for, synthesis="1200", default="FAIL: the answer has no unit"
    )
    dataset = {
        "cases": [
            {
                "name": "judged",
                "query": "What is 48 times 25?",
                "judge": {"rubric": "The answer states 1200."},
            }
        ]
    }
    unjudged = (await _report(model.model, shop_tools, dataset)).case("judged")
    assert "judge" not in unjudged.checks and unjudged.passed
    judged = (await _report(model.model, shop_tools, dataset, judge=True)).case("judged")
    assert judged.checks["judge"] is False and not judged.passed
    assert "judge: FAIL: the answer has no unit" in judged.failures
    [call] = model.calls_for("chat")
    assert "The answer states 1200." in call.messages[-1]["content"]


# -- the dataset's door ------------------------------------------------------------------------
def test_a_dataset_that_cannot_mean_anything_is_refused_naming_the_case(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("cases:\n  - {name: a, query: q, expect: {tools: [x], max_llm_calls: 0}}\n")
    with pytest.raises(DatasetError, match=r"case 1 \(a\): expect.max_llm_calls"):
        art.load_dataset(bad)
    bad.write_text("cases:\n  - {name: a, query: q, expcet: {}}\n")
    with pytest.raises(DatasetError, match=r"case 1 \(a\): expcet: Extra inputs"):
        art.load_dataset(bad)
    with pytest.raises(DatasetError, match="two cases are named 'a'"):
        art.load_dataset({"cases": [{"name": "a", "query": "q"}, {"name": "a", "query": "r"}]})
    with pytest.raises(DatasetError, match="cannot read the dataset"):
        art.load_dataset(tmp_path / "missing.yaml")
    loaded = art.load_dataset(ROOT / "examples" / "eval" / "questions.yaml")
    assert len(loaded.cases) >= 20
    assert len({tool for case in loaded.cases for tool in case.expect.tools}) >= 4


# -- art eval ----------------------------------------------------------------------------------
@pytest.fixture
def invoke():
    runner = CliRunner()

    def call(*args: str):
        return runner.invoke(app, list(args), env={"COLUMNS": "200", "NO_COLOR": "1"})

    return call


@pytest.fixture
def dataset_file(tmp_path) -> Path:
    """The dataset in a file, naming its tools by a path relative to itself."""
    shutil.copy(ROOT / "examples" / "eval" / "shop_tools.py", tmp_path / "eval_shop.py")
    path = tmp_path / "checks.json"
    path.write_text(json.dumps(DATASET | {"tools": "eval_shop.py:TOOLS"}))
    return path


def test_art_eval_prints_a_table_per_case_and_in_total(invoke, good_model, dataset_file):
    result = invoke("eval", str(dataset_file), "--model", good_model.model)
    assert result.exit_code == EXIT_OK, result.output
    out = result.stdout
    assert re.search(r"euros\s+│\s+✓\s+│\s+✓\s+│\s+0\s+│\s+✓\s+│\s+✓\s+│\s+✓\s+│\s+2", out), out
    assert re.search(r"total \(2\)\s+│\s+2/2\s+│\s+2/2", out)
    assert "p50" in out and "p95" in out
    assert "[1/2]" in result.stderr and "[2/2]" in result.stderr  # progress


def test_art_eval_compares_two_models_and_marks_the_differences(
    invoke, good_model, wrong_model, dataset_file, tmp_path
):
    report, page = tmp_path / "report.json", tmp_path / "report.html"
    result = invoke(
        "eval", str(dataset_file), "--model", good_model.model, "--compare", wrong_model.model,
        "--json", str(report), "--html", str(page),
    )  # fmt: skip
    assert result.exit_code == EXIT_OK, result.output
    comparison = result.stdout.split(f"{good_model.model}  vs  {wrong_model.model}", 1)[1]
    assert re.search(r"euros\s+│\s+✓ \| ✗ ◆", comparison), comparison
    assert re.search(r"total\s+│\s+2/2 \| 0/2 ◆", comparison)
    runs = json.loads(report.read_text())["runs"]
    assert [run["label"] for run in runs] == [good_model.model, wrong_model.model]
    assert runs[0]["totals"]["scores"]["passed"] == 1.0
    html = page.read_text()
    assert "flowchart TD" in html and "class='diff'" in html
    assert "<script" not in html and "http" not in html.replace(good_model.model, "")


def test_the_baseline_gate_fails_only_when_a_score_drops(
    invoke, good_model, wrong_model, dataset_file, tmp_path
):
    baseline = tmp_path / "baseline.json"
    first = invoke("eval", str(dataset_file), "-m", good_model.model, "--json", str(baseline))
    assert first.exit_code == EXIT_OK
    same = invoke("eval", str(dataset_file), "-m", good_model.model, "--baseline", str(baseline))
    assert same.exit_code == EXIT_OK, same.output
    worse = invoke("eval", str(dataset_file), "-m", wrong_model.model, "--baseline", str(baseline))
    assert worse.exit_code == EXIT_ERROR
    assert "score dropped passed: 0 % < baseline 100 %" in " ".join(worse.stderr.split())


def test_art_eval_refuses_a_bad_dataset_or_baseline(invoke, good_model, tmp_path, dataset_file):
    bad = tmp_path / "bad.yaml"
    bad.write_text("cases: []\n")
    result = invoke("eval", str(bad), "-m", good_model.model)
    assert result.exit_code == EXIT_USAGE and "cases" in result.stderr
    missing = invoke("eval", str(dataset_file), "-m", good_model.model, "--baseline", "nope.json")
    assert missing.exit_code == EXIT_USAGE and "--baseline" in missing.stderr


# -- pytest ------------------------------------------------------------------------------------
def test_a_dataset_becomes_one_test_per_case(pytester, monkeypatch):
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makefile(".json", cases=json.dumps(DATASET))
    pytester.makepyfile(
        test_cases="""
        import pytest

        @pytest.mark.art_dataset("cases.json")
        def test_case(eval_case):
            assert eval_case.expect.tools
        """
    )
    result = pytester.runpytest_inprocess(
        "-p", "art.testing.plugin", "-v", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*test_case?euros? PASSED*", "*test_case?product? PASSED*"])
