"""invoke_tool: the one path every tool call goes through.

It validates the input, runs the tool (async, or sync in a worker thread), enforces
the timeout, and checks what came back against the ToolResult contract. It never
raises: every failure becomes a `status="error"` ToolResult whose
`metadata["error_code"]` is a ToolErrorCode and whose `metadata["retryable"]` says
whether trying again may help. The only exception is `asyncio.CancelledError`
when the caller's own task is cancelled.

Contract decisions (docs/tools.md explains them to tool authors):

- A missing or mismatched `call_id` / `tool_name` is flagged as CONTRACT_VIOLATION,
  not silently filled: it means the tool built its result from the wrong call.
- A blocking tool's suspended result without `metadata["suspension_id"]` (or the seed's
  `suspensionId`, kept as its id) gets a fresh id.
- An error result without `metadata["error_code"]` gets UNKNOWN, and without
  `metadata["retryable"]` gets False.
- Whatever a tool returned that carried data ends up in the result's `output`, even
  when the result is a contract error, so nothing is silently dropped.

The engine calls `call_tool`, which also says whether another try may change the answer
(`CallOutcome.retry`): decided where the failure is made, not read back from metadata.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import logging
import time
import uuid
from collections import deque
from collections.abc import Callable, Generator, Mapping
from concurrent.futures import Executor
from typing import TYPE_CHECKING, NamedTuple

import pydantic

from art.core.binary import JSON_SCALARS
from art.core.log import get_logger
from art.core.serialization import own_copy, safe_stringify, to_jsonable
from art.errors import ToolErrorCode
from art.tooling.contract import (
    ASKS_FOR_INPUT,
    ExecutionContext,
    IToolExecutor,
    ToolResult,
    ToolSchema,
)
from art.tooling.registry import (
    ToolEntry,
    build_validator,
    input_errors,
    is_async_tool,
    passes_fast_check,
)
from art.tooling.threads import StuckCall, ThreadCalls

if TYPE_CHECKING:
    from art.tooling.registry import ToolRegistry

__all__ = [
    "DEFAULT_STOP_GRACE_S",
    "CallOutcome",
    "CallTimeouts",
    "NotStopped",
    "call_tool",
    "invoke_tool",
]

log = get_logger(__name__)
_stdlib_log = logging.getLogger(__name__)

_RESULT_KEYS = frozenset(
    {"call_id", "callId", "tool_name", "toolName", "output", "error", "metadata", "data", "result"}
)
_STATUSES = ("success", "error", "suspended")
# Keys under which tools commonly put data that belongs in `output`.
_MISPLACED_DATA_KEYS = ("data", "result")
_METADATA_DATA_KEYS = ("output", "data", "result", "results", "value")
# Bare values and stringified leftovers kept in contract errors are cut to this size.
_KEPT_TEXT_LENGTH = 60_000
#: Seconds a timed-out or cancelled call may take to stop (ExecutionConfig.tool_stop_grace_s).
DEFAULT_STOP_GRACE_S = 5.0
#: Error codes a retry cannot fix, even when the tool raised the exception behind them.
_NOT_RETRIED = frozenset(
    {
        ToolErrorCode.VALIDATION_ERROR,
        ToolErrorCode.CONTRACT_VIOLATION,
        ToolErrorCode.CANCELLED,
        ToolErrorCode.NOT_STOPPED,
        ToolErrorCode.CONFIG_ERROR,
        ToolErrorCode.PERMISSION_DENIED,
    }
)


class CallOutcome(NamedTuple):
    """One tool call's result, and whether calling again may change it (`retry`): the
    tool returned an error it marked retryable, the call timed out, or the tool raised
    an exception a retry can help with (not one behind VALIDATION_ERROR,
    CONTRACT_VIOLATION, CANCELLED, CONFIG_ERROR or PERMISSION_DENIED)."""

    result: ToolResult
    retry: bool = False


class CallTimeouts:
    """One timer for every tool call that shares a timeout (the calls of one run).

    `asyncio.timeout()` arms and cancels a timer handle for each call, which costs more
    than the rest of an instant call. Calls with the same timeout expire in the order
    they started, so a queue of deadlines and one handle, armed for the oldest call
    still running, serve them all. An expired call's task is cancelled, and the call
    sees a `TimeoutError` as `asyncio.timeout` would give it (see `_Deadline.finish`).
    """

    __slots__ = ("_handle", "_loop", "_queue", "timeout_s")

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: deque[_Deadline] = deque()
        self._handle: asyncio.TimerHandle | None = None

    def start(self, task: asyncio.Task[object]) -> _Deadline:
        """The deadline of a call starting now in `task`; `finish()` it when it ends."""
        loop = self._loop
        if loop is None:
            loop = self._loop = task.get_loop()
        queue = self._queue
        while queue and queue[0].finished:
            queue.popleft()
        deadline = _Deadline(task, loop.time() + self.timeout_s)
        queue.append(deadline)
        if self._handle is None:
            self._handle = loop.call_at(deadline.when, self._expire)
        return deadline

    def close(self) -> None:
        """Disarm the timer (every call is over)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._queue.clear()

    def _expire(self) -> None:
        self._handle = None
        loop, queue = self._loop, self._queue
        assert loop is not None
        now = loop.time()
        while queue:
            deadline = queue[0]
            if deadline.finished:
                queue.popleft()
            elif deadline.when <= now:
                queue.popleft()
                deadline.expire()
            else:
                self._handle = loop.call_at(deadline.when, self._expire)
                return


