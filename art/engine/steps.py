"""One step's path, from ready to finished: the executor calls `StepRunner.run` per step.

A tool step resolves its references when it starts, lets `tool:before` hooks edit the
arguments or veto the call, runs the tool through `invoke_tool` (which validates the
arguments against the tool's schema and enforces `step_timeout_s`, one timer serving
all of the phase's calls), retries retryable failures with exponential backoff, asks
the model when the tool requires it (LLM_ASSIST_REQUIRED), and suspends when a blocking
tool waits for a human. A reasoning step (no tool) makes one `step` LLM call. Every
record is persisted when the step starts and when it ends, and every status change is
a `step:status` event. A failure is recorded on the step and handed to the failure
policy (`art.engine.policies`); only cancellation and engine faults leave `run`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from art.core.log import get_logger
from art.core.serialization import context_text, safe_stringify
from art.core.spans import LazySpan, SpanContext
from art.engine.execution_state import FINISHED, ExecutionDeps, ExecutionState, StepState, Stop
from art.errors import ModelError, ModelErrorCode, RunErrorCode, StorageError, ToolErrorCode
from art.observe.errors import error_data
from art.observe.events import EventBus, HookVeto, RunEvents
from art.planning.references import resolve_references
from art.responses import RunError, StepStatus, utcnow
from art.storage.contract import Suspension
from art.tooling.contract import (
    ASKS_FOR_INPUT,
    ExecutionContext,
    ProgressStage,
    ToolResult,
    ToolSchema,
)
from art.tooling.invocation import CallOutcome, CallTimeouts, NotStopped, call_tool
from art.tooling.threads import ThreadCalls, ToolThreads

if TYPE_CHECKING:
    from art.engine.policies import FailurePolicy
    from art.engine.scheduler import Executor
    from art.planning.plans import Step
    from art.tooling.registry import ToolEntry

__all__ = ["CallResources", "StepRunner", "ToolCaller", "reasoning_messages"]

log = get_logger(__name__)

LLM_ASSIST_REQUIRED = ToolErrorCode.LLM_ASSIST_REQUIRED.value
# Where a tool says it needs the model's help (seed 000's `metadata.error`, or art's own
# `metadata.error_code`), and what an error result adds: gone once the model helped.
_ASSIST_SIGNAL = frozenset({"error", "error_code", "retryable"})
# Taken only to make a tool call's relay, by its first progress report.
_RELAY_MADE = threading.Lock()
REASONING_TOOL_NAME = "reasoning"


# -- what every tool call of a phase shares -----------------------------------------------------


class CallResources:
    """The timer and threads every tool call of one execute phase shares.

    Blocking (`def`) tools run on the pool given (the instance's, whose threads outlive a
    run) or on one of the phase's own, made when first needed, through a `ThreadCalls`
    of the phase's, which lets the threads start their calls while a wide layer is still
    being started. `close()` at the end of the phase.
    """

    def __init__(self, deps: ExecutionDeps) -> None:
        config = deps.run.config
        self.timeouts = CallTimeouts(config.step_timeout_s) if config.step_timeout_s else None
        self._max_concurrency = config.max_concurrency
        self.stop_grace_s = config.tool_stop_grace_s
        self._pool = deps.thread_pool
        self._owns_pool = False
        self.thread_calls: ThreadCalls | None = None  # this phase's way onto the pool

    def blocking_calls(self) -> ThreadCalls:
        """Where this phase calls plain `def` tools (threads start on demand)."""
        if self.thread_calls is None:
            if self._pool is None:
                self._owns_pool = True
                self._pool = ToolThreads(self._max_concurrency)
            self.thread_calls = ThreadCalls(self._pool)
        return self.thread_calls

    def close(self) -> None:
        if self.timeouts is not None:
            self.timeouts.close()
        if self.thread_calls is not None:
            self.thread_calls.close()
        if self._owns_pool and self._pool is not None:
            # Threads of tools that ignored cancellation finish on their own.
            self._pool.shutdown(wait=False, cancel_futures=True)


class _Interest:
    """What the events of every step need, as the run's event bus stood at `changes`:
    read once per step and status change, instead of seven `wants`/`listened` calls
    per step. Read again when a hook or subscriber is added or removed."""

    __slots__ = (
        "changes",
        "events",
        "status_listened",
        "status_wanted",
        "tool_after",
        "tool_before",
        "updates_listened",
        "updates_wanted",
    )

    def __init__(self, events: EventBus | RunEvents) -> None:
        self.events = events
        self.changes = -1
        self.fresh()

    def fresh(self) -> _Interest:
        events = self.events
        if self.changes != events.changes:
            self.changes = events.changes
            self.tool_before: bool = events.wants("tool:before")
            self.tool_after: bool = events.wants("tool:after")
            self.updates_wanted: bool = events.wants("tool:update")
            self.updates_listened: bool = events.listened("tool:update")
            self.status_wanted: bool = events.wants("step:status")
            self.status_listened: bool = events.listened("step:status")
        return self


async def _emit(
    deps: ExecutionDeps, name: str, data: dict[str, Any], span: SpanContext
) -> dict[str, Any]:
    run = deps.run
    return await run.events.emit(name, data, thread_id=run.thread_id, run_id=run.run_id, span=span)


# -- one tool call ------------------------------------------------------------------------------


class ToolCaller:
    """One tool call of a step, with its hooks, progress updates and cancellation signal.

    Tells the run when it is idle: every running step waits for its tool and no step is
    ready (`ExecutionDeps.idle`). One per pass: it asks the pass's executor.
    """

    def __init__(
        self,
        deps: ExecutionDeps,
        resources: CallResources,
        scheduler: Executor,
        interest: _Interest,
    ) -> None:
        run = deps.run
        self._deps = deps
        self._resources = resources
        self._scheduler = scheduler
        self._interest = interest
        self._calls: dict[str, ExecutionContext] = {}  # the running tool calls' contexts
        self._in_tools = 0  # running steps whose tool call is under way
        self._idle = deps.idle
        self._idle_check: asyncio.Handle | None = None
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._run_context = ExecutionContext(
            thread_id=run.thread_id,
            trace_id=run.trace_id,
            call_id="",
            user_id=run.user_id,
            session_id=run.session_id,
            message_id=run.message_id,
            agent=run.agent,
            extra=run.metadata,
        )

    async def call(
        self,
        step: Step,
        record: StepState,
        entry: ToolEntry,
        args: dict[str, Any],
        attempt: int,
        step_span: LazySpan,
        decision: dict[str, Any] | None = None,
    ) -> tuple[CallOutcome, str | None]:
        """One tool execution; returns its outcome and, when a hook vetoed it, the reason.

        Every execution has exactly one `tool:update` `start` and one `end`, and one
        `tool:after`, whichever way it ends: a result, a veto, or the run cancelling it
        (the `end` is sent before the cancellation goes on). `decision` is the human
        decision a blocking tool runs under when it runs on approval.
        """
        deps = self._deps
        tool = entry.tool
        run = deps.run
        step_id = step.id
        span = LazySpan(step_span)  # its SpanContext is made only if something reads it
        call_id = f"{run.run_id}:{step_id}:{attempt}"
        name = tool.schema.name
        interest = self._interest.fresh()
        call = _Call(deps, interest, step_id, name, call_id, attempt, span, tool.schema, self)
        if interest.tool_before:
            try:
                data = await _emit(
                    deps,
                    "tool:before",
                    {
                        "step_id": step_id,
                        "tool": name,
                        "call_id": call_id,
                        "args": args,
                        "attempt": attempt,
                    },
                    span.context(),
                )
            except HookVeto as veto:
                reason = f"vetoed by a tool:before hook: {veto.reason}"
                result = ToolResult(
                    call_id=call_id,
                    tool_name=name,
                    status="error",
                    error=reason,
                    metadata={
                        "error_code": ToolErrorCode.PERMISSION_DENIED.value,
                        "retryable": False,
                        "vetoed": True,
                    },
                )
                if (starting := call.start(args)) is not None:
                    await starting
                if (ending := call.end(result, args)) is not None:
                    await ending
                return CallOutcome(result), reason
            edited = data.get("args", args) if isinstance(data, dict) else args
            if edited is not args:
                args = edited
                if isinstance(edited, dict):
                    record.args = edited
        context = self._run_context.for_call(
            call_id,
            step_id,
            attempt,
            span,
            decision,
            run.cancellation,
            call if interest.updates_wanted else None,  # its relay is made by a first report
        )
        self._calls[step_id] = context
        run.stats.add_tool_call()
        self._in_tools += 1
        try:
            if (starting := call.start(args)) is not None:
                await starting
            if context.cancelled:  # the run was cancelled meanwhile (by a tool:before hook, say)
                raise asyncio.CancelledError
            if (
                self._idle is not None
                and self._idle_check is None
                and not self._scheduler.has_ready
            ):
                # Looked at once this worker yields: an instant tool has returned by then.
                self._idle_check = self._loop.call_soon(self._check_idle)
            outcome = await call_tool(
                tool,
                args,
                context,
                registry=deps.registry,
                thread_pool=None if entry.is_async else self._resources.blocking_calls(),
                timeouts=self._resources.timeouts,
                stop_grace_s=self._resources.stop_grace_s,
            )
        except asyncio.CancelledError as exc:
            # The run cancelled the call (a `fail` policy, `inst.cancel`): it still ends.
            why = context.cancellation.reason
            if isinstance(exc, NotStopped):
                why = f"{why or 'cancelled'}; {exc}"
            cancelled = _cancelled_result(call_id, name, why)
            record.result = cancelled
            if (ending := call.finish(cancelled, args)) is not None:
                await ending
            raise
        finally:
            self._in_tools -= 1
            self._calls.pop(step_id, None)
            context.release()
        if (ending := call.finish(outcome.result, args)) is not None:
            await ending
        return outcome, None

    def wait_turn(self, entry: ToolEntry) -> Awaitable[None] | None:
        """The wait that lets the threads start the `def` calls handed out so far
        (art.tooling.threads), when there is one: no coroutine per step otherwise."""
        calls = self._resources.thread_calls
        if calls is not None and calls.gate_closed and not entry.is_async:
            return calls.wait_turn()
        return None

    def cancel_calls(self, reason: str) -> None:
        """Signal every running call to stop (before its task sees CancelledError)."""
        for context in list(self._calls.values()):
            context.cancellation.cancel(reason)

    def close(self) -> None:
        if self._idle_check is not None:
            self._idle_check.cancel()
            self._idle_check = None

    def relay(self, step_id: str, tool: str, call_id: str, span: LazySpan) -> ProgressRelay:
        """The relay of a call's progress reports to `tool:update` events."""

        def emit(data: dict[str, Any]) -> Awaitable[dict[str, Any]]:
            return _emit(self._deps, "tool:update", data, span.context())

        return ProgressRelay(
            {"step_id": step_id, "tool": tool, "call_id": call_id},
            emit,
            self._loop,
            self._loop_thread,
            self._scheduler.start_task,
        )

    def _check_idle(self) -> None:
        self._idle_check = None
        calls = self._resources.thread_calls
        if calls is not None and calls.handing_out:
            # Threads are still starting the calls just handed out: write the log after.
            self._idle_check = self._loop.call_later(calls.handoff_wait_s, self._check_idle)
            return
        scheduler = self._scheduler
        running = scheduler.running
        if (
            self._idle is not None
            and running
            and running == self._in_tools
            and not scheduler.has_ready
            and not scheduler.stopping
        ):
            self._idle()


