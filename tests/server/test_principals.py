"""Users on one server: keys name a user, a thread belongs to the user who created it, and
another user's thread is a 404 at every door (REST, SSE, AG-UI, the OpenAI endpoint);
an admin key sees every thread. Thread metadata, search and pages."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from postgres_databases import fresh_database

from art.server import Principal, ServerSettings
from art.server.app import create_app
from art.testing import ScriptedModel
from art.tools import AskHuman, Calculator

from .conftest import APPROVAL_PLAN, Server, read_sse
from .test_agui import run_input

# Each test runs a real server (uvicorn on 127.0.0.1): `pytest --slow` runs them.
pytestmark = pytest.mark.slow

ALICE = "alice-key-0123456789abcdef"
BOB = "bob-key-0123456789abcdef00"
ADMIN = "admin-key-0123456789abcdef"


def settings() -> ServerSettings:
    return ServerSettings(
        api_keys=[ADMIN], user_keys={ALICE: "alice", BOB: "bob"}, poll_interval_s=0.1
    )


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def run(server: Server, key: str, thread_id: str, query: str = "What is 17 * 23?") -> Any:
    response = server.client(**auth(key)).post(
        f"/threads/{thread_id}/runs", params={"wait": "true"}, json={"query": query}
    )
    return response


@pytest.mark.parametrize("storage", ["memory", "sqlite", "postgres"])
def test_a_user_sees_only_their_own_threads_through_rest_and_sse(
    make_server: Any, storage: str, tmp_path: Any, request: pytest.FixtureRequest
) -> None:
    if storage == "postgres":
        database = fresh_database(request.getfixturevalue("postgres_server"))
        url = database.__enter__()
        request.addfinalizer(lambda: database.__exit__(None, None, None))
    else:
        url = "memory://" if storage == "memory" else f"sqlite:///{tmp_path}/art.db"
    server = make_server(settings=settings(), storage=url)
    alice, bob, admin = (server.client(**auth(k)) for k in (ALICE, BOB, ADMIN))

    assert run(server, ALICE, "t-alice").status_code == 200
    assert run(server, BOB, "t-bob").status_code == 200
    run_id = alice.get("/threads/t-alice").json()["runs"][0]["runId"]

    assert [t["threadId"] for t in alice.get("/threads").json()["threads"]] == ["t-alice"]
    assert [t["threadId"] for t in bob.get("/threads").json()["threads"]] == ["t-bob"]
    assert {t["threadId"] for t in admin.get("/threads").json()["threads"]} == {
        "t-alice",
        "t-bob",
    }
    by_owner = admin.get("/threads", params={"user": "alice"}).json()["threads"]
    assert [(t["threadId"], t["owner"]) for t in by_owner] == [("t-alice", "alice")]
    # Bob asking for Alice's user gets his own threads: the filter is an admin's.
    assert [
        t["threadId"] for t in bob.get("/threads", params={"user": "alice"}).json()["threads"]
    ] == ["t-bob"]

    # Every route of Alice's thread is a 404 to Bob, exactly as a thread that does not exist.
    routes = [
        ("GET", "/threads/t-alice"),
        ("GET", "/threads/t-alice/runs"),
        ("GET", f"/threads/t-alice/runs/{run_id}"),
        ("GET", f"/threads/t-alice/runs/{run_id}/wait?timeout_s=1"),
        ("POST", f"/threads/t-alice/runs/{run_id}/cancel"),
        ("GET", f"/threads/t-alice/runs/{run_id}/events"),
        ("GET", "/threads/t-alice/events"),
        ("GET", "/threads/t-alice/suspensions"),
        ("POST", "/threads/t-alice/suspensions/abc/decision"),
        ("PATCH", "/threads/t-alice"),
        ("DELETE", "/threads/t-alice"),
    ]
    bodies = {"decision": {"approved": True}, "PATCH": {"metadata": {"a": 1}}}
    for method, path in routes:
        body = bodies["decision"] if path.endswith("decision") else bodies.get(method)
        answer = bob.request(method, path, json=body)
        assert answer.status_code == 404, (method, path, answer.text)
        assert answer.json()["detail"] == "no thread 't-alice'"
    # A run Bob starts on Alice's thread id is refused the same way, and changes nothing.
    assert run(server, BOB, "t-alice").status_code == 404
    assert len(alice.get("/threads/t-alice").json()["runs"]) == 1
    # Alice reads her thread's event stream; the admin reads every thread.
    with alice.stream("GET", f"/threads/t-alice/runs/{run_id}/events") as stream:
        names = [e.event for e in read_sse(stream)]
    assert names[0] == "session:start" and names[-1] == "session:end"
    assert admin.get("/threads/t-bob").json()["owner"] == "bob"
    assert admin.delete("/threads/t-bob").status_code == 204
    assert alice.delete("/threads/t-alice").status_code == 204


def test_a_thread_made_outside_the_server_is_only_an_admins(make_server: Any) -> None:
    server = make_server(settings=settings())
    server.instance.process("What is 17 * 23?", "t-local")
    alice, admin = server.client(**auth(ALICE)), server.client(**auth(ADMIN))

    assert alice.get("/threads/t-local").status_code == 404
    assert run(server, ALICE, "t-local").status_code == 404
    assert admin.get("/threads/t-local").json()["owner"] is None
    assert alice.get("/threads").json()["threads"] == []


def test_a_user_cannot_lift_the_user_id_of_their_runs(make_server: Any) -> None:
    server = make_server(settings=settings())
    answer = server.client(**auth(ALICE)).post(
        "/threads/t-who/runs",
        params={"wait": "true"},
        json={"query": "What is 17 * 23?", "options": {"userId": "bob"}},
    )
    assert answer.status_code == 200
    runs = server.client(**auth(ADMIN)).get("/threads/t-who/runs").json()
    assert [r["userId"] for r in runs] == ["alice"]


def test_ag_ui_and_the_openai_endpoint_keep_threads_to_their_owner(make_server: Any) -> None:
    server = make_server(APPROVAL_PLAN, settings=settings())
    alice, bob = server.client(**auth(ALICE)), server.client(**auth(BOB))

    with alice.stream("POST", "/ag-ui", json=run_input("t-agui", "17 * 23 + 12?")) as stream:
        assert stream.status_code == 200
        events = [e.data for e in read_sse(stream)]
    assert events[-1]["type"] == "RUN_FINISHED"  # suspended for approval: an interrupt
    interrupt = events[-1]["outcome"]["interrupts"][0]["id"]

    resume = {"resume": [{"interruptId": interrupt, "status": "resolved", "payload": True}]}
    refused = bob.post("/ag-ui", json=run_input("t-agui", **_snake(resume)))
    assert refused.status_code == 404
    new_run = bob.post("/ag-ui", json=run_input("t-agui", "hello"))
    assert new_run.status_code == 404
    suspensions = alice.get("/threads/t-agui/suspensions").json()["suspensions"]
    assert len(suspensions) == 1 and suspensions[0]["decision"] is None

    sdk = {
        key: openai.OpenAI(
            base_url=f"{server.url}/v1",
            api_key=key,
            default_headers={"X-Art-Thread-Id": "t-chat"},
            max_retries=0,
        )
        for key in (ALICE, BOB)
    }
    server.model.planning = None  # answered directly: no tool steps
    completion = sdk[ALICE].chat.completions.create(
        model="art", messages=[{"role": "user", "content": "What is 17 * 23?"}]
    )
    assert completion.choices[0].message.content
    with pytest.raises(openai.NotFoundError):
        sdk[BOB].chat.completions.create(
            model="art", messages=[{"role": "user", "content": "What is 17 * 23?"}]
        )
    owners = {
        t["threadId"]: t["owner"]
        for t in server.client(**auth(ADMIN)).get("/threads").json()["threads"]
    }
    assert owners == {"t-agui": "alice", "t-chat": "alice"}


def _snake(fields: dict[str, Any]) -> dict[str, Any]:
    return {
        "resume": [
            {"interrupt_id": e["interruptId"], "status": e["status"], "payload": e["payload"]}
            for e in fields["resume"]
        ]
    }


def test_thread_metadata_is_set_merged_and_searched_a_page_at_a_time(
    make_server: Any,
) -> None:
    server = make_server(settings=settings())
    alice = server.client(**auth(ALICE))

    made = alice.post("/threads", json={"threadId": "t-m1", "metadata": {"project": "apollo"}})
    assert made.status_code == 201
    assert (made.json()["owner"], made.json()["metadata"]) == ("alice", {"project": "apollo"})
    assert alice.post("/threads", json={"threadId": "t-m1"}).status_code == 409
    assert server.client(**auth(BOB)).post("/threads", json={"threadId": "t-m1"}).status_code == 409
    generated = alice.post("/threads", json={"metadata": {"project": "gemini"}}).json()
    for n in range(3):
        alice.post("/threads", json={"threadId": f"t-p{n}", "metadata": {"n": n}})

    patched = alice.patch("/threads/t-m1", json={"metadata": {"stage": 2, "project": None}})
    assert patched.json()["metadata"] == {"stage": 2}
    assert alice.get("/threads/t-m1").json()["metadata"] == {"stage": 2}

    def ids(**params: Any) -> list[str]:
        return [t["threadId"] for t in alice.get("/threads", params=params).json()["threads"]]

    assert ids(metadata='{"project": "gemini"}') == [generated["threadId"]]
    assert ids(metadata='{"stage": 2}') == ["t-m1"]
    pages, cursor, seen = 0, None, []
    while True:
        page = alice.get("/threads", params={"limit": 2, **({"cursor": cursor} if cursor else {})})
        body = page.json()
        seen += [t["threadId"] for t in body["threads"]]
        pages += 1
        cursor = body["nextCursor"]
        if cursor is None:
            break
    assert (pages, len(seen), len(set(seen))) == (3, 5, 5)
    assert seen[0] == "t-m1"  # the latest change first

    bad = [
        ("GET", "/threads", {"params": {"metadata": "[1]"}}),
        ("GET", "/threads", {"params": {"metadata": '{"a": {"b": 1}}'}}),
        ("GET", "/threads", {"params": {"cursor": "nope"}}),
        ("POST", "/threads", {"content": '{"metadata": {"x": NaN}}'}),
        ("POST", "/threads", {"json": {"metadata": {"x": "y" * 20_000}}}),
        ("POST", "/threads", {"json": {"threadId": "bad id"}}),
    ]
    for method, path, kwargs in bad:
        if "content" in kwargs:
            kwargs["headers"] = {"Content-Type": "application/json"}
        answer = alice.request(method, path, **kwargs)
        assert answer.status_code == 422, (path, kwargs, answer.text)


def test_an_applications_authenticate_hook_names_the_principal() -> None:
    from art.server import serve_in_thread

    def authenticate(request: Any) -> Principal | None:
        user = request.headers.get("X-User")
        if user == "root":
            return Principal(admin=True)
        return Principal(user=user) if user else None

    import httpx

    with ScriptedModel(planning=None, synthesis="Hello.") as model:
        app = create_app(
            model=model.model,
            tools=[Calculator(), AskHuman()],
            storage="memory://",
            authenticate=authenticate,
            settings=ServerSettings(poll_interval_s=0.1),
        )
        with serve_in_thread(app) as url, httpx.Client(base_url=url, timeout=30) as client:
            assert client.get("/threads").status_code == 401
            ran = client.post(
                "/threads/t-hook/runs",
                params={"wait": "true"},
                json={"query": "hi"},
                headers={"X-User": "carol"},
            )
            assert ran.status_code == 200
            assert client.get("/threads/t-hook", headers={"X-User": "dave"}).status_code == 404
            mine = client.get("/threads/t-hook", headers={"X-User": "carol"}).json()
            assert mine["owner"] == "carol"
            assert client.get("/threads/t-hook", headers={"X-User": "root"}).status_code == 200
