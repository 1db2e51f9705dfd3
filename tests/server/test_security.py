"""Security: keys (required by default beyond loopback), CORS, bounded requests, validated
thread ids, host checks, and errors as problem details that never carry a stack trace."""

from __future__ import annotations

from typing import Any

import pytest

from art.server import ServerSettings

from .conftest import Server

# Each test runs a real server (uvicorn on 127.0.0.1): `pytest --slow` runs them.
pytestmark = pytest.mark.slow

KEY = "k-" + "s3cret" * 4


def test_with_keys_every_api_call_needs_one(make_server: Any) -> None:
    server = make_server(settings=ServerSettings(api_keys=[KEY, "another-key-0123456789"]))

    anonymous = server.client().get("/threads")
    wrong = server.client(Authorization="Bearer not-the-key-at-all").get("/threads")
    basic = server.client(Authorization="Basic dXNlcjpwYXNz").get("/threads")
    right = server.client(Authorization=f"Bearer {KEY}").get("/threads")
    second = server.client(Authorization="Bearer another-key-0123456789").get("/tools")

    for refused in (anonymous, wrong, basic):
        assert refused.status_code == 401
        assert refused.headers["content-type"] == "application/problem+json"
        assert refused.headers["www-authenticate"] == 'Bearer realm="art"'
        assert refused.json()["code"] == "UNAUTHORIZED"
    assert right.status_code == 200 and second.status_code == 200
    for path in ("/threads/t/events", "/ag-ui", "/v1/models", "/plans"):
        method = "GET" if "events" in path or "models" in path else "POST"
        assert server.client().request(method, path, json={}).status_code == 401, path
    # The page, its files and the health check need no key (they hold no data).
    assert server.client().get("/").status_code == 200
    assert server.client().get("/static/app.js").status_code == 200
    assert server.client().get("/healthz").status_code == 200


def test_cors_is_off_by_default_and_allows_the_configured_origins(make_server: Any) -> None:
    closed = make_server()
    opened = make_server(settings=ServerSettings(cors_origins=["https://ui.example"]))
    preflight = {
        "Origin": "https://ui.example",
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type",
    }

    refused = closed.client().options("/threads/t/runs", headers=preflight)
    allowed = opened.client().options("/threads/t/runs", headers=preflight)
    other = opened.client().options(
        "/threads/t/runs", headers={**preflight, "Origin": "https://x.example"}
    )
    simple = opened.client(Origin="https://ui.example").get("/threads")

    assert "access-control-allow-origin" not in refused.headers
    assert allowed.status_code == 200
    assert allowed.headers["access-control-allow-origin"] == "https://ui.example"
    assert "authorization" in allowed.headers["access-control-allow-headers"].lower()
    assert "access-control-allow-origin" not in other.headers
    assert simple.headers["access-control-allow-origin"] == "https://ui.example"


def test_requests_are_bounded(make_server: Any) -> None:
    server = make_server(settings=ServerSettings(max_body_bytes=2_000, max_query_chars=50))
    client = server.client()

    body = client.post("/threads/t/runs", json={"query": "x" * 3_000})
    chunked = client.post(
        "/threads/t/runs",
        content=iter([b'{"query": "', b"y" * 2_500, b'"}']),  # no Content-Length
        headers={"Content-Type": "application/json"},
    )
    query = client.post("/threads/t/runs", json={"query": "q" * 51})
    url = client.get("/threads", params={"limit": "1" * 9_000})
    plan = client.post("/plans", json={"query": "q" * 51})

    assert body.status_code == 413 and body.json()["code"] == "CONTENT_TOO_LARGE"
    assert chunked.status_code == 413
    assert query.status_code == 422 and query.json()["code"] == "QUERY_TOO_LONG"
    assert "51 characters" in query.json()["detail"]
    assert url.status_code == 414 and url.json()["code"] == "URI_TOO_LONG"
    assert plan.status_code == 422
    assert client.post("/threads/t/runs?wait=true", json={"query": "q" * 50}).status_code == 200


@pytest.mark.parametrize(
    "thread_id", ["has space", "-leading-dash", "x" * 129, "semi;colon", "new%0Aline", "über"]
)
def test_thread_ids_are_validated(server: Server, thread_id: str) -> None:
    response = server.client().post(f"/threads/{thread_id}/runs", json={"query": "hi"})

    assert response.status_code == 422
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["errors"][0]["loc"] == ["path", "thread_id"]


def test_bad_requests_are_problems_that_never_echo_input(server: Server) -> None:
    client = server.client()

    not_json = client.post(
        "/threads/t/runs", content="query=hi", headers={"Content-Type": "text/plain"}
    )
    unknown_field = client.post("/threads/t/runs", json={"query": "hi", "llm_params": {"x": 1}})
    no_route = client.get("/nothing/here")
    wrong_method = client.put("/threads")

    assert not_json.status_code == 422
    assert unknown_field.status_code == 422
    assert "llm_params" in unknown_field.json()["detail"]
    assert no_route.status_code == 404 and no_route.json()["code"] == "NOT_FOUND"
    assert wrong_method.status_code == 405
    for response in (not_json, unknown_field, no_route, wrong_method):
        assert response.headers["content-type"] == "application/problem+json"
        assert set(response.json()) >= {"type", "title", "status", "detail", "code", "instance"}
        assert "query=hi" not in response.text


def test_an_unexpected_failure_is_a_500_problem_without_a_stack_trace(
    server: Server, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("database password is hunter2")

    monkeypatch.setattr(server.instance.storage.inner, "search_threads", broken)

    response = server.client().get("/threads")

    assert response.status_code == 500
    problem = response.json()
    assert problem["code"] == "INTERNAL_ERROR"
    assert "incident" in problem["detail"]
    assert "hunter2" not in response.text and "Traceback" not in response.text
    assert "RuntimeError" not in response.text
    incident = problem["detail"].split()[-1]
    assert incident in caplog.text and "hunter2" in caplog.text  # the log has the details


def test_without_keys_only_loopback_host_names_are_answered(server: Server) -> None:
    rebound = server.client(Host="evil.example:8000").get("/threads")
    local = server.client(Host="localhost:8000").get("/threads")

    assert rebound.status_code == 400 and rebound.json()["code"] == "INVALID_HOST"
    assert local.status_code == 200
