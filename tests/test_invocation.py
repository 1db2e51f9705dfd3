import asyncio
import contextlib
import contextvars
import datetime as dt
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import art.tooling.invocation
from art.errors import ConfigurationError
from art.tooling.contract import ExecutionContext, IToolExecutor, ToolResult, ToolSchema
from art.tooling.invocation import invoke_tool
from art.tooling.registry import ToolRegistry

SCHEMA = {
    "type": "object",
    "properties": {"n": {"type": "integer", "minimum": 0}, "label": {"type": "string"}},
    "required": ["n"],
}


def make_context(call_id: str = "call-1") -> ExecutionContext:
    return ExecutionContext(thread_id="t1", trace_id="0" * 32, call_id=call_id)


def make_tool(
    body: Callable[..., Any],
    *,
    name: str = "probe",
    asynchronous: bool = True,
    mode: str = "functional",
    input_schema: dict | None = None,
) -> IToolExecutor:
    """A tool whose execute calls `body(input, context)`, as `async def` or plain `def`."""
    schema = ToolSchema(
        name=name,
        description="A probe tool for tests.",
        input_schema=SCHEMA if input_schema is None else input_schema,
        execution_mode=mode,
    )
    if asynchronous:

        class AsyncTool(IToolExecutor):
            async def execute(self, input, context):
                return body(input, context)

        AsyncTool.schema = schema
        return AsyncTool()

    class SyncTool(IToolExecutor):
        def execute(self, input, context):
            return body(input, context)

    SyncTool.schema = schema
    return SyncTool()


def ok(input: dict, context: ExecutionContext) -> ToolResult:
    return ToolResult(
        call_id=context.call_id, tool_name="probe", status="success", output=input["n"] * 2
    )


def assert_error(result: ToolResult, code: str, *fragments: str) -> None:
    assert result.status == "error", result
    assert result.call_id == "call-1"
    assert result.tool_name == "probe"
    assert result.metadata["error_code"] == code, result
    assert isinstance(result.metadata["retryable"], bool)
    for fragment in fragments:
        assert fragment in result.error, result.error


# --- running ---------------------------------------------------------------------------


@pytest.mark.parametrize("asynchronous", [True, False])
async def test_successful_call(asynchronous):
    result = await invoke_tool(make_tool(ok, asynchronous=asynchronous), {"n": 21}, make_context())
    assert result == ToolResult(
        call_id="call-1", tool_name="probe", status="success", output=42, metadata={}
    )


async def test_sync_tool_runs_in_a_worker_thread_with_contextvars():
    request_id = contextvars.ContextVar("request_id")
    request_id.set("req-7")
    seen = {}

    def body(input, context):
        seen["thread"] = threading.current_thread()
        seen["request_id"] = request_id.get(None)
        return ok(input, context)

    result = await invoke_tool(make_tool(body, asynchronous=False), {"n": 1}, make_context())
    assert result.status == "success"
    assert seen["thread"] is not threading.main_thread()
    assert seen["request_id"] == "req-7"


async def test_a_plain_def_returning_a_coroutine_is_awaited():
    class Tool(IToolExecutor):
        schema = ToolSchema(name="probe", description="d", input_schema=SCHEMA)

        def execute(self, input, context):
            async def later():
                return ok(input, context)

            return later()

    result = await invoke_tool(Tool(), {"n": 2}, make_context())
    assert result.output == 4


async def test_tool_mutating_its_input_does_not_change_the_callers_args():
    def body(input, context):
        input["n"] = 99
        return ok(input, context)

    args = {"n": 1}
    await invoke_tool(make_tool(body), args, make_context())
    assert args == {"n": 1}


async def test_output_is_normalized_to_json_data():
    def body(input, context):
        return ToolResult(
            call_id=context.call_id,
            tool_name="probe",
            status="success",
            output={"pair": (1, 2), "when": dt.date(2024, 1, 2)},
            metadata={"tags": {"a"}},
        )

    result = await invoke_tool(make_tool(body), {"n": 1}, make_context())
    assert result.output == {"pair": [1, 2], "when": "2024-01-02"}
    assert result.metadata == {"tags": ["a"]}