class _Deadline:
    """One call's place in `CallTimeouts`."""

    __slots__ = ("cancelling", "expired", "finished", "task", "when")

    def __init__(self, task: asyncio.Task[object], when: float) -> None:
        self.task: asyncio.Task[object] | None = task
        self.when = when
        # Cancellations the task had before the call: ours is told apart from them.
        self.cancelling = task.cancelling()
        self.expired = False
        self.finished = False

    def expire(self) -> None:
        if self.task is not None and not self.finished:
            self.expired = True
            self.task.cancel()

    def finish(self) -> bool:
        """End the call; True when it timed out and the CancelledError it caught (if
        any) was only the timeout's, which is then withdrawn (asyncio.timeout's rule)."""
        self.finished = True
        task, self.task = self.task, None
        if not self.expired or task is None:
            return False
        return task.uncancel() <= self.cancelling


async def invoke_tool(
    tool: IToolExecutor,
    args: Mapping[str, object],
    context: ExecutionContext,
    *,
    timeout_s: float | None = None,
    registry: ToolRegistry | None = None,
    thread_pool: Executor | None = None,
    timeouts: CallTimeouts | None = None,
    stop_grace_s: float = DEFAULT_STOP_GRACE_S,
) -> ToolResult:
    """Run one tool call and return its ToolResult; never raises (except cancellation).
    What `call_tool` does, without saying whether a retry may help."""
    outcome = await call_tool(
        tool,
        args,
        context,
        timeout_s=timeout_s,
        registry=registry,
        thread_pool=thread_pool,
        timeouts=timeouts,
        stop_grace_s=stop_grace_s,
    )
    return outcome.result


