"""Forks: a stored run runs again from one step as a new run of the thread; the finished
steps that step cannot change keep their outputs (their tools are not called again), the
step and everything downstream run again, and the new run names its origin."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

import art
from art.cli.app import EXIT_OK, app
from art.tooling.contract import ExecutionContext, IToolExecutor, ToolResult, ToolSchema
from art.tools import Calculator
from art.tools.calculator import evaluate

# s1 and s2 are independent; s3 needs s2; s4 needs s1 and s3.
PLAN: dict[str, Any] = {
    "title": "Fork me",
    "steps": [
        {"id": "s1", "tool": "counted", "args": {"expression": "17 * 23"}},
        {"id": "s2", "tool": "counted", "args": {"expression": "2 + 2"}},
        {"id": "s3", "tool": "counted", "args": {"expression": "{{s2.output}} * 10"}},
        {"id": "s4", "tool": "counted", "args": {"expression": "{{s1.output}} + {{s3.output}}"}},
    ],
}


class Counted(IToolExecutor):
    """The calculator, counting its calls by expression."""

    schema = ToolSchema(
        name="counted",
        description="Evaluates an arithmetic expression.",
        input_schema={
            "type": "object",
            "properties": {"expression": {"type": "string"}},
            "required": ["expression"],
        },
    )

    def __init__(self) -> None:
        self.calls: list[str] = []

    def execute(self, input: dict[str, Any], context: ExecutionContext) -> ToolResult:
        self.calls.append(input["expression"])
        return ToolResult(
            call_id=context.call_id,
            tool_name="counted",
            status="success",
            output=evaluate(input["expression"]),
        )


@pytest.fixture
def forkable(scripted_model: Any) -> Any:
    counted = Counted()
    model = scripted_model(planning=PLAN, synthesis="Done.")
    with art.create_art_instance(model=model.model, tools=[counted], storage="memory://") as inst:
        first = inst.process("compute", "t-fork")
        assert [s.output for s in first.steps] == [391, 4, 40, 431]
        counted.calls.clear()
        yield inst, counted, first, model


def test_a_fork_reuses_what_the_step_cannot_change_and_reruns_the_rest(forkable: Any) -> None:
    inst, counted, first, model = forkable

    fork = inst.fork("t-fork", first.metadata.run_id, "s2", args={"expression": "3 + 3"})

    assert fork.status == "success"
    assert {s.step_id: s.output for s in fork.steps} == {"s1": 391, "s2": 6, "s3": 60, "s4": 451}
    assert counted.calls == ["3 + 3", "6 * 10", "391 + 60"]  # s1 reused
    assert (fork.metadata.llm_calls, fork.metadata.tool_calls) == (1, 3)  # synthesis only
    assert len(model.calls_for("planning")) == 1  # the first run's
    state = inst.get_state("t-fork")
    assert [r.run_id for r in state.runs] == [first.metadata.run_id, fork.metadata.run_id]
    origin = state.runs[1].forked_from
    assert origin is not None
    assert (origin.run_id, origin.step_id, origin.args) == (
        first.metadata.run_id,
        "s2",
        {"expression": "3 + 3"},
    )
    assert state.runs[0].forked_from is None
    assert state.runs[1].plan.step("s2").args == {"expression": "3 + 3"}  # type: ignore[union-attr]
    assert state.runs[0].plan.step("s2").args == {"expression": "2 + 2"}  # type: ignore[union-attr]


def test_a_fork_without_new_arguments_reruns_the_step_as_it_was(forkable: Any) -> None:
    inst, counted, first, _ = forkable

    fork = inst.fork("t-fork", first.metadata.run_id, "s3")

    assert [s.output for s in fork.steps] == [391, 4, 40, 431]
    assert counted.calls == ["4 * 10", "391 + 40"]


@pytest.mark.parametrize(
    ("run", "step", "args", "code"),
    [
        ("nope", "s2", None, "FORK_RUN_NOT_FOUND"),
        (None, "s9", None, "FORK_STEP_NOT_FOUND"),
        (None, "s2", {"expression": 42}, "FORK_INVALID"),
        (None, "s2", {"expression": "{{s7.output}}"}, "FORK_INVALID"),
    ],
)
def test_a_fork_that_cannot_run_is_refused_and_stores_nothing(
    forkable: Any, run: str | None, step: str, args: Any, code: str
) -> None:
    inst, counted, first, _ = forkable

    with pytest.raises(art.ForkError) as refused:
        inst.fork("t-fork", run or first.metadata.run_id, step, args=args)

    assert refused.value.code == code
    assert len(inst.get_state("t-fork").runs) == 1
    assert counted.calls == []


def test_a_fork_is_refused_while_a_run_is_active_on_the_thread(scripted_model: Any) -> None:
    ask = {
        "title": "Ask",
        "steps": [
            {"id": "s1", "tool": "calculator", "args": {"expression": "1 + 1"}},
            {"id": "s2", "tool": "ask_human", "args": {"question": "ok?"}, "dependsOn": ["s1"]},
        ],
    }
    model = scripted_model(planning=ask, synthesis="Done.")
    with art.create_art_instance(
        model=model.model, tools=[Calculator(), art.tools.AskHuman()], storage="memory://"
    ) as inst:
        waiting = inst.process("ask", "t-busy")
        assert waiting.status == "suspended"
        with pytest.raises(art.ThreadBusyError):
            inst.fork("t-busy", waiting.metadata.run_id, "s1")


def test_art_fork_runs_the_fork_from_the_command_line(scripted_model: Any, tmp_path: Any) -> None:
    model = scripted_model(planning=PLAN, synthesis="Done.")
    db = f"sqlite:///{tmp_path}/art.db"
    tools = "tests/test_fork.py:Counted"
    runner = CliRunner()
    first = runner.invoke(
        app,
        [
            "run",
            "compute",
            "-T",
            "t-cli",
            "--model",
            model.model,
            "--storage",
            db,
            "--tools",
            tools,
            "--json",
        ],
    )
    assert first.exit_code == EXIT_OK, first.output
    run_id = json.loads(first.stdout)["metadata"]["runId"]

    forked = runner.invoke(
        app,
        [
            "fork",
            "t-cli",
            run_id,
            "s1",
            "--args",
            '{"expression": "1 + 1"}',
            "--model",
            model.model,
            "--storage",
            db,
            "--tools",
            tools,
            "--json",
        ],
    )

    assert forked.exit_code == EXIT_OK, forked.output
    document = json.loads(forked.stdout)
    assert [s["result"]["output"] for s in document["steps"]] == [2, 4, 40, 42]
    bad = runner.invoke(
        app,
        [
            "fork",
            "t-cli",
            run_id,
            "s1",
            "--args",
            "[1]",
            "--storage",
            db,
            "--model",
            model.model,
            "--tools",
            tools,
        ],
    )
    assert bad.exit_code == 2 and "must be a JSON object" in bad.output
