"""A newcomer's first hour, end to end, in a fresh project as the docs tell it: two tools
(an `@art.tool` function and an `IToolExecutor` class), a scripted model, a plan snapshot
test run by pytest, then the `art` command: a run, a `--json` run, an approval resumed
from another process with the printed command, `art show` and `art threads`.

Every step runs as its own process, as a user's would (docs/quickstart.md, docs/tools.md,
docs/testing.md, docs/cli.md).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # each step starts a Python process that imports litellm

SHOP = textwrap.dedent(
    '''
    """The shop's tools and, for offline runs, a scripted model."""

    import pydantic

    import art
    from art.testing import ScriptedModel


    @art.tool(examples=[{"input": {"order_id": "A-1"}, "description": "Where is order A-1?"}])
    def lookup_order(order_id: str) -> dict:
        """Look up an order by its id.

        Returns its status and the carrier that has it.

        Args:
            order_id: The order's id, e.g. A-1.
        """
        print(f"looking up {order_id}")  # a stray print must not break --json
        return {"order_id": order_id, "status": "shipped", "carrier": "DHL"}


    class DeliveryInput(pydantic.BaseModel):
        carrier: str = pydantic.Field(description="The carrier, e.g. DHL.")


    class EstimateDelivery(art.IToolExecutor):
        schema = art.ToolSchema(
            name="estimate_delivery",
            description="Estimate how many days a carrier needs. Returns a number of days.",
            input_schema=DeliveryInput.model_json_schema(),
        )

        async def execute(self, input, context):
            carrier = DeliveryInput.model_validate(input).carrier
            if carrier != "DHL":
                return self.fail(context, f"unknown carrier {carrier}", code="NOT_FOUND")
            return self.ok(context, 2)


    @art.tool(execution_mode="blocking")
    def approve_refund(order_id: str) -> str:
        """Ask a person to approve a refund."""
        return f"Refund order {order_id}?"


    TOOLS = [lookup_order, EstimateDelivery(), approve_refund]

    PLAN = {
        "title": "Where is the order",
        "steps": [
            {"id": "s1", "tool": "lookup_order", "args": {"order_id": "A-1"}},
            {"id": "s2", "tool": "estimate_delivery", "args": {"carrier": "{{s1.output.carrier}}"}},
        ],
    }
    REFUND_PLAN = {
        "title": "Refund",
        "steps": [{"id": "s1", "tool": "approve_refund", "args": {"order_id": "A-1"}}],
    }


    def _plan(messages, metadata):
        asked = messages[-1]["content"]
        return REFUND_PLAN if "refund" in asked.lower() else PLAN


    MODEL = ScriptedModel(planning=_plan, synthesis="Order A-1 has shipped with DHL: 2 days.")
    '''
)

TEST_SHOP = textwrap.dedent(
    """
    import art
    from shop import PLAN, TOOLS


    def test_the_plan(scripted_model, plan_snapshot):
        model = scripted_model(planning=PLAN)
        with art.create_art_instance(model=model.model, tools=TOOLS, storage="memory://") as inst:
            assert inst.plan("Where is order A-1?") == plan_snapshot


    def test_the_answer(scripted_model):
        model = scripted_model(planning=PLAN, synthesis="2 days.")
        with art.create_art_instance(model=model.model, tools=TOOLS, storage="memory://") as inst:
            resp = inst.process("Where is order A-1?", "t")
        assert resp.status == "success"
        assert [s.output for s in resp.steps] == [
            {"order_id": "A-1", "status": "shipped", "carrier": "DHL"},
            2,
        ]
    """
)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "shop.py").write_text(SHOP)
    (tmp_path / "test_shop.py").write_text(TEST_SHOP)
    return tmp_path


def _run(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "COLUMNS": "200", "NO_COLOR": "1"}
    env.pop("ART_MODEL", None)
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, cwd=project, env=env, timeout=300
    )


def _art(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return _run(project, "-c", "from art.cli.app import main; main()", *args)


def test_a_new_users_first_hour(project: Path) -> None:
    # The tools register without a warning and the docstring's paragraphs are kept.
    checked = _run(
        project,
        "-W",
        "error",
        "-c",
        "import shop, art; art.ToolRegistry(shop.TOOLS); "
        "print(shop.lookup_order.schema.description)",
    )
    assert checked.returncode == 0, checked.stderr
    assert "Look up an order by its id.\n\nReturns its status" in checked.stdout

    # docs/testing.md: record the plan snapshot, then the suite passes against it.
    recorded = _run(project, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--snapshot-update")
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    snapshot = project / "__snapshots__" / "test_shop" / "test_the_plan.plan.md"
    assert "## s2 · estimate_delivery" in snapshot.read_text()
    assert "depends on: s1" in snapshot.read_text()
    checked_again = _run(project, "-m", "pytest", "-q", "-p", "no:cacheprovider")
    assert checked_again.returncode == 0, checked_again.stdout
    assert "2 passed" in checked_again.stdout

    # docs/quickstart.md: the whole agent from the terminal, offline.
    db = f"sqlite:///{project / 'art.db'}"
    agent = ["--tools", "shop.py:TOOLS", "--model", "shop.py:MODEL", "--storage", db]
    ran = _art(project, "run", "Where is order A-1?", "--thread", "w1", *agent)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert re.search(r"✓ s1 lookup_order .* completed", ran.stdout)
    assert re.search(r"✓ s2 estimate_delivery .* completed", ran.stdout)
    assert "Order A-1 has shipped with DHL: 2 days." in ran.stdout
    assert ran.stdout.strip().splitlines()[-1].startswith("success  2 LLM calls · 2 tool calls")

    as_json = _art(project, "-v", "run", "Where is order A-1?", "--thread", "w2", "--json", *agent)
    assert as_json.returncode == 0, as_json.stderr
    document = json.loads(as_json.stdout)  # one document, although the tool prints
    assert document["metadata"]["status"] == "success"
    assert [s["result"]["output"] for s in document["steps"]][1] == 2
    assert "looking up A-1" in as_json.stderr and "run finished" in as_json.stderr

    # docs/cli.md: an approval, decided from another process with the printed command.
    asked = _art(project, "run", "Please refund order A-1", "--thread", "w3", *agent)
    assert asked.returncode == 3, asked.stdout + asked.stderr
    assert "Refund order A-1?" in asked.stdout
    hint = re.search(r"resume with: (art resume .*)$", asked.stdout, re.MULTILINE)
    assert hint, asked.stdout
    resumed = _art(project, *shlex.split(hint.group(1))[1:], "--reason", "goodwill")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert re.search(r"✓ s1 approve_refund .*approved: goodwill", resumed.stdout)

    # Reading the stored threads back.
    shown = _art(project, "show", "w1", "--storage", db)
    assert shown.returncode == 0, shown.stderr
    assert re.search(r"step:status +s2 estimate_delivery → completed", shown.stdout)
    listed = _art(project, "threads", "--storage", db)
    assert re.search(r"w3 +1 +success", listed.stdout), listed.stdout
    assert re.search(r"w1 +1 +success", listed.stdout), listed.stdout
