"""Snapshot-test your agent's plans: copy this file into your own tests.

    pytest examples/plan_snapshot_test.py                    # compare with the snapshots
    pytest examples/plan_snapshot_test.py --snapshot-update  # record / accept changes

A plan is the engine's whole behaviour in one value (which tools, which arguments, what
runs in parallel), so a snapshot catches any change your prompt, tools or model make,
and shows it in review as a readable Markdown diff. The snapshots live in
`__snapshots__/plan_snapshot_test/` next to this file; commit them.

The fixtures `scripted_model` and `plan_snapshot` come with art (its pytest plugin).
Here the scripted model plays the planner, which pins down how art reads, validates and
completes what the model wrote (implied dependencies, typed arguments). To snapshot what
a *real* model plans, build the instance with your model instead, run
`pytest --snapshot-update` once, and review the recorded files.
"""

from __future__ import annotations

import pytest

import art
from art.tools import Calculator

QUESTION = "What are 17 x 23 and 19 x 29, and their sum?"

# What the planner writes: s3 names s1 and s2 only through references.
MODEL_PLAN = {
    "intent": "compute two products and add them",
    "title": "Products and their sum",
    "steps": [
        {"id": "s1", "tool": "calculator", "args": {"expression": "17 * 23"}},
        {"id": "s2", "tool": "calculator", "args": {"expression": "19 * 29"}},
        {
            "id": "s3",
            "description": "add the two products",
            "tool": "calculator",
            "args": {"expression": "{{s1.output}} + {{s2.output}}"},
        },
    ],
}


@pytest.fixture
def inst(scripted_model):
    model = scripted_model(planning=MODEL_PLAN)
    with art.create_art_instance(
        model=model.model, tools=[Calculator()], storage="memory://"
    ) as instance:
        yield instance


def test_plan_matches_the_snapshot(inst, plan_snapshot):
    assert inst.plan(QUESTION) == plan_snapshot


def test_plan_runs_the_products_in_parallel(inst):
    plan = inst.plan(QUESTION)
    assert plan.steps[0].all_dependencies == []
    assert plan.steps[1].all_dependencies == []
    assert plan.steps[2].all_dependencies == ["s1", "s2"]  # implied by the references
