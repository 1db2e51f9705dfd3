"""`art resume` from the printed hint: the run's tools and model come along, a missing
tool is refused before the decision is used up, and a failed approved step exits 1."""

from __future__ import annotations

import re
import shlex
import textwrap

import pytest
from typer.testing import CliRunner

import art
from art.cli.app import EXIT_ERROR, EXIT_OK, EXIT_SUSPENDED, EXIT_USAGE, app

pytestmark = pytest.mark.usefixtures("restore_logging")

TOOLS = textwrap.dedent(
    '''
    import art


    @art.tool(execution_mode="blocking")
    def approve_refund(order_id: str) -> str:
        """Ask a person to approve a refund."""
        return f"Refund {order_id}?"


    @art.tool
    def refund(order_id: str) -> str:
        """Refund an order."""
        if order_id == "BROKEN":
            raise RuntimeError("the payment service is down")
        return f"refunded {order_id}"


    @art.tool(execution_mode="blocking", blocking_config={"run_on_approval": True})
    def pay(amount: float, context: art.ExecutionContext) -> str:
        """Pay an amount once a person approves."""
        if context.decision is None:
            return f"Pay {amount} EUR?"
        raise RuntimeError("the payment service is down")


    TOOLS = [approve_refund, refund, pay]
    '''
)


def _plan(order_id: str) -> dict:
    return {
        "steps": [
            {"id": "s1", "tool": "approve_refund", "args": {"order_id": order_id}},
            {"id": "s2", "tool": "refund", "args": {"order_id": order_id}, "dependsOn": ["s1"]},
        ]
    }


@pytest.fixture
def invoke():
    runner = CliRunner()

    def call(*args: str):
        env = {"COLUMNS": "200", "NO_COLOR": "1", "ART_DEBUG": ""}
        return runner.invoke(app, list(args), env=env)

    return call


@pytest.fixture
def project(tmp_path):
    (tmp_path / "shop_tools.py").write_text(TOOLS)
    return tmp_path


def _hint(output: str) -> list[str]:
    match = re.search(r"resume with: (art resume .*)$", output, re.MULTILINE)
    assert match, output
    return shlex.split(match.group(1))[1:]


def test_the_printed_hint_resumes_with_the_runs_tools_and_model(invoke, project, scripted_model):
    model = scripted_model(planning=_plan("A-1"), synthesis="Refunded.")
    db = f"sqlite:///{project / 'art.db'}"
    tools = f"{project / 'shop_tools.py'}:TOOLS"
    first = invoke("run", "refund A-1", "-m", model.model, "-s", db, "-t", tools, "-T", "r1")
    assert first.exit_code == EXIT_SUSPENDED, first.output
    command = _hint(first.stdout)
    assert ["--tools", tools] == command[command.index("--tools") :][:2]
    assert ["--model", model.model] == command[command.index("--model") :][:2]

    resumed = invoke(*command)  # literally what was printed
    assert resumed.exit_code == EXIT_OK, resumed.output
    assert re.search(r"✓ s2 refund .* completed", resumed.stdout)
    assert resumed.stdout.strip().splitlines()[-1].startswith("success")


def test_a_resume_without_the_runs_tools_is_refused_and_the_suspension_stays_open(
    invoke, project, scripted_model
):
    model = scripted_model(planning=_plan("A-2"), synthesis="Refunded.")
    db = f"sqlite:///{project / 'art.db'}"
    tools = f"{project / 'shop_tools.py'}:TOOLS"
    first = invoke("run", "refund A-2", "-m", model.model, "-s", db, "-t", tools, "-T", "r2")
    suspension_id = _hint(first.stdout)[2]

    refused = invoke("resume", "r2", suspension_id, "--approve", "-s", db, "-m", model.model)
    assert refused.exit_code == EXIT_USAGE, refused.output
    message = " ".join(refused.stderr.split())
    assert "error CONFIG_ERROR: cannot resume" in message
    assert "'approve_refund', 'refund'" in message and "--tools" in message

    inst = art.create_art_instance(model=model.model, storage=db, tools=[])
    try:
        still = inst.check_for_suspended_state("r2")
        assert still is not None and still.suspension_id == suspension_id
    finally:
        inst.close()

    resumed = invoke(
        "resume", "r2", suspension_id, "--approve", "-s", db, "-m", model.model, "-t", tools
    )
    assert resumed.exit_code == EXIT_OK, resumed.output


@pytest.mark.slow  # the failing call is retried with backoff
def test_an_approved_step_that_fails_exits_1(invoke, project, scripted_model):
    plan = {
        "steps": [
            {"id": "s1", "tool": "pay", "args": {"amount": 20}},
            {"id": "s2", "tool": "refund", "args": {"order_id": "A-3"}},
        ]
    }
    model = scripted_model(planning=plan, synthesis="The payment failed.")
    db = f"sqlite:///{project / 'art.db'}"
    tools = f"{project / 'shop_tools.py'}:TOOLS"
    first = invoke("run", "pay", "-m", model.model, "-s", db, "-t", tools, "-T", "r3")
    command = _hint(first.stdout)

    failed = invoke(*command)
    assert failed.exit_code == EXIT_ERROR, failed.output
    assert "error approved step s1 failed: " in failed.stderr
    assert "the payment service is down" in failed.stderr
    assert failed.stdout.strip().splitlines()[-1].startswith("partial")

    as_json = invoke("run", "pay", "-m", model.model, "-s", db, "-t", tools, "-T", "r4")
    rejected = invoke(*[w if w != "--approve" else "--reject" for w in _hint(as_json.stdout)])
    assert rejected.exit_code == EXIT_OK, rejected.output  # a rejection failing is no error


def test_only_a_run_kept_in_memory_is_told_it_cannot_be_resumed_elsewhere(
    project, scripted_model, tmp_path
):
    model = scripted_model(planning=_plan("A-4"), synthesis="Refunded.")
    tools = f"{project / 'shop_tools.py'}:TOOLS"
    env = {"COLUMNS": "200", "NO_COLOR": "1", "ART_DEBUG": "", "ART_STORAGE": None}
    env["XDG_DATA_HOME"] = str(tmp_path / "data")  # the default SQLite file goes here
    runner = CliRunner()
    note = "resuming from another process needs persistent storage"

    stored = runner.invoke(app, ["run", "refund A-4", "-m", model.model, "-t", tools], env=env)
    assert stored.exit_code == EXIT_SUSPENDED, stored.output
    assert note not in stored.stdout  # the default storage is a SQLite file
    resumed = runner.invoke(app, _hint(stored.stdout), env=env)
    assert resumed.exit_code == EXIT_OK, resumed.output

    env["ART_STORAGE"] = "memory://"  # chosen by the environment, not by --storage
    in_memory = runner.invoke(app, ["run", "refund A-4", "-m", model.model, "-t", tools], env=env)
    assert in_memory.exit_code == EXIT_SUSPENDED, in_memory.output
    assert note in in_memory.stdout