async def test_each_call_is_logged_at_debug_level(caplog):
    with caplog.at_level(logging.DEBUG, logger="art.tooling.invocation"):
        await invoke_tool(make_tool(ok), {"n": 1}, make_context())
    (record,) = [
        r for r in caplog.records if isinstance(r.msg, dict) and r.msg["event"] == "tool call"
    ]
    entry = record.msg
    assert record.levelno == logging.DEBUG
    assert entry["tool"] == "probe"
    assert entry["status"] == "success"
    assert entry["duration_ms"] >= 0


# --- input validation ------------------------------------------------------------------


@pytest.mark.parametrize("asynchronous", [True, False])
async def test_invalid_input_never_reaches_the_tool(asynchronous):
    calls = []

    def body(input, context):
        calls.append(input)
        return ok(input, context)

    result = await invoke_tool(
        make_tool(body, asynchronous=asynchronous), {"n": -1, "label": 5}, make_context()
    )
    assert calls == []
    assert_error(result, "VALIDATION_ERROR", "invalid input for tool 'probe' (2 problems)")
    assert "$.label: 5 is not of type 'string'" in result.error
    assert "$.n: -1 is less than the minimum of 0" in result.error
    assert result.metadata["validation_errors"] == [
        "$.label: 5 is not of type 'string'",
        "$.n: -1 is less than the minimum of 0",
    ]
    assert result.retryable is False


async def test_non_object_arguments_are_refused():
    result = await invoke_tool(make_tool(ok), ["n", 1], make_context())
    assert_error(result, "VALIDATION_ERROR", "arguments must be a JSON object, got list")


async def test_registry_validator_is_used(monkeypatch):
    tool = make_tool(ok)
    registry = ToolRegistry([tool])

    def must_not_build(*args, **kwargs):
        raise AssertionError("the registry's cached validator should be used")

    monkeypatch.setattr(art.tooling.invocation, "build_validator", must_not_build)
    result = await invoke_tool(tool, {"n": "x"}, make_context(), registry=registry)
    assert_error(result, "VALIDATION_ERROR", "$.n: 'x' is not of type 'integer'")
    assert (await invoke_tool(tool, {"n": 1}, make_context(), registry=registry)).output == 2


async def test_broken_schema_or_no_schema_is_a_config_error():
    broken = make_tool(ok, input_schema={"type": "object", "properties": {"n": {"type": 1}}})
    result = await invoke_tool(broken, {"n": 1}, make_context())
    assert_error(result, "CONFIG_ERROR", "not valid JSON Schema")

    class NoSchema(IToolExecutor):
        def execute(self, input, context):
            raise AssertionError("never called")

    result = await invoke_tool(NoSchema(), {}, make_context())
    assert result.status == "error"
    assert result.tool_name == "NoSchema"
    assert result.metadata["error_code"] == "CONFIG_ERROR"


# --- timeouts and cancellation ---------------------------------------------------------


async def test_async_timeout():
    async def slow(input, context):
        await asyncio.sleep(10)

    class Slow(IToolExecutor):
        schema = ToolSchema(name="probe", description="d", input_schema=SCHEMA)

        async def execute(self, input, context):
            return await slow(input, context)

    context = make_context()
    started = time.perf_counter()
    result = await invoke_tool(Slow(), {"n": 1}, context, timeout_s=0.05)
    assert time.perf_counter() - started < 2
    assert_error(result, "TIMEOUT", "did not finish within 0.05 s")
    assert result.retryable is True
    assert result.metadata["timeout_s"] == 0.05
    assert context.cancelled
    assert "timed out" in context.cancellation.reason


async def test_sync_tool_honours_cancellation_after_timeout():
    observed = threading.Event()

    def body(input, context):
        # A well-behaved sync tool: do work in slices and stop when asked.
        while not context.cancellation.wait(0.01):
            pass
        observed.set()
        return ok(input, context)

    context = make_context()
    result = await invoke_tool(
        make_tool(body, asynchronous=False), {"n": 1}, context, timeout_s=0.05
    )
    assert_error(result, "TIMEOUT")
    assert await asyncio.to_thread(observed.wait, 5)


