"""A second run on a busy thread does what its `multitaskStrategy` says: `reject` (409),
`enqueue` (after the current run), `interrupt` (cancel it, keep its finished steps) or
`rollback` (cancel and delete it); on memory and PostgreSQL storage."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from postgres_databases import fresh_database

from .conftest import GATE_PLAN, Server

# Each test runs a real server (uvicorn on 127.0.0.1): `pytest --slow` runs them.
pytestmark = pytest.mark.slow


@pytest.fixture(params=["memory", "postgres"])
def busy_server(
    request: pytest.FixtureRequest, make_server: Callable[..., Server]
) -> tuple[Server, httpx.Client, str]:
    """A server whose thread `t-busy` has a run waiting at the gate (step s2)."""
    if request.param == "postgres":
        database = fresh_database(request.getfixturevalue("postgres_server"))
        storage = database.__enter__()
        request.addfinalizer(lambda: database.__exit__(None, None, None))
    else:
        storage = "memory://"
    server = make_server(GATE_PLAN, storage=storage)
    client = server.client()
    started = client.post("/threads/t-busy/runs", json={"query": "through the gate"})
    assert started.status_code == 202
    assert server.gate.entered.wait(10)
    return server, client, started.json()["runId"]


def second(client: httpx.Client, strategy: str | None, **params: Any) -> httpx.Response:
    body: dict[str, Any] = {"query": "the second question"}
    if strategy is not None:
        body["multitaskStrategy"] = strategy
    return client.post("/threads/t-busy/runs", json=body, params=params)


def run_of(client: httpx.Client, run_id: str) -> dict[str, Any]:
    response = client.get(f"/threads/t-busy/runs/{run_id}/wait", params={"timeout_s": 10})
    assert response.status_code == 200, response.text
    return response.json()


def test_reject_is_the_default_and_leaves_the_current_run_alone(
    busy_server: tuple[Server, httpx.Client, str],
) -> None:
    server, client, first = busy_server

    for strategy in (None, "reject"):
        refused = second(client, strategy)
        assert refused.status_code == 409
        assert refused.json()["code"] == "THREAD_BUSY"

    server.gate.opened.set()
    assert run_of(client, first)["status"] == "completed"
    assert len(client.get("/threads/t-busy/runs").json()) == 1


def test_interrupt_cancels_the_current_run_keeping_its_finished_steps(
    busy_server: tuple[Server, httpx.Client, str],
) -> None:
    server, client, first = busy_server

    started = second(client, "interrupt")

    assert started.status_code == 202, started.text
    cancelled = client.get(f"/threads/t-busy/runs/{first}").json()
    assert cancelled["status"] == "failed"
    assert cancelled["error"]["code"] == "CANCELLED"
    assert cancelled["steps"]["s1"]["status"] == "completed"  # kept
    server.gate.opened.set()
    new = run_of(client, started.json()["runId"])
    assert (new["status"], new["query"]) == ("completed", "the second question")
    assert [r["runId"] for r in client.get("/threads/t-busy/runs").json()] == [
        first,
        new["runId"],
    ]


def test_rollback_cancels_and_deletes_the_current_run(
    busy_server: tuple[Server, httpx.Client, str],
) -> None:
    server, client, first = busy_server

    started = second(client, "rollback")

    assert started.status_code == 202, started.text
    assert client.get(f"/threads/t-busy/runs/{first}").status_code == 404
    runs = client.get("/threads/t-busy/runs").json()
    assert [r["runId"] for r in runs] == [started.json()["runId"]]
    server.gate.opened.set()
    assert run_of(client, started.json()["runId"])["status"] == "completed"


def test_enqueue_runs_after_the_current_run_in_order(
    busy_server: tuple[Server, httpx.Client, str],
) -> None:
    server, client, first = busy_server

    queued = [second(client, "enqueue") for _ in range(2)]

    assert [q.status_code for q in queued] == [202, 202]
    ids = [q.json()["runId"] for q in queued]
    assert [q.json()["status"] for q in queued] == ["queued", "queued"]
    assert client.get(f"/threads/t-busy/runs/{ids[0]}").status_code == 404  # not started
    server.gate.opened.set()
    deadline = time.monotonic() + 20
    while len(client.get("/threads/t-busy/runs").json()) < 3:
        assert time.monotonic() < deadline, "the queued runs did not start"
        time.sleep(0.05)
    finished = [run_of(client, run_id) for run_id in [first, *ids]]
    assert [r["status"] for r in finished] == ["completed"] * 3
    order = [r["runId"] for r in client.get("/threads/t-busy/runs").json()]
    assert order == [first, *ids]
    # Each started after the one before it had ended.
    for before, after in itertools.pairwise(finished):
        assert after["createdAt"] >= before["updatedAt"]


def test_an_unknown_strategy_is_refused(busy_server: tuple[Server, httpx.Client, str]) -> None:
    server, client, _ = busy_server
    refused = second(client, "elbow")
    assert refused.status_code == 422
    server.gate.opened.set()


def test_enqueue_to_the_queue_runs_after_the_current_run(
    make_server: Callable[..., Server], tmp_path: Any
) -> None:
    from art.server import ServerSettings

    storage = f"sqlite:///{tmp_path / 'art.db'}"
    settings = ServerSettings(poll_interval_s=0.1, enqueue_to_queue=True)
    server = make_server(GATE_PLAN, storage=storage, settings=settings)
    client = server.client()
    first = client.post("/threads/t-q/runs", json={"query": "through the gate"}).json()["runId"]
    assert server.gate.entered.wait(10)

    queued = client.post(
        "/threads/t-q/runs", json={"query": "the second question", "multitaskStrategy": "enqueue"}
    )

    assert queued.status_code == 202, queued.text
    assert queued.json()["status"] == "queued"
    time.sleep(0.5)  # the queue's worker (in this process, on SQLite) waits for the thread
    assert len(client.get("/threads/t-q/runs").json()) == 1
    server.gate.opened.set()
    deadline = time.monotonic() + 20
    while (
        len(runs := client.get("/threads/t-q/runs").json()) < 2 or runs[1]["status"] != "completed"
    ):
        assert time.monotonic() < deadline, runs
        time.sleep(0.1)
    assert [r["runId"] for r in runs] == [first, queued.json()["runId"]]
    assert runs[0]["status"] == "completed"
