"""The `art` command: what the terminal shows, JSON for scripts, exit codes, resume, start-up.

Commands run in-process through typer's CliRunner with a ScriptedModel (its litellm
provider lives in this process), so `--model <scripted.model>` works as with any model.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

import art
import art.cli.app
import art.cli.common
from art.cli.app import EXIT_ERROR, EXIT_OK, EXIT_SUSPENDED, EXIT_USAGE, app, load_model, load_tools

PRODUCTS_PLAN = {
    "title": "Products and their sum",
    "steps": [
        {"id": "s1", "tool": "calculator", "args": {"expression": "17 * 23"}},
        {"id": "s2", "tool": "calculator", "args": {"expression": "19 * 29"}},
        {
            "id": "s3",
            "tool": "calculator",
            "args": {"expression": "{{s1.output}} + {{s2.output}}"},
        },
    ],
}
APPROVAL_PLAN = {
    "title": "Approve, then double",
    "steps": [
        {"id": "s1", "tool": "calculator", "args": {"expression": "17 * 23"}},
        {"id": "s2", "tool": "ask_human", "args": {"question": "Spend $391?"}},
        {
            "id": "s3",
            "tool": "calculator",
            "args": {"expression": "{{s1.output}} * 2"},
            "dependsOn": ["s2"],
        },
    ],
}


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


# Every command configures logging (WARNING to stderr); undo it after each test.
pytestmark = pytest.mark.usefixtures("restore_logging")


@pytest.fixture
def invoke(runner):
    """Run `art ...` in-process; a wide, colourless terminal so lines are not wrapped."""

    def call(*args: str, input: str | None = None):
        env = {"COLUMNS": "160", "NO_COLOR": "1", "ART_DEBUG": ""}
        return runner.invoke(app, list(args), input=input, env=env)

    return call


@pytest.fixture
def db(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'art.db'}"


def _json(result) -> dict | list:
    return json.loads(result.stdout)


# -- art run ---------------------------------------------------------------------------
def test_run_shows_the_plan_tree_statuses_answer_and_summary(invoke, scripted_model):
    model = scripted_model(planning=PRODUCTS_PLAN, synthesis="The sum is **942**.")
    result = invoke("run", "What is the sum?", "--model", model.model, "--storage", "memory://")

    assert result.exit_code == EXIT_OK, result.output
    out = result.stdout
    assert "Plan: Products and their sum" in out
    assert re.search(r"✓ s1 calculator .*17 \* 23.* completed \d+ ms", out)
    assert re.search(r"✓ s2 calculator .* completed", out)
    assert re.search(r"✓ s3 calculator .*← s1, s2 .*completed", out)  # implied by references
    assert "The sum is 942." in out  # markdown rendered: no ** left
    assert "**" not in out
    summary = out.strip().splitlines()[-1]
    assert re.match(
        r"success  2 LLM calls · 3 tool calls · [\d,]+ tokens · cost n/a · [\d.]+ m?s"
        r" · thread cli-",
        summary,
    ), summary
    # the tree comes first, then the answer, then the summary
    assert out.index("Plan:") < out.index("The sum is") < out.index("2 LLM calls")


def test_run_json_is_one_document_with_the_response(invoke, scripted_model):
    model = scripted_model(planning=PRODUCTS_PLAN, synthesis="942")
    result = invoke(
        "run", "sum?", "--model", model.model, "--storage", "memory://", "--thread", "j1", "--json"
    )
    assert result.exit_code == EXIT_OK
    document = _json(result)
    assert document["metadata"]["status"] == "success"
    assert document["metadata"]["threadId"] == "j1"
    assert document["metadata"]["llmCalls"] == 2
    assert document["response"]["content"] == "942"
    assert [s["result"]["output"] for s in document["steps"]] == [391, 551, 942]


def test_run_takes_the_runs_tools_system_context_and_metadata(invoke, scripted_model, db):
    model = scripted_model(planning=PRODUCTS_PLAN, synthesis="942")
    common = ("--model", model.model, "--storage", db, "--json")
    result = invoke(
        "run", "sum?", *common, "--thread", "o1", "--only", "calculator",
        "--context", "locale=de-CH", "--context", 'limits={"max": 3}',
        "--metadata", "tenant=acme", "--metadata", "priority=2",
    )  # fmt: skip
    assert result.exit_code == EXIT_OK, result.output
    planning = model.calls_for("planning")[0].messages[0]["content"]
    assert next(line for line in planning.splitlines() if line.startswith("- ")).startswith(
        "- calculator:"
    )
    assert "- ask_human:" not in planning  # a built-in tool this run was not given
    assert '- locale: de-CH\n- limits: {"max": 3}' in planning

    async def stored() -> dict:
        async with art.create_art_instance(model=model.model, storage=db) as inst:
            return (await inst.aget_state("o1")).runs[0].metadata

    assert asyncio.run(stored()) == {"tenant": "acme", "priority": 2}
    bad = invoke("run", "sum?", *common, "--only", "nope")
    assert bad.exit_code == EXIT_USAGE and "unknown tool 'nope'" in bad.output
    bad = invoke("run", "sum?", *common, "--metadata", "no-equals-sign")
    assert bad.exit_code == EXIT_USAGE and "KEY=VALUE" in bad.output


def test_run_eager_streams_the_plan_and_shows_only_the_answer(invoke, scripted_model):
    model = scripted_model(planning=PRODUCTS_PLAN, synthesis="The sum is 942.", tokens_per_s=2000)
    common = ("--model", model.model, "--storage", "memory://")
    result = invoke("run", "What is the sum?", *common, "--eager")
    assert result.exit_code == EXIT_OK, result.output
    assert re.search(r"✓ s3 calculator .*completed", result.stdout)
    assert "The sum is 942." in result.stdout
    assert '"steps"' not in result.stdout  # the streamed plan is not shown as the answer
    assert model.calls_for("planning")[0].stream

    document = _json(invoke("run", "What is the sum?", *common, "--eager", "--json"))
    assert all(step["arrivedAt"] for step in document["steps"])
    document = _json(invoke("run", "What is the sum?", *common, "--no-eager", "--json"))
    assert not any(step.get("arrivedAt") for step in document["steps"])
    assert not model.calls_for("planning")[-1].stream


def test_run_failed_step_is_shown_and_the_run_is_partial(invoke, scripted_model):
    plan = {
        "title": "One bad step",
        "steps": [
            {"id": "s1", "tool": "calculator", "args": {"expression": "1 / 0"}},
            {"id": "s2", "tool": "calculator", "args": {"expression": "{{s1.output}} + 1"}},
            {"id": "s3", "tool": "calculator", "args": {"expression": "2 + 2"}},
        ],
    }
    model = scripted_model(planning=plan, synthesis="Only part of it worked.")
    result = invoke("run", "q", "--model", model.model, "--storage", "memory://")
    assert result.exit_code == EXIT_OK  # partial still produced an answer
    out = result.stdout
    assert re.search(r"✗ s1 calculator .* failed .*: .*zero", out, re.IGNORECASE)
    assert re.search(r"↷ s2 calculator .* skipped", out)
    assert re.search(r"✓ s3 calculator .* completed", out)
    assert out.strip().splitlines()[-1].startswith("partial")


def test_run_renders_display_tool_output_as_a_table(invoke, scripted_model):
    plan = {
        "title": "Show a table",
        "steps": [
            {"id": "s1", "tool": "calculator", "args": {"expression": "6 * 7"}},
            {
                "id": "s2",
                "tool": "show",
                "args": {
                    "title": "Results",
                    "table": {"columns": ["what", "value"], "rows": [["6 x 7", "{{s1.output}}"]]},
                },
            },
        ],
    }
    model = scripted_model(planning=plan, synthesis="See the table.")
    result = invoke("run", "q", "--model", model.model, "--storage", "memory://")
    assert result.exit_code == EXIT_OK
    assert "Results · show s2" in result.stdout
    assert re.search(r"│ 6 x 7 │ 42 +│", result.stdout)


def test_planning_failure_is_one_readable_line_with_the_code(invoke, scripted_model):
    model = scripted_model(planning="I cannot make a plan, sorry.")
    result = invoke("run", "q", "--model", model.model, "--storage", "memory://")
    assert result.exit_code == EXIT_ERROR
    assert "error PLAN_INVALID: no valid plan after 3 attempts" in result.output
    assert result.output.count("PLAN_INVALID") == 1  # said once, not restated
    assert "found no JSON at all" in result.output  # the planner's problem is shown
    assert "Traceback" not in result.output
    assert result.output.strip().splitlines()[-1].startswith("error  3 LLM calls")

    json_result = invoke("run", "q", "--model", model.model, "--storage", "memory://", "--json")
    assert json_result.exit_code == EXIT_ERROR
    assert _json(json_result)["metadata"]["error"]["code"] == "PLAN_INVALID"


# -- live rendering ----------------------------------------------------------------------
class _WaitForEachOther(art.IToolExecutor):
    """Two calls that each wait until the other has started: proof they overlap."""

    schema = art.ToolSchema(
        name="rendezvous",
        description="Waits for its partner.",
        input_schema={
            "type": "object",
            "properties": {"name": {"type": "string"}},
            "required": ["name"],
        },
    )

    def __init__(self) -> None:
        self.started: dict[str, asyncio.Event] = {}

    async def execute(self, input, context):
        me = input["name"]
        other = "b" if me == "a" else "a"
        self.started.setdefault(me, asyncio.Event()).set()
        await asyncio.wait_for(self.started.setdefault(other, asyncio.Event()).wait(), 5)
        return art.ToolResult(
            call_id=context.call_id, tool_name="rendezvous", status="success", output=me
        )


def test_live_tree_shows_parallel_steps_running_together(invoke, scripted_model, monkeypatch):
    """Frames rendered on a (recording) terminal while the run goes: both steps spin at once."""
    plan = {
        "title": "Together",
        "steps": [
            {"id": "s1", "tool": "rendezvous", "args": {"name": "a"}},
            {"id": "s2", "tool": "rendezvous", "args": {"name": "b"}},
        ],
    }
    model = scripted_model(planning=plan, synthesis="Both met.")
    terminal = Console(file=io.StringIO(), force_terminal=True, width=140, record=True)
    # The terminal and the tools are the command line's, replaced where it makes them.
    monkeypatch.setattr(art.cli.common, "make_console", lambda stderr=False: terminal)
    monkeypatch.setattr(art.cli.common, "builtin_tools", lambda: [_WaitForEachOther()])

    frames: list[str] = []
    original = art.cli.app.RunView.handle

    def handle_and_render(view, event):
        original(view, event)
        frame = Console(file=io.StringIO(), width=140, record=True)
        frame.print(view)
        frames.append(frame.export_text())

    monkeypatch.setattr(art.cli.app.RunView, "handle", handle_and_render)
    result = invoke("run", "meet", "--model", model.model, "--storage", "memory://")
    assert result.exit_code == EXIT_OK, result.output

    spinner = r"[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏]"
    both = [
        f
        for f in frames
        if re.search(spinner + r" s1 rendezvous .* running", f)
        and re.search(spinner + r" s2 rendezvous .* running", f)
    ]
    assert both, "no frame showed s1 and s2 running at the same time"
    assert any("Planning…" in f for f in frames)
    assert any("Writing the answer…" in f for f in frames)
    final = terminal.export_text()
    assert "✓ s1 rendezvous" in final and "✓ s2 rendezvous" in final
    assert "Both met." in final and "2 LLM calls · 2 tool calls" in final


# -- art plan ----------------------------------------------------------------------------
def test_plan_prints_a_tree_without_running_anything(invoke, scripted_model):
    model = scripted_model(planning=PRODUCTS_PLAN)
    result = invoke("plan", "sum?", "--model", model.model, "--storage", "memory://")
    assert result.exit_code == EXIT_OK
    out = result.stdout
    assert "Plan: Products and their sum" in out
    assert re.search(r"s3 calculator .*← s1, s2", out)
    assert "completed" not in out and "pending" not in out
    assert [c.phase for c in model.calls] == ["planning"]  # no synthesis, no tools


def test_an_untitled_plan_is_headed_plan_alone(invoke, scripted_model):
    untitled = {"steps": [{"id": "s1", "tool": "calculator", "args": {"expression": "1 + 1"}}]}
    model = scripted_model(planning=untitled)
    result = invoke("plan", "sum?", "--model", model.model, "--storage", "memory://")
    assert result.exit_code == EXIT_OK
    assert result.stdout.splitlines()[0].strip() == "Plan"


def test_plan_mermaid_and_json(invoke, scripted_model):
    model = scripted_model(planning=PRODUCTS_PLAN)
    mermaid = invoke("plan", "q", "--model", model.model, "--storage", "memory://", "--mermaid")
    assert mermaid.exit_code == EXIT_OK
    assert mermaid.stdout.startswith("flowchart")
    assert "s1 --> n_s3" in mermaid.stdout.replace("n_s1", "s1")

    as_json = invoke("plan", "q", "--model", model.model, "--storage", "memory://", "--json")
    plan = _json(as_json)
    assert plan["title"] == "Products and their sum"
    assert [s["id"] for s in plan["steps"]] == ["s1", "s2", "s3"]

    both = invoke("plan", "q", "--mermaid", "--json", "--model", model.model)
    assert both.exit_code == EXIT_USAGE


# -- suspension and resume ---------------------------------------------------------------
def _resume_command(output: str) -> list[str]:
    match = re.search(r"resume with: art (resume \S+ \S+ --approve.*)$", output, re.MULTILINE)
    assert match, output
    return match.group(1).split()


def test_suspension_without_a_terminal_prints_how_to_resume(invoke, scripted_model, db):
    model = scripted_model(planning=APPROVAL_PLAN, synthesis="Doubled: **782**.")
    result = invoke("run", "spend?", "--model", model.model, "--storage", db, "--thread", "t1")

    assert result.exit_code == EXIT_SUSPENDED
    out = result.stdout
    assert re.search(r"⏸ s2 ask_human .* waiting for approval", out)
    assert re.search(r"○ s3 calculator .* pending", out)
    assert "waiting for approval step s2 (ask_human): Spend $391?" in out
    command = _resume_command(out)
    assert command[:2] == ["resume", "t1"]
    assert command[-4:] == ["--model", model.model, "--storage", db]
    assert out.strip().splitlines()[-1].startswith("suspended  1 LLM call · 2 tool calls")

    resumed = invoke(*command, "--reason", "within budget", "--model", model.model)
    assert resumed.exit_code == EXIT_OK, resumed.output
    out = resumed.stdout
    assert re.search(r"✓ s2 ask_human .*approved: within budget", out)
    assert re.search(r"✓ s3 calculator .* completed", out)
    assert "Doubled: 782." in out
    assert out.strip().splitlines()[-1].startswith("success")

    again = invoke(*command, "--model", model.model)
    assert again.exit_code == EXIT_ERROR
    assert "error SUSPENSION_ALREADY_DECIDED:" in again.output
    assert "Traceback" not in again.output


def test_reject_skips_the_dependents(invoke, scripted_model, db):
    model = scripted_model(planning=APPROVAL_PLAN, synthesis="Not approved, nothing spent.")
    first = invoke("run", "spend?", "--model", model.model, "--storage", db, "--thread", "t2")
    command = _resume_command(first.stdout)
    command[command.index("--approve")] = "--reject"
    result = invoke(*command, "--reason", "too much", "--model", model.model)
    assert result.exit_code == EXIT_OK
    assert re.search(r"✗ s2 ask_human .*rejected: too much", result.stdout)
    assert re.search(r"↷ s3 calculator .* skipped", result.stdout)
    assert result.stdout.strip().splitlines()[-1].startswith("partial")


def test_suspension_json_lists_resume_commands_and_exits_3(invoke, scripted_model, db):
    model = scripted_model(planning=APPROVAL_PLAN, synthesis="ok")
    result = invoke("run", "q", "--model", model.model, "--storage", db, "--thread", "t3", "--json")
    assert result.exit_code == EXIT_SUSPENDED
    document = _json(result)
    assert document["metadata"]["status"] == "suspended"
    suspension_id = document["metadata"]["suspensionId"]
    assert document["resume"] == [
        f"art resume t3 {suspension_id} --approve --model {model.model} --storage {db}"
    ]

    resumed = invoke(
        "resume",
        "t3",
        suspension_id,
        "--approve",
        "--storage",
        db,
        "--model",
        model.model,
        "--json",
    )
    assert resumed.exit_code == EXIT_OK
    assert _json(resumed)["metadata"]["status"] == "success"


def test_interactive_terminal_asks_and_resumes(invoke, scripted_model, monkeypatch):
    # private: the test runner is no terminal; the command must think it is one.
    monkeypatch.setattr(art.cli.app, "_interactive", lambda: True)
    model = scripted_model(planning=APPROVAL_PLAN, synthesis="Approved and doubled: 782.")
    result = invoke(
        "run", "spend?", "--model", model.model, "--storage", "memory://", input="y\nfine by me\n"
    )
    assert result.exit_code == EXIT_OK, result.output
    out = result.stdout
    assert "approval needed · s2 · ask_human" in out
    assert "Spend $391?" in out
    assert "Approve? [y/n] (y):" in out and "Reason (optional):" in out
    assert re.search(r"✓ s2 ask_human .*approved: fine by me", out)
    assert "Approved and doubled: 782." in out
    decision = model.calls_for("synthesis")[0].messages
    assert "fine by me" in json.dumps(decision)  # the reason reached the synthesis


def test_resume_needs_a_decision_and_a_known_suspension(invoke, scripted_model, db):
    missing = invoke("resume", "t9", "nope", "--storage", db)
    assert missing.exit_code == EXIT_USAGE
    assert "--approve or --reject" in missing.output

    model = scripted_model(synthesis="x")
    unknown = invoke("resume", "t9", "nope", "--approve", "--storage", db, "--model", model.model)
    assert unknown.exit_code == EXIT_ERROR
    assert "error SUSPENSION_NOT_FOUND:" in unknown.output

    as_json = invoke(
        "resume", "t9", "nope", "--approve", "--storage", db, "--model", model.model, "--json"
    )
    assert as_json.exit_code == EXIT_ERROR
    assert _json(as_json) == {
        "error": {
            "code": "SUSPENSION_NOT_FOUND",
            "message": "no suspension 'nope' on thread 't9'",
        }
    }


# -- threads and show --------------------------------------------------------------------
def test_threads_and_show_read_the_stored_thread(invoke, scripted_model, db):
    model = scripted_model(planning=PRODUCTS_PLAN, synthesis="942")
    assert invoke("run", "sum?", "--model", model.model, "--storage", db, "-T", "th").exit_code == 0

    listed = invoke("threads", "--storage", db)
    assert listed.exit_code == EXIT_OK
    assert re.search(r"th +1 +success .* sum\?", listed.stdout)
    as_json = _json(invoke("threads", "--storage", db, "--json"))
    assert as_json[0]["thread_id"] == "th" and as_json[0]["runs"] == 1

    shown = invoke("show", "th", "--storage", db)
    assert shown.exit_code == EXIT_OK
    out = shown.stdout
    assert "thread th" in out
    names = re.findall(r"^\s*\+\S+ (?:ms|s)?\s*(\S+)", out, re.MULTILINE)
    assert names[0] == "session:start" and names[-1] == "session:end"
    assert "plan:created" in names
    assert re.search(r"step:status +s3 calculator → completed", out)
    assert re.search(r"message:after +synthesis .* tokens", out)
    # steps are indented under the run: their span's parent is the run span
    column = {
        name: line.index(name)
        for line in out.splitlines()
        for name in ("session:start", "step:status")
        if name in line
    }
    assert column["step:status"] == column["session:start"] + 2

    document = _json(invoke("show", "th", "--storage", db, "--json"))
    assert document["thread_id"] == "th"
    assert [r["status"] for r in document["runs"]] == ["completed"]
    assert document["events"][0]["name"] == "session:start"


def test_threads_empty_and_show_unknown(invoke, db):
    empty = invoke("threads", "--storage", db)
    assert empty.exit_code == EXIT_OK and "No threads yet" in empty.stdout
    unknown = invoke("show", "ghost", "--storage", db)
    assert unknown.exit_code == EXIT_ERROR
    assert "error THREAD_NOT_FOUND: no thread 'ghost'" in unknown.output


@pytest.mark.parametrize("limit", ["0", "-3"])
def test_a_limit_below_one_is_a_usage_error(invoke, scripted_model, db, limit):
    model = scripted_model(planning=PRODUCTS_PLAN, synthesis="942")
    assert invoke("run", "sum?", "--model", model.model, "--storage", db).exit_code == 0
    result = invoke("threads", "--storage", db, "--limit", limit)
    assert result.exit_code == EXIT_USAGE
    assert "No threads yet" not in result.output
    assert "Invalid value for '--limit'" in result.output
    assert "greater than or equal to 1" in result.output


def test_storage_that_cannot_be_opened_names_the_file(invoke):
    result = invoke("threads", "--storage", "sqlite:////proc/art.db")
    assert result.exit_code == EXIT_ERROR
    assert "error STORAGE_ERROR: SQLite storage /proc/art.db: unable to open" in result.output
    assert "Traceback" not in result.output


def test_bad_storage_url_is_a_usage_error(invoke):
    result = invoke("threads", "--storage", "ftp://nowhere")
    assert result.exit_code == EXIT_USAGE
    assert "error CONFIG_ERROR:" in result.output
    assert "Traceback" not in result.output


# -- --tools -----------------------------------------------------------------------------
def test_load_tools_accepts_instances_lists_classes_factories_and_files(tmp_path, monkeypatch):
    module = tmp_path / "my_tools.py"
    module.write_text(
        "import art\n"
        "from art.tools import Calculator\n"
        "@art.tool\n"
        "def shout(text: str) -> str:\n"
        "    '''Upper-case the text.'''\n"
        "    return text.upper()\n"
        "ONE = Calculator()\n"
        "MANY = [Calculator(), shout]\n"
        "CLASS = Calculator\n"
        "def factory():\n"
        "    return [shout]\n"
        "NOT_A_TOOL = 42\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "my_tools", raising=False)
    assert [t.name for t in load_tools(["my_tools:ONE"])] == ["calculator"]
    assert [t.name for t in load_tools(["my_tools:MANY"])] == ["calculator", "shout"]
    assert [t.name for t in load_tools(["my_tools:CLASS"])] == ["calculator"]
    assert [t.name for t in load_tools(["my_tools:factory", "my_tools:ONE"])] == [
        "shout",
        "calculator",
    ]
    assert [t.name for t in load_tools([f"{module}:shout"])] == ["shout"]

    for spec, message in [
        ("my_tools", "expected module:attr"),
        ("my_tools:MISSING", "has no attribute 'MISSING'"),
        ("no_such_module:x", "cannot import no_such_module"),
        ("my_tools:NOT_A_TOOL", "got int"),
        ("./nowhere.py:x", "no such file"),
    ]:
        with pytest.raises(art.cli.app.CliError, match=re.escape(message)) as caught:
            load_tools([spec])
        assert caught.value.exit_code == EXIT_USAGE


def test_the_quickstarts_shop_runs_from_the_terminal_as_shown(invoke, tmp_path, monkeypatch):
    page = (Path(__file__).resolve().parents[1] / "docs" / "quickstart.md").read_text()
    shop = re.search(r"```python\n(# shop\.py\n.*?)```", page, re.DOTALL).group(1)
    command = re.search(r"^art run .*--tools shop\.py:TOOLS.*$", page, re.MULTILINE).group(0)
    (tmp_path / "shop.py").write_text(shop)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "shop", raising=False)
    try:
        result = invoke(*shlex.split(command)[1:])
    finally:
        loaded = sys.modules.pop("shop", None)
        if loaded is not None:
            loaded.MODEL.unregister()
    assert result.exit_code == EXIT_OK, result.output
    assert re.search(r"✓ s1 order_status +\{\"order_id\": \"A-1\"\} +completed", result.stdout)
    assert "Order A-1 has shipped." in [line.rstrip() for line in result.stdout.splitlines()]
    assert result.stdout.strip().splitlines()[-1].startswith("success  2 LLM calls · 1 tool call")


def test_a_tools_file_named_by_path_imports_the_modules_next_to_it(
    invoke, scripted_model, tmp_path, monkeypatch
):
    app_dir = tmp_path / "shop_app"
    app_dir.mkdir()
    (app_dir / "shop_orders.py").write_text("ORDERS = {'A-1': 'shipped'}\n")
    (app_dir / "shop_status.py").write_text(
        "import art\nfrom shop_orders import ORDERS\n@art.tool\n"
        "def order_status(order_id: str) -> str:\n"
        "    '''The status of an order.'''\n    return ORDERS[order_id]\n"
    )
    monkeypatch.chdir(tmp_path)  # not the file's directory
    monkeypatch.setattr(sys, "path", list(sys.path))
    for name in ("shop_orders", "shop_status"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    plan = {"steps": [{"id": "s1", "tool": "order_status", "args": {"order_id": "A-1"}}]}
    model = scripted_model(planning=plan, synthesis="shipped")
    tools = "shop_app/shop_status.py:order_status"
    result = invoke("run", "A-1?", "-m", model.model, "-s", "memory://", "-t", tools, "--json")
    assert result.exit_code == EXIT_OK, result.output
    assert _json(result)["steps"][0]["result"]["output"] == "shipped"


def test_load_model_takes_a_file_or_a_module_attribute_else_a_model_name(tmp_path, monkeypatch):
    (tmp_path / "cli_model.py").write_text(
        "from art.testing import ScriptedModel\nMODEL = ScriptedModel(synthesis='hi')\n"
        "NAME = 'openai/gpt-4o-mini'\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "cli_model", raising=False)
    try:
        scripted = load_model("cli_model:MODEL")
        module = sys.modules["cli_model"]
        assert scripted == module.MODEL.model and scripted.startswith("art-scripted-")
        assert load_model("cli_model.py:MODEL") == scripted  # the same file, run once
        assert load_model("cli_model:NAME") == "openai/gpt-4o-mini"
    finally:
        sys.modules.pop("cli_model", None)
        module.MODEL.unregister()
    for name in ("ollama/llama3:8b", "openai/ft:gpt-4o:acme::a1b2"):
        assert load_model(name) == name  # litellm names holding a colon stay names


def test_tools_option_replaces_the_builtin_tools(invoke, scripted_model, tmp_path, monkeypatch):
    (tmp_path / "cli_tools.py").write_text(
        "import art\n@art.tool\ndef shout(text: str) -> str:\n"
        "    '''Upper-case the text.'''\n    return text.upper()\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "cli_tools", raising=False)
    plan = {"title": "Shout", "steps": [{"id": "s1", "tool": "shout", "args": {"text": "hi"}}]}
    model = scripted_model(planning=plan, synthesis="HI")
    result = invoke(
        "run", "q", "--model", model.model, "--storage", "memory://", "--tools", "cli_tools:shout"
    )
    assert result.exit_code == EXIT_OK, result.output
    assert re.search(r"✓ s1 shout", result.stdout)
    planning_prompt = json.dumps(model.calls_for("planning")[0].messages)
    assert "shout" in planning_prompt
    assert "http_get" not in planning_prompt and "ask_human" not in planning_prompt

    bad = invoke("run", "q", "--model", model.model, "--tools", "cli_tools:nothing")
    assert bad.exit_code == EXIT_USAGE
    assert "error CONFIG_ERROR: --tools 'cli_tools:nothing'" in bad.output


def test_the_environment_s_keys_never_reach_the_terminal(
    invoke, scripted_model, tmp_path, monkeypatch, db
):
    key = "env-cli-key-0123456789abcdef"
    monkeypatch.setenv("MISTRAL_API_KEY", key)
    (tmp_path / "leaky_tools.py").write_text(
        "import os, art\n@art.tool\ndef env(name: str) -> str:\n"
        "    '''Read an environment variable.'''\n    return os.environ[name]\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "leaky_tools", raising=False)
    plan = {"steps": [{"id": "s1", "tool": "env", "args": {"name": "MISTRAL_API_KEY"}}]}
    model = scripted_model(planning=plan, synthesis=f"The key ends in ...{key[-10:]}")
    common = ("--model", model.model, "--storage", db, "--tools", "leaky_tools:env")
    shown = invoke("run", "which key?", *common, "-T", "k1")
    as_json = invoke("run", "which key?", *common, "-T", "k2", "--json")
    stored = invoke("show", "k1", "--storage", db, "--json")
    for result in (shown, as_json, stored):
        assert result.exit_code == EXIT_OK, result.output
        assert "***" in result.output
        assert key not in result.output and key[-10:] not in result.output


def test_usage_errors_exit_2(invoke):
    assert invoke("run").exit_code == EXIT_USAGE  # missing QUERY
    assert invoke("frobnicate").exit_code == EXIT_USAGE
    assert invoke("--help").exit_code == EXIT_OK


# -- start-up ----------------------------------------------------------------------------
@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["resume", "--help"]])
def test_help_starts_without_importing_litellm_or_the_engine(argv):
    code = (
        "import sys; sys.argv = ['art', *sys.argv[1:]]\n"
        "from art.cli.app import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "bad = [m for m in sys.modules if m.split('.')[0] == 'litellm'"
        " or m in ('art.instance', 'art.engine.scheduler', 'art.llm.client')]\n"
        "print('IMPORTED', bad)\n"
    )
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code, *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert "IMPORTED []" in done.stdout, done.stdout
    assert "Usage: art" in done.stdout
    imported = [line for line in done.stderr.splitlines() if "litellm" in line]
    assert not imported, imported[:5]


def test_console_script_is_installed():
    entry = Path(sys.executable).with_name("art")
    found = str(entry) if entry.exists() else shutil.which("art")
    assert found, "the `art` console script is not installed (pip install -e .)"
    done = subprocess.run([found, "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    assert "Exit codes: 0 success" in done.stdout


NUMERIC_OPTIONS = [
    # (command and its other arguments, option, a value out of range)
    (("run", "q"), "--timeout", "0"),
    (("run", "q"), "--timeout", "-5"),
    (("run", "q"), "--timeout", "nan"),
    (("plan", "q"), "--timeout", "inf"),
    (("resume", "t", "--approve"), "--timeout", "0"),
    (("threads",), "--limit", "0"),
    (("serve",), "--port", "70000"),
    (("serve",), "--port", "-1"),
    (("mcp", "--http"), "--port", "65536"),
    (("submit", "q", "--wait"), "--timeout", "-1"),
    (("worker",), "--concurrency", "0"),
    (("worker",), "--heartbeat", "0"),
    (("worker",), "--stalled-after", "-2"),
    (("worker",), "--shutdown-timeout", "-1"),
]


@pytest.mark.parametrize(("command", "option", "value"), NUMERIC_OPTIONS)
def test_a_numeric_option_out_of_range_is_a_usage_error_before_anything_runs(
    invoke, db, command, option, value
):
    result = invoke(*command, "--storage", db, option, value)
    assert result.exit_code == EXIT_USAGE, result.output
    assert f"Invalid value for '{option}'" in result.output
    assert "Traceback" not in result.output
    assert not os.path.exists(db.removeprefix("sqlite:///"))  # nothing was stored or queued


# -- first-hour snags --------------------------------------------------------------------
def test_a_failing_resume_writes_nothing_to_stdout(invoke, scripted_model, db):
    model = scripted_model(synthesis="x")
    result = invoke("resume", "t9", "nope", "--approve", "--storage", db, "--model", model.model)
    assert result.exit_code == EXIT_ERROR
    assert "SUSPENSION_NOT_FOUND" in result.stderr
    assert result.stdout == ""  # a resume does not plan: no "Planning…" spinner frame


def test_a_model_spec_naming_a_missing_module_is_refused_like_tools(tmp_path, monkeypatch):
    (tmp_path / "scripted.py").write_text(
        "from art.testing import ScriptedModel\nMODEL = ScriptedModel(synthesis='hi')\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "scripted", raising=False)
    try:
        with pytest.raises(art.cli.app.CliError) as typo:
            load_model("scriptd:MODEL")
        assert typo.value.exit_code == EXIT_USAGE
        assert "--model 'scriptd:MODEL': cannot import scriptd" in typo.value.message
        with pytest.raises(art.cli.app.CliError) as missing:
            load_model("scripted:NOPE")
        assert "--model 'scripted:NOPE': scripted has no attribute 'NOPE'" in missing.value.message
    finally:
        module = sys.modules.pop("scripted", None)
        if module is not None:
            module.MODEL.unregister()


def test_plan_json_lists_the_dependencies_references_imply(invoke, scripted_model):
    model = scripted_model(planning=PRODUCTS_PLAN)
    as_json = invoke("plan", "q", "--model", model.model, "--storage", "memory://", "--json")
    steps = _json(as_json)["steps"]
    assert [s["dependsOn"] for s in steps] == [[], [], ["s1", "s2"]]
    assert art.Plan.model_validate(_json(as_json)).steps[2].depends_on == ["s1", "s2"]


LONG_PLAN = {
    "title": "Long",
    "steps": [
        {
            "id": "s1",
            "tool": "calculator",
            "args": {"expression": " + ".join(str(n) for n in range(1, 60))},
        }
    ],
}


def test_full_shows_the_arguments_whole_in_the_tree(invoke, scripted_model):
    whole = " + ".join(str(n) for n in range(1, 60))
    model = scripted_model(planning=LONG_PLAN, synthesis="1770")
    cut = invoke("plan", "q", "--model", model.model, "--storage", "memory://")
    assert cut.exit_code == EXIT_OK and whole not in cut.stdout and "…" in cut.stdout
    for command in (["plan", "q"], ["run", "q"]):
        shown = invoke(*command, "--model", model.model, "--storage", "memory://", "--full")
        assert shown.exit_code == EXIT_OK, shown.output
        assert whole in " ".join(shown.stdout.split())  # wrapped to the terminal, not cut


def test_every_json_path_docs_cli_lists_is_in_a_runs_document(invoke, scripted_model):
    docs = (Path(__file__).parent.parent / "docs" / "cli.md").read_text()
    paths = re.findall(r"^\| `(\.[a-zA-Z.\[\]]+)` \|", docs, re.MULTILINE)
    assert ".response.content" in paths
    model = scripted_model(planning=PRODUCTS_PLAN, synthesis="The sum is 942.")
    result = invoke("run", "sum?", "--model", model.model, "--storage", "memory://", "--json")
    document = _json(result)
    assert document["response"]["content"] == "The sum is 942."
    for path in paths:
        value = document
        for key in path.strip(".").replace("[]", "").split("."):
            value = value[0] if isinstance(value, list) else value
            if value is None:  # metadata.error of a run that succeeded
                break
            assert key in value, f"{path}: no {key!r} in {sorted(value)}"
            value = value[key]