async def test_a_finished_call_is_not_affected_by_its_timeout():
    context = make_context()
    result = await invoke_tool(make_tool(ok), {"n": 1}, context, timeout_s=5)
    assert result.status == "success"
    assert not context.cancelled


async def test_calls_sharing_one_timer_each_get_their_own_timeout():
    timeouts = art.tooling.invocation.CallTimeouts(0.1)

    def sleeper(seconds: float) -> IToolExecutor:
        class Sleeper(IToolExecutor):
            schema = ToolSchema(name="probe", description="d", input_schema=SCHEMA)

            async def execute(self, input, context):
                await asyncio.sleep(seconds)
                return ok(input, context)

        return Sleeper()

    async def call(tool: IToolExecutor, delay: float = 0.0) -> tuple[ToolResult, float]:
        await asyncio.sleep(delay)
        started = time.perf_counter()
        result = await invoke_tool(tool, {"n": 1}, make_context(), timeouts=timeouts)
        return result, time.perf_counter() - started

    (fast, _), (slow, slow_s), (late, late_s) = await asyncio.gather(
        call(sleeper(0.0)), call(sleeper(10)), call(sleeper(10), delay=0.05)
    )
    assert fast.status == "success"
    assert_error(slow, "TIMEOUT", "did not finish within 0.1 s")
    assert_error(late, "TIMEOUT")
    # Each call had its own 0.1 s, counted from its own start (not the first call's).
    assert slow_s >= 0.1 and late_s >= 0.1
    timeouts.close()


async def test_a_tool_that_swallows_its_timeout_keeps_its_result_and_the_task_is_clean():
    class Stubborn(IToolExecutor):
        schema = ToolSchema(name="probe", description="d", input_schema=SCHEMA)

        async def execute(self, input, context):
            # Ignores the timeout's cancellation and answers anyway.
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(10)
            return ok(input, context)

    context = make_context()
    result = await invoke_tool(Stubborn(), {"n": 4}, context, timeout_s=0.05)
    assert result.status == "success" and result.output == 8  # as asyncio.timeout does
    # The timeout's cancel request is withdrawn: the caller's next await is not cancelled.
    assert asyncio.current_task().cancelling() == 0
    await asyncio.sleep(0)


