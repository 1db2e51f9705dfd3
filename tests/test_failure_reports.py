"""Every failure a run meets -- a tool, an LLM call, storage, a hook, a callback, synthesis
-- is reported once: one `error` event and one `on_error` call, each with the code, the
phase, the step, a suggestion and whether the run goes on (seed 000's onError, seed
004's ErrorHookData)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

import pytest

import art
from art.adapters.memory import MemoryStorage
from art.errors import StorageError
from art.testing import Answer, FakeProvider, HTTPStatus

ERROR_FIELDS = {"source", "code", "message", "phase", "step_id", "event_type", "recoverable"}


class Tool(art.IToolExecutor):
    """A tool whose behaviour the case picks by name."""

    def __init__(self, name: str, behaviour) -> None:
        self.schema = art.ToolSchema(name=name, description=f"the {name} tool")
        self._behaviour = behaviour

    async def execute(self, input: dict[str, Any], context: art.ExecutionContext) -> Any:
        return await self._behaviour(self, context)


async def _ok(tool, context):
    return tool.ok(context, "fine")


async def _error_result(tool, context):
    return art.ToolResult(
        call_id=context.call_id, tool_name=tool.schema.name, status="error", error="disk on fire"
    )


async def _os_error(tool, context):
    raise OSError("no such file: /data/x")


async def _slow(tool, context):
    await asyncio.sleep(30)


async def _bare_value(tool, context):
    return 42  # not a ToolResult: a contract violation


TOOLS = [
    Tool("ok", _ok),
    Tool("error_result", _error_result),
    Tool("os_error", _os_error),
    Tool("slow", _slow),
    Tool("bare_value", _bare_value),
]


class StoreFailsOnCompletedStep(MemoryStorage):
    async def save_step(self, run_id, record):
        if record.status == "completed":
            raise StorageError("the disk is full")
        await super().save_step(run_id, record)


@dataclass
class Case:
    """One kind of failure: what the run does, and the one report it must produce."""

    replies: list[Any]
    tool: str | None = None
    expected: dict[str, Any] = field(default_factory=dict)
    status: str = "partial"
    execution: dict[str, Any] = field(default_factory=dict)
    storage: Any = "memory://"
    hook: str | None = None  # an event whose hook raises
    callback: str | None = None  # a callback that raises


def plan(tool: str) -> Answer:
    return Answer(json.dumps({"title": "t", "steps": [{"id": "s1", "tool": tool}]}))


CASES = {
    "tool error result": Case(
        [plan("error_result"), Answer("sorry")],
        expected={"source": "tool", "code": "UNKNOWN", "phase": "execute", "step_id": "s1"},
    ),
    "tool raises OSError": Case(
        [plan("os_error"), Answer("sorry")],
        expected={"source": "tool", "code": "IO_ERROR", "phase": "execute", "step_id": "s1"},
    ),
    "tool times out": Case(
        [plan("slow"), Answer("sorry")],
        execution={"step_timeout_s": 0.05},
        expected={"source": "tool", "code": "TIMEOUT", "phase": "execute", "step_id": "s1"},
    ),
    "tool breaks the contract": Case(
        [plan("bare_value"), Answer("sorry")],
        expected={"source": "tool", "code": "CONTRACT_VIOLATION", "step_id": "s1"},
    ),
    "tool fails the run": Case(
        [plan("error_result")],
        execution={"on_step_failure": "fail"},
        status="error",
        expected={"source": "tool", "step_id": "s1", "recoverable": False},
    ),
    "planning call refused": Case(
        [HTTPStatus(401, message="bad key")],
        status="error",
        expected={
            "source": "llm",
            "code": "AUTHENTICATION_ERROR",
            "phase": "planning",
            "step_id": None,
            "recoverable": False,
        },
    ),
    "LLM call retried": Case(
        [HTTPStatus(503), plan("ok"), Answer("fine")],
        execution={"llm_max_retries": 1},
        status="success",
        expected={"source": "llm", "code": "PROVIDER_ERROR", "phase": "planning"},
    ),
    "synthesis call fails": Case(
        [plan("ok"), HTTPStatus(401, message="bad key")],
        status="error",
        expected={
            "source": "llm",
            "code": "AUTHENTICATION_ERROR",
            "phase": "synthesis",
            "recoverable": False,
        },
    ),
    "storage fails": Case(
        [plan("ok"), Answer("fine")],
        storage=StoreFailsOnCompletedStep(),
        status="raises",  # nowhere to record a response: process raises the StorageError
        expected={"source": "storage", "code": "STORAGE_ERROR", "recoverable": False},
    ),
    "hook raises": Case(
        [plan("ok"), Answer("fine")],
        hook="plan:created",
        status="success",
        expected={"source": "hook", "code": "HOOK_FAILED", "event_type": "plan:created"},
    ),
    "callback raises": Case(
        [plan("ok"), Answer("fine")],
        callback="on_tool_start",
        status="success",
        expected={"source": "callbacks", "code": "CALLBACK_FAILED", "event_type": "tool:update"},
    ),
}


@pytest.mark.parametrize("kind", list(CASES))
async def test_each_failure_is_reported_once(kind, fake_provider: FakeProvider, monkeypatch):
    case = CASES[kind]
    monkeypatch.setattr("art.engine.run.STEP_SAVE_RETRY_S", 0.05)  # storage retries briefly
    fake_provider.queue(*case.replies)
    on_error: list[dict[str, Any]] = []

    class Callbacks(art.AgentCallbacks):
        def on_error(self, ctx, error):
            on_error.append(error)

    if case.callback is not None:

        def broken(self, *args):
            raise RuntimeError("the callback broke")

        setattr(Callbacks, case.callback, broken)

    async with art.create_art_instance(
        model="openai/fake",
        tools=TOOLS,
        storage=case.storage,
        callbacks=Callbacks(),
        llm_params={"api_base": fake_provider.openai_base, "api_key": "k"},
        execution_config={"retry_backoff_s": 0, "step_max_retries": 0, **case.execution},
    ) as inst:
        events: list[dict[str, Any]] = []
        inst.on("error", lambda data, context: events.append(data))
        if case.hook is not None:

            def raising(data, context):
                raise RuntimeError("the hook broke")

            inst.on(case.hook, raising)
        if case.status == "raises":
            with pytest.raises(StorageError):
                await inst.aprocess("go", "t")
        else:
            response = await inst.aprocess("go", "t")
            assert response.metadata.status == case.status, response.metadata.error
    assert len(events) == 1, events
    assert len(on_error) == 1, on_error
    [event] = events
    assert set(event) >= ERROR_FIELDS
    assert event["message"]
    assert event["suggestion"]
    expected = {"recoverable": case.status not in ("error", "raises"), **case.expected}
    assert {key: event[key] for key in expected} == expected
    assert {key: on_error[0][key] for key in expected} == expected