class _Call:
    """The `tool:update` and `tool:after` events of one tool execution: `start` once, and
    `end` and `tool:after` once, whichever way the execution ends."""

    __slots__ = (
        "attempt",
        "call_id",
        "caller",
        "deps",
        "ended",
        "interest",
        "relay",
        "schema",
        "span",
        "started",
        "started_at",
        "step_id",
        "tool",
    )

    def __init__(
        self,
        deps: ExecutionDeps,
        interest: _Interest,
        step_id: str,
        tool: str,
        call_id: str,
        attempt: int,
        span: LazySpan,
        schema: ToolSchema | None,
        caller: ToolCaller | None = None,
    ) -> None:
        self.deps = deps
        self.caller = caller
        self.relay: ProgressRelay | None = None
        self.interest = interest
        self.step_id = step_id
        self.tool = tool
        self.call_id = call_id
        self.attempt = attempt
        self.span = span
        self.schema = schema
        self.started = False
        self.ended = False
        self.started_at = 0.0  # the clock is read by start()

    def start(self, args: dict[str, Any], **extra: Any) -> Awaitable[Any] | None:
        """Mark the execution started; the `start` update to await, when anything sees it."""
        self.started = True
        self.started_at = time.perf_counter()
        # A tool's own progress notes are logged; the start and end updates are not, so
        # they are emitted only when a hook, subscriber or stream is there to see them.
        if not self.interest.updates_listened:
            return None
        data = {
            "stage": "start",
            "step_id": self.step_id,
            "tool": self.tool,
            "call_id": self.call_id,
            "args": args,
            "attempt": self.attempt,
            **extra,
        }
        return _emit(self.deps, "tool:update", data, self.span.context())

    def __call__(self, stage: ProgressStage, payload: dict[str, object]) -> None:
        """The tool's progress report (its context's reporter): the first one makes the
        relay that carries them, so a call that never reports costs none."""
        relay = self.relay
        if relay is None:
            assert self.caller is not None  # a tool call's _Call has its caller
            with _RELAY_MADE:  # reports may come from several of the tool's threads
                if self.relay is None:
                    self.relay = self.caller.relay(self.step_id, self.tool, self.call_id, self.span)
                relay = self.relay
        relay.report(stage, payload)

    def finish(self, result: ToolResult, args: dict[str, Any]) -> Awaitable[None] | None:
        """The progress still being sent, then the end (the end always comes last)."""
        relay = self.relay
        if relay is not None and (draining := relay.close()) is not None:
            return self._end_after(draining, result, args)
        return self.end(result, args)

    async def _end_after(
        self, draining: Awaitable[Any], result: ToolResult, args: dict[str, Any]
    ) -> None:
        await draining
        if (ending := self.end(result, args)) is not None:
            await ending

    def end(self, result: ToolResult, args: dict[str, Any], **extra: Any) -> Awaitable[None] | None:
        """Mark the execution ended (once); its `end` update and `tool:after` to await,
        when anything sees them."""
        if self.ended or not self.started:
            return None
        self.ended = True
        interest = self.interest
        if not interest.updates_listened and not (interest.tool_after and self.schema is not None):
            return None
        duration_ms = (time.perf_counter() - self.started_at) * 1000.0
        return self._send_end(result, args, duration_ms, extra)

    async def _send_end(
        self, result: ToolResult, args: dict[str, Any], duration_ms: float, extra: dict[str, Any]
    ) -> None:
        schema = self.schema
        display = schema is not None and schema.mode == "display"
        if self.interest.updates_listened:
            end: dict[str, Any] = {
                "stage": "end",
                "step_id": self.step_id,
                "tool": self.tool,
                "call_id": self.call_id,
                "status": result.status,
                "duration_ms": duration_ms,
                **extra,
            }
            if result.status == "error":
                end["error"] = result.error
                if code := result.metadata.get("error_code"):
                    end["error_code"] = code
            else:
                end["result"] = result.output
            if display:
                end["display"] = True
                if schema is not None and schema.display_config:
                    end["display_config"] = schema.display_config
            await _emit(self.deps, "tool:update", end, self.span.context())
        if self.interest.tool_after and schema is not None:
            await _emit(
                self.deps,
                "tool:after",
                {
                    "step_id": self.step_id,
                    "tool": self.tool,
                    "call_id": self.call_id,
                    "args": args,
                    "result": result,
                    "duration_ms": duration_ms,
                    "display": display,
                },
                self.span.context(),
            )


