"""Running a dataset's cases on an ArtInstance and checking each run against its case.

A case whose run fails, raises or times out is a result like any other (its checks
fail, its status says why): it never stops the evaluation.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, Unpack

from art.evaluation.dataset import ArgExpectation, Case, Dataset, load_dataset
from art.evaluation.results import CaseResult

if TYPE_CHECKING:
    from art.evaluation.report import EvalReport
    from art.instance import ArtInstance
    from art.observe.events import Event
    from art.planning.plans import Plan

__all__ = [
    "aevaluate",
    "aevaluate_case",
    "answer_holds",
    "answer_holds_values",
    "evaluate",
]


class _Tally:
    """The LLM calls of one case's thread, counted from the instance's events."""

    def __init__(self, thread_id: str) -> None:
        self.thread_id = thread_id
        self.planning_calls = 0
        self.llm_calls = 0
        self.tokens = 0
        self.cost: float | None = None

    def __call__(self, event: Event) -> None:
        if event.name != "message:after" or event.thread_id != self.thread_id:
            return
        data = event.data
        self.llm_calls += 1
        if data.get("phase") == "planning":
            self.planning_calls += 1
        usage = data.get("usage") or {}
        self.tokens += int(usage.get("total_tokens") or usage.get("totalTokens") or 0)
        if isinstance(data.get("cost"), int | float):
            self.cost = (self.cost or 0.0) + float(data["cost"])


async def aevaluate_case(
    case: Case,
    instance: ArtInstance,
    *,
    plan_only: bool = False,
    timeout_s: float | None = None,
    judge: bool = False,
    directory: Path | None = None,
) -> CaseResult:
    """Run one case (or only plan it) and check the outcome; never raises for a run's
    failure or timeout (the result says so)."""
    from art.errors import PlanError
    from art.responses import ConversationMessage

    thread_id = f"eval-{case.name[:40]}-{uuid.uuid4().hex[:8]}"
    result = CaseResult(case=case.name, query=case.query)
    tally = _Tally(thread_id)
    unsubscribe = instance.events.subscribe(tally)
    started = time.perf_counter()
    plan: Plan | None = None
    try:
        for turn in case.history:
            await instance.storage.append_message(
                ConversationMessage(thread_id=thread_id, role=turn.role, content=turn.content)
            )
        async with asyncio.timeout(timeout_s):
            if plan_only:
                plan = await instance.aplan(case.query, thread_id)
                result.valid_plan = True
            else:
                response = await instance.aprocess(case.query, thread_id)
                plan = response.plan
                result.answer = response.content
                error = response.metadata.error
                result.valid_plan = plan is not None and (
                    error is None or error.code != "PLAN_INVALID"
                )
                if response.status == "error" and error is not None:
                    result.status = "error"
                    result.error = f"{error.code}: {error.message}"
    except PlanError as exc:
        result.status, result.error = "error", f"{exc.code}: {exc.message}"
    except TimeoutError:
        result.status, result.error = "timeout", f"no outcome within {timeout_s:g} s"
    except Exception as exc:  # a broken tool or model: this case fails, the others run
        result.status, result.error = "error", f"{type(exc).__name__}: {exc}"
    finally:
        unsubscribe()
    result.latency_s = time.perf_counter() - started
    result.llm_calls, result.tokens, result.cost_usd = tally.llm_calls, tally.tokens, tally.cost
    result.repairs = max(tally.planning_calls - 1, 0)
    result.valid_first = result.valid_plan and tally.planning_calls == 1
    if plan is not None:
        result.plan = plan.to_wire()
        result.mermaid = plan.to_mermaid()
    _check(result, case, plan, plan_only=plan_only, directory=directory)
    if judge and case.judge is not None and result.answer is not None:
        await _judge(result, case, instance)
    return result


def _check(
    result: CaseResult, case: Case, plan: Plan | None, *, plan_only: bool, directory: Path | None
) -> None:
    expect = case.expect
    checks = result.checks
    failures = result.failures
    used = [step.tool for step in plan.steps if step.tool] if plan is not None else []
    if expect.tools or expect.tools_not:
        missing = [tool for tool in expect.tools if tool not in used]
        unwanted = sorted({tool for tool in used if tool in expect.tools_not})
        checks["right_tools"] = not missing and not unwanted
        failures += [f"{tool} was not used" for tool in missing]
        failures += [f"{tool} was used" for tool in unwanted]
    if expect.args:
        unmet = [e.describe() for e in expect.args if not _arg_met(e, plan)]
        checks["right_args"] = not unmet
        failures += [f"no step has {what}" for what in unmet]
    if expect.values:
        if plan_only:
            checks["right_values"] = None  # no answer without running the plan
        else:
            absent = [v for v in expect.values if not answer_holds(result.answer or "", v)]
            checks["right_values"] = not absent
            failures += [f"the answer lacks {v!r}" for v in absent]
    if expect.plan_snapshot is not None:
        checks["snapshot"] = _snapshot_matches(result, expect.plan_snapshot, plan, directory)
    budgets: tuple[tuple[str, float | None, float | None], ...] = (
        ("max_llm_calls", expect.max_llm_calls, result.llm_calls),
        ("max_cost_usd", expect.max_cost_usd, result.cost_usd),
        ("max_latency_s", expect.max_latency_s, result.latency_s),
    )
    for name, limit, actual in budgets:
        if limit is None:
            continue
        if actual is None:
            checks[name] = None
            continue
        checks[name] = actual <= limit
        if not checks[name]:
            failures.append(f"{name.removeprefix('max_')} {actual:g} over {limit:g}")


def _arg_met(expectation: ArgExpectation, plan: Plan | None) -> bool:
    from art.planning.references import has_references

    if plan is None:
        return False
    for step in plan.steps:
        if step.tool != expectation.tool:
            continue
        if expectation.arg is not None:
            values = [step.args[expectation.arg]] if expectation.arg in step.args else []
        else:
            values = list(step.args.values())
        for value in values:
            if "equals" in expectation.model_fields_set and not _same(value, expectation.equals):
                continue
            if expectation.contains is not None and _squeezed(expectation.contains) not in (
                _squeezed(value if isinstance(value, str) else json.dumps(value))
            ):
                continue
            if expectation.reference is not None and has_references(value) != (
                expectation.reference
            ):
                continue
            return True
    return False


def _same(value: object, expected: object) -> bool:
    if isinstance(value, int | float) and isinstance(expected, int | float):
        return not isinstance(value, bool) and math.isclose(value, expected, rel_tol=1e-9)
    return bool(value == expected)


def _squeezed(text: str) -> str:
    return "".join(text.split()).lower()


_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?|-?\.\d+")


def answer_holds(answer: str, value: str | float) -> bool:
    """Whether the answer states `value`: a number as any number in the text equal to it
    within 0.5 % (so 80.96 is found in "about 80.96 EUR" or "80.960"), a text without
    regard to case."""
    if isinstance(value, str):
        return value.lower() in answer.lower()
    for match in _NUMBER.finditer(answer):
        try:
            number = float(match.group().replace(",", ""))
        except ValueError:
            continue
        if math.isclose(number, value, rel_tol=0.005, abs_tol=1e-9):
            return True
    return False


def answer_holds_values(answer: str, values: Sequence[str | float]) -> bool:
    """Whether the answer states every one of `values` (see `answer_holds`)."""
    return all(answer_holds(answer, value) for value in values)


def _snapshot_matches(
    result: CaseResult, snapshot: str, plan: Plan | None, directory: Path | None
) -> bool:
    from art.planning.text import plan_text_diff, render_plan_text

    path = (directory or Path.cwd()) / snapshot
    try:
        stored = path.read_text(encoding="utf-8")
    except OSError:
        result.failures.append(f"no plan snapshot at {path}")
        return False
    received = render_plan_text(plan) if plan is not None else ""
    if received == stored:
        return True
    diff = list(plan_text_diff(stored, received))
    result.failures.append("the plan differs from its snapshot:\n" + "\n".join(diff[:20]))
    return False


_JUDGE_PROMPT = """\
You judge an AI assistant's answer. Reply PASS if the answer meets the rubric, \
else FAIL, then one sentence saying why.

