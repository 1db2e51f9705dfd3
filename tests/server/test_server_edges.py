"""The server's edges: errors that never carry a traceback, OpenAI-shaped errors for the
OpenAI SDK, `art serve --model file.py:ATTR`, CORS for the documented headers, 404s for
unknown threads, empty queries, `updatedAt`, a suspension decided twice, which routes
are public, and the URL printed only once the server accepts connections."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from art.server import ServerSettings, create_app, serve_in_thread
from art.server.security import PUBLIC_ROUTES
from art.testing.provider import FakeProvider, Malformed
from art.tools import Calculator

from .conftest import APPROVAL_PLAN, Server

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
KEY = "k-" + "s3cret" * 4
_LEAKS = ("Traceback", 'File "', "site-packages", ".py")


def sdk(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)


def test_a_provider_error_litellm_does_not_map_reaches_no_client_with_a_traceback() -> None:
    # A reply litellm fails to parse inside its own code: it appends the traceback.
    with FakeProvider(default=Malformed('{"content": 5}')) as provider:
        app = create_app(
            model="anthropic/claude-x",
            llm_params={"api_base": provider.url, "api_key": "sk-test"},
            execution_config={"llm_max_retries": 0},
            tools=[Calculator()],
            storage="memory://",
        )
        with serve_in_thread(app) as url, httpx.Client(base_url=url, timeout=60) as client:
            waited = client.post("/threads/t-leak/runs?wait=true", json={"query": "hi"}).json()
            with pytest.raises(openai.APIStatusError) as plain:
                sdk(url).chat.completions.create(
                    model="art", messages=[{"role": "user", "content": "hi"}]
                )
            with pytest.raises(openai.APIError) as streamed:
                list(
                    sdk(url).chat.completions.create(
                        model="art", messages=[{"role": "user", "content": "hi"}], stream=True
                    )
                )

    messages = [
        waited["metadata"]["error"]["message"],
        plain.value.message,
        plain.value.response.text,
        streamed.value.message,
    ]
    assert "'int' object is not iterable" in messages[0]  # what went wrong stays
    for message in messages:
        for leak in _LEAKS:
            assert leak not in message, (leak, message)


def test_openai_errors_have_openai_s_shape(make_server: Any) -> None:
    server = make_server({"steps": [{"id": "s1", "tool": "no_such_tool", "args": {}}]})

    with pytest.raises(openai.APIStatusError) as failed:
        sdk(server.url).chat.completions.create(
            model="art", messages=[{"role": "user", "content": "x"}]
        )
    with pytest.raises(openai.UnprocessableEntityError) as empty:
        sdk(server.url).chat.completions.create(
            model="art", messages=[{"role": "user", "content": "  \n"}]
        )

    assert failed.value.status_code == 502
    assert failed.value.code == "PLAN_INVALID" and failed.value.type == "server_error"
    assert failed.value.response.json()["error"]["message"].startswith("the run failed")
    assert empty.value.code == "QUERY_EMPTY" and empty.value.type == "invalid_request_error"


def start_serve(tmp_path: Path, *args: str, before: str = "") -> tuple[subprocess.Popen[str], str]:
    """`art serve` in a process of its own (after running `before`), and the URL it printed
    (read at once: the server is expected to accept connections by then)."""
    code = f"{before}\nfrom art.cli.app import main\nmain()"
    process = subprocess.Popen(
        [sys.executable, "-c", code, "serve", "--port", "0", "--log-level", "warning", *args],
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    assert process.stderr is not None
    printed = ""
    while not (found := re.search(r"art serve: (http://\S+?)/ ", printed)):
        line = process.stderr.readline()
        assert line, f"art serve ended: {printed}"
        printed += line
    return process, found.group(1)


def stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.terminate()
        process.wait(30)


def test_serve_resolves_model_and_tools_specs_like_run(tmp_path: Path) -> None:
    agent = tmp_path / "agent.py"
    agent.write_text(
        "from art.testing import ScriptedModel\n"
        "model = ScriptedModel(planning={'steps': [{'id': 's1', 'tool': 'calculator',"
        " 'args': {'expression': '6 * 7'}}]}, synthesis='It is 42.')\n"
    )
    process, url = start_serve(tmp_path, "--model", f"{agent}:model", "--storage", "memory://")
    try:
        with httpx.Client(base_url=url, timeout=60) as client:
            done = client.post("/threads/t-file/runs?wait=true", json={"query": "6*7?"}).json()
    finally:
        stop(process)

    assert done["metadata"]["status"] == "success", done["metadata"].get("error")
    assert done["response"]["content"] == "It is 42."


def test_serve_prints_its_url_once_it_accepts_connections(tmp_path: Path) -> None:
    # Storage that takes a second to open: the server starts that long after binding.
    slow = (
        "import asyncio\n"
        "from art.server.journal import JournaledStorage\n"
        "opening = JournaledStorage.open\n"
        "async def slow_open(self):\n"
        "    await asyncio.sleep(1.0)\n"
        "    await opening(self)\n"
        "JournaledStorage.open = slow_open\n"
    )
    process, url = start_serve(tmp_path, "--storage", "memory://", before=slow)
    try:
        health = httpx.get(f"{url}/healthz", timeout=10)  # at once, no retry
    finally:
        stop(process)

    assert health.json() == {"status": "ok"}


def test_on_sigterm_open_streams_end_with_a_clean_close(tmp_path: Path) -> None:
    process, url = start_serve(tmp_path, "--storage", "memory://", "--grace", "2")
    ended: dict[str, Any] = {}

    def read(path: str) -> None:
        try:
            with httpx.stream("GET", f"{url}{path}", timeout=30) as response:
                ended[path] = ("closed", response.status_code, b"".join(response.iter_raw()))
        except httpx.HTTPError as exc:
            ended[path] = ("broken", repr(exc))

    paths = ["/threads/t-a/events", "/threads/t-b/events"]
    readers = [threading.Thread(target=read, args=(path,)) for path in paths]
    for reader in readers:
        reader.start()
    time.sleep(1.0)  # both streams open
    process.send_signal(signal.SIGTERM)
    process.wait(30)
    for reader in readers:
        reader.join(10)

    assert ended == {path: ("closed", 200, b"") for path in paths}


def test_cors_allows_the_thread_header_and_the_openai_sdk_s_headers(make_server: Any) -> None:
    server = make_server(settings=ServerSettings(cors_origins=["https://ui.example"]))
    requested = "authorization,content-type,x-art-thread-id,x-stainless-os,x-stainless-lang"
    preflight = {
        "Origin": "https://ui.example",
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": requested,
    }

    allowed = server.client().options("/v1/chat/completions", headers=preflight)
    answered = server.client(Origin="https://ui.example", **{"X-Art-Thread-Id": "t-cors"}).post(
        "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]}
    )

    assert allowed.status_code == 200, allowed.text
    assert "x-art-thread-id" in allowed.headers["access-control-allow-headers"].lower()
    assert answered.headers["x-art-thread-id"] == "t-cors"
    exposed = answered.headers["access-control-expose-headers"].lower()
    assert "x-art-thread-id" in exposed


def test_an_unknown_thread_is_a_404_everywhere_and_an_empty_query_a_422(server: Server) -> None:
    client = server.client()

    for path in ("/threads/t-none", "/threads/t-none/runs", "/threads/t-none/suspensions"):
        assert client.get(path).status_code == 404, path
    for query in ("", "   ", "\n\t"):
        refused = client.post("/threads/t-empty/runs", json={"query": query})
        assert refused.status_code == 422 and refused.json()["code"] in (
            "QUERY_EMPTY",
            "VALIDATION_ERROR",
        )
    assert client.get("/threads/t-empty/runs").status_code == 404  # no run was started


def test_a_run_s_updated_at_moves_as_it_changes(make_server: Any) -> None:
    server = make_server(APPROVAL_PLAN)
    client = server.client()

    started = client.post("/threads/t-upd/runs?wait=true", json={"query": "go"}).json()
    [run] = client.get("/threads/t-upd/runs").json()

    assert started["metadata"]["status"] == "suspended"
    assert run["updatedAt"] > run["createdAt"]


def test_a_suspension_decided_twice_is_already_decided_not_a_busy_thread(
    make_server: Any,
) -> None:
    server = make_server(
        {
            "steps": [
                {"id": "s1", "tool": "ask_human", "args": {"question": "go?"}},
                {"id": "s2", "tool": "gate", "args": {}, "dependsOn": ["s1"]},
            ]
        }
    )
    client = server.client()
    client.post("/threads/t-twice/runs?wait=true", json={"query": "go"})
    [suspension] = client.get("/threads/t-twice/suspensions").json()["suspensions"]
    path = f"/threads/t-twice/suspensions/{suspension['suspensionId']}/decision"

    first = client.post(path, json={"approved": True})
    assert server.gate.entered.wait(10)  # the resumed run holds the thread
    second = client.post(path, json={"approved": False})
    server.gate.opened.set()

    assert first.status_code == 202
    assert second.status_code == 409
    assert second.json()["code"] == "SUSPENSION_ALREADY_DECIDED"


def test_with_keys_only_the_public_routes_answer_without_one(make_server: Any) -> None:
    server = make_server(settings=ServerSettings(api_keys=[KEY]))
    anonymous = server.client()
    keyed = server.client(Authorization=f"Bearer {KEY}")

    # Every route: the API's (from its OpenAPI document) and the app's own.
    routes = {
        (path, method.upper())
        for path, methods in keyed.get("/openapi.json").json()["paths"].items()
        for method in methods
    }
    for route in server.app.routes:
        if getattr(route, "path", None):
            routes |= {(route.path, m) for m in getattr(route, "methods", None) or {"GET"}}
    answered = set()
    for path, method in routes:
        if method == "HEAD":
            continue
        url = re.sub(r"\{[^}]+\}", "x1", path) + ("/app.js" if path == "/static" else "")
        if anonymous.request(method, url, json={}).status_code != 401:
            answered.add(path)

    assert answered == set(PUBLIC_ROUTES)
    assert anonymous.get("/docs").status_code in (401, 404)  # no Swagger UI from a CDN
    assert keyed.get("/openapi.json").json()["info"]["title"] == "art"
