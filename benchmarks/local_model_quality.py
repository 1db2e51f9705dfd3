"""How well an in-process model plans over art's built-in tools, and how long each phase takes.

    python -m benchmarks.local_model_quality                  # the demo model, 20 questions
    python -m benchmarks.local_model_quality --model local//models/qwen2.5-0.5b-instruct-q4_k_m.gguf
    python -m benchmarks.local_model_quality --only 3 --json results/local.json

Each question is one full run (plan, execute, synthesize) on a fresh thread, at
temperature 0 with a fixed seed, so a run is repeatable on the same build. Per question it
records whether the first planning call gave a valid plan, whether the repair loop got one,
whether the plan used a tool the question needs and that tool step completed, the answer's
length, and the wall time of each phase. The tools are the built-in ones that work offline
and unattended: calculator, show, and read_file/list_files over a temporary folder (not
http_get, which needs the network, nor ask_human, which waits for a person).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_MODEL = "local/smollm2"


@dataclass(frozen=True)
class Question:
    text: str
    tools: tuple[str, ...]  # a plan that uses any of these tools is on topic
    answer: str | None = None  # a regex the right answer matches (None: nothing to check)


def _number(value: str) -> str:
    """A regex for `value` as a whole number, allowing a trailing .0 and thousands commas."""
    return rf"(?<![\d.]){value}(\.0+)?(?![\d])"


QUESTIONS: tuple[Question, ...] = (
    Question("What is 17 * 23?", ("calculator",), _number("391")),
    Question("Calculate 1234 + 5678.", ("calculator",), _number("6,?912")),
    Question("What is 2 to the power of 10?", ("calculator",), _number("1,?024")),
    Question("What is the square root of 169?", ("calculator",), _number("13")),
    Question("What is 15% of 80?", ("calculator",), _number("12")),
    Question("Divide 144 by 12.", ("calculator",), r"(=|is|:)\s*12(\.0+)?(?![\d])"),
    Question("What is (3 + 4) * 5?", ("calculator",), _number("35")),
    Question("What is the average of 4, 8 and 15?", ("calculator",), _number("9")),
    Question("Compute 17 * 23, then add 12 to the result.", ("calculator",), _number("403")),
    Question("What is 12 * 12 plus 13 * 13?", ("calculator",), _number("313")),
    Question("Multiply 6 by 7 and then divide the result by 2.", ("calculator",), _number("21")),
    Question("How many seconds are there in a week?", ("calculator",), _number("604,?800")),
    Question("Show the user a markdown note that says 'Hello, world'.", ("show",)),
    Question("Show a table of the numbers 1, 2 and 3 with their squares.", ("show",)),
    Question(
        "Compute 45 * 3 and show the result to the user.", ("calculator", "show"), _number("135")
    ),
    Question(
        "List the files that are available.",
        ("list_files",),
        r"(?s)(?=.*notes\.txt)(?=.*prices\.csv)",
    ),
    Question("Read the file notes.txt and tell me what it says.", ("read_file",), "Thursday"),
    Question("What is the price of a pear according to prices.csv?", ("read_file",), _number("5")),
    Question("Read prices.csv and show its contents to the user.", ("read_file", "show")),
    Question(
        "How many files are there, and what is 7 * 8?",
        ("list_files", "calculator"),
        _number("56"),
    ),
)

FILES = {
    "notes.txt": "Team meeting moved to Thursday at 10:00. Bring the budget draft.\n",
    "prices.csv": "item,price\napple,3\npear,5\nplum,2\n",
}


@dataclass
class Outcome:
    question: str
    status: str = "error"
    planning_calls: int = 0
    valid_first: bool = False
    valid_after_repair: bool = False
    steps: int = 0
    used_tool: bool = False
    tool_completed: bool = False
    answered: bool = False
    correct: bool | None = None  # the answer matches Question.answer (None: not checked)
    planning_prompt_tokens: int = 0
    planning_completion_tokens: int = 0
    llm_completion_tokens: int = 0
    llm_seconds: float = 0.0
    plan_s: float = 0.0
    execute_s: float = 0.0
    synthesize_s: float = 0.0
    total_s: float = 0.0
    error: str | None = None
    plan: dict[str, Any] | None = None
    answer: str = ""


@dataclass
class _Clock:
    """Wall-clock marks of one run, set by event hooks."""

    started: float = field(default_factory=time.perf_counter)
    planned: float | None = None
    synthesis_started: float | None = None
    planning_calls: int = 0
    planning_prompt_tokens: int = 0
    planning_completion_tokens: int = 0
    completion_tokens: int = 0
    llm_seconds: float = 0.0


def _tools(files_root: Path) -> list[Any]:
    from art.tools import Calculator, ListFiles, ReadFile, Show

    return [Calculator(), Show(), ReadFile(files_root), ListFiles(files_root)]


async def run_question(
    instance: Any, clock: list[_Clock], index: int, question: Question
) -> Outcome:
    """One full run of `question`; `clock[0]` is replaced with this run's marks."""
    clock[0] = _Clock()
    outcome = Outcome(question=question.text)
    response = await instance.aprocess(question.text, f"quality-{index}")
    ended = time.perf_counter()
    marks = clock[0]

    outcome.status = str(response.metadata.status)
    outcome.planning_calls = marks.planning_calls
    outcome.valid_after_repair = response.plan is not None
    outcome.valid_first = outcome.valid_after_repair and marks.planning_calls == 1
    if response.plan is not None:
        outcome.plan = response.plan.model_dump(by_alias=True, exclude_defaults=True)
        outcome.steps = len(response.plan.steps)
        outcome.used_tool = any(step.tool in question.tools for step in response.plan.steps)
    outcome.tool_completed = any(
        record.tool in question.tools and record.status == "completed" for record in response.steps
    )
    outcome.answer = response.content or ""
    outcome.answered = outcome.status == "success" and bool(outcome.answer.strip())
    if question.answer is not None:
        outcome.correct = (
            outcome.answered and re.search(question.answer, outcome.answer) is not None
        )
    outcome.planning_prompt_tokens = marks.planning_prompt_tokens
    outcome.planning_completion_tokens = marks.planning_completion_tokens
    outcome.llm_completion_tokens = marks.completion_tokens
    outcome.llm_seconds = marks.llm_seconds
    if response.metadata.error is not None:
        outcome.error = f"{response.metadata.error.code}: {response.metadata.error.message}"[:300]

    planned = marks.planned or ended
    synthesis = marks.synthesis_started or ended
    outcome.plan_s = planned - marks.started
    outcome.execute_s = max(0.0, synthesis - planned)
    outcome.synthesize_s = ended - synthesis if marks.synthesis_started else 0.0
    outcome.total_s = ended - marks.started
    return outcome