async def call_tool(
    tool: IToolExecutor,
    args: Mapping[str, object],
    context: ExecutionContext,
    *,
    timeout_s: float | None = None,
    registry: ToolRegistry | None = None,
    thread_pool: Executor | None = None,
    timeouts: CallTimeouts | None = None,
    stop_grace_s: float = DEFAULT_STOP_GRACE_S,
) -> CallOutcome:
    """Run one tool call; its result and whether a retry may change it. Never raises
    (except cancellation).

    A plain `def` tool runs on `thread_pool` (default: the loop's default executor,
    whose few threads would cap how many blocking tools run at once).

    `registry` supplies the tool's cached input validator when the tool is registered
    there; otherwise the validator is built for this call. The call may take
    `timeout_s`, or the timeout of `timeouts` (a run's calls share one timer). On
    timeout, and when the awaiting task is cancelled, `context.cancellation` is
    cancelled so that a sync tool still running in its worker thread can notice
    (`context.cancelled`) and stop. A call that has not stopped `stop_grace_s` later
    is abandoned: a timed-out one fails with NOT_STOPPED (never overlapped by a retry),
    a cancelled one lets the cancellation go on; either way a warning names the tool.
    The tool gets a deep copy of `args`: what it changes in them is its own.
    """
    name = _tool_name(tool)
    started = time.perf_counter()
    if timeouts is None and timeout_s is not None:
        timeouts = CallTimeouts(timeout_s)
    # One coroutine per call (the engine makes one per step): the checks are a function,
    # the call itself is awaited here.
    try:
        checked = _check_call(tool, name, args, context, registry)
        if not isinstance(checked, tuple):
            outcome = CallOutcome(checked)
        else:
            schema, is_async = checked
            task = asyncio.current_task()
            deadline = timeouts.start(task) if timeouts is not None and task is not None else None
            own_args = _own_copy(args)
            try:
                if is_async:
                    told = functools.partial(_told_to_stop, context, deadline)
                    raw = await _in_task(tool, own_args, context, name, stop_grace_s, told)
                else:
                    tell = functools.partial(_tell_to_stop, context, deadline, timeouts)
                    raw = await _in_thread(
                        tool, own_args, context, name, thread_pool, stop_grace_s, tell
                    )
            except asyncio.CancelledError as exc:
                cancelled = _cancelled_call(exc, deadline, timeouts, task, name, context)
                if cancelled is None:
                    raise
                outcome = cancelled
            except (Exception, SystemExit, KeyboardInterrupt) as exc:
                # A tool's own SystemExit/KeyboardInterrupt fails its step: raised on,
                # it would stop the event loop's thread mid-run.
                if deadline is not None:
                    deadline.finish()
                outcome = _from_exception(tool, name, context, exc)
            else:
                if deadline is not None:
                    deadline.finish()  # a tool that swallowed the timeout's cancellation
                result = _accept(raw, schema, name, context)
                # The tool's own word (`ToolResult.retryable`) on an error it returned.
                outcome = CallOutcome(result, result.status == "error" and result.retryable)
    except asyncio.CancelledError:
        context.cancellation.cancel("cancelled")
        log.debug("tool call cancelled", tool=name, call_id=context.call_id)
        raise
    except Exception as exc:  # a bug on this path must still come back as a result
        log.debug("tool invocation failed", tool=name, call_id=context.call_id, exc_info=True)
        failure = _failure(
            name,
            context,
            ToolErrorCode.UNKNOWN,
            f"internal error while invoking the tool: {type(exc).__name__}: {exc}",
            exception_type=type(exc).__name__,
        )
        outcome = CallOutcome(failure, retry=True)  # as an exception the tool raised
    if _stdlib_log.isEnabledFor(logging.DEBUG):  # skip building the record per call
        log.debug(
            "tool call",
            tool=name,
            call_id=context.call_id,
            step_id=context.step_id,
            attempt=context.attempt,
            status=outcome.result.status,
            error_code=outcome.result.error_code,
            duration_ms=round((time.perf_counter() - started) * 1000, 3),
        )
    return outcome


