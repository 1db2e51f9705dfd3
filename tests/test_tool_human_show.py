import pytest

from art.tooling.contract import ExecutionContext
from art.tooling.invocation import invoke_tool
from art.tooling.registry import ToolRegistry
from art.tools import (
    AskHuman,
    Calculator,
    HttpGet,
    ListFiles,
    ReadFile,
    Show,
    builtin_tools,
)


def make_context() -> ExecutionContext:
    return ExecutionContext(thread_id="t1", trace_id="0" * 32, call_id="c1")


async def call(tool, **args):
    return await invoke_tool(tool, args, make_context(), registry=ToolRegistry([tool]))


# --- ask_human -------------------------------------------------------------------------


async def test_ask_human_suspends_with_the_question():
    result = await call(AskHuman(), question="Deploy to production?", options=["yes", "no"])
    assert AskHuman.schema.execution_mode == "blocking"
    assert result.status == "suspended"
    assert result.output == {"question": "Deploy to production?", "options": ["yes", "no"]}
    assert len(result.metadata["suspension_id"]) == 32


async def test_each_suspension_gets_a_fresh_id():
    first = await call(AskHuman(), question="A?", details="context for the person")
    second = await call(AskHuman(), question="A?")
    assert first.output == {"question": "A?", "details": "context for the person"}
    assert first.metadata["suspension_id"] != second.metadata["suspension_id"]


async def test_ask_human_needs_a_question():
    result = await call(AskHuman(), question="")
    assert result.metadata["error_code"] == "VALIDATION_ERROR"


# --- show ------------------------------------------------------------------------------


async def test_show_markdown():
    result = await call(Show(), title="Summary", markdown="**3** items")
    assert Show.schema.execution_mode == "display"
    assert result.status == "success"
    assert result.output == {"kind": "markdown", "title": "Summary", "markdown": "**3** items"}


async def test_show_table():
    table = {"columns": ["city", "temp"], "rows": [["Paris", 21], ["Oslo", None]]}
    result = await call(Show(), title="Weather", table=table)
    assert result.output == {
        "kind": "table",
        "title": "Weather",
        "columns": ["city", "temp"],
        "rows": [["Paris", 21], ["Oslo", None]],
    }


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"title": "T"}, "exactly one of 'markdown'"),
        (
            {"title": "T", "markdown": "m", "table": {"columns": ["a"], "rows": []}},
            "exactly one of 'markdown'",
        ),
        (
            {"title": "T", "table": {"columns": ["a", "b"], "rows": [[1, 2], [3]]}},
            "table rows [1] do not have one value per column (2 columns: a, b)",
        ),
        ({"title": "T", "table": {"columns": ["a"], "rows": [[{"x": 1}]]}}, "invalid input"),
    ],
)
async def test_show_refuses_bad_payloads(args, message):
    result = await invoke_tool(Show(), args, make_context())
    assert result.metadata["error_code"] == "VALIDATION_ERROR"
    assert message in result.error


# --- the set ---------------------------------------------------------------------------


def test_builtin_tools(tmp_path):
    plain = builtin_tools()
    assert [type(t) for t in plain] == [Calculator, HttpGet, AskHuman, Show]
    with_files = builtin_tools(files_root=tmp_path)
    assert [t.name for t in with_files] == [
        "calculator",
        "http_get",
        "ask_human",
        "show",
        "read_file",
        "list_files",
    ]
    assert isinstance(with_files[4], ReadFile) and with_files[4].root == tmp_path.resolve()
    assert isinstance(with_files[5], ListFiles)
    registry = ToolRegistry(with_files)  # every built-in passes registration
    assert len(registry) == 6
    assert builtin_tools()[0] is not plain[0]


def test_descriptions_say_what_when_and_returns(tmp_path):
    for tool in builtin_tools(files_root=tmp_path):
        description = tool.schema.description
        assert len(description) > 120, tool.name
        assert "Use it" in description, tool.name
        assert "Returns" in description or "returns" in description or "becomes" in description
