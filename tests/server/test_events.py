"""Event streams: every engine event of a run as SSE with ids from the thread's stored log,
replay after `Last-Event-ID` with no gap and no repeat, thread streams, and the journal
behind them."""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from typing import Any

import pytest

from .conftest import APPROVAL_PLAN, GATE_PLAN, Server, SseEvent, SseReader, read_sse

# Each test runs a real server (uvicorn on 127.0.0.1): `pytest --slow` runs them.
pytestmark = pytest.mark.slow


def _is_end(event: SseEvent) -> bool:
    return event.event == "session:end"


def test_a_run_stream_carries_every_event_with_ids_until_the_run_ends(make_server: Any) -> None:
    server = make_server(APPROVAL_PLAN, synthesis="17 x 23 is 391; plus 12 is 403.")
    client = server.client()
    run = client.post("/threads/t-ev/runs", json={"query": "go"}).json()
    path = f"/threads/t-ev/runs/{run['runId']}/events"

    with client.stream("GET", path) as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        reader = SseReader(stream)
        first = reader.read(until=_is_end)  # the suspension's end: the stream stays open
        assert first[-1].data["data"]["status"] == "suspended"
        sid = next(e for e in first if e.event == "suspended").data["data"]["suspension_id"]
        decided = server.client().post(
            f"/threads/t-ev/suspensions/{sid}/decision", json={"approved": True}
        )
        assert decided.status_code == 202
        rest = reader.read()  # to the end of the stream: the run's final session:end
    events = first + rest

    ids = [int(e.id) for e in events if e.id is not None]
    assert len(ids) == len(events) and ids == sorted(ids) and len(set(ids)) == len(ids)
    assert all(e.data["seq"] == int(e.id) and e.data["name"] == e.event for e in events)
    assert all(e.data["runId"] == run["runId"] for e in events)
    names = [e.event for e in events]
    assert names[0] == "session:start" and names[-1] == "session:end"
    assert events[-1].data["data"]["status"] == "success"
    assert {"plan:created", "tool:loop:before", "tool:before", "tool:after", "suspended"} <= set(
        names
    )
    assert {"resumed", "message:before", "message:after", "buffer:flush"} <= set(names)
    assert not any(name.startswith("chunk:") for name in names)
    statuses = [
        (e.data["data"]["step_id"], e.data["data"]["status"])
        for e in events
        if e.event == "step:status"
    ]
    assert ("s1", "in_progress") in statuses and ("s1", "completed") in statuses
    assert ("s3", "waiting") in statuses
    # Tool updates by stage: exactly one start and one end per tool execution.
    stages = Counter(
        (e.data["data"]["call_id"], e.data["data"]["stage"])
        for e in events
        if e.event == "tool:update"
    )
    calls = {call for call, _ in stages}
    assert len(calls) == 4  # s1, s2, s3 (blocking) and s4
    assert all(stages[(call, "start")] == 1 and stages[(call, "end")] == 1 for call in calls)
    shown = next(e for e in events if e.event == "tool:after" and e.data["data"]["tool"] == "show")
    assert shown.data["data"]["display"] is True
    assert shown.data["data"]["result"]["output"]["rows"] == [["17 x 23", 391]]
    answer = "".join("".join(e.data["data"]["chunks"]) for e in events if e.event == "buffer:flush")
    assert answer == "17 x 23 is 391; plus 12 is 403." == events[-1].data["data"]["answer"]
    end = events[-1].data["data"]
    assert end["usage"]["total_tokens"] > 0 and end["llm_cost"] > 0
    assert end["display"][0]["output"]["title"] == "Product"


def test_reconnecting_with_last_event_id_replays_what_was_missed_exactly(
    make_server: Any,
) -> None:
    server = make_server(GATE_PLAN)
    client = server.client()
    run = client.post("/threads/t-re/runs", json={"query": "through the gate"}).json()
    path = f"/threads/t-re/runs/{run['runId']}/events"
    assert server.gate.entered.wait(10)
    with client.stream("GET", path) as stream:
        before = read_sse(stream, limit=5)
    # The client is gone; the run goes on without it.
    server.gate.opened.set()
    client.get(f"/threads/t-re/runs/{run['runId']}/wait")

    with client.stream("GET", path, headers={"Last-Event-ID": before[-1].id}) as stream:
        after = read_sse(stream)
    with client.stream("GET", path) as stream:
        whole = read_sse(stream)

    assert [e.id for e in before + after] == [e.id for e in whole]
    assert [e.data for e in before + after] == [e.data for e in whole]
    assert whole[-1].event == "session:end" and whole[-1].data["data"]["status"] == "success"
    # ?after= is the same for clients that cannot set headers.
    with client.stream("GET", path, params={"after": before[-1].id}) as stream:
        assert [e.id for e in read_sse(stream)] == [e.id for e in after]


def test_the_thread_stream_follows_every_run_and_stays_open(make_server: Any) -> None:
    server = make_server(GATE_PLAN)
    client = server.client()
    server.gate.opened.set()
    first = client.post("/threads/t-th/runs?wait=true", json={"query": "one"}).json()

    with client.stream("GET", "/threads/t-th/events") as stream:
        reader = SseReader(stream)
        replayed = reader.read(until=_is_end)
        second = server.client().post("/threads/t-th/runs", json={"query": "two"}).json()
        live = reader.read(until=_is_end)  # the second run, as it happens

    assert {e.data["runId"] for e in replayed} == {first["metadata"]["runId"]}
    assert {e.data["runId"] for e in live} == {second["runId"]}
    assert int(live[0].id) > int(replayed[-1].id)
    assert live[-1].data["data"]["status"] == "success"


def test_a_bad_last_event_id_is_a_422_problem(server: Server) -> None:
    client = server.client()
    run = client.post("/threads/t-bad/runs?wait=true", json={"query": "x"}).json()

    refused = client.get(
        f"/threads/t-bad/runs/{run['metadata']['runId']}/events",
        headers={"Last-Event-ID": "yesterday"},
    )

    assert refused.status_code == 422
    assert refused.headers["content-type"] == "application/problem+json"
    assert "Last-Event-ID" in refused.json()["detail"]
    assert client.get("/threads/t-bad/runs/nope/events").status_code == 404


def test_the_journal_stores_each_event_once_in_emission_order(server: Server) -> None:
    client = server.client()
    client.post("/threads/t-j/runs?wait=true", json={"query": "sum?"})

    async def stored() -> list[Any]:
        return await server.instance.storage.query_events("t-j")

    events = asyncio.run(stored())

    names = [e.name for e in events]
    assert names.count("session:start") == 1 and names.count("session:end") == 1
    assert names.count("plan:created") == 1  # the engine's own log is not written beside it
    assert names[0] == "session:start" and names[-1] == "session:end"
    assert [e.seq for e in events] == sorted(e.seq for e in events)
    assert all(e.timestamp <= f.timestamp for e, f in itertools.pairwise(events))
    prompt = next(e for e in events if e.name == "message:before").data
    assert set(prompt) == {"phase", "model", "messages", "prompt_chars"}  # not the prompt
