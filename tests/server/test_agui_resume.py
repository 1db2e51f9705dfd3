"""AG-UI `resume` goes through the server's run manager: an input answering a real and a
bogus interrupt decides nothing (404), and answered interrupts continue the run in the
manager, where it can be seen executing and cancelled."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from .test_agui import post, run_input

pytestmark = pytest.mark.slow

TWO_QUESTIONS_THEN_GATE = {
    "steps": [
        {"id": "s1", "tool": "ask_human", "args": {"question": "First?"}},
        {"id": "s2", "tool": "ask_human", "args": {"question": "Second?"}},
        {"id": "s3", "tool": "gate", "args": {"name": "g"}, "dependsOn": ["s1", "s2"]},
    ]
}


def _approve(interrupt_id: str) -> dict[str, Any]:
    return {"interruptId": interrupt_id, "status": "resolved", "payload": {"approved": True}}


def test_a_resume_naming_a_bogus_interrupt_decides_nothing(make_server: Any) -> None:
    server = make_server(TWO_QUESTIONS_THEN_GATE)
    client = server.client()
    first = post(server, run_input("t-bogus", "go"))
    real = [i.id for i in first[-1].outcome.interrupts]

    refused = client.post(
        "/ag-ui", json=run_input("t-bogus", resume=[_approve(real[0]), _approve("bogus")])
    )

    assert refused.status_code == 404, refused.text
    assert refused.json()["code"] == "SUSPENSION_NOT_FOUND"
    pending = client.get("/threads/t-bogus/suspensions").json()["suspensions"]
    assert sorted(s["suspensionId"] for s in pending) == sorted(real)  # nothing decided


def test_answered_interrupts_continue_the_run_inside_the_run_manager(make_server: Any) -> None:
    server = make_server(TWO_QUESTIONS_THEN_GATE)
    client = server.client()
    first = post(server, run_input("t-manager", "go"))
    real = [i.id for i in first[-1].outcome.interrupts]
    resumed: list[Any] = []
    streaming = threading.Thread(
        target=lambda: resumed.extend(
            post(server, run_input("t-manager", resume=[_approve(i) for i in real]))
        )
    )
    streaming.start()
    try:
        assert server.gate.entered.wait(30)
        (run,) = client.get("/threads/t-manager/runs").json()
        assert run["status"] == "running" and run["executingHere"] is True
        cancelled = client.post(f"/threads/t-manager/runs/{run['runId']}/cancel")
        assert cancelled.status_code == 200, cancelled.text
    finally:
        server.gate.opened.set()
        streaming.join(30)
    assert resumed and resumed[-1].type.value in ("RUN_FINISHED", "RUN_ERROR")
    (run,) = client.get("/threads/t-manager/runs").json()
    assert run["status"] == "failed" and run["error"]["code"] == "CANCELLED"