def _cancelled_result(call_id: str, tool: str, reason: str | None) -> ToolResult:
    """The result of a tool call the run cancelled."""
    why = reason or "cancelled"
    return ToolResult(
        call_id=call_id,
        tool_name=tool,
        status="error",
        error=why if why.startswith("cancelled") else f"cancelled: {why}",
        metadata={"error_code": ToolErrorCode.CANCELLED.value, "retryable": False},
    )


class ProgressRelay:
    """Carries one tool call's progress reports, from any thread, to `tool:update` events.

    Reports are queued in order and emitted by one drain task at a time, owned by the
    executor's TaskGroup. `close()` stops taking reports and returns the drain task
    still emitting earlier ones (await it, so the `end` update always comes last).
    One is made per tool call and most tools never report: it costs little until used.
    """

    __slots__ = ("_closed", "_emit", "_ids", "_items", "_loop", "_loop_thread", "_spawn", "_task")

    def __init__(
        self,
        ids: dict[str, str],
        emit: Callable[[dict[str, Any]], Awaitable[Any]],
        loop: asyncio.AbstractEventLoop,
        loop_thread: int,
        spawn: Callable[[Any], asyncio.Task[None]],
    ) -> None:
        self._ids = ids
        self._emit = emit
        self._loop = loop
        self._loop_thread = loop_thread
        self._spawn = spawn
        self._items: deque[tuple[str, dict[str, Any]]] | None = None  # made by a report
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    def report(self, stage: str, payload: dict[str, Any]) -> None:
        if self._closed:
            return
        if threading.get_ident() == self._loop_thread:
            self._push(stage, payload)
            return
        # RuntimeError: the loop is closed, nobody is left to tell.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._push, stage, payload)

    def _push(self, stage: str, payload: dict[str, Any]) -> None:
        if self._closed:
            return
        if self._items is None:
            self._items = deque()
        self._items.append((stage, payload))
        if self._task is None or self._task.done():
            self._task = self._spawn(self._drain())

    async def _drain(self) -> None:
        while self._items:  # a drain runs only after a report made the queue
            stage, payload = self._items.popleft()
            await self._emit({"stage": stage, **self._ids, **payload})

    def close(self) -> asyncio.Task[None] | None:
        # Reports a worker thread made before its tool returned are already queued: the
        # loop runs their callbacks before the one that hands back the tool's result.
        self._closed = True
        task = self._task
        return task if task is not None and not task.done() else None


