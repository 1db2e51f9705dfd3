"""Hostile clients at the server's doors: data storage could not read back, options that
would lift the operator's limits, and secrets in answers."""

from __future__ import annotations

import json
from typing import Any

import pytest

import art

from .conftest import APPROVAL_PLAN


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"k": value}
    return value


def test_a_decision_nested_too_deep_is_refused_and_the_thread_stays_readable(
    make_server: Any,
) -> None:
    server = make_server(APPROVAL_PLAN, storage="memory://")
    client = server.client()
    suspended = client.post("/threads/t-deep/runs?wait=true", json={"query": "go"}).json()
    sid = suspended["metadata"]["suspensionId"]
    path = f"/threads/t-deep/suspensions/{sid}/decision"
    body = json.dumps({"approved": True, "modifiedArgs": {"question": _nested(200)}})

    refused = client.post(path, content=body, headers={"content-type": "application/json"})

    assert refused.status_code == 422, refused.text
    assert refused.json()["code"] == "INVALID_DECISION"
    assert "nested more than 100 levels" in refused.json()["detail"]
    thread = client.get("/threads/t-deep")
    assert thread.status_code == 200
    assert [s["suspensionId"] for s in thread.json()["suspensions"]] == [sid]
    done = client.post(path, params={"wait": "true"}, json={"approved": True}).json()
    assert done["metadata"]["status"] == "success"
    assert client.get("/threads/t-deep").status_code == 200


@pytest.mark.parametrize(
    "overrides",
    [
        {"maxPlanAttempts": 200},
        {"stepTimeoutS": None},
        {"llmMaxRetries": 1e6},
        {"max_replans": 1e6},
        {"llmTimeoutS": 3600},
        {"maxPlanSteps": 10**9},
    ],
)
def test_execution_config_from_a_client_cannot_raise_the_operators_limits(
    make_server: Any, overrides: dict[str, Any]
) -> None:
    server = make_server()
    client = server.client()
    body = {"query": "go", "options": {"executionConfig": overrides}}

    refused = client.post("/threads/t-limits/runs", json=body)

    assert refused.status_code == 422, refused.text
    assert refused.json()["code"] == "LIMIT_RAISED"
    assert "may lower this server's limits, not raise them" in refused.json()["detail"]
    assert server.model.calls == []
    assert client.get("/threads/t-limits").status_code == 404


def test_execution_config_from_a_client_may_lower_the_operators_limits(make_server: Any) -> None:
    server = make_server()
    client = server.client()
    lowered = {"maxPlanAttempts": 1, "stepTimeoutS": 5, "llmMaxRetries": 0, "maxReplans": 0}
    body = {"query": "go", "options": {"executionConfig": lowered}}
    done = client.post("/threads/t-lower/runs?wait=true", json=body)
    assert done.status_code == 200, done.text
    assert done.json()["metadata"]["status"] == "success"
    bad = client.post(
        "/threads/t-lower/runs", json={"query": "go", "options": {"executionConfig": {"x": 1}}}
    )
    assert bad.status_code == 422 and bad.json()["code"] == "CONFIG_ERROR"


def _plan_for(messages: list[dict[str, Any]], metadata: Any) -> Any:
    asked = " ".join(str(m["content"]) for m in messages)  # the repair requests too
    if "many steps" in asked:
        steps = [
            {"id": f"s{i}", "tool": "calculator", "args": {"expression": "1"}} for i in range(30)
        ]
        return {"steps": steps}
    if "long title" in asked:
        return {"title": "t" * 2_000, "steps": []}
    return {"steps": []}


def test_plans_and_answers_beyond_the_operators_size_limits_are_refused_or_cut(
    make_server: Any,
) -> None:
    server = make_server(_plan_for, synthesis="x" * 5_000)
    config = server.instance.config.execution_config
    server.instance.config.execution_config = config.merged(
        {"max_plan_steps": 20, "max_answer_chars": 1_000}
    )
    client = server.client()
    query = {"query": "many steps"}
    too_many = client.post("/threads/t-big/runs?wait=true", json=query).json()
    assert too_many["metadata"]["status"] == "error"
    assert too_many["metadata"]["error"]["code"] == "PLAN_INVALID"
    assert "the plan has 30 steps; at most 20 may run" in too_many["metadata"]["error"]["message"]

    titled = client.post("/threads/t-title/runs?wait=true", json={"query": "long title"}).json()
    assert "title is 2000 characters long" in titled["metadata"]["error"]["message"]

    answered = client.post("/threads/t-answer/runs?wait=true", json={"query": "go"}).json()
    assert answered["metadata"]["status"] == "partial"
    assert answered["metadata"]["error"]["code"] == "ANSWER_INCOMPLETE"
    assert len(answered["response"]["content"]) == 1_000
    (run,) = client.get("/threads/t-answer/runs").json()
    assert len(run["answer"]) == 1_000


def test_the_operators_execution_config_sets_the_ceilings(
    make_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from art.cli.app import app

    server = make_server()
    server.instance.config.execution_config = art.ExecutionConfig(max_plan_attempts=8)
    client = server.client()
    body = {"query": "go", "options": {"executionConfig": {"maxPlanAttempts": 8}}}
    assert client.post("/threads/t-op/runs?wait=true", json=body).status_code == 200
    body["options"]["executionConfig"] = {"maxPlanAttempts": 9}
    refused = client.post("/threads/t-op/runs", json=body).json()
    assert refused["code"] == "LIMIT_RAISED" and "max_plan_attempts 9 > 8" in refused["detail"]

    monkeypatch.delenv("ART_API_KEYS", raising=False)
    bad = CliRunner().invoke(app, ["serve", "--model", "m", "--execution-config", '{"x": 1}'])
    assert bad.exit_code == 2
    assert "error CONFIG_ERROR: --execution-config:" in bad.output


SECRET = "sk-hostile0123456789abcdef"


def test_answers_given_live_mask_the_processs_secrets_as_stored_ones_do(
    make_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    leak = f"the key is {SECRET}"
    server = make_server({"steps": []}, synthesis=leak)
    client = server.client()

    waited = client.post("/threads/t-secret/runs?wait=true", json={"query": "go"})
    chat = client.post(
        "/v1/chat/completions",
        json={"model": "art", "messages": [{"role": "user", "content": "go"}]},
    )
    stored = client.get("/threads/t-secret/runs")

    for response in (waited, chat, stored):
        assert response.status_code == 200, response.text
        assert SECRET not in response.text
        assert SECRET[:12] not in response.text  # no part of it either
    assert waited.json()["response"]["content"] == "the key is ***"
    assert chat.json()["choices"][0]["message"]["content"] == "the key is ***"