@pytest.mark.parametrize("asynchronous", [True, False])
async def test_cancelling_the_caller_reraises_and_signals_the_tool(asynchronous):
    started = threading.Event()
    stopped = threading.Event()

    def sync_body(input, context):
        started.set()
        context.cancellation.wait(5)
        stopped.set()
        return ok(input, context)

    class AsyncSlow(IToolExecutor):
        schema = ToolSchema(name="probe", description="d", input_schema=SCHEMA)

        async def execute(self, input, context):
            started.set()
            try:
                await asyncio.sleep(10)
            finally:
                stopped.set()

    tool = AsyncSlow() if asynchronous else make_tool(sync_body, asynchronous=False)
    context = make_context()
    task = asyncio.create_task(invoke_tool(tool, {"n": 1}, context))
    assert await asyncio.to_thread(started.wait, 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert context.cancelled
    assert await asyncio.to_thread(stopped.wait, 5)


async def test_a_tool_raising_cancelled_error_itself_is_an_error_result():
    def body(input, context):
        raise asyncio.CancelledError("upstream gave up")

    result = await invoke_tool(make_tool(body), {"n": 1}, make_context())
    assert_error(result, "CANCELLED", "upstream gave up")


# --- exceptions ------------------------------------------------------------------------


class CodedError(Exception):
    code = "RATE_LIMITED"


@pytest.mark.parametrize(
    ("exc", "code", "retryable"),
    [
        (ValueError("bad value"), "UNKNOWN", False),
        (PermissionError("no access"), "PERMISSION_DENIED", False),
        (FileNotFoundError("no such file"), "NOT_FOUND", False),
        (OSError("disk on fire"), "IO_ERROR", False),
        (ConnectionResetError("reset"), "IO_ERROR", True),
        (TimeoutError("upstream slow"), "TIMEOUT", True),
        (ConfigurationError("missing key"), "CONFIG_ERROR", False),
        (CodedError("slow down"), "RATE_LIMITED", False),
        (SystemExit(3), "UNKNOWN", False),
    ],
)
@pytest.mark.parametrize("asynchronous", [True, False])
async def test_exceptions_become_error_results(exc, code, retryable, asynchronous):
    def body(input, context):
        raise exc

    result = await invoke_tool(make_tool(body, asynchronous=asynchronous), {"n": 1}, make_context())
    assert_error(result, code, type(exc).__name__, str(exc))
    assert result.metadata["exception_type"] == type(exc).__name__
    assert result.retryable is retryable


async def test_exception_without_message():
    def body(input, context):
        raise KeyError

    result = await invoke_tool(make_tool(body), {"n": 1}, make_context())
    assert result.error == "KeyError"


# --- contract violations ---------------------------------------------------------------

FIX = "return the data in ToolResult.output: ToolResult(call_id=context.call_id"


@pytest.mark.parametrize(
    "value", [42, "text", [1, 2], {"temperature": 21}, {"status": "ok", "count": 3}]
)
async def test_bare_return_value_is_kept_in_output(value):
    result = await invoke_tool(make_tool(lambda i, c: value), {"n": 1}, make_context())
    assert_error(result, "CONTRACT_VIOLATION", "instead of a ToolResult", FIX)
    assert "tool_name='probe', status='success', output=<your value>)" in result.error
    assert result.output == value


async def test_returning_none_hints_at_a_missing_return():
    result = await invoke_tool(make_tool(lambda i, c: None), {"n": 1}, make_context())
    assert_error(result, "CONTRACT_VIOLATION", "returned None", "forget to return", FIX)


async def test_unserializable_bare_value_is_kept_as_text():
    class Thing:
        def __repr__(self):
            return "<thing 7>"

    result = await invoke_tool(make_tool(lambda i, c: Thing()), {"n": 1}, make_context())
    assert_error(result, "CONTRACT_VIOLATION", "a bare Thing")
    assert result.output == '"<thing 7>"'


@pytest.mark.parametrize("key", ["data", "result"])
@pytest.mark.parametrize("camel", [True, False])
async def test_dict_with_data_or_result_instead_of_output(key, camel):
    ids = (
        {"callId": "call-1", "toolName": "probe"}
        if camel
        else {
            "call_id": "call-1",
            "tool_name": "probe",
        }
    )
    result = await invoke_tool(
        make_tool(lambda i, c: {**ids, "status": "success", key: {"rows": [1]}}),
        {"n": 1},
        make_context(),
    )
    assert_error(result, "CONTRACT_VIOLATION", f"under {key!r}", FIX)
    assert result.output == {"rows": [1]}


async def test_seed_style_dict_without_ids_but_with_data():
    result = await invoke_tool(
        make_tool(lambda i, c: {"status": "success", "data": [1, 2]}), {"n": 1}, make_context()
    )
    assert_error(result, "CONTRACT_VIOLATION", "under 'data'")
    assert result.output == [1, 2]


@pytest.mark.parametrize("key", ["data", "result"])
async def test_toolresult_constructed_with_data_or_result(key):
    def body(input, context):
        return ToolResult(
            call_id=context.call_id, tool_name="probe", status="success", **{key: [1, 2, 3]}
        )

    result = await invoke_tool(make_tool(body), {"n": 1}, make_context())
    assert_error(
        result, "CONTRACT_VIOLATION", f"built ToolResult with {key}=...", "has no field", FIX
    )
    assert result.output == [1, 2, 3]
    assert result.metadata["exception_type"] == "ValidationError"


async def test_toolresult_constructed_badly_otherwise():
    def body(input, context):
        return ToolResult(call_id=context.call_id, tool_name="probe", status="ok", message="hi")

    result = await invoke_tool(make_tool(body), {"n": 1}, make_context())
    assert_error(result, "CONTRACT_VIOLATION", "built an invalid ToolResult", "status:")
    assert "message: unknown field" in result.error
    assert result.output == {"message": "hi"}


async def test_other_validation_errors_are_ordinary_exceptions():
    import pydantic

    class Model(pydantic.BaseModel):
        n: int

    def body(input, context):
        Model(n="x")

    result = await invoke_tool(make_tool(body), {"n": 1}, make_context())
    assert_error(result, "UNKNOWN", "ValidationError")


@pytest.mark.parametrize(
    ("returned", "missing"),
    [
        ({"tool_name": "probe", "status": "success", "output": 1}, "call_id"),
        ({"callId": "call-1", "status": "success", "output": 1}, "tool_name"),
        ({"status": "success", "output": 1}, "call_id and tool_name"),
    ],
)
async def test_dict_missing_ids(returned, missing):
    result = await invoke_tool(make_tool(lambda i, c: returned), {"n": 1}, make_context())
    assert_error(result, "CONTRACT_VIOLATION", f"without {missing}", FIX)
    assert result.output == 1


async def test_toolresult_with_empty_ids():
    def body(input, context):
        return ToolResult(call_id="", tool_name="probe", status="success", output=1)

    result = await invoke_tool(make_tool(body), {"n": 1}, make_context())
    assert_error(result, "CONTRACT_VIOLATION", "empty call_id")
    assert result.output == 1


@pytest.mark.parametrize(
    "returned",
    [
        {"callId": "call-1", "toolName": "probe", "status": "success", "output": {"a": 1}},
        {"call_id": "call-1", "tool_name": "probe", "status": "success", "output": {"a": 1}},
    ],
)
async def test_result_shaped_dict_is_accepted(returned):
    result = await invoke_tool(make_tool(lambda i, c: returned), {"n": 1}, make_context())
    assert result.status == "success"
    assert result.output == {"a": 1}


async def test_malformed_result_shaped_dict():
    returned = {"callId": "call-1", "toolName": "probe", "status": "done", "output": 5}
    result = await invoke_tool(make_tool(lambda i, c: returned), {"n": 1}, make_context())
    assert_error(result, "CONTRACT_VIOLATION", "malformed ToolResult", "status:")
    assert result.output == returned


async def test_mismatched_call_id_and_tool_name_are_flagged():
    def wrong_call(input, context):
        return ToolResult(call_id="other", tool_name="probe", status="success", output=1)

    def wrong_name(input, context):
        return ToolResult(call_id=context.call_id, tool_name="prob", status="success", output=2)

    result = await invoke_tool(make_tool(wrong_call), {"n": 1}, make_context())
    assert_error(result, "CONTRACT_VIOLATION", "call_id 'other'", "set call_id=context.call_id")
    assert result.output == 1
    result = await invoke_tool(make_tool(wrong_name), {"n": 1}, make_context())
    assert_error(result, "CONTRACT_VIOLATION", "tool_name 'prob'", "tool_name='probe'")
    assert result.output == 2


async def test_success_with_data_in_metadata_is_flagged():
    def body(input, context):
        return ToolResult(
            call_id=context.call_id, tool_name="probe", status="success", metadata={"data": [7]}
        )

    result = await invoke_tool(make_tool(body), {"n": 1}, make_context())
    assert_error(result, "CONTRACT_VIOLATION", "metadata['data']", FIX)
    assert result.output == [7]


async def test_success_without_output_is_allowed():
    def body(input, context):
        return ToolResult(call_id=context.call_id, tool_name="probe", status="success")

    result = await invoke_tool(make_tool(body), {"n": 1}, make_context())
    assert result.status == "success"
    assert result.output is None


async def test_error_without_message_is_flagged():
    def body(input, context):
        return ToolResult(call_id=context.call_id, tool_name="probe", status="error", output=3)

    result = await invoke_tool(make_tool(body), {"n": 1}, make_context())
    assert_error(result, "CONTRACT_VIOLATION", "without an error message")
    assert result.output == 3


async def test_error_results_get_a_code_and_keep_their_own():
    def plain(input, context):
        return ToolResult(call_id=context.call_id, tool_name="probe", status="error", error="x")

    def coded(input, context):
        return ToolResult(
            call_id=context.call_id,
            tool_name="probe",
            status="error",
            error="slow down",
            metadata={"error_code": "RATE_LIMITED", "retryable": True},
        )

    result = await invoke_tool(make_tool(plain), {"n": 1}, make_context())
    assert result.metadata == {"error_code": "UNKNOWN", "retryable": False}
    assert result.error == "x"
    result = await invoke_tool(make_tool(coded), {"n": 1}, make_context())
    assert result.metadata == {"error_code": "RATE_LIMITED", "retryable": True}
    assert result.retryable


def suspend(suspension_id=None):
    def body(input, context):
        metadata = {"suspension_id": suspension_id} if suspension_id else {}
        return ToolResult(
            call_id=context.call_id,
            tool_name="probe",
            status="suspended",
            output={"question": "ok?"},
            metadata=metadata,
        )

    return body


async def test_suspended_only_from_blocking_tools():
    result = await invoke_tool(make_tool(suspend()), {"n": 1}, make_context())
    assert_error(result, "CONTRACT_VIOLATION", "only blocking tools may suspend")
    assert result.output == {"question": "ok?"}

    result = await invoke_tool(make_tool(suspend(), mode="blocking"), {"n": 1}, make_context())
    assert result.status == "suspended"
    assert len(result.metadata["suspension_id"]) == 32

    result = await invoke_tool(make_tool(suspend("s-1"), mode="blocking"), {"n": 1}, make_context())
    assert result.metadata["suspension_id"] == "s-1"


async def test_unserializable_output_or_metadata_is_flagged():
    class Thing:
        def __repr__(self):
            return "<thing>"

    def bad_output(input, context):
        return ToolResult(
            call_id=context.call_id, tool_name="probe", status="success", output={"t": Thing()}
        )

    def bad_metadata(input, context):
        return ToolResult(
            call_id=context.call_id,
            tool_name="probe",
            status="success",
            output=1,
            metadata={"t": Thing()},
        )

    result = await invoke_tool(make_tool(bad_output), {"n": 1}, make_context())
    assert_error(result, "CONTRACT_VIOLATION", "cannot be serialized", "JSON-compatible")
    assert result.output == '{"t": "<thing>"}'

    result = await invoke_tool(make_tool(bad_metadata), {"n": 1}, make_context())
    assert_error(result, "CONTRACT_VIOLATION", "metadata that cannot be serialized")
    assert result.output == 1
    assert result.metadata["t"] == '"<thing>"'


def test_child_tokens_follow_their_parent_but_not_the_other_way():
    from art.tooling.contract import CancellationToken

    run = CancellationToken()
    first, second = run.child(), run.child()
    first.cancel("timed out")
    assert first.cancelled and not second.cancelled and not run.cancelled
    run.cancel("user stopped the run")
    assert second.cancelled and second.reason == "user stopped the run"
    assert first.reason == "timed out"
    late = run.child()
    assert late.cancelled and late.reason == "user stopped the run"


def test_a_detached_token_no_longer_follows_its_parent():
    from art.tooling.contract import CancellationToken

    run = CancellationToken()
    finished, running = run.child(), run.child()
    finished.detach()  # its call is over
    finished.detach()  # idempotent
    run.cancel("stop")
    assert running.cancelled and not finished.cancelled


async def test_a_tool_gets_its_own_copy_of_nested_cyclic_and_uncopyable_arguments():
    seen = {}

    def body(input, context):
        seen.update(input)
        input["nested"]["items"].append("tool")
        input["cycle"].append("tool")
        return ok({"n": 1}, context)

    cycle = [1]
    cycle.append(cycle)
    lock = threading.Lock()  # cannot be deep-copied: the tool gets it as it is
    args = {"n": 1, "nested": {"items": ["a", {"b": [1.5, None]}]}, "cycle": cycle, "lock": lock}
    await invoke_tool(make_tool(body), args, make_context())
    assert args["nested"] == {"items": ["a", {"b": [1.5, None]}]}
    assert seen["nested"]["items"][1] is not args["nested"]["items"][1]
    assert cycle == [1, cycle] and seen["cycle"][1] is seen["cycle"]  # the copy keeps its cycle
    assert seen["lock"] is lock