# -- one step -----------------------------------------------------------------------------------


class StepRunner:
    """Runs the steps of one pass: `run(step_id)` is the executor's `run_step`."""

    def __init__(
        self,
        deps: ExecutionDeps,
        state: ExecutionState,
        policy: FailurePolicy,
        scheduler: Executor,
        resources: CallResources,
        steps: Mapping[str, Step],
        dependencies: Mapping[str, Sequence[str]],
    ) -> None:
        self.deps = deps
        self.state = state
        self.policy = policy
        self.scheduler = scheduler
        self._interest = _Interest(deps.run.events)
        self.tools = ToolCaller(deps, resources, scheduler, self._interest)
        self._steps = steps
        self._dependencies = dependencies
        config = deps.run.config
        self._max_attempts = 1 + config.step_max_retries
        self._count_interrupted = config.count_interrupted_attempts
        self._backoff_s = config.retry_backoff_s

    async def run(self, step_id: str) -> bool:
        """Run `step_id` to its end; True when it finished, False when it waits (suspended)
        or was not started (the run's token was cancelled)."""
        state = self.state
        run = self.deps.run
        if state.stop is None and run.cancellation.cancelled:
            # The run's token was cancelled directly: its tools already see it; stop here too.
            reason = run.cancellation.reason or "cancelled"
            self.stop(Stop.CANCELLED, RunError(code=RunErrorCode.CANCELLED, message=reason))
            return False
        step = self._steps[step_id]
        record = state.records[step_id]
        deps = self._dependencies[step_id]
        # A ready step's dependencies have all finished; look for the one that did not
        # complete only when some step did not (a step may wait for dozens).
        unsuccessful = state.unsuccessful
        if unsuccessful and not unsuccessful.isdisjoint(deps):
            for dep in deps:
                dep_record = state.records.get(dep)
                if dep_record is None or dep_record.status != "completed":
                    span = LazySpan(run.span)
                    await self._finish(record, "skipped", span, _skip_reason(dep, dep_record))
                    return True
        step_span = LazySpan(run.span)
        try:
            if step.tool is None:
                await self._reasoning_step(step, record, step_span)
            else:
                await self._tool_step(step, record, step_span)
        except asyncio.CancelledError:
            if not state.cancelling:
                raise
            # This step was cancelled by the run (fail policy or cancel()), not from outside.
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            await self._finish(record, "cancelled", step_span, state.cancel_reason())
        except StorageError:
            raise  # the storage is gone: the run stops as a crash would (Run.drive)
        except Exception as exc:  # an engine fault on this step's path: fail the step, go on
            log.exception("step failed inside the engine", step_id=step_id)
            await self._finish(
                record,
                "failed",
                step_span,
                f"internal error while running the step: {type(exc).__name__}: {exc}",
            )
        status = record.status
        if status == "failed":
            verdict = self.policy.after_failure(record, state)
            if verdict is not None:
                self.stop(verdict.stop, verdict.error)
            goes_on = verdict is None or verdict.stop is Stop.REPLAN
            state.error_reported = state.error_reported or not goes_on
            await self._report_failure(step, record, step_span, goes_on=goes_on)
        return status in FINISHED

    async def _report_failure(
        self, step: Step, record: StepState, span: LazySpan, *, goes_on: bool
    ) -> None:
        """The failed step's `error` event (one per failure; `recoverable`: the run goes on)."""
        if not self.deps.run.events.wants("error"):
            return
        result = record.result
        code = result.metadata.get("error_code") if result is not None else None
        data = error_data(
            "tool" if step.tool is not None else "llm",
            str(code) if code else "UNKNOWN",
            record.reason or "the step failed",
            recoverable=goes_on,
            phase="execute",
            step_id=step.id,
            tool=step.tool,
            attempts=record.attempts,
        )
        await _emit(self.deps, "error", data, span.context())

    def close(self) -> None:
        """At the end of the pass."""
        self.tools.close()

    def stop(self, stop: Stop, error: RunError | None = None) -> None:
        """Start no more steps because of `stop`; a failed or cancelled run also cancels
        the running ones."""
        state = self.state
        state.stop = stop
        if error is not None:
            state.error = error
        if state.cancelling:
            self.tools.cancel_calls(state.cancel_reason())
            self.scheduler.abort()
        else:
            self.scheduler.drain()

    # -- tool steps ---------------------------------------------------------------------
    async def _tool_step(self, step: Step, record: StepState, span: LazySpan) -> None:
        registry = self.deps.registry
        entry = registry.entry(step.tool or "")
        if entry is None:
            known = ", ".join(registry.names()) or "none"
            await self._finish(
                record, "failed", span, f"unknown tool {step.tool!r} (registered: {known})"
            )
            return
        if (turn := self.tools.wait_turn(entry)) is not None:
            await turn
        decision = record.decision
        try:
            if decision is not None and record.args is not None:
                # An approved blocking tool that runs on approval: the approved arguments.
                args = dict(record.args)
            elif step.referencing_args:
                args = resolve_references(step.args, self.state.outputs)
            else:
                args = dict(step.args)
        except Exception as exc:
            await self._finish(record, "failed", span, f"cannot resolve the arguments: {exc}")
            return
        attempt = record.attempts
        # A run on approval follows the call that suspended: it gets attempts of its own;
        # so do attempts its process died in, when those are not counted.
        free = decision is not None or (
            record.status == "in_progress" and not self._count_interrupted
        )
        max_attempts = self._max_attempts + (attempt if free else 0)
        while True:
            attempt += 1
            if attempt > max_attempts:
                await self._finish(
                    record,
                    "failed",
                    span,
                    f"gave up after {record.attempts} attempt(s) that never finished",
                )
                return
            record.attempts, record.args = attempt, args
            await self._start(record, span)
            outcome, vetoed = await self.tools.call(
                step, record, entry, args, attempt, span, decision
            )
            result = outcome.result
            if vetoed is not None:
                record.result = result
                await self._finish(record, "failed", span, vetoed)
                return
            if not (outcome.retry and attempt < max_attempts and self.state.stop is None):
                break
            delay = self._backoff_s * (2 ** (attempt - 1))
            log.info("step retried", step_id=step.id, attempt=attempt, delay_s=delay)
            record.result = result
            if delay:
                await asyncio.sleep(delay)
        metadata = result.metadata
        if LLM_ASSIST_REQUIRED in (metadata.get("error"), metadata.get("error_code")):
            result = await self._llm_assist(result, span)
        if decision is not None and result.status == "success":
            result.metadata.setdefault("decision", "approved")
        record.result = result
        if result.status == "success":
            self.state.outputs[step.id] = result.output
            await self._finish(record, "completed", span)
        elif result.status == "suspended":
            await self._suspend_step(step, record, result, span)
        else:
            await self._finish(record, "failed", span, result.error or "the tool failed")

    async def _llm_assist(self, result: ToolResult, span: LazySpan) -> ToolResult:
        """The tool asked for the model's help (seed 000): one `step` call with its prompt."""
        prompt = _assist_prompt(result.output)
        metadata = {k: v for k, v in result.metadata.items() if k not in _ASSIST_SIGNAL}
        metadata["llm_assisted"] = True
        if prompt is None:
            return result.model_copy(
                update={
                    "status": "error",
                    "error": "the tool asked for LLM assistance but gave no prompt in its output",
                    "metadata": {**metadata, "error_code": LLM_ASSIST_REQUIRED, "retryable": False},
                }
            )
        system = _STEP_SYSTEM_PROMPT
        if context := self.deps.run.system_context:
            system = f"{system}\n\n{context_text(context)}"
        messages = [{"role": "system", "content": system}, {"role": "user", "content": prompt}]
        try:
            answer = await self._complete(messages, span.context())
        except (ModelError, HookVeto, TimeoutError) as exc:
            return result.model_copy(
                update={
                    "status": "error",
                    "error": f"LLM assistance failed: {_error_text(exc)}",
                    "metadata": {**metadata, "error_code": LLM_ASSIST_REQUIRED, "retryable": False},
                }
            )
        return ToolResult(
            call_id=result.call_id,
            tool_name=result.tool_name,
            status="success",
            output=answer,
            metadata=metadata,
        )

    async def _suspend_step(
        self, step: Step, record: StepState, result: ToolResult, span: LazySpan
    ) -> None:
        run = self.deps.run
        suspension_id = str(result.metadata.get("suspension_id") or "") or _new_id()
        result.metadata["suspension_id"] = suspension_id
        tool = self.deps.registry.get(result.tool_name)
        config = (tool.schema.blocking_config if tool is not None else None) or {}
        prompt = result.output if result.output is not None else config.get("prompt")
        suspension = Suspension(
            suspension_id=suspension_id,
            thread_id=run.thread_id,
            run_id=run.run_id,
            step_id=step.id,
            tool_name=result.tool_name,
            call_id=result.call_id,
            args=record.args or {},
            prompt=prompt,
            asks_for_input=bool(result.metadata.get(ASKS_FOR_INPUT)),
        )
        if self.deps.suspend is not None:
            await self.deps.suspend(suspension)
        self.state.suspensions.append(suspension)
        if self.state.stop is None:
            self.stop(Stop.SUSPENDED)  # let running steps finish; start nothing new
        record.status = "waiting"
        record.reason = "waiting for a human decision"
        record.decision = None  # a tool run on approval may ask again: a new decision
        if (persist := self.deps.persist) is not None:
            await persist(record.snapshot())
        if (emitting := self._emit_status(record, span)) is not None:
            await emitting

    # -- reasoning steps ----------------------------------------------------------------
    async def _reasoning_step(self, step: Step, record: StepState, span: LazySpan) -> None:
        """One `step` LLM call; a UI sees it as a block too: one `tool:update` `start` and
        `end` (tool `reasoning`, `reasoning: true`), no `tool:before`/`tool:after`."""
        record.attempts += 1
        await self._start(record, span)
        run = self.deps.run
        call_id = f"{run.run_id}:{step.id}:{record.attempts}"
        limit = run.config.tool_result_max_length
        outputs = self.state.outputs
        dependencies = self._dependencies[step.id]
        inputs = {dep: outputs.get(dep) for dep in dependencies}
        messages = reasoning_messages(
            self.deps.query, step, inputs, limit, self.deps.run.system_context
        )
        call_span = LazySpan(span)
        call = _Call(
            self.deps,
            self._interest.fresh(),
            step.id,
            REASONING_TOOL_NAME,
            call_id,
            record.attempts,
            call_span,
            None,
        )
        args = {"task": step.description, "inputs": list(dependencies)}
        if (starting := call.start(args, reasoning=True)) is not None:
            await starting
        try:
            answer = await self._complete(messages, call_span.context())
        except (ModelError, HookVeto, TimeoutError) as exc:
            code = str(getattr(exc, "code", "") or "")
            record.result = ToolResult(
                call_id=call_id,
                tool_name=REASONING_TOOL_NAME,
                status="error",
                error=_error_text(exc),
                metadata={"error_code": code or "UNKNOWN", "retryable": False},
            )
            if (ending := call.end(record.result, args, reasoning=True)) is not None:
                await ending
            await self._finish(
                record, "failed", span, f"the reasoning call failed: {_error_text(exc)}"
            )
            return
        except asyncio.CancelledError:
            cancelled = _cancelled_result(call_id, REASONING_TOOL_NAME, run.cancellation.reason)
            record.result = cancelled
            if (ending := call.end(cancelled, args, reasoning=True)) is not None:
                await ending
            raise
        record.result = ToolResult(
            call_id=call_id, tool_name=REASONING_TOOL_NAME, status="success", output=answer
        )
        if (ending := call.end(record.result, args, reasoning=True)) is not None:
            await ending
        outputs[step.id] = answer
        await self._finish(record, "completed", span)

    async def _complete(self, messages: list[dict[str, Any]], span: SpanContext) -> str:
        deps = self.deps
        if deps.llm is None or deps.model is None:
            raise ModelError(
                "this run has no LLM client (reasoning and LLM-assisted steps need one)",
                ModelErrorCode.PROVIDER_NOT_CONFIGURED,
            )
        async with asyncio.timeout(deps.run.config.step_timeout_s):
            result = await deps.llm.complete(
                deps.run, phase="step", model=deps.model, messages=messages, span=span
            )
        return result.content

    # -- records, persistence and events --------------------------------------------------
    async def _start(self, record: StepState, span: LazySpan) -> None:
        if record.started_at is None:
            record.started_at = utcnow()
        record.status = "in_progress"
        if (persist := self.deps.persist) is not None:
            await persist(record.snapshot())
        if (emitting := self._emit_status(record, span)) is not None:
            await emitting

    async def _finish(
        self, record: StepState, status: StepStatus, span: LazySpan, reason: str | None = None
    ) -> None:
        record.status = status
        record.reason = reason
        record.ended_at = utcnow()
        if status != "completed":
            self.state.unsuccessful.add(record.step_id)
        if (persist := self.deps.persist) is not None:
            await persist(record.snapshot())
        if (emitting := self._emit_status(record, span)) is not None:
            await emitting

    def _emit_status(self, record: StepState, span: LazySpan) -> Awaitable[Any] | None:
        """The record's `step:status` event: the emission to await when a hook, subscriber
        or stream sees it; else logged here, without a coroutine (one per step), unless
        it is `in_progress`, which the run's event log never keeps."""
        interest = self._interest.fresh()
        if interest.status_listened:
            return _emit(self.deps, "step:status", _status_data(record), span.context())
        if interest.status_wanted and record.status != "in_progress":
            # A finished step's event happened when the record says it ended.
            events = self.deps.run.events
            if isinstance(events, RunEvents):  # a bare EventBus keeps no log
                events.log_only("step:status", _status_data(record), span, record.ended_at)
        return None


