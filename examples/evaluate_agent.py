"""Evaluate an agent over a dataset of questions, and compare two models side by side.

    python examples/evaluate_agent.py

Two scripted models stand in for real ones (no key, no network): one plans the shop
questions right, one always looks up the weather. The same works with any model:
`art eval examples/eval/questions.yaml --model openai/gpt-4o-mini --compare local/smollm2`.
"""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

from rich.console import Console

import art
from art.evaluation import baseline_drops, comparison_table, report_table
from art.testing import ScriptedModel

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "eval"))
from shop_tools import TOOLS  # noqa: E402  (the question set's tools, next to it)

DATASET = {
    "name": "shop questions (three of them)",
    "cases": [
        {
            "name": "price-in-euros",
            "query": "What does one GLOBEX share cost in euros?",
            "expect": {
                "tools": ["stock_price", "convert_currency"],
                "args": [
                    {"tool": "stock_price", "arg": "symbol", "equals": "GLOBEX"},
                    {"tool": "convert_currency", "arg": "amount", "reference": True},
                ],
                "values": [80.96],
                "max_llm_calls": 2,
            },
        },
        {
            "name": "order-with-tax",
            "query": "What is the total for 3 items at 19.99 dollars each with 8 percent tax?",
            "expect": {"tools": ["order_total"], "values": [64.77]},
        },
        {
            "name": "weather-oslo",
            "query": "What is the weather in Oslo today?",
            "expect": {"tools": ["weather"], "values": ["cloudy"]},
        },
    ],
}

PLANS = {
    "What does one GLOBEX share cost in euros?": [
        ("stock_price", {"symbol": "GLOBEX"}),
        ("convert_currency", {"amount": "{{s1.output}}", "currency": "EUR"}),
    ],
    "What is the total for 3 items at 19.99 dollars each with 8 percent tax?": [
        ("order_total", {"quantity": 3, "unit_price": 19.99, "tax_percent": 8})
    ],
    "What is the weather in Oslo today?": [("weather", {"city": "Oslo"})],
}


def right_plan(messages, metadata):
    request = messages[-1]["content"].rsplit("Request: ", 1)[-1].split("\n")[0]
    steps = PLANS[request]
    return {"steps": [{"id": f"s{i}", "tool": t, "args": a} for i, (t, a) in enumerate(steps, 1)]}


def answer_from_outputs(messages, metadata):
    """A synthesis that states the last step's output (what a good model would say)."""
    outputs = re.findall(r"-?\d+\.\d+|cloudy|sunny", messages[-1]["content"])
    return f"The answer is {outputs[-1]}." if outputs else "I do not know."


async def main() -> int:
    console = Console(width=140)
    good = ScriptedModel(planning=right_plan, synthesis=answer_from_outputs)
    weather_only = ScriptedModel(
        planning={"steps": [{"id": "s1", "tool": "weather", "args": {"city": "Oslo"}}]},
        synthesis="It is cloudy in Oslo.",
    )
    reports = []
    with good, weather_only:
        for model, label in ((good, "good planner"), (weather_only, "weather only")):
            async with art.create_art_instance(
                model=model, tools=TOOLS, storage="memory://"
            ) as inst:
                reports.append(await art.aevaluate(DATASET, inst, label=label, concurrency=3))
    for report in reports:
        console.print(report_table(report))
    console.print(comparison_table(*reports))
    first, second = reports
    print(f"passed: {first.label} {first.totals.counts['passed'][0]}/3, "
          f"{second.label} {second.totals.counts['passed'][0]}/3")  # fmt: skip
    for drop in baseline_drops(second, baseline=first):
        print(f"score dropped against the baseline: {drop}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
