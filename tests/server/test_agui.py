"""The AG-UI endpoint: every event parses with the `ag-ui-protocol` package's own models,
the sequence is well formed (runs, steps, tool calls and messages open and close in order,
state deltas apply to the snapshots), and a suspended run ends with an interrupt that the
next input's `resume` answers."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from ag_ui.core import Event, RunAgentInput
from pydantic import TypeAdapter

from .conftest import APPROVAL_PLAN, GATE_PLAN, Server, check_agui_sequence, read_sse

# Each test runs a real server (uvicorn on 127.0.0.1): `pytest --slow` runs them.
pytestmark = pytest.mark.slow

EVENTS: TypeAdapter[Any] = TypeAdapter(Event)


def run_input(thread_id: str, text: str | None = None, **fields: Any) -> dict[str, Any]:
    messages = [{"id": "m1", "role": "user", "content": text}] if text else []
    model = RunAgentInput(
        thread_id=thread_id,
        run_id=f"agui-{uuid.uuid4().hex[:8]}",
        messages=messages,
        state={},
        tools=[],
        context=[],
        forwarded_props={},
        **fields,
    )
    return model.model_dump(mode="json", by_alias=True)


def post(server: Server, body: dict[str, Any]) -> list[Any]:
    client = server.client()
    with client.stream("POST", "/ag-ui", json=body, headers={"Accept": "text/event-stream"}) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        raw = read_sse(r)
    events = [EVENTS.validate_python(e.data) for e in raw]
    check_agui_sequence(events, body)
    return events


def of(events: list[Any], kind: str) -> list[Any]:
    return [e for e in events if e.type.value == kind]


def test_a_run_streams_as_valid_ag_ui_events_then_an_interrupt_and_a_resume(
    make_server: Any,
) -> None:
    server = make_server(APPROVAL_PLAN, synthesis="It is 403.")

    first = post(server, run_input("t-agui", "What is 17 * 23 + 12?"))

    snapshot = of(first, "STATE_SNAPSHOT")[0].snapshot
    assert [s["id"] for s in snapshot["plan"]["steps"]] == ["s1", "s2", "s3", "s4"]
    starts = {e.tool_call_name: e for e in of(first, "TOOL_CALL_START")}
    assert set(starts) == {"calculator", "show", "ask_human"}
    args = {e.tool_call_id: e.delta for e in of(first, "TOOL_CALL_ARGS")}
    assert args[starts["calculator"].tool_call_id] == '{"expression": "17 * 23"}'
    results = {e.tool_call_id: e.content for e in of(first, "TOOL_CALL_RESULT")}
    assert results[starts["calculator"].tool_call_id] == "391"
    assert starts["ask_human"].tool_call_id not in results  # a person answers it
    [display] = [e for e in of(first, "CUSTOM") if e.name == "art.display"]
    assert display.value["output"]["rows"] == [["17 x 23", 391]]
    finished = first[-1]
    assert finished.type.value == "RUN_FINISHED" and finished.outcome.type == "interrupt"
    [interrupt] = finished.outcome.interrupts
    assert interrupt.message == "Add 12?"
    assert interrupt.tool_call_id == starts["ask_human"].tool_call_id
    assert interrupt.response_schema["required"] == ["approved"]

    resume = [
        {
            "interruptId": interrupt.id,
            "status": "resolved",
            "payload": {"approved": True, "reason": "ok", "modifiedArgs": {"question": "Add!"}},
        }
    ]
    second = post(server, run_input("t-agui", resume=resume))

    [answered] = of(second, "TOOL_CALL_RESULT")[:1]
    assert answered.tool_call_id == interrupt.tool_call_id  # the call the person answered
    assert '"approved": true' in answered.content and '"Add!"' in answered.content
    opening = of(second, "STATE_SNAPSHOT")[0].snapshot
    assert opening["runId"] == snapshot["runId"] == finished.result["runId"]
    assert opening["steps"]["s3"]["status"] == "waiting"
    assert opening["steps"]["s4"]["status"] == "pending"  # not yet run when the stream opens
    assert [d["output"]["rows"] for d in opening["display"]] == [[["17 x 23", 391]]]
    text = "".join(e.delta for e in of(second, "TEXT_MESSAGE_CONTENT"))
    assert text == "It is 403."
    last = second[-1]
    assert last.type.value == "RUN_FINISHED" and last.outcome.type == "success"
    assert last.result["answer"] == "It is 403." and last.result["status"] == "success"
    assert last.usage[0].total_tokens > 0
    final_state = of(second, "STATE_SNAPSHOT")[-1].snapshot
    assert final_state["steps"]["s4"]["status"] == "completed"
    assert final_state["status"] == "success"
    assert final_state["display"] == opening["display"]
    assert {e.step_name for e in of(second, "STEP_FINISHED")} == {"s4"}


def test_a_failed_run_ends_with_run_error(make_server: Any) -> None:
    server = make_server({"steps": [{"id": "s1", "tool": "no_such_tool", "args": {}}]})

    events = post(server, run_input("t-agui-err", "break"))

    assert events[-1].type.value == "RUN_ERROR"
    assert events[-1].code == "PLAN_INVALID"


def test_a_busy_thread_and_an_input_without_a_question_are_problems(make_server: Any) -> None:
    server = make_server(GATE_PLAN)
    client = server.client()
    client.post("/threads/t-agui-busy/runs", json={"query": "wait"})
    assert server.gate.entered.wait(10)

    busy = client.post("/ag-ui", json=run_input("t-agui-busy", "hello"))
    empty = client.post("/ag-ui", json=run_input("t-agui-empty"))
    bad = client.post("/ag-ui", json=run_input("bad thread", "hello"))

    assert busy.status_code == 409 and busy.json()["code"] == "THREAD_BUSY"
    assert empty.status_code == 422 and "user message" in empty.json()["detail"]
    assert bad.status_code == 422
    server.gate.opened.set()


def test_every_answered_interrupt_gets_its_tool_call_result(make_server: Any) -> None:
    server = make_server(
        {
            "steps": [
                {"id": "s1", "tool": "ask_human", "args": {"question": "First?"}},
                {"id": "s2", "tool": "ask_human", "args": {"question": "Second?"}},
                {"id": "s3", "tool": "calculator", "args": {"expression": "1 + 1"}},
            ]
        }
    )
    first = post(server, run_input("t-agui-two", "two questions"))
    interrupts = first[-1].outcome.interrupts
    calls = {
        e.tool_call_id for e in of(first, "TOOL_CALL_START") if e.tool_call_name == "ask_human"
    }
    assert {i.tool_call_id for i in interrupts} == calls and len(calls) == 2

    resume = [
        {"interruptId": interrupts[0].id, "status": "resolved", "payload": {"approved": True}},
        {"interruptId": interrupts[1].id, "status": "cancelled", "payload": {"reason": "no"}},
    ]
    second = post(server, run_input("t-agui-two", resume=resume))

    results = {e.tool_call_id: e.content for e in of(second, "TOOL_CALL_RESULT")}
    assert '"approved": true' in results[interrupts[0].tool_call_id]
    assert results[interrupts[1].tool_call_id].startswith("error: rejected")
    final = of(second, "STATE_SNAPSHOT")[-1].snapshot["steps"]
    by_call = {i.tool_call_id: i.metadata["stepId"] for i in interrupts}
    assert final[by_call[interrupts[0].tool_call_id]]["status"] == "completed"
    assert final[by_call[interrupts[1].tool_call_id]]["status"] == "failed"