def _check_call(
    tool: IToolExecutor,
    name: str,
    args: Mapping[str, object],
    context: ExecutionContext,
    registry: ToolRegistry | None,
) -> ToolResult | tuple[ToolSchema, bool]:
    """The failure that stops the call before it starts, or (schema, whether it is async)."""
    schema = getattr(tool, "schema", None)
    if not isinstance(schema, ToolSchema):
        return _failure(
            name,
            context,
            ToolErrorCode.CONFIG_ERROR,
            f"tool {name!r} has no ToolSchema in `schema`; set schema = ToolSchema(...)",
        )
    entry = registry.entry(schema.name) if registry is not None else None
    if entry is not None and entry.tool is not tool:
        entry = None  # another tool of the same name: nothing cached applies
    if entry is not None and passes_fast_check(entry.fast_check, args):
        return schema, entry.is_async  # valid input, the usual case
    problems = _input_problems(schema, args, entry)
    if problems is None:
        return _failure(
            name,
            context,
            ToolErrorCode.CONFIG_ERROR,
            f"tool {name!r} has an input_schema that is not valid JSON Schema; "
            "register it with ToolRegistry to see what is wrong",
        )
    if problems:
        listed = "\n".join(f"- {problem}" for problem in problems)
        return _failure(
            name,
            context,
            ToolErrorCode.VALIDATION_ERROR,
            f"invalid input for tool {name!r} ({len(problems)} problem"
            f"{'s' if len(problems) > 1 else ''}):\n{listed}",
            validation_errors=problems,
        )
    return schema, entry.is_async if entry is not None else is_async_tool(tool)


def _cancelled_call(
    exc: asyncio.CancelledError,
    deadline: _Deadline | None,
    timeouts: CallTimeouts | None,
    task: asyncio.Task[object] | None,
    name: str,
    context: ExecutionContext,
) -> CallOutcome | None:
    """The outcome of a call that ended in CancelledError, or None when the caller itself
    was cancelled (the cancellation goes on). Only a timeout that stopped is retried."""
    if deadline is not None and deadline.finish():
        timeout = timeouts.timeout_s if timeouts is not None else 0.0
        context.cancellation.cancel(f"timed out after {timeout:g} s")
        if isinstance(exc, NotStopped):
            stuck = _failure(
                name,
                context,
                ToolErrorCode.NOT_STOPPED,
                f"timed out after {timeout:g} s: {exc}",
                timeout_s=timeout,
                base_metadata={"stuck_calls": exc.stuck} if exc.stuck is not None else None,
            )
            return CallOutcome(stuck)
        timed_out = _failure(
            name,
            context,
            ToolErrorCode.TIMEOUT,
            f"tool {name!r} did not finish within {timeout:g} s",
            retryable=True,
            timeout_s=timeout,
        )
        return CallOutcome(timed_out, retry=True)
    if task is not None and task.cancelling():
        return None
    # The tool let a CancelledError of its own escape; our caller was not cancelled.
    own = _failure(
        name,
        context,
        ToolErrorCode.CANCELLED,
        f"tool {name!r} was cancelled: {exc}" if str(exc) else f"tool {name!r} was cancelled",
        exception_type=type(exc).__name__,
    )
    return CallOutcome(own)


def _input_problems(schema: ToolSchema, args: object, entry: ToolEntry | None) -> list[str] | None:
    """The input's violations, or None when the tool's input_schema itself is broken.
    The entry's compiled check has already said no (`_check_call`): jsonschema decides."""
    if entry is not None:
        validator = entry.validator
    else:
        try:
            validator = build_validator(schema.input_schema)
        except Exception:
            return None
    try:
        return input_errors(validator, args)
    except Exception:  # e.g. an unresolvable $ref, found only while validating
        return None


class NotStopped(asyncio.CancelledError):
    """A cancelled tool call went on running `grace_s` after it was told to stop: the
    engine no longer waits for it. An `async def` tool's coroutine is closed (`stuck` is
    None); a plain `def` tool's thread cannot be stopped: `stuck` counts the pool's calls
    still running so."""

    def __init__(self, tool: str, grace_s: float, stuck: int | None) -> None:
        what = "its coroutine was closed" if stuck is None else "its thread still runs it"
        super().__init__(
            f"tool {tool!r} did not stop within {grace_s:g} s of being told to; abandoned ({what})"
        )
        self.grace_s = grace_s
        self.stuck = stuck