Rubric: {rubric}

Question: {query}

Answer: {answer}"""


async def _judge(result: CaseResult, case: Case, instance: ArtInstance) -> None:
    assert case.judge is not None
    prompt = _JUDGE_PROMPT.format(
        rubric=case.judge.rubric, query=case.query, answer=result.answer or ""
    )
    try:
        reply = await instance.achat(
            [{"role": "user", "content": prompt}],
            model=case.judge.model,
            llm_params={"temperature": 0},
        )
    except Exception as exc:  # the judge failing is not the agent failing: say so
        result.checks["judge"] = None
        result.failures.append(f"the judge could not answer: {exc}")
        return
    verdict = reply.content.strip()
    result.checks["judge"] = verdict.upper().startswith("PASS")
    if not result.checks["judge"]:
        result.failures.append(f"judge: {verdict[:300]}")


class EvaluateOptions(TypedDict, total=False):
    """`aevaluate`'s keyword options, which `evaluate` passes on."""

    plan_only: bool
    concurrency: int
    timeout_s: float | None
    judge: bool
    label: str | None
    on_result: Callable[[CaseResult], object] | None


async def aevaluate(
    dataset: Dataset | str | Path | Mapping[str, object],
    instance: ArtInstance,
    *,
    plan_only: bool = False,
    concurrency: int = 1,
    timeout_s: float | None = None,
    judge: bool = False,
    label: str | None = None,
    on_result: Callable[[CaseResult], object] | None = None,
) -> EvalReport:
    """Every case of `dataset` on `instance`, at most `concurrency` at a time, as an
    `EvalReport` (`on_result` is called as each case finishes: progress)."""
    from art.evaluation.report import EvalReport

    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    dataset = load_dataset(dataset)
    gate = asyncio.Semaphore(concurrency)

    async def one(case: Case) -> CaseResult:
        async with gate:
            result = await aevaluate_case(
                case,
                instance,
                plan_only=plan_only,
                timeout_s=timeout_s,
                judge=judge,
                directory=dataset.directory,
            )
        if on_result is not None:
            on_result(result)
        return result

    results: Sequence[CaseResult] = await asyncio.gather(*(one(case) for case in dataset.cases))
    return EvalReport(
        dataset=dataset.name,
        label=label or str(instance.config.model or ""),
        plan_only=plan_only,
        cases=list(results),
    )


def evaluate(
    dataset: Dataset | str | Path | Mapping[str, object],
    instance: ArtInstance,
    **options: Unpack[EvaluateOptions],
) -> EvalReport:
    """Sync `aevaluate`, on the instance's own event loop (where its storage lives)."""
    return instance._sync(aevaluate(dataset, instance, **options))