async def measure(
    model: str, questions: tuple[Question, ...], max_tokens: int | None, seed: int
) -> list[Outcome]:
    import art

    clock = [_Clock()]

    def on_message(data: dict[str, Any], _context: Any) -> None:
        if data.get("phase") == "planning":
            clock[0].planning_calls += 1
        elif data.get("phase") == "synthesis" and clock[0].synthesis_started is None:
            clock[0].synthesis_started = time.perf_counter()

    def on_answer(data: dict[str, Any], _context: Any) -> None:
        usage = data.get("usage") or {}
        marks = clock[0]
        marks.completion_tokens += usage.get("completion_tokens", 0)
        marks.llm_seconds += (data.get("duration_ms") or 0.0) / 1000.0
        if data.get("phase") == "planning":
            if not marks.planning_prompt_tokens:
                marks.planning_prompt_tokens = usage.get("prompt_tokens", 0)
            marks.planning_completion_tokens += usage.get("completion_tokens", 0)

    def on_plan(_data: dict[str, Any], _context: Any) -> None:
        clock[0].planned = time.perf_counter()

    outcomes = []
    with tempfile.TemporaryDirectory(prefix="art-quality-") as root:
        for name, text in FILES.items():
            (Path(root) / name).write_text(text, encoding="utf-8")
        instance = art.create_art_instance(
            model=model,
            tools=_tools(Path(root)),
            storage="memory://",
            llm_params={"temperature": 0, "seed": seed}
            | ({"max_tokens": max_tokens} if max_tokens else {}),
        )
        instance.on("message:before", on_message)
        instance.on("message:after", on_answer)
        instance.on("plan:created", on_plan)
        async with instance:
            for index, question in enumerate(questions, start=1):
                outcome = await run_question(instance, clock, index, question)
                outcomes.append(outcome)
                _print_row(index, outcome)
    return outcomes