def _own_copy(args: Mapping[str, object]) -> dict[str, object]:
    """`args` as the tool's own: containers deep-copied, immutable scalars shared."""
    return {
        key: value if type(value) in JSON_SCALARS else own_copy(value)
        for key, value in args.items()
    }


async def _in_task(
    tool: IToolExecutor,
    args: dict[str, object],
    context: ExecutionContext,
    name: str,
    grace_s: float,
    told: Callable[[], bool],
) -> object:
    """An `async def` tool's call, awaited in the caller's task. Told to stop, a call
    that goes on waiting instead gets `grace_s` to end, then is closed (NotStopped)."""
    raw = tool.execute(args, context)
    if not inspect.isawaitable(raw):
        return raw
    result = await _Abandonable(raw.__await__(), name, grace_s, told)
    if type(result) is not ToolResult and inspect.isawaitable(result):
        result = await _settled(result)
    return result


class _Abandonable:
    """Awaits a call as `await` would, watching for a cancellation the call ignores."""

    __slots__ = ("_call", "_grace_s", "_name", "_told")

    def __init__(
        self,
        call: Generator[object, object, object],
        name: str,
        grace_s: float,
        told: Callable[[], bool],
    ) -> None:
        self._call = call
        self._name = name
        self._grace_s = grace_s
        self._told = told  # True once the engine has told the call to stop

    def __await__(self) -> Generator[object, object, object]:
        call, told = self._call, self._told
        value: object = None
        error: BaseException | None = None
        while True:
            try:
                waits_on = call.send(value) if error is None else call.throw(error)
            except StopIteration as stop:
                return stop.value
            if isinstance(error, asyncio.CancelledError) and told():
                # Told to stop, it waits on: it may, for `grace_s`. (A cancellation of
                # the tool's own, e.g. an anyio cancel scope's, is none of ours.)
                return (yield from self._within_grace(waits_on))
            try:
                value, error = (yield waits_on), None
            except GeneratorExit:
                call.close()
                raise
            except BaseException as exc:  # thrown in by the task: its cancellation
                value, error = None, exc

    def _within_grace(self, waits_on: object) -> Generator[object, object, object]:
        """Go on with a call that ignored its cancellation until it ends or `grace_s`
        passes; then close it (GeneratorExit where it waits) and raise NotStopped."""
        call = self._call
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._grace_s
        while True:
            if not isinstance(waits_on, asyncio.Future) or loop.time() >= deadline:
                if waits_on is None and loop.time() < deadline:
                    yield None  # a bare yield: it lets the loop run once
                else:
                    self._close(waits_on)
                    raise _not_stopped(self._name, self._grace_s, None)
            else:
                wake = loop.create_future()
                timer = loop.call_at(deadline, _resolve, wake)
                waits_on.add_done_callback(functools.partial(_woken, wake))
                try:
                    yield from wake
                except BaseException:  # cancelled again while it had its grace
                    self._close(waits_on)
                    raise
                finally:
                    timer.cancel()
                if not waits_on.done():
                    continue  # the deadline passed: closed above
            try:
                waits_on = call.send(None)
            except StopIteration as stop:
                return stop.value

    def _close(self, waits_on: object) -> None:
        if isinstance(waits_on, asyncio.Future):
            waits_on.cancel()
        with contextlib.suppress(RuntimeError):  # it ignored GeneratorExit too
            self._call.close()


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _woken(wake: asyncio.Future[None], _waited: asyncio.Future[object]) -> None:
    _resolve(wake)


