"""`POST .../runs/{run}/fork`: a stored run runs again from a step as a new run of the
thread, named by its `forkedFrom`."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import Server

# Each test runs a real server (uvicorn on 127.0.0.1): `pytest --slow` runs them.
pytestmark = pytest.mark.slow


def test_a_fork_runs_from_a_step_with_new_arguments(server: Server) -> None:
    client = server.client()
    first = client.post(
        "/threads/t-fork/runs", params={"wait": "true"}, json={"query": "17 * 23 + 12?"}
    ).json()
    run_id = first["metadata"]["runId"]

    started = client.post(
        f"/threads/t-fork/runs/{run_id}/fork",
        json={"stepId": "s2", "args": {"expression": "{{s1.output}} + 100"}},
    )

    assert started.status_code == 202, started.text
    fork = client.get(f"/threads/t-fork/runs/{started.json()['runId']}/wait").json()
    assert fork["status"] == "completed"
    assert fork["forkedFrom"] == {
        "runId": run_id,
        "stepId": "s2",
        "args": {"expression": "{{s1.output}} + 100"},
    }
    assert [fork["steps"][s]["result"]["output"] for s in ("s1", "s2")] == [391, 491]
    assert fork["llmCalls"] == 1  # the synthesis: s1 came from the first run
    runs = client.get("/threads/t-fork/runs").json()
    assert [r["runId"] for r in runs] == [run_id, fork["runId"]]


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"stepId": "s9"}, 404, "FORK_STEP_NOT_FOUND"),
        ({"stepId": "s2", "args": {"expression": 7}}, 422, "FORK_INVALID"),
    ],
)
def test_a_fork_that_cannot_run_is_a_problem(
    server: Server, body: dict[str, Any], status: int, code: str
) -> None:
    client = server.client()
    first = client.post(
        "/threads/t-bad/runs", params={"wait": "true"}, json={"query": "17 * 23 + 12?"}
    ).json()

    refused = client.post(f"/threads/t-bad/runs/{first['metadata']['runId']}/fork", json=body)

    assert (refused.status_code, refused.json()["code"]) == (status, code)
    assert client.post("/threads/t-bad/runs/nope/fork", json=body).status_code == 404
    assert len(client.get("/threads/t-bad/runs").json()) == 1


def test_a_fork_cannot_lift_the_operators_limits(server: Server) -> None:
    client = server.client()
    first = client.post(
        "/threads/t-limit/runs", params={"wait": "true"}, json={"query": "17 * 23 + 12?"}
    ).json()

    refused = client.post(
        f"/threads/t-limit/runs/{first['metadata']['runId']}/fork",
        json={"stepId": "s2", "options": {"executionConfig": {"maxPlanAttempts": 200}}},
    )

    assert (refused.status_code, refused.json()["code"]) == (422, "LIMIT_RAISED")
    assert len(client.get("/threads/t-limit/runs").json()) == 1
