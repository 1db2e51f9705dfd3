"""Fixtures for `art serve`: a real server (uvicorn on 127.0.0.1, in a thread) over an
engine played by a ScriptedModel, and helpers to read its event streams."""

from __future__ import annotations

import copy
import json
import os
import shutil
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from art.testing import ScriptedModel
from art.tooling.contract import ExecutionContext, IToolExecutor, ToolResult, ToolSchema
from art.tools import AskHuman, Calculator, Show

APPROVAL_PLAN: dict[str, Any] = {
    "title": "Multiply, show, ask, add",
    "steps": [
        {"id": "s1", "tool": "calculator", "args": {"expression": "17 * 23"}},
        {
            "id": "s2",
            "tool": "show",
            "args": {
                "title": "Product",
                "table": {"columns": ["what", "value"], "rows": [["17 x 23", "{{s1.output}}"]]},
            },
        },
        {"id": "s3", "tool": "ask_human", "args": {"question": "Add 12?"}, "dependsOn": ["s1"]},
        {
            "id": "s4",
            "tool": "calculator",
            "args": {"expression": "{{s1.output}} + 12"},
            "dependsOn": ["s3"],
        },
    ],
}
SUM_PLAN: dict[str, Any] = {
    "title": "Two sums",
    "steps": [
        {"id": "s1", "tool": "calculator", "args": {"expression": "17 * 23"}},
        {"id": "s2", "tool": "calculator", "args": {"expression": "{{s1.output}} + 12"}},
    ],
}


class Gate(IToolExecutor):
    """A tool that waits until the test opens it (a run the test can catch mid-way)."""

    schema = ToolSchema(
        name="gate",
        description="Waits for the test.",
        input_schema={"type": "object", "properties": {"name": {"type": "string"}}},
    )

    def __init__(self) -> None:
        self.opened = threading.Event()
        self.entered = threading.Event()
        self.calls = 0

    def execute(self, input: dict[str, Any], context: ExecutionContext) -> ToolResult:
        self.calls += 1
        self.entered.set()
        context.progress("waiting at the gate", {"name": input.get("name")})
        while not self.opened.wait(0.02):
            if context.cancelled:
                return ToolResult(
                    call_id=context.call_id, tool_name="gate", status="error", error="cancelled"
                )
        return ToolResult(
            call_id=context.call_id, tool_name="gate", status="success", output="open"
        )


GATE_PLAN: dict[str, Any] = {
    "title": "Through the gate",
    "steps": [
        {"id": "s1", "tool": "calculator", "args": {"expression": "2 + 2"}},
        {"id": "s2", "tool": "gate", "args": {"name": "g"}, "dependsOn": ["s1"]},
        {"id": "s3", "tool": "calculator", "args": {"expression": "{{s1.output}} * 10"}},
    ],
}


@dataclass
class Server:
    """A running server: its base URL, engine, model and tools."""

    url: str
    app: Any
    model: ScriptedModel
    gate: Gate
    clients: list[httpx.Client] = field(default_factory=list)

    @property
    def instance(self) -> Any:
        return self.app.state.context.instance

    def client(self, **headers: str) -> httpx.Client:
        client = httpx.Client(base_url=self.url, timeout=30, headers=headers)
        self.clients.append(client)
        return client


@pytest.fixture
def make_server(scripted_model: Callable[..., ScriptedModel]) -> Iterator[Callable[..., Server]]:
    """Starts servers (`make_server(planning=..., synthesis=..., settings=...)`); all are
    stopped after the test."""
    from art.server import ServerSettings, create_app, serve_in_thread

    stack: list[Any] = []

    def make(
        planning: Any = None,
        synthesis: Any = "The answer is 403.",
        *,
        settings: ServerSettings | None = None,
        storage: str = "memory://",
        **model_options: Any,
    ) -> Server:
        model = scripted_model(
            planning=planning or SUM_PLAN,
            synthesis=synthesis,
            cost_per_token=(1e-6, 2e-6),
            **model_options,
        )
        gate = Gate()
        app = create_app(
            model=model.model,
            tools=[Calculator(), Show(), AskHuman(), gate],
            storage=storage,
            settings=settings or ServerSettings(poll_interval_s=0.1),
        )
        running = serve_in_thread(app)
        url = running.__enter__()
        server = Server(url, app, model, gate)
        stack.append((running, server))
        return server

    yield make
    for running, server in reversed(stack):
        server.gate.opened.set()
        for client in server.clients:
            client.close()
        running.__exit__(None, None, None)


@pytest.fixture
def server(make_server: Callable[..., Server]) -> Server:
    return make_server()


@dataclass
class SseEvent:
    id: str | None
    event: str | None
    data: Any


class SseReader:
    """Reads the events of an SSE response (data parsed as JSON when it is), in parts."""

    def __init__(self, response: httpx.Response) -> None:
        self._lines = response.iter_lines()

    def read(
        self, *, until: Callable[[SseEvent], bool] | None = None, limit: int | None = None
    ) -> list[SseEvent]:
        """Events until the stream ends, `until(event)` is true, or `limit` were read."""
        events: list[SseEvent] = []
        current: dict[str, Any] = {"id": None, "event": None, "data": []}
        for line in self._lines:
            if line == "":
                if current["data"]:
                    text = "\n".join(current["data"])
                    try:
                        data = json.loads(text)
                    except ValueError:
                        data = text
                    event = SseEvent(current["id"], current["event"], data)
                    events.append(event)
                    if (until is not None and until(event)) or (limit and len(events) >= limit):
                        return events
                current = {"id": None, "event": None, "data": []}
            elif not line.startswith(":"):
                name, _, value = line.partition(":")
                value = value.removeprefix(" ")
                if name == "data":
                    current["data"].append(value)
                elif name in ("id", "event"):
                    current[name] = value
        return events