async def _in_thread(
    tool: IToolExecutor,
    args: dict[str, object],
    context: ExecutionContext,
    name: str = "",
    thread_pool: Executor | None = None,
    grace_s: float = DEFAULT_STOP_GRACE_S,
    tell_to_stop: Callable[[], None] | None = None,
) -> object:
    """A plain `def` tool's call, on `thread_pool` (None: the loop's default executor);
    `tell_to_stop` signals a cancelled call that its thread should stop."""
    # As asyncio.to_thread does: the worker thread sees the caller's contextvars.
    call = functools.partial(contextvars.copy_context().run, tool.execute, args, context)
    if isinstance(thread_pool, ThreadCalls):  # the engine's runs: see art.tooling.threads
        try:
            raw = await thread_pool.call(call, stop_grace_s=grace_s, tell_to_stop=tell_to_stop)
        except StuckCall as stuck:
            raise _not_stopped(name, grace_s, stuck.stuck) from None
    else:
        raw = await asyncio.get_running_loop().run_in_executor(thread_pool, call)
    return await _settled(raw)


def _told_to_stop(context: ExecutionContext, deadline: _Deadline | None) -> bool:
    """True when the call timed out or the run cancelled it (not a scope of its own)."""
    return context.cancelled or (deadline is not None and deadline.expired)


def _tell_to_stop(
    context: ExecutionContext, deadline: _Deadline | None, timeouts: CallTimeouts | None
) -> None:
    if deadline is not None and deadline.expired and timeouts is not None:
        context.cancellation.cancel(f"timed out after {timeouts.timeout_s:g} s")
    else:
        context.cancellation.cancel("cancelled")


def _not_stopped(name: str, grace_s: float, stuck: int | None) -> NotStopped:
    log.warning(
        "tool did not stop when told to; abandoned",
        tool=name,
        grace_s=grace_s,
        **({"stuck_calls": stuck} if stuck is not None else {}),
    )
    return NotStopped(name, grace_s, stuck)


async def _settled(raw: object) -> object:
    while type(raw) is not ToolResult and inspect.isawaitable(raw):
        raw = await raw  # a plain `def` that returned a coroutine
    return raw


# --- turning what came back into a ToolResult ------------------------------------------


def _accept(raw: object, schema: ToolSchema, name: str, context: ExecutionContext) -> ToolResult:
    if isinstance(raw, ToolResult):
        return _checked(raw, schema, name, context)
    if isinstance(raw, Mapping) and _looks_like_result(raw):
        return _accept_mapping(raw, schema, name, context)
    kind = "None" if raw is None else f"a bare {type(raw).__name__}"
    hint = " (did the tool forget to return?)" if raw is None else ""
    return _violation(
        name,
        context,
        f"tool {name!r} returned {kind} instead of a ToolResult{hint}; {_output_fix(name)}",
        output=raw,
    )


def _looks_like_result(raw: Mapping[object, object]) -> bool:
    keys = set(raw)
    if keys & {"call_id", "callId", "tool_name", "toolName"}:
        return True
    return raw.get("status") in _STATUSES and bool(keys & _RESULT_KEYS)


def _accept_mapping(
    raw: Mapping[str, object], schema: ToolSchema, name: str, context: ExecutionContext
) -> ToolResult:
    if "output" not in raw:
        for key in _MISPLACED_DATA_KEYS:
            if key in raw:
                return _violation(
                    name,
                    context,
                    f"tool {name!r} returned its data under {key!r}, which is not read as "
                    f"data; {_output_fix(name)}",
                    output=raw[key],
                )
    missing = [
        field
        for field, alias in (("call_id", "callId"), ("tool_name", "toolName"))
        if not (raw.get(field) or raw.get(alias))
    ]
    if missing:
        return _violation(
            name,
            context,
            f"tool {name!r} returned a result without {' and '.join(missing)}; {_output_fix(name)}",
            output=raw.get("output", raw),
        )
    try:
        result = ToolResult.model_validate(dict(raw))
    except pydantic.ValidationError as exc:
        return _violation(
            name,
            context,
            f"tool {name!r} returned a malformed ToolResult ({_describe(exc)}); "
            f"{_output_fix(name)}",
            output=raw,
        )
    return _checked(result, schema, name, context)