def summarize(outcomes: list[Outcome]) -> dict[str, Any]:
    count = len(outcomes)

    def share(flag: str) -> str:
        hits = sum(1 for o in outcomes if getattr(o, flag))
        return f"{hits}/{count}"

    def seconds(attribute: str, among: list[Outcome]) -> dict[str, float]:
        values = [getattr(o, attribute) for o in among]
        if not values:
            return {}
        return {
            "median": round(statistics.median(values), 2),
            "max": round(max(values), 2),
            "total": round(sum(values), 1),
        }

    planned = [o for o in outcomes if o.valid_after_repair]
    return {
        "questions": count,
        "valid_first_attempt": share("valid_first"),
        "valid_after_repair": share("valid_after_repair"),
        "plan_uses_a_needed_tool": share("used_tool"),
        "needed_tool_completed": share("tool_completed"),
        "answered": share("answered"),
        "answer_has_the_right_value": (
            f"{sum(1 for o in outcomes if o.correct)}/"
            f"{sum(1 for o in outcomes if o.correct is not None)}"
        ),
        "planning_calls": sum(o.planning_calls for o in outcomes),
        "planning_prompt_tokens": seconds("planning_prompt_tokens", outcomes).get("median"),
        "generated_tokens_per_s": round(
            sum(o.llm_completion_tokens for o in outcomes)
            / max(sum(o.llm_seconds for o in outcomes), 1e-9),
            1,
        ),
        "plan_s": seconds("plan_s", outcomes),
        "execute_s": seconds("execute_s", planned),
        "synthesize_s": seconds("synthesize_s", planned),
        "total_s": seconds("total_s", outcomes),
    }


def machine(model: str, max_tokens: int | None, seed: int) -> dict[str, Any]:
    from art.adapters import local

    info: dict[str, Any] = {
        "model": model,
        "max_tokens": max_tokens
        or int(os.environ.get(local.MAX_TOKENS_ENV, local.DEFAULT_MAX_TOKENS)),
        "temperature": 0,
        "seed": seed,
        "threads": os.environ.get(local.THREADS_ENV, str(local.DEFAULT_THREADS)),
        "n_ctx": os.environ.get(local.CONTEXT_ENV, str(local.DEFAULT_CONTEXT)),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    try:
        import llama_cpp

        info["llama_cpp_python"] = llama_cpp.__version__
    except ImportError:
        info["llama_cpp_python"] = None
    if hasattr(os, "getloadavg"):
        info["load_average_at_start"] = [round(x, 2) for x in os.getloadavg()]
    return info


def _print_row(index: int, o: Outcome) -> None:
    marks = "".join(
        symbol if flag else "."
        for symbol, flag in (
            ("1", o.valid_first),
            ("R", o.valid_after_repair),
            ("T", o.used_tool),
            ("C", o.tool_completed),
            ("A", o.answered),
            ("V", bool(o.correct)),
        )
    )
    print(
        f"{index:2d} {marks} calls={o.planning_calls} plan={o.plan_s:6.1f}s "
        f"exec={o.execute_s:5.1f}s synth={o.synthesize_s:5.1f}s  {o.question}",
        flush=True,
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.local_model_quality",
        description="Plan validity and phase times of an in-process model on 20 fixed questions.",
    )
    parser.add_argument("--model", default=DEFAULT_MODEL, help=f"default {DEFAULT_MODEL}")
    parser.add_argument("--only", type=int, default=None, help="run only the first N questions")
    parser.add_argument(
        "--max-tokens",
        type=int,
        default=None,
        help="completion cap per LLM call (default: the provider's, 512 for local models)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    questions = QUESTIONS[: args.only] if args.only else QUESTIONS
    info = machine(args.model, args.max_tokens, args.seed)
    print(json.dumps(info), flush=True)
    print(
        "marks: 1 valid first attempt, R valid after repair, T uses a needed tool, "
        "C that tool completed, A answered (status success, non-empty answer), "
        "V the answer has the right value",
        flush=True,
    )
    started = time.perf_counter()
    outcomes = asyncio.run(measure(args.model, questions, args.max_tokens, args.seed))
    summary = summarize(outcomes)
    summary["wall_s"] = round(time.perf_counter() - started, 1)
    print(json.dumps(summary, indent=2), flush=True)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        report = {"machine": info, "summary": summary, "runs": [asdict(o) for o in outcomes]}
        args.json.write_text(json.dumps(report, indent=2, default=str), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