def read_sse(
    response: httpx.Response,
    *,
    until: Callable[[SseEvent], bool] | None = None,
    limit: int | None = None,
) -> list[SseEvent]:
    """The events of an SSE response, read once (see SseReader)."""
    return SseReader(response).read(until=until, limit=limit)


# -- AG-UI ---------------------------------------------------------------------------------


def _apply(state: dict[str, Any], patch: list[Any]) -> None:
    for op in patch:
        *parents, last = [t.replace("~1", "/").replace("~0", "~") for t in op.path.split("/")[1:]]
        target: Any = state
        for token in parents:
            target = target[token]
        assert op.op in ("add", "replace"), op
        if isinstance(target, list):
            target.append(op.value) if last == "-" else target.insert(int(last), op.value)
        else:
            assert (last in target) == (op.op == "replace"), op
            target[last] = op.value


def check_agui_sequence(events: list[Any], body: dict[str, Any]) -> None:
    """The ordering rules an AG-UI client relies on."""
    types = [e.type.value for e in events]
    assert types[0] == "RUN_STARTED"
    assert events[0].thread_id == body["threadId"] and events[0].run_id == body["runId"]
    assert types[-1] in ("RUN_FINISHED", "RUN_ERROR")
    assert (
        types.count("RUN_STARTED") == 1
        and types.count("RUN_FINISHED") + types.count("RUN_ERROR") == 1
    )
    open_steps: set[str] = set()
    calls: dict[str, str] = {}
    message: str | None = None
    state: dict[str, Any] | None = None
    for event in events[1:-1]:
        kind = event.type.value
        if kind == "STEP_STARTED":
            assert event.step_name not in open_steps
            open_steps.add(event.step_name)
        elif kind == "STEP_FINISHED":
            open_steps.remove(event.step_name)
        elif kind == "TOOL_CALL_START":
            assert event.tool_call_id not in calls
            calls[event.tool_call_id] = "started"
        elif kind == "TOOL_CALL_ARGS":
            assert calls[event.tool_call_id] == "started"
        elif kind == "TOOL_CALL_END":
            assert calls[event.tool_call_id] == "started"
            calls[event.tool_call_id] = "ended"
        elif kind == "TOOL_CALL_RESULT":
            # A resume answers the call its interrupt named, which an earlier run started.
            earlier = "resume" in body and event.tool_call_id not in calls
            assert earlier or calls[event.tool_call_id] == "ended"
            calls[event.tool_call_id] = "answered"
        elif kind == "TEXT_MESSAGE_START":
            assert message is None
            message = event.message_id
        elif kind == "TEXT_MESSAGE_CONTENT":
            assert event.message_id == message and event.delta
        elif kind == "TEXT_MESSAGE_END":
            assert event.message_id == message
            message = None
        elif kind == "STATE_SNAPSHOT":
            if state is not None:
                assert event.snapshot["steps"].keys() >= state["steps"].keys()
            state = copy.deepcopy(event.snapshot)
        elif kind == "STATE_DELTA":
            assert state is not None, "a delta before any snapshot"
            _apply(state, event.delta)
    assert not open_steps and message is None
    if state is not None and types[-1] == "RUN_FINISHED":
        final = next(e for e in reversed(events) if e.type.value == "STATE_SNAPSHOT")
        assert {k: v for k, v in state.items() if k in ("steps", "display")} == {
            k: v for k, v in final.snapshot.items() if k in ("steps", "display")
        }


# -- the inspector's browser ------------------------------------------------------------

CHROMIUM = os.environ.get("ART_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One Chromium for the module."""
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        message = (
            f"Chromium not found at {CHROMIUM}: install the Debian package chromium "
            "(.ci/run does), or point ART_TEST_CHROMIUM at a Chromium binary"
        )
        if os.environ.get("CI"):
            pytest.fail(f"the inspector's browser tests need Chromium in CI. {message}")
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


class PageErrors(list[str]):
    """What the page reported as errors; a test may take out those it expects, or name
    them with `expect` (errors the browser reports after the test's last step)."""

    def __init__(self) -> None:
        super().__init__()
        self.expected: list[str] = []

    def expect(self, *parts: str) -> None:
        self.expected.extend(parts)

    def unexpected(self) -> list[str]:
        return [error for error in self if not any(part in error for part in self.expected)]


@pytest.fixture
def page_errors() -> PageErrors:
    return PageErrors()


@pytest.fixture
def page(browser: Any, page_errors: PageErrors) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.on("pageerror", lambda error: page_errors.append(str(error)))
    page.on("console", lambda m: page_errors.append(m.text) if m.type == "error" else None)
    page.set_default_timeout(20_000)
    yield page
    context.close()
    assert not page_errors.unexpected(), f"the page reported errors: {page_errors}"