def _checked(
    result: ToolResult, schema: ToolSchema, name: str, context: ExecutionContext
) -> ToolResult:
    if (
        result.status == "success"
        and result.call_id == context.call_id
        and result.tool_name == name
        and type(result.output) in JSON_SCALARS
        and not result.metadata
        and result.call_id
    ):
        return result  # the usual case: what the checks below would return unchanged
    keep = {"output": result.output, "metadata": result.metadata}
    missing = [field for field in ("call_id", "tool_name") if not getattr(result, field)]
    if missing:
        return _violation(
            name,
            context,
            f"tool {name!r} returned a result with an empty {' and '.join(missing)}; "
            f"{_output_fix(name)}",
            **keep,
        )
    if result.call_id != context.call_id:
        return _violation(
            name,
            context,
            f"tool {name!r} returned call_id {result.call_id!r} but this call is "
            f"{context.call_id!r}; set call_id=context.call_id",
            **keep,
        )
    if result.tool_name != name:
        return _violation(
            name,
            context,
            f"tool {name!r} returned tool_name {result.tool_name!r}; set "
            f"tool_name={name!r} (self.schema.name)",
            **keep,
        )
    if (
        result.status == "suspended"
        and schema.mode != "blocking"
        # A tool asked for input mid-call (an MCP elicitation) may suspend in any mode.
        and not result.metadata.get(ASKS_FOR_INPUT)
    ):
        return _violation(
            name,
            context,
            f"tool {name!r} returned status='suspended' but its execution_mode is "
            f"{schema.execution_mode!r}; only blocking tools may suspend: set "
            "execution_mode='blocking' in its ToolSchema, or return 'success' or 'error'",
            **keep,
        )
    if result.status == "error" and not result.error:
        return _violation(
            name,
            context,
            f"tool {name!r} returned status='error' without an error message; set "
            "ToolResult.error to a sentence saying what failed",
            **keep,
        )
    if result.status == "success" and result.output is None:
        misplaced = [key for key in _METADATA_DATA_KEYS if key in result.metadata]
        if misplaced:
            return _violation(
                name,
                context,
                f"tool {name!r} returned output=None with its data in "
                f"metadata[{misplaced[0]!r}]; {_output_fix(name)}",
                output=result.metadata[misplaced[0]],
                metadata=result.metadata,
            )
    output = result.output
    try:
        if type(output) not in JSON_SCALARS:
            output = to_jsonable(output)
    except TypeError as exc:
        return _violation(
            name,
            context,
            f"tool {name!r} returned an output that cannot be serialized ({exc}); "
            "return JSON-compatible data in ToolResult.output",
            **keep,
        )
    metadata = result.metadata
    try:
        if metadata:
            metadata = to_jsonable(metadata)
    except TypeError as exc:
        return _violation(
            name,
            context,
            f"tool {name!r} returned metadata that cannot be serialized ({exc}); "
            "put only JSON-compatible values in ToolResult.metadata",
            **keep,
        )
    if result.status == "success" and output is result.output and metadata is result.metadata:
        return result  # already JSON data (a scalar output, no metadata): nothing to change
    metadata = dict(metadata)  # never edit the tool's own dict (it may reuse its result)
    if result.status == "suspended":
        # The tool's own id, in either spelling (seed 003 writes `suspensionId`).
        metadata.setdefault("suspension_id", metadata.get("suspensionId") or uuid.uuid4().hex)
    elif result.status == "error":
        metadata.setdefault("error_code", ToolErrorCode.UNKNOWN.value)
        metadata.setdefault("retryable", False)
    return result.model_copy(update={"output": output, "metadata": metadata})


# --- error results ---------------------------------------------------------------------


def _from_exception(
    tool: IToolExecutor, name: str, context: ExecutionContext, exc: BaseException
) -> CallOutcome:
    """An exception the tool raised: retried unless its code says a retry cannot help."""
    if isinstance(exc, pydantic.ValidationError) and exc.title == ToolResult.__name__:
        return CallOutcome(_bad_construction(name, context, exc))
    code = _code_for(exc)
    message = str(exc)
    result = _failure(
        name,
        context,
        code,
        f"{type(exc).__name__}: {message}" if message else type(exc).__name__,
        retryable=code == ToolErrorCode.TIMEOUT or isinstance(exc, ConnectionError),
        exception_type=type(exc).__name__,
    )
    return CallOutcome(result, retry=code not in _NOT_RETRIED)