# -- prompts and helpers -----------------------------------------------------------------------

_STEP_SYSTEM_PROMPT = (
    "You carry out one step of a larger plan. Answer the step's task directly and "
    "concisely from the inputs given; do not describe what you would do."
)


def reasoning_messages(
    query: str,
    step: Step,
    inputs: Mapping[str, Any],
    max_length: int,
    system_context: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """The messages of a reasoning step's LLM call: the task and its inputs, each cut,
    and the run's system context."""
    task = step.description or "reason over the inputs"
    parts = [f"Overall question: {query}" if query else "", f"Your task ({step.id}): {task}"]
    if inputs:
        parts.append("Inputs from earlier steps:")
        for dep, output in inputs.items():
            parts.append(f"[{dep}]\n{safe_stringify(output, max_length=max_length)}")
    system = _STEP_SYSTEM_PROMPT
    if system_context:
        system = f"{system}\n\n{context_text(system_context)}"
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": "\n\n".join(p for p in parts if p)},
    ]


def _assist_prompt(output: Any) -> str | None:
    """The prompt of an LLM_ASSIST_REQUIRED result: `output` is a dict or its JSON text."""
    data = output
    if isinstance(output, str):
        try:
            data = json.loads(output)
        except ValueError:
            return output.strip() or None
    if isinstance(data, Mapping):
        prompt = data.get("prompt")
        return str(prompt) if prompt else None
    return None


def _status_data(record: StepState) -> dict[str, Any]:
    """The data of a record's `step:status` event."""
    status = record.status
    data: dict[str, Any] = {
        "step_id": record.step_id,
        "tool": record.tool,
        "status": status,
        "attempt": record.attempts,
    }
    if reason := record.reason:
        data["reason"] = reason
    if status == "completed" and (result := record.result) is not None:
        data["output"] = result.output  # seed 003's "stepOutput": no state query needed
    return data


def _skip_reason(dep: str, record: StepState | None) -> str:
    if record is None:
        return f"skipped because step {dep} did not run"
    if record.status == "failed":
        return f"skipped because step {dep} failed: {record.reason}"
    if record.status == "skipped":
        return f"skipped because step {dep} was skipped"
    return f"skipped because step {dep} is {record.status}"


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, HookVeto):
        return f"vetoed by a {exc.event} hook: {exc.reason}"
    if isinstance(exc, TimeoutError):
        return "the step did not finish within step_timeout_s"
    return getattr(exc, "message", None) or str(exc) or type(exc).__name__


def _new_id() -> str:
    import uuid

    return uuid.uuid4().hex
