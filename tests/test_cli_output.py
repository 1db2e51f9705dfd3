"""What the CLI writes where: --json keeps stdout one JSON document whatever tools, C code
or litellm print; art logs a run summary and rejected plans; `art show` and `art threads`
speak the response's words; piped output is not wrapped."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest
from typer.testing import CliRunner

from art.cli.app import EXIT_OK, app

pytestmark = pytest.mark.usefixtures("restore_logging")

NOISY_TOOLS = textwrap.dedent(
    '''
    import os
    import sys

    import art


    @art.tool
    def lookup_order(order_id: str, context: art.ExecutionContext) -> dict:
        """Look up an order."""
        context.progress("checking the warehouse")
        print("looking up", order_id)  # a careless print()
        sys.stdout.write("more noise\\n")
        os.write(1, b"a C library writing to fd 1\\n")
        return {"order_id": order_id, "status": "shipped"}


    TOOLS = [lookup_order]
    '''
)
MODEL = textwrap.dedent(
    """
    from art.testing import ScriptedModel

    PLAN = {"steps": [{"id": "s1", "tool": "lookup_order", "args": {"order_id": "A-1"}}]}
    BAD_PLAN = {"steps": [{"id": "s1", "tool": "lookup_orders", "args": {}}]}
    MODEL = ScriptedModel(planning=(BAD_PLAN, PLAN), synthesis="Order A-1 has shipped.")
    """
)


@pytest.fixture
def project(tmp_path):
    (tmp_path / "shop_tools.py").write_text(NOISY_TOOLS)
    (tmp_path / "shop_model.py").write_text(MODEL)
    return tmp_path


def _args(project, *extra: str) -> list[str]:
    return [
        "run",
        "where is A-1?",
        "--model",
        f"{project / 'shop_model.py'}:MODEL",
        "--tools",
        f"{project / 'shop_tools.py'}:TOOLS",
        "--storage",
        f"sqlite:///{project / 'art.db'}",
        *extra,
    ]


def test_json_stays_one_document_when_tools_print(project):
    result = CliRunner().invoke(
        app, ["-vv", *_args(project, "--thread", "j1", "--json")], env={"ART_DEBUG": ""}
    )
    assert result.exit_code == EXIT_OK, result.output
    document = json.loads(result.stdout)
    assert document["metadata"]["status"] == "success"
    assert document["steps"][0]["result"]["output"]["status"] == "shipped"
    assert "looking up A-1" in result.stderr and "more noise" in result.stderr


@pytest.mark.slow  # a fresh interpreter
@pytest.mark.parametrize("verbosity", [[], ["-v"], ["-vv"]], ids=["quiet", "info", "debug"])
def test_json_stdout_of_a_real_process_is_exactly_one_document(project, verbosity):
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "ART_LOG_JSON": "1"}
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from art.cli.app import main; main()",
            *verbosity,
            *_args(project, "--json"),
        ],
        capture_output=True,
        text=True,
        cwd=project,
        env=env,
        timeout=120,
    )
    assert done.returncode == EXIT_OK, done.stderr
    document = json.loads(done.stdout)  # nothing else on stdout
    assert document["response"]["content"] == "Order A-1 has shipped."
    assert "a C library writing to fd 1" in done.stderr
    assert "looking up A-1" in done.stderr
    printed = {"looking up A-1", "more noise", "a C library writing to fd 1"}
    log_lines = [line for line in done.stderr.splitlines() if line not in printed]
    records = [json.loads(line) for line in log_lines]  # JSON mode is all JSON
    if verbosity:
        events = [record["event"] for record in records]
        assert "run finished" in events and "plan rejected" in events
    if verbosity == ["-vv"]:
        assert "rejected plan reply" in events  # art's DEBUG records
        # The scripted model is art's own: litellm is neither imported nor logging.
        assert not any("LiteLLM" in record.get("logger", "") for record in records)


def test_a_run_summary_and_rejected_plans_are_logged(project):
    result = CliRunner().invoke(
        app, ["-v", *_args(project, "--thread", "s1")], env={"ART_DEBUG": "", "ART_LOG_JSON": "1"}
    )
    assert result.exit_code == EXIT_OK, result.output
    records = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    [rejected] = [r for r in records if r["event"] == "plan rejected"]
    assert rejected["level"] == "info" and rejected["attempt"] == 1
    assert any("unknown tool 'lookup_orders'" in p for p in rejected["problems"])
    assert not [r for r in records if r["event"] == "rejected plan reply"]  # DEBUG only
    [summary] = [r for r in records if r["event"] == "run finished"]
    assert summary["status"] == "success" and summary["thread_id"] == "s1"
    assert summary["llm_calls"] == 3 and summary["tool_calls"] == 1
    assert summary["steps"] == summary["steps_completed"] == 1

    (project / "shop_model.py").rename(project / "fresh_model.py")  # a fresh script
    args = [a.replace("shop_model.py", "fresh_model.py") for a in _args(project, "-T", "s2")]
    debug = CliRunner().invoke(app, ["-vv", *args], env={"ART_DEBUG": "", "ART_LOG_JSON": "1"})
    records = [json.loads(line) for line in debug.stderr.splitlines() if line.startswith("{")]
    [reply] = [r for r in records if r["event"] == "rejected plan reply"]
    assert "lookup_orders" in reply["reply"]
    loggers = {r.get("logger", "") for r in records}
    assert not [name for name in loggers if name.startswith("markdown_it")]  # not art's debug


def test_show_lists_the_rejected_plan_and_names_each_progress_lines_step(project):
    runner = CliRunner()
    env = {"ART_DEBUG": "", "COLUMNS": "200", "NO_COLOR": "1"}
    assert runner.invoke(app, _args(project, "--thread", "t1"), env=env).exit_code == EXIT_OK
    db = f"sqlite:///{project / 'art.db'}"
    shown = runner.invoke(app, ["show", "t1", "--storage", db], env=env)
    assert shown.exit_code == EXIT_OK, shown.output
    assert re.search(
        r"error +PLAN_INVALID plan rejected \(attempt 1 of 3\); asking for a repair: step "
        r"'s1' uses unknown tool 'lookup_orders'",
        shown.stdout,
    )
    assert re.search(r"tool:update +s1 lookup_order running: checking the warehouse", shown.stdout)

    listed = runner.invoke(app, ["threads", "--storage", db], env=env)
    assert re.search(r"t1 +1 +success", listed.stdout)
    assert "completed" not in listed.stdout
    as_json = runner.invoke(app, ["threads", "--storage", db, "--json"], env=env)
    assert json.loads(as_json.stdout)[0]["last_status"] == "completed"  # the stored word


def test_piped_output_is_not_wrapped_at_80_columns(project):
    env = {"ART_DEBUG": "", "NO_COLOR": "1", "COLUMNS": ""}
    long_thread = "a-thread-id-long-enough-to-push-the-summary-line-past-eighty-columns"
    result = CliRunner().invoke(app, _args(project, "--thread", long_thread), env=env)
    assert result.exit_code == EXIT_OK, result.output
    summary = result.stdout.strip().splitlines()[-1]
    assert summary.startswith("success") and summary.endswith(long_thread)
    assert len(summary) > 80
    assert not [line for line in result.stdout.splitlines() if line != line.rstrip()]


def test_piped_output_laid_out_to_columns_is_not_padded(project):
    env = {"ART_DEBUG": "", "NO_COLOR": "1", "COLUMNS": "100"}
    result = CliRunner().invoke(app, _args(project, "--thread", "p1"), env=env)
    assert result.exit_code == EXIT_OK, result.output
    assert "Order A-1 has shipped." in result.stdout.splitlines()
    assert not [line for line in result.stdout.splitlines() if line != line.rstrip()]