def _code_for(exc: BaseException) -> ToolErrorCode:
    own = getattr(exc, "code", None)
    if isinstance(own, str) and own in ToolErrorCode.__members__:
        return ToolErrorCode(own)
    if isinstance(exc, TimeoutError):
        return ToolErrorCode.TIMEOUT
    if isinstance(exc, PermissionError):
        return ToolErrorCode.PERMISSION_DENIED
    if isinstance(exc, FileNotFoundError | NotADirectoryError | IsADirectoryError):
        return ToolErrorCode.NOT_FOUND
    if isinstance(exc, OSError):
        return ToolErrorCode.IO_ERROR
    return ToolErrorCode.UNKNOWN


def _bad_construction(
    name: str, context: ExecutionContext, exc: pydantic.ValidationError
) -> ToolResult:
    """The tool raised while building its ToolResult, e.g. `ToolResult(..., data=x)`."""
    unknown = {
        str(error["loc"][0]): error.get("input")
        for error in exc.errors()
        if error["type"] == "extra_forbidden" and error["loc"]
    }
    for key in _MISPLACED_DATA_KEYS:
        if key in unknown:
            return _violation(
                name,
                context,
                f"tool {name!r} built ToolResult with {key}=..., but ToolResult has no field "
                f"{key!r}; {_output_fix(name)}",
                output=unknown[key],
                exception_type=type(exc).__name__,
            )
    return _violation(
        name,
        context,
        f"tool {name!r} built an invalid ToolResult ({_describe(exc)}); {_output_fix(name)}",
        output=unknown or None,
        exception_type=type(exc).__name__,
    )


def _output_fix(name: str) -> str:
    return (
        "return the data in ToolResult.output: ToolResult(call_id=context.call_id, "
        f"tool_name={name!r}, status='success', output=<your value>)"
    )


def _describe(exc: pydantic.ValidationError) -> str:
    parts = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"]) or "result"
        message = "unknown field" if error["type"] == "extra_forbidden" else error["msg"]
        parts.append(f"{where}: {message}")
    return "; ".join(parts)


def _violation(
    name: str,
    context: ExecutionContext,
    message: str,
    *,
    output: object = None,
    metadata: Mapping[str, object] | None = None,
    **extra: str,
) -> ToolResult:
    """A CONTRACT_VIOLATION result that keeps what the tool returned; `extra` goes into
    its metadata."""
    kept_metadata = {str(key): _kept(value) for key, value in (metadata or {}).items()}
    return _failure(
        name,
        context,
        ToolErrorCode.CONTRACT_VIOLATION,
        f"contract violation: {message}",
        output=_kept(output),
        base_metadata={**kept_metadata, **extra},
    )


def _kept(value: object) -> object:
    """`value` as JSON data, or as text when it cannot be converted."""
    try:
        return to_jsonable(value)
    except TypeError:
        return safe_stringify(value, max_length=_KEPT_TEXT_LENGTH)


def _failure(
    name: str,
    context: ExecutionContext,
    code: ToolErrorCode,
    message: str,
    *,
    output: object = None,
    retryable: bool = False,
    base_metadata: Mapping[str, object] | None = None,
    **metadata: object,
) -> ToolResult:
    return ToolResult(
        call_id=context.call_id,
        tool_name=name,
        status="error",
        output=output,
        error=message,
        metadata={
            **(base_metadata or {}),
            **metadata,
            "error_code": code.value,
            "retryable": retryable,
        },
    )


def _tool_name(tool: object) -> str:
    schema = getattr(tool, "schema", None)
    name = getattr(schema, "name", None)
    return name if isinstance(name, str) and name else type(tool).__name__
