"""The server's pure parts, without a server: settings, the journal's stored form, the
AG-UI translation of a run's stored events, and problem documents for engine errors."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from ag_ui.core import RunAgentInput

from art.errors import ConfigurationError, RunErrorCode, SuspensionError, ThreadBusyError
from art.observe.events import Event
from art.planning.plans import Plan
from art.responses import AgentFinalResponse, ConversationMessage, ExecutionMetadata
from art.server import ServerSettings, create_app
from art.server.agui import AgUiTranslator
from art.server.journal import MAX_VALUE_CHARS, stored_event
from art.server.problems import from_art_error
from art.server.settings import is_loopback, valid_thread_id
from art.storage.contract import StoredEvent

from .conftest import check_agui_sequence

KEY = "k-" + "s3cret" * 4
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_beyond_loopback_the_server_refuses_to_start_without_keys() -> None:
    with pytest.raises(ConfigurationError, match="without API keys"):
        create_app(model="m", storage="memory://", settings=ServerSettings(host="0.0.0.0"))
    for settings in (
        ServerSettings(host="0.0.0.0", api_keys=[KEY]),
        ServerSettings(host="0.0.0.0", allow_unauthenticated=True),
        ServerSettings(host="::1"),
        ServerSettings(host="localhost"),
    ):
        settings.check_exposure()  # none of these raises
    with pytest.raises(ConfigurationError, match="at least 16"):
        ServerSettings(api_keys=["short"])
    assert [is_loopback(h) for h in ("127.0.0.2", "[::1]", "0.0.0.0", "example.com")] == [
        True,
        True,
        False,
        False,
    ]
    assert valid_thread_id("t-1.a:b_c") and not valid_thread_id("a/b")


def test_the_journal_stores_json_with_large_values_cut_and_the_end_with_usage() -> None:
    big = {"rows": [[i, "x" * 50] for i in range(2_000)]}
    plan = Plan.model_validate({"title": "t", "steps": [{"id": "s1", "tool": "calc", "args": {}}]})
    response = AgentFinalResponse(
        response=ConversationMessage(thread_id="t", role="assistant", content="hi"),
        metadata=ExecutionMetadata(
            thread_id="t", trace_id="a" * 32, run_id="r1", status="success", llm_cost=0.5
        ),
    )

    def stored_data(name: str, data: dict[str, Any]) -> dict[str, Any]:
        event = Event(name=name, data=data, thread_id="t", run_id="r1", timestamp=T0)
        return stored_event(event, lambda value: value).data

    cut = stored_data("tool:after", {"result": big, "args": {"n": 1}, "when": T0})
    planned = stored_data("plan:created", {"plan": plan, "steps": 1})
    prompt = stored_data(
        "message:before", {"phase": "planning", "model": "m", "messages": [{"content": "abc"}]}
    )
    end = stored_data("session:end", {"status": "success", "answer": "hi", "response": response})

    assert isinstance(cut["result"], str) and len(cut["result"]) == MAX_VALUE_CHARS
    assert cut["result"].endswith("characters]") and cut["args"] == {"n": 1}
    assert cut["when"].startswith("2026-01-01T00:00:00")
    assert planned["plan"]["steps"][0]["id"] == "s1"
    assert prompt == {"phase": "planning", "model": "m", "messages": 1, "prompt_chars": 3}
    assert "response" not in end and end["llm_cost"] == 0.5 and end["run_id"] == "r1"
    assert end["usage"]["total_tokens"] == 0


def _events(*items: tuple[str, dict[str, Any]]) -> list[StoredEvent]:
    return [
        StoredEvent(
            seq=i + 1,
            thread_id="t",
            run_id="r1",
            name=name,
            data=data,
            timestamp=T0 + timedelta(seconds=i),
        )
        for i, (name, data) in enumerate(items)
    ]


def _tool(step: str, call: str, tool: str, args: dict[str, Any], **end: Any) -> list[Any]:
    return [
        ("step:status", {"step_id": step, "tool": tool, "status": "in_progress", "attempt": 1}),
        (
            "tool:update",
            {"stage": "start", "step_id": step, "tool": tool, "call_id": call, "args": args},
        ),
        ("tool:update", {"stage": "end", "step_id": step, "tool": tool, "call_id": call, **end}),
    ]


def test_a_run_s_stored_events_become_a_well_formed_ag_ui_sequence() -> None:
    plan = {"steps": [{"id": "s1", "tool": "calculator"}, {"id": "s2", "tool": "show"}]}
    table = {"kind": "table", "columns": ["x"], "rows": [[391]]}
    stored = _events(
        ("session:start", {"query": "q"}),
        ("plan:created", {"plan": plan, "steps": 2}),
        *_tool("s1", "c1", "calculator", {"expression": "17*23"}, status="success", result=391),
        ("step:status", {"step_id": "s1", "status": "in_progress", "attempt": 2}),  # a retry
        ("step:status", {"step_id": "s1", "status": "completed", "attempt": 2}),
        *_tool("s2", "c2", "show", {"title": "T"}, status="success", result=table, display=True),
        ("step:status", {"step_id": "s2", "status": "completed", "attempt": 1}),
        ("buffer:flush", {"phase": "synthesis", "chunks": ["It is ", "391."]}),
        ("buffer:flush", {"phase": "synthesis", "chunks": []}),
        (
            "session:end",
            {
                "status": "success",
                "answer": "It is 391.",
                "run_id": "r1",
                "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
            },
        ),
        ("step:status", {"step_id": "s9", "status": "in_progress"}),  # after the end: dropped
    )
    body = RunAgentInput(thread_id="t", run_id="agui-1", messages=[]).model_dump(by_alias=True)
    translator = AgUiTranslator("t", "agui-1", frozenset({"show"}))

    events = translator.started(RunAgentInput.model_validate(body), None)
    for event in stored:
        events += translator.translate(event)

    check_agui_sequence(events, body)
    kinds = [e.type.value for e in events]
    assert kinds.count("STEP_STARTED") == 2 and kinds.count("TOOL_CALL_RESULT") == 2
    assert [e.delta for e in events if e.type.value == "TEXT_MESSAGE_CONTENT"] == ["It is 391."]
    assert events[-1].result == {"answer": "It is 391.", "status": "success", "runId": "r1"}
    assert events[-1].usage[0].total_tokens == 8
    assert translator.state["display"][0]["output"] == table
    assert all(e.timestamp is not None for e in events[1:])


def test_a_suspended_run_finishes_with_an_interrupt_per_pending_step() -> None:
    stored = _events(
        ("plan:created", {"plan": {"steps": [{"id": "s1", "tool": "ask_human"}]}}),
        *_tool("s1", "c1", "ask_human", {"question": "ok?"}, status="suspended"),
        ("step:status", {"step_id": "s1", "status": "waiting"}),
        (
            "suspended",
            {
                "steps": [
                    {
                        "suspension_id": "sus1",
                        "step_id": "s1",
                        "tool": "ask_human",
                        "args": {"question": "ok?"},
                        "prompt": {"question": "ok?"},
                    }
                ]
            },
        ),
        ("session:end", {"status": "suspended", "answer": ""}),
    )
    body = RunAgentInput(thread_id="t", run_id="agui-2", messages=[]).model_dump(by_alias=True)
    translator = AgUiTranslator("t", "agui-2", frozenset())
    events = translator.started(RunAgentInput.model_validate(body), None)
    for event in stored:
        events += translator.translate(event)

    check_agui_sequence(events, body)
    [interrupt] = events[-1].outcome.interrupts
    assert (interrupt.id, interrupt.message, interrupt.tool_call_id) == ("sus1", "ok?", "c1")
    assert not [e for e in events if e.type.value == "TOOL_CALL_RESULT"]  # a person answers


def test_a_plan_created_after_its_first_steps_ran_keeps_their_state() -> None:
    # Eager execution: the plan is complete (plan:created) after s1 already ran.
    plan = {"steps": [{"id": "s1", "tool": "calculator"}, {"id": "s2", "tool": "calculator"}]}
    stored = _events(
        *_tool("s1", "c1", "calculator", {"expression": "1+2"}, result=3),
        ("step:status", {"step_id": "s1", "tool": "calculator", "status": "completed"}),
        ("plan:created", {"plan": plan}),
        ("session:end", {"status": "success", "answer": "3"}),
    )
    body = RunAgentInput(thread_id="t", run_id="agui-3", messages=[]).model_dump(by_alias=True)
    translator = AgUiTranslator("t", "agui-3", frozenset())
    events = translator.started(RunAgentInput.model_validate(body), None)
    for event in stored:
        events += translator.translate(event)

    check_agui_sequence(events, body)
    snapshot = [e for e in events if e.type.value == "STATE_SNAPSHOT"][-1]
    steps = snapshot.snapshot["steps"]
    assert steps["s1"]["status"] == "completed"
    assert steps["s2"] == {"status": "pending", "tool": "calculator"}


def test_engine_errors_become_problems_with_their_codes() -> None:
    busy = from_art_error(ThreadBusyError("t", retry_after_s=2.2))
    decided = from_art_error(
        SuspensionError("decided", code=RunErrorCode.SUSPENSION_ALREADY_DECIDED)
    )
    unknown = from_art_error(SuspensionError("no", code=RunErrorCode.SUSPENSION_NOT_FOUND))

    assert (busy.status, busy.code, busy.headers["Retry-After"]) == (409, "THREAD_BUSY", "2")
    assert (decided.status, decided.code) == (409, "SUSPENSION_ALREADY_DECIDED")
    assert (unknown.status, unknown.code) == (404, "SUSPENSION_NOT_FOUND")


def test_art_serve_documents_its_options_and_refuses_an_open_server_without_keys(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from typer.testing import CliRunner

    from art.cli.app import app

    monkeypatch.delenv("ART_API_KEYS", raising=False)
    runner = CliRunner()

    shown = runner.invoke(app, ["serve", "--help"])
    refused = runner.invoke(app, ["serve", "--host", "0.0.0.0", "--model", "m"])

    assert shown.exit_code == 0
    for option in (
        "--host HOST",
        "--port PORT",
        "--api-key KEY",
        "--cors-origin ORIGIN",
        "--grace SECONDS",
        "--max-body-bytes N",
        "--root-path PATH",
        "--no-auth",
    ):
        assert option in shown.output, option
    assert refused.exit_code == 2
    assert "refusing to listen on 0.0.0.0 without API keys" in refused.output


def test_the_journaled_storage_delegates_every_method_of_the_contract() -> None:
    from art.server.journal import JournaledStorage
    from art.storage.contract import StorageAdapter

    contract = {
        name
        for name, value in vars(StorageAdapter).items()
        if callable(value) and not name.startswith("_")
    }

    # A method the contract gains later must be delegated too, not left to its default.
    assert contract - set(vars(JournaledStorage)) == set()
