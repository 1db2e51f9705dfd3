"""What a response reports beyond the answer: a plan that ran no tool, and the whole
working time of a run that was suspended and resumed."""

from __future__ import annotations

import asyncio
import re

import pytest
from typer.testing import CliRunner

import art
from art.cli.app import EXIT_OK, app


@art.tool
def lookup_order(order_id: str) -> str:
    """Look up an order's status."""
    return "shipped"


async def test_an_empty_plan_with_tools_registered_says_no_tool_ran(scripted_model):
    model = scripted_model(planning={"steps": []}, synthesis="Probably shipped.")
    async with art.create_art_instance(
        model=model.model, tools=[lookup_order], storage="memory://"
    ) as inst:
        resp = await inst.aprocess("where is A-1?", "t")
    assert resp.status == "success"
    assert resp.metadata.warnings == [
        "the plan has no steps, so no tool ran (1 available: lookup_order); "
        "the answer comes from the model alone"
    ]
    assert resp.to_wire()["metadata"]["warnings"] == resp.metadata.warnings


async def test_an_empty_plan_without_tools_is_no_news(scripted_model):
    model = scripted_model(planning={"steps": []}, synthesis="Hello!")
    async with art.create_art_instance(model=model.model, tools=[], storage="memory://") as inst:
        resp = await inst.aprocess("hi", "t")
    assert resp.status == "success" and resp.metadata.warnings == []


@pytest.mark.usefixtures("restore_logging")
def test_the_cli_prints_the_warning(scripted_model):
    model = scripted_model(planning={"steps": []}, synthesis="Probably shipped.")
    result = CliRunner().invoke(
        app,
        ["run", "where is A-1?", "-m", model.model, "-s", "memory://"],
        env={"COLUMNS": "200", "NO_COLOR": "1", "ART_DEBUG": ""},
    )
    assert result.exit_code == EXIT_OK, result.output
    assert re.search(
        r"note: the plan has no steps, so no tool ran \(4 available: calculator", result.stdout
    )


class SlowApproval(art.IToolExecutor):
    schema = art.ToolSchema(
        name="slow_approval", description="Works a while, then asks.", execution_mode="blocking"
    )

    async def execute(self, input, context):
        await asyncio.sleep(0.3)
        return self.ask(context, "Go on?")


@pytest.mark.slow  # a tool that works 0.3 s, a 0.5 s wait
async def test_a_resumed_run_reports_its_whole_working_time(scripted_model, tmp_path):
    url = f"sqlite:///{tmp_path / 'art.db'}"
    plan = {"steps": [{"id": "s1", "tool": "slow_approval", "args": {}}]}
    model = scripted_model(planning=plan, synthesis="Done.")
    async with art.create_art_instance(
        model=model.model, tools=[SlowApproval()], storage=url
    ) as inst:
        first = await inst.aprocess("go", "t")
    assert first.metadata.total_duration_ms >= 300
    await asyncio.sleep(0.5)  # the person thinking: not working time
    # another process resumes it: the earlier part's time comes from storage
    async with art.create_art_instance(
        model=model.model, tools=[SlowApproval()], storage=url
    ) as other:
        done = await other.aresume_execution("t", first.metadata.suspension_id, True)
    assert done.status == "success"
    assert done.metadata.total_duration_ms > first.metadata.total_duration_ms
    assert done.metadata.total_duration_ms < first.metadata.total_duration_ms + 500


def _summary_seconds(stdout: str) -> float:
    """The working time on the CLI's summary line (`... · 340 ms · thread t`)."""
    found = re.search(r" · ([\d.]+) (ms|s) · thread ", stdout)
    assert found, stdout
    value = float(found.group(1))
    return value / 1000 if found.group(2) == "ms" else value


@pytest.mark.slow  # a tool that works 0.3 s
@pytest.mark.usefixtures("restore_logging")
def test_art_resume_prints_the_whole_runs_working_time(scripted_model, tmp_path):
    (tmp_path / "slow_tools.py").write_text(
        "import time\nimport art\n"
        "@art.tool(execution_mode='blocking')\n"
        "def slow_approval() -> str:\n"
        "    '''Works a while, then asks.'''\n"
        "    time.sleep(0.3)\n"
        "    return 'Go on?'\n"
    )
    plan = {"steps": [{"id": "s1", "tool": "slow_approval", "args": {}}]}
    model = scripted_model(planning=plan, synthesis="Done.")
    db = f"sqlite:///{tmp_path / 'art.db'}"
    common = ["-m", model.model, "-s", db, "-t", f"{tmp_path / 'slow_tools.py'}:slow_approval"]
    env = {"COLUMNS": "200", "NO_COLOR": "1", "ART_DEBUG": ""}
    runner = CliRunner()
    first = runner.invoke(app, ["run", "go", "-T", "w", *common], env=env)
    suspension_id = re.search(r"art resume w ([0-9a-f]{32})", first.stdout).group(1)
    resumed = runner.invoke(app, ["resume", "w", suspension_id, "--approve", *common], env=env)
    assert resumed.exit_code == EXIT_OK, resumed.output
    # the first part's 0.3 s of work is in it; the resume alone is a synthesis call
    assert _summary_seconds(resumed.stdout) >= _summary_seconds(first.stdout) >= 0.3
