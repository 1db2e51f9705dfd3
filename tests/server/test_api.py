"""The REST resources of `art serve`, against a real server on 127.0.0.1: threads, runs
(start, wait, read, cancel), suspensions, plans, tools, the OpenAPI document, and runs
that outlive the request that started them."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
from openapi_spec_validator import validate

from .conftest import APPROVAL_PLAN, GATE_PLAN, Server

# Each test runs a real server (uvicorn on 127.0.0.1): `pytest --slow` runs them.
pytestmark = pytest.mark.slow


def wait_until(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(0.02)


def test_a_run_with_wait_answers_with_its_response_and_is_stored(server: Server) -> None:
    client = server.client()

    done = client.post("/threads/t-wait/runs", params={"wait": "true"}, json={"query": "sum?"})

    assert done.status_code == 200
    body = done.json()
    assert body["metadata"]["status"] == "success"
    assert body["response"]["content"] == "The answer is 403."
    assert [s["stepId"] for s in body["steps"]] == ["s1", "s2"]
    assert body["steps"][1]["result"]["output"] == 403
    thread = client.get("/threads/t-wait").json()
    assert [m["role"] for m in thread["history"]] == ["user", "assistant"]
    assert [r["status"] for r in thread["runs"]] == ["completed"]
    assert thread["runs"][0]["runId"] == body["metadata"]["runId"]


def test_a_started_run_is_202_then_waited_for_and_read_with_steps_usage_and_cost(
    server: Server,
) -> None:
    client = server.client()

    started = client.post("/threads/t-async/runs", json={"query": "sum?"})

    assert started.status_code == 202
    run = started.json()
    assert run["threadId"] == "t-async" and run["query"] == "sum?"
    assert started.headers["location"] == f"threads/t-async/runs/{run['runId']}"
    finished = client.get(f"/threads/t-async/runs/{run['runId']}/wait").json()
    assert finished["status"] == "completed"
    assert finished["answer"] == "The answer is 403."
    read = client.get(f"/threads/t-async/runs/{run['runId']}").json()
    assert read == finished | {"executingHere": False}
    s2 = read["steps"]["s2"]
    assert s2["args"] == {"expression": "391 + 12"}  # resolved references
    assert s2["result"]["output"] == 403 and s2["attempts"] == 1
    assert s2["startedAt"] <= s2["endedAt"]
    assert read["plan"]["steps"][1]["args"] == {"expression": "{{s1.output}} + 12"}
    assert read["llmCalls"] == 2 and read["toolCalls"] == 2
    assert read["usage"]["totalTokens"] > 0 and read["llmCost"] > 0
    assert client.get("/threads/t-async/runs").json() == [read]


def test_a_person_approves_a_blocking_step_through_the_api(make_server: Any) -> None:
    server = make_server(APPROVAL_PLAN)
    client = server.client()

    suspended = client.post("/threads/t-hitl/runs?wait=true", json={"query": "go"}).json()

    assert suspended["metadata"]["status"] == "suspended"
    run_id = suspended["metadata"]["runId"]
    [pending] = client.get("/threads/t-hitl/suspensions").json()["suspensions"]
    assert pending["stepId"] == "s3" and pending["toolName"] == "ask_human"
    assert pending["prompt"]["question"] == "Add 12?"
    run = client.get(f"/threads/t-hitl/runs/{run_id}").json()
    assert run["status"] == "suspended"
    assert [s["suspensionId"] for s in run["suspensions"]] == [pending["suspensionId"]]
    assert run["display"] == [
        {
            "stepId": "s2",
            "toolName": "show",
            "output": {
                "kind": "table",
                "title": "Product",
                "columns": ["what", "value"],
                "rows": [["17 x 23", 391]],
            },
            "config": {"kinds": ["markdown", "table"]},  # the show tool's display_config
        }
    ]

    decision = {"approved": True, "reason": "fine by me", "modifiedArgs": {"question": "Add 12!"}}
    path = f"/threads/t-hitl/suspensions/{pending['suspensionId']}/decision"
    finished = client.post(path, params={"wait": "true"}, json=decision).json()

    assert finished["metadata"]["status"] == "success"
    s3 = next(s for s in finished["steps"] if s["stepId"] == "s3")
    assert s3["result"]["output"] == {
        "approved": True,
        "reason": "fine by me",
        "modified_args": {"question": "Add 12!"},
    }
    assert next(s for s in finished["steps"] if s["stepId"] == "s4")["result"]["output"] == 403
    again = client.post(path, json=decision)
    assert again.status_code == 409
    assert again.headers["content-type"] == "application/problem+json"
    assert again.json()["code"] == "SUSPENSION_ALREADY_DECIDED"
    unknown = client.post("/threads/t-hitl/suspensions/nope/decision", json=decision)
    assert unknown.status_code == 404 and unknown.json()["code"] == "SUSPENSION_NOT_FOUND"
    assert client.get("/threads/t-hitl/suspensions").json() == {"suspensions": []}


def test_a_rejection_with_a_reason_fails_the_step_and_skips_its_dependents(
    make_server: Any,
) -> None:
    server = make_server(APPROVAL_PLAN)
    client = server.client()
    suspended = client.post("/threads/t-no/runs?wait=true", json={"query": "go"}).json()
    sid = suspended["metadata"]["suspensionId"]

    done = client.post(
        f"/threads/t-no/suspensions/{sid}/decision?wait=true",
        json={"approved": False, "reason": "too expensive"},
    ).json()

    steps = {s["stepId"]: s for s in done["steps"]}
    assert steps["s3"]["status"] == "failed" and "too expensive" in steps["s3"]["reason"]
    # every field of the decision, modified_args null when the reviewer gave none
    assert steps["s3"]["result"]["output"] == {
        "approved": False,
        "reason": "too expensive",
        "modified_args": None,
    }
    assert steps["s4"]["status"] == "skipped"
    assert done["metadata"]["status"] == "partial"


def test_a_second_run_on_a_busy_thread_is_a_409_problem(make_server: Any) -> None:
    server = make_server(GATE_PLAN)
    client = server.client()
    first = client.post("/threads/t-busy/runs", json={"query": "wait at the gate"}).json()
    assert server.gate.entered.wait(10)

    second = client.post("/threads/t-busy/runs", json={"query": "another"})

    assert second.status_code == 409
    problem = second.json()
    assert second.headers["content-type"] == "application/problem+json"
    assert problem["code"] == "THREAD_BUSY" and problem["status"] == 409
    assert "t-busy" in problem["detail"]
    assert client.post("/threads/t-other/runs", json={"query": "x"}).status_code == 202
    server.gate.opened.set()
    done = client.get(f"/threads/t-busy/runs/{first['runId']}/wait").json()
    assert done["status"] == "completed"


def test_cancel_stops_a_run_executing_here(make_server: Any) -> None:
    server = make_server(GATE_PLAN)
    client = server.client()
    run = client.post("/threads/t-cancel/runs", json={"query": "wait"}).json()
    assert server.gate.entered.wait(10)
    assert client.get(f"/threads/t-cancel/runs/{run['runId']}").json()["executingHere"]

    cancelled = client.post(f"/threads/t-cancel/runs/{run['runId']}/cancel")

    assert cancelled.status_code == 200
    body = cancelled.json()
    assert body["status"] == "failed" and body["error"]["code"] == "CANCELLED"
    again = client.post(f"/threads/t-cancel/runs/{run['runId']}/cancel")
    assert again.status_code == 409 and again.json()["code"] == "RUN_ENDED"


def test_cancel_ends_a_suspended_run_and_its_stream(make_server: Any) -> None:
    server = make_server(APPROVAL_PLAN)
    client = server.client()
    run_id = client.post("/threads/t-cs/runs?wait=true", json={"query": "go"}).json()["metadata"][
        "runId"
    ]

    body = client.post(f"/threads/t-cs/runs/{run_id}/cancel").json()

    assert body["status"] == "failed" and body["error"]["code"] == "CANCELLED"
    assert client.get("/threads/t-cs/suspensions").json() == {"suspensions": []}
    with client.stream("GET", f"/threads/t-cs/runs/{run_id}/events") as stream:
        names = [line[7:] for line in stream.iter_lines() if line.startswith("event: ")]
    assert names[-1] == "session:end"  # the stream ended: the run is over


def test_a_run_outlives_the_request_that_started_it(make_server: Any) -> None:
    server = make_server(GATE_PLAN)
    impatient = httpx.Client(base_url=server.url, timeout=0.5)
    with pytest.raises(httpx.ReadTimeout):
        impatient.post("/threads/t-gone/runs?wait=true", json={"query": "wait at the gate"})
    impatient.close()  # the client went away mid-run
    assert server.gate.entered.wait(10)

    server.gate.opened.set()

    client = server.client()
    [run] = client.get("/threads/t-gone/runs").json()
    done = client.get(f"/threads/t-gone/runs/{run['runId']}/wait").json()
    assert done["status"] == "completed" and done["answer"] == "The answer is 403."
    history = client.get("/threads/t-gone").json()["history"]
    assert [m["content"] for m in history] == ["wait at the gate", "The answer is 403."]


def test_threads_are_listed_read_and_deleted(make_server: Any) -> None:
    server = make_server(GATE_PLAN)
    client = server.client()
    server.gate.opened.set()
    for thread_id in ("t-a", "t-b"):
        client.post(f"/threads/{thread_id}/runs?wait=true", json={"query": f"q {thread_id}"})

    listed = client.get("/threads").json()["threads"]

    assert [t["threadId"] for t in listed] == ["t-b", "t-a"]
    assert listed[0]["lastQuery"] == "q t-b" and listed[0]["lastStatus"] == "completed"
    assert client.get("/threads", params={"limit": 1}).json()["threads"][0]["threadId"] == "t-b"
    assert client.delete("/threads/t-a").status_code == 204
    assert client.get("/threads/t-a").status_code == 404
    assert client.delete("/threads/t-a").status_code == 404
    assert [t["threadId"] for t in client.get("/threads").json()["threads"]] == ["t-b"]


def test_a_thread_with_a_run_executing_cannot_be_deleted(make_server: Any) -> None:
    server = make_server(GATE_PLAN)
    client = server.client()
    client.post("/threads/t-del/runs", json={"query": "wait"})
    assert server.gate.entered.wait(10)

    refused = client.delete("/threads/t-del")

    assert refused.status_code == 409 and refused.json()["code"] == "THREAD_BUSY"
    server.gate.opened.set()


def test_a_plan_is_made_without_running_anything(server: Server) -> None:
    client = server.client()

    plan = client.post("/plans", json={"query": "sum?"}).json()

    assert plan["plan"]["title"] == "Two sums"
    assert [s["id"] for s in plan["plan"]["steps"]] == ["s1", "s2"]
    assert plan["mermaid"].startswith("flowchart TD")
    assert client.get("/threads").json() == {"threads": [], "nextCursor": None}


def test_tools_are_listed_with_their_schemas_and_modes(server: Server) -> None:
    tools = {t["name"]: t for t in server.client().get("/tools").json()["tools"]}

    assert set(tools) == {"calculator", "show", "ask_human", "gate"}
    assert tools["ask_human"]["executionMode"] == "blocking"
    assert tools["show"]["executionMode"] == "display"
    assert tools["calculator"]["inputSchema"]["required"] == ["expression"]


def test_the_openapi_document_describes_every_resource(server: Server) -> None:
    document = server.client().get("/openapi.json").json()

    validate(document)  # against the OpenAPI 3.1 specification's schema
    assert document["openapi"].startswith("3.1")
    assert document["info"]["title"] == "art"
    operations = {
        (path, method)
        for path, item in document["paths"].items()
        for method in item
        if method in ("get", "post", "delete", "put", "patch")
    }
    assert operations == {
        ("/threads", "get"),
        ("/threads", "post"),
        ("/threads/{thread_id}", "get"),
        ("/threads/{thread_id}", "patch"),
        ("/threads/{thread_id}", "delete"),
        ("/threads/{thread_id}/events", "get"),
        ("/threads/{thread_id}/runs", "get"),
        ("/threads/{thread_id}/runs", "post"),
        ("/threads/{thread_id}/runs/{run_id}", "get"),
        ("/threads/{thread_id}/runs/{run_id}/wait", "get"),
        ("/threads/{thread_id}/runs/{run_id}/cancel", "post"),
        ("/threads/{thread_id}/runs/{run_id}/fork", "post"),
        ("/threads/{thread_id}/runs/{run_id}/events", "get"),
        ("/threads/{thread_id}/suspensions", "get"),
        ("/threads/{thread_id}/suspensions/{suspension_id}/decision", "post"),
        ("/plans", "post"),
        ("/tools", "get"),
        ("/queue/runs", "get"),
        ("/queue/runs/{run_id}/cancel", "post"),
        ("/queue/runs/{run_id}/retry", "post"),
        ("/queue/runs/{run_id}/discard", "post"),
        ("/ag-ui", "post"),
        ("/v1/chat/completions", "post"),
        ("/v1/models", "get"),
        ("/healthz", "get"),
    }
    schemes = document["components"]["securitySchemes"]
    assert schemes == {
        "HTTPBearer": {
            "type": "http",
            "scheme": "bearer",
            "description": schemes["HTTPBearer"]["description"],
        }
    }
    operation_ids = []
    for path, method in operations:
        operation = document["paths"][path][method]
        operation_ids.append(operation["operationId"])
        assert operation.get("description") or operation.get("summary"), (path, method)
        if path != "/healthz":
            assert operation["security"] == [{"HTTPBearer": []}], (path, method)
        if path.startswith("/threads"):
            for status in ("401", "404", "409", "422"):
                schema = operation["responses"][status]["content"]["application/json"]["schema"]
                assert schema == {"$ref": "#/components/schemas/ProblemBody"}, (path, status)
    assert len(set(operation_ids)) == len(operation_ids)
    start = document["paths"]["/threads/{thread_id}/runs"]["post"]
    assert set(start["responses"]) >= {"200", "202"}
    # 202 is the started run, or with multitaskStrategy "enqueue" the queued one.
    started = start["responses"]["202"]["content"]["application/json"]["schema"]
    assert started["anyOf"] == [
        {"$ref": "#/components/schemas/RunResource"},
        {"$ref": "#/components/schemas/QueuedRunResource"},
    ]
    thread_id = next(p for p in start["parameters"] if p["name"] == "thread_id")
    assert thread_id["schema"]["pattern"] == "^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"
    # Every reference in the document resolves.
    components = document["components"]["schemas"]

    def refs(node: Any) -> list[str]:
        if isinstance(node, dict):
            found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
            return found + [r for value in node.values() for r in refs(value)]
        if isinstance(node, list):
            return [r for value in node for r in refs(value)]
        return []

    for ref in refs(document):
        assert ref.startswith("#/components/schemas/") and ref.split("/")[-1] in components, ref
    assert {"RunResource", "ThreadResource", "AgentFinalResponse", "ProblemBody"} <= set(components)


def test_health_needs_no_key_and_says_ok(server: Server) -> None:
    assert server.client().get("/healthz").json() == {"status": "ok"}
