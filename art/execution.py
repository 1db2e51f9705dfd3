"""The DAG scheduler: readiness, concurrency cap, timeouts, retries, failure policies.

Two halves, kept apart (as CPython's `graphlib` and `asyncio.TaskGroup` are):

- `Readiness` is bookkeeping only: it counts each step's unfinished dependencies and
  says which steps a finished one unblocked. No I/O, no event loop; misuse raises.
- `Executor` owns the running: one `asyncio.TaskGroup` holds its worker tasks. A step
  is started the moment its last dependency finishes (no polling, no waves), up to
  `max_concurrency` at a time: the worker that finished a step takes the next ready
  one, and more workers start while ready steps outnumber them. A task per step would
  cost more than an instant tool call; a worker running steps back to back yields to
  the event loop every `_SLICE_S`, so a plan of instant tools cannot starve the loop.
  A failed tool never reaches the group: failures are caught at the step boundary and
  become step records; only cancellation and engine faults propagate.

Per step: references are resolved when the step starts; `tool:before` hooks may edit
the arguments or veto the call; the tool runs through `invoke_tool` (which validates the
resolved arguments against the tool's schema and enforces `step_timeout_s`, one timer
serving all of the run's calls); retryable failures are retried with exponential
backoff. Every record is persisted when the step starts and when it ends, and every
status change is a `step:status` event.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections import Counter, defaultdict, deque
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from graphlib import CycleError
from typing import TYPE_CHECKING, Any, Literal

from art._log import get_logger
from art._models import trusted
from art._thread_calls import ThreadCalls
from art.errors import ModelError, ModelErrorCode, PlanError, RunErrorCode, ToolErrorCode
from art.events import HookVeto
from art.invocation import CallTimeouts, invoke_tool
from art.plans import Plan, Step, never_ready
from art.references import find_references, resolve_references
from art.responses import RunError, StepRecord, utcnow
from art.serialization import safe_stringify
from art.spans import SpanContext
from art.state import Suspension
from art.tooling import CancellationToken, ExecutionContext, ToolResult

if TYPE_CHECKING:
    from art.context import RunContext
    from art.llm import LLMClient
    from art.registry import ToolEntry, ToolRegistry

__all__ = [
    "FINISHED",
    "ExecutionOutcome",
    "Executor",
    "Readiness",
    "reasoning_messages",
    "step_dependencies",
]

log = get_logger(__name__)

#: Step statuses after which a step never runs again in this run.
FINISHED: frozenset[str] = frozenset({"completed", "failed", "skipped", "cancelled"})
#: Error codes a retry cannot fix, even when an exception caused them.
_NOT_RETRIED = frozenset(
    {
        ToolErrorCode.VALIDATION_ERROR.value,
        ToolErrorCode.CONTRACT_VIOLATION.value,
        ToolErrorCode.CANCELLED.value,
        ToolErrorCode.CONFIG_ERROR.value,
        ToolErrorCode.PERMISSION_DENIED.value,
    }
)
LLM_ASSIST_REQUIRED = ToolErrorCode.LLM_ASSIST_REQUIRED.value
REASONING_TOOL_NAME = "reasoning"
# How long a worker runs steps back to back before it lets the event loop run others.
_SLICE_S = 0.002

OutcomeStatus = Literal["completed", "partial", "suspended", "failed", "cancelled"]
PersistStep = Callable[[StepRecord], Awaitable[None]]
SaveSuspension = Callable[[Suspension], Awaitable[None]]
PlanUpdated = Callable[[Plan, int], Awaitable[None]]


# -- bookkeeping ----------------------------------------------------------------------------


class Readiness:
    """Which steps may start, by counting each step's unfinished dependencies.

    `start()` hands out the steps that wait for nothing; `finish(step)` marks a handed-out
    step finished and returns the steps that were waiting only for it. Steps in
    `finished` count as done from the start (a resumed run); dependencies on them are
    satisfied. Raises `graphlib.CycleError` for a cycle and ValueError for an unknown
    dependency, a second `start()`, or finishing a step twice or before it was handed out.
    `acyclic=True` skips the cycle search, for a graph already checked (`validate_plan`).
    """

    __slots__ = ("_dependents", "_handed_out", "_started", "_waiting")

    def __init__(
        self,
        dependencies: Mapping[str, Iterable[str]],
        *,
        finished: Iterable[str] = (),
        acyclic: bool = False,
    ) -> None:
        done = set(finished)
        waiting: dict[str, int] = {}
        dependents: defaultdict[str, list[str]] = defaultdict(list)
        # A plan of a few hundred steps can have tens of thousands of edges: count them
        # in a plain loop, then look for mistakes once per step that is depended on.
        for step, deps in dependencies.items():
            if step in done:
                continue
            if done:
                deps = [dep for dep in deps if dep not in done]
            elif not isinstance(deps, list | tuple):
                deps = list(deps)
            for dep in deps:
                dependents[dep].append(step)
            waiting[step] = len(deps)
        for dep, steps in dependents.items():
            if dep not in dependencies:
                raise ValueError(f"step {steps[0]!r} depends on unknown step {dep!r}")
            if dep in steps:
                raise CycleError(f"step {dep!r} depends on itself", [dep, dep])
        self._waiting = waiting
        self._dependents = dependents
        self._handed_out: set[str] = set()
        self._started = False
        if not acyclic:
            self._check_acyclic()

    def _check_acyclic(self) -> None:
        stuck = sorted(never_ready(self._waiting, self._dependents))
        if stuck:
            raise CycleError(f"the steps {stuck} depend on each other in a cycle", stuck)

    def raise_for_cycle(self) -> None:
        """Raise CycleError when unfinished steps can never become ready (a cycle)."""
        if self._handed_out:
            return  # steps still out (or suspended) may yet unblock the rest
        self._check_acyclic()

    def start(self) -> list[str]:
        """The steps with no unfinished dependency, in the order they were given."""
        if self._started:
            raise ValueError("start() was already called")
        self._started = True
        ready = [step for step, count in self._waiting.items() if count == 0]
        self._handed_out.update(ready)
        return ready

    def finish(self, step: str) -> list[str]:
        """Mark `step` finished; return the steps that became ready because of it."""
        if step not in self._handed_out:
            state = "was already finished" if step in self._waiting else "is unknown"
            if step in self._waiting and self._waiting[step] > 0:
                state = "was never handed out"
            raise ValueError(f"cannot finish step {step!r}: it {state}")
        self._handed_out.discard(step)
        del self._waiting[step]
        ready: list[str] = []
        for dependent in self._dependents.pop(step, ()):
            remaining = self._waiting[dependent] - 1
            self._waiting[dependent] = remaining
            if remaining == 0:
                ready.append(dependent)
        self._handed_out.update(ready)
        return ready

    @property
    def unfinished(self) -> int:
        """How many steps are not finished yet (waiting or handed out)."""
        return len(self._waiting)


def step_dependencies(step: Step) -> Sequence[str]:
    """Every step `step` waits for: `depends_on` plus the steps its references name."""
    deps = getattr(step, "all_dependencies", None)
    if deps is not None:
        return deps  # a fresh list each time: the caller may keep it
    return tuple(dict.fromkeys([*step.depends_on, *sorted(find_references(step.args))]))


# -- the outcome ----------------------------------------------------------------------------


@dataclass
class ExecutionOutcome:
    """What executing a plan produced."""

    status: OutcomeStatus
    plan: Plan
    records: dict[str, StepRecord]
    suspensions: list[Suspension] = field(default_factory=list)
    replans: int = 0
    error: RunError | None = None

    @property
    def outputs(self) -> dict[str, Any]:
        return {
            step_id: record.result.output if record.result is not None else None
            for step_id, record in self.records.items()
            if record.status == "completed"
        }


# -- running --------------------------------------------------------------------------------


class Executor:
    """Runs one plan to the end, a suspension, or a stop. Use once: `await executor.run()`.

    `records` carries the step records of an earlier attempt of the same run (an
    idempotent retry or a resume): completed steps are not run again and their outputs
    are reused; `in_progress` steps run again with the next attempt number; `waiting`
    steps stay suspended. `persist` is awaited with a step's record when it starts and
    when it ends; `suspend` with each new Suspension; `plan_updated` after a replan.
    `thread_pool` runs the plain `def` tools (default: a pool of `max_concurrency`
    threads made for this run and shut down at its end), through a `ThreadCalls` of
    the run's, which lets the threads start their calls while a wide layer is still
    being started. `idle` is called when every running step is waiting for its tool
    and no step is ready: time the run would otherwise spend waiting (the instance
    writes its event log then).
    Plans are expected to have passed `validate_plan`; a cycle in one that did not is
    found once the steps outside it have run, and raised as `graphlib.CycleError`.
    """

    def __init__(
        self,
        run: RunContext,
        plan: Plan,
        registry: ToolRegistry,
        *,
        llm: LLMClient | None = None,
        model: str | None = None,
        planner: Any = None,
        query: str = "",
        history: Sequence[Any] = (),
        records: Mapping[str, StepRecord] | None = None,
        replans: int = 0,
        persist: PersistStep | None = None,
        suspend: SaveSuspension | None = None,
        plan_updated: PlanUpdated | None = None,
        thread_pool: ThreadPoolExecutor | None = None,
        idle: Callable[[], None] | None = None,
    ) -> None:
        self.run_context = run
        self.plan = plan
        self.registry = registry
        self.llm = llm
        self.model = model
        self.planner = planner
        self.query = query
        self.history = list(history)
        self.replans = replans
        self._persist = persist
        self._suspend = suspend
        self._plan_updated = plan_updated
        self._config = run.config
        self._events = run.events
        self._interest = _Interest(run.events)
        # Earlier records of steps not in this plan matter only for their outputs.
        self._records: dict[str, StepRecord] = {}
        if records:
            plan_ids = {step.id for step in plan.steps}
            self._records = {
                step_id: record
                for step_id, record in records.items()
                if step_id in plan_ids or record.status == "completed"
            }
        self._outputs: dict[str, Any] = {
            step_id: record.result.output if record.result is not None else None
            for step_id, record in self._records.items()
            if record.status == "completed"
        }
        self._suspensions: list[Suspension] = []
        self._stop: str | None = None  # None | "suspended" | "replan" | "failed" | "cancelled"
        self._stop_error: RunError | None = None
        self._cancelling = False
        self._tasks: dict[str, asyncio.Task[None]] = {}  # running step -> its worker
        self._tokens: dict[str, CancellationToken] = {}  # the running tool calls' signals
        # Blocking (`def`) tools run on the pool given (the instance's, whose threads
        # outlive a run) or on one of this run's own, made when first needed.
        self._thread_pool = thread_pool
        self._owns_pool = False
        self._thread_calls: ThreadCalls | None = None  # this run's way onto the pool
        self._idle = idle
        self._in_tools = 0  # running steps whose tool call is under way
        self._idle_check: asyncio.Handle | None = None
        timeout_s = self._config.step_timeout_s
        self._timeouts = CallTimeouts(timeout_s) if timeout_s else None
        self._ready: deque[str] = deque()
        self._running = 0  # steps started and not finished
        # Steps started (counted in _running) that no worker runs yet: the next worker to
        # be free takes them, or each gets a task of its own once the loop gets control.
        self._claimed: deque[str] = deque()
        self._spawn: asyncio.Handle | None = None  # the call that gives them their tasks
        self._slicing = 0  # workers only letting the loop run between steps (see _worker)
        # Read per step: kept here, as a config model's attributes are slow to read.
        self._max_concurrency = self._config.max_concurrency
        self._max_attempts = 1 + self._config.step_max_retries
        self._group: asyncio.TaskGroup | None = None
        self._readiness: Readiness | None = None
        self._steps: dict[str, Step] = {}
        self._deps: dict[str, Sequence[str]] = {}
        self._unsuccessful: set[str] = set()  # finished steps that did not complete
        self._used = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._context_template = ExecutionContext(
            thread_id=run.thread_id,
            trace_id=run.trace_id,
            call_id="",
            user_id=run.user_id,
            session_id=run.session_id,
            message_id=run.message_id,
            agent=run.agent,
            extra=run.metadata,
        )

    # -- public -----------------------------------------------------------------------
    async def run(self) -> ExecutionOutcome:
        """Execute the plan (and its replans) and return the outcome."""
        if self._used:
            raise RuntimeError("an Executor runs once; build a new one")
        self._used = True
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        run = self.run_context
        await self._emit_run(
            "tool:loop:before", {"steps": len(self.plan.steps), "title": self.plan.title}
        )
        try:
            while True:
                await self._execute_plan()
                if self._stop != "replan":
                    break
                replanned = await self._replan()
                if not replanned:
                    break
        finally:
            if self._idle_check is not None:
                self._idle_check.cancel()
            if self._timeouts is not None:
                self._timeouts.close()
            if self._thread_calls is not None:
                self._thread_calls.close()
            if self._owns_pool and self._thread_pool is not None:
                # Threads of tools that ignored cancellation finish on their own.
                self._thread_pool.shutdown(wait=False, cancel_futures=True)
        outcome, counts = self._outcome()
        await self._emit_run(
            "tool:loop:after",
            {
                "status": outcome.status,
                "completed": counts["completed"],
                "failed": counts["failed"],
                "skipped": counts["skipped"],
                "waiting": counts["waiting"],
                "replans": outcome.replans,
            },
        )
        log.debug("plan executed", run_id=run.run_id, status=outcome.status)
        return outcome

    def _blocking_calls(self) -> ThreadCalls:
        """Where this run calls plain `def` tools (threads start on demand)."""
        if self._thread_calls is None:
            if self._thread_pool is None:
                self._owns_pool = True
                self._thread_pool = ThreadPoolExecutor(
                    max_workers=self._config.max_concurrency, thread_name_prefix="art-tool"
                )
            self._thread_calls = ThreadCalls(self._thread_pool)
        return self._thread_calls

    def _check_idle(self) -> None:
        self._idle_check = None
        calls = self._thread_calls
        if calls is not None and calls.handing_out:
            # Threads are still starting the calls just handed out: write the log after.
            self._idle_check = self._loop.call_later(  # type: ignore[union-attr]
                calls.handoff_wait_s, self._check_idle
            )
            return
        running = self._running
        if running and running == self._in_tools and not self._ready and self._stop is None:
            self._idle()  # type: ignore[misc]

    def cancel(self, reason: str = "cancelled") -> None:
        """Stop the run: no new steps, running ones cancelled (their tools see it)."""
        if self._stop in ("failed", "cancelled"):
            return
        self._stop = "cancelled"
        self._stop_error = RunError(code=RunErrorCode.CANCELLED, message=reason)
        self.run_context.cancellation.cancel(reason)
        self._cancel_running()

    # -- one pass over the DAG ----------------------------------------------------------
    async def _execute_plan(self) -> None:
        self._stop = None
        steps: dict[str, Step] = {}
        deps: dict[str, Sequence[str]] = {}
        records = self._records
        for step in self.plan.steps:
            # Each id is read once: pydantic's __getattr__ makes a model's attributes
            # slow to read (docs/performance.md, fifth session).
            step_id = step.id
            steps[step_id] = step
            deps[step_id] = step_dependencies(step)
            if step_id not in records:
                records[step_id] = _pending_record(step)
        self._steps, self._deps = steps, deps
        finished = [sid for sid, rec in records.items() if rec.status in FINISHED]
        self._unsuccessful = {sid for sid in finished if self._records[sid].status != "completed"}
        # Plans come through validate_plan, which found no cycle: searching every edge
        # again up front costs milliseconds on big plans. A cycle in a plan that was not
        # validated leaves steps that never became ready; that is reported below.
        self._readiness = readiness = Readiness(self._deps, finished=finished, acyclic=True)
        self._ready.extend(readiness.start())
        async with asyncio.TaskGroup() as group:
            self._group = group
            if (first := self._take_ready()) is not None:
                group.create_task(self._worker(first))
                self._start_workers()
        self._group = None
        if self._spawn is not None:
            self._spawn.cancel()
            self._spawn = None
        self._ready.clear()
        if self._stop is None and readiness.unfinished:
            readiness.raise_for_cycle()

    def _start_workers(self) -> None:
        """Start the ready steps there is room for (and no stop was asked for).

        Each is claimed now, so that a step which suspends or fails the run does not keep
        its siblings from starting, and gets a task of its own once the loop gets control,
        unless a worker is free first: a worker whose steps never wait (instant tools)
        runs them one after another, as fast as one task can, instead of handing each to
        a task that would only run once this one yields.
        """
        if self._group is None:
            return
        claimed = self._claimed
        while (step_id := self._take_ready()) is not None:
            claimed.append(step_id)
        if claimed and self._spawn is None:
            self._spawn = self._loop.call_soon(self._spawn_claimed)  # type: ignore[union-attr]

    def _spawn_claimed(self) -> None:
        """A task for each claimed step: a worker waits (its tool, a hook, storage)."""
        self._spawn = None
        claimed = self._claimed
        if not claimed:
            return
        if self._slicing:
            # A worker only lets the loop run other tasks between its steps, and comes
            # straight back to take these; look again the next time the loop gets control.
            self._spawn = self._loop.call_soon(self._spawn_claimed)  # type: ignore[union-attr]
            return
        group = self._group
        if group is None:
            return
        while claimed:
            worker = self._worker(claimed[0])
            try:
                group.create_task(worker)
            except RuntimeError:  # the task group is shutting down: the run is ending
                worker.close()
                return
            claimed.popleft()

    def _take_ready(self) -> str | None:
        """The next ready step to start (now counted as running), or None."""
        if self._stop is None and self.run_context.cancellation.cancelled:
            # The run's token was cancelled directly (not through cancel()): its tools
            # already see it; stop here too.
            self.cancel(self.run_context.cancellation.reason or "cancelled")
        while self._ready and self._running < self._max_concurrency:
            if self._stop is not None:
                return None
            step_id = self._ready.popleft()
            if self._records[step_id].status == "waiting":
                continue  # still suspended: its dependents wait with it
            self._running += 1
            return step_id
        return None

    async def _worker(self, step_id: str) -> None:
        """Run `step_id`, then the ready steps no other worker took, until none is left."""
        task = asyncio.current_task()
        assert task is not None
        sliced = time.perf_counter()
        while True:
            self._tasks[step_id] = task
            try:
                await self._run_step(step_id)
            finally:
                self._running -= 1
                del self._tasks[step_id]
            if self._records[step_id].status in FINISHED and self._readiness is not None:
                self._ready.extend(self._readiness.finish(step_id))
            if time.perf_counter() - sliced >= _SLICE_S:
                self._slicing += 1
                try:
                    await asyncio.sleep(0)  # between steps: this worker holds none
                finally:
                    self._slicing -= 1
                sliced = time.perf_counter()
            # This worker's next step, a claimed one first: no new task for it.
            claimed = self._claimed
            next_id = claimed.popleft() if claimed else self._take_ready()
            if self._ready:
                self._start_workers()
            if next_id is None:
                return
            step_id = next_id

    async def _run_step(self, step_id: str) -> None:
        step = self._steps[step_id]
        record = self._records[step_id]
        deps = self._deps[step_id]
        # A ready step's dependencies have all finished; look for the one that did not
        # complete only when some step did not (a step may wait for dozens).
        if self._unsuccessful and not self._unsuccessful.isdisjoint(deps):
            for dep in deps:
                dep_record = self._records.get(dep)
                if dep_record is None or dep_record.status != "completed":
                    span = self.run_context.span.child()
                    await self._finish(record, "skipped", span, _skip_reason(dep, dep_record))
                    return
        step_span = self.run_context.span.child()
        try:
            if step.tool is None:
                await self._reasoning_step(step, record, step_span)
            else:
                await self._tool_step(step, record, step_span)
        except asyncio.CancelledError:
            if not self._cancelling:
                raise
            # This step was cancelled by the run (fail policy or cancel()), not from outside.
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            await self._finish(record, "cancelled", step_span, self._cancel_reason())
        except Exception as exc:  # an engine fault on this step's path: fail the step, go on
            log.exception("step failed inside the engine", step_id=step_id)
            await self._finish(
                record,
                "failed",
                step_span,
                f"internal error while running the step: {type(exc).__name__}: {exc}",
            )
        if record.status == "failed":
            self._on_failure(record)

    # -- tool steps ---------------------------------------------------------------------
    async def _tool_step(self, step: Step, record: StepRecord, span: SpanContext) -> None:
        entry = self.registry.entry(step.tool or "")
        if entry is None:
            known = ", ".join(self.registry.names()) or "none"
            await self._finish(
                record, "failed", span, f"unknown tool {step.tool!r} (registered: {known})"
            )
            return
        calls = self._thread_calls
        if calls is not None and calls.gate_closed and not entry.is_async:
            # Let the threads start the `def` calls handed out so far (art._thread_calls).
            await calls.wait_turn()
        try:
            args = (
                resolve_references(step.args, self._outputs)
                if step.referencing_args
                else dict(step.args)
            )
        except Exception as exc:
            await self._finish(record, "failed", span, f"cannot resolve the arguments: {exc}")
            return
        max_attempts = self._max_attempts
        attempt = record.attempts
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
            await self._start(record, span, attempts=attempt, args=args)
            result, vetoed = await self._call_tool(step, entry, args, attempt, span)
            if vetoed is not None:
                _update(record, result=result)
                await self._finish(record, "failed", span, vetoed)
                return
            if _worth_retrying(result) and attempt < max_attempts and self._stop is None:
                delay = self._config.retry_backoff_s * (2 ** (attempt - 1))
                log.info("step retried", step_id=step.id, attempt=attempt, delay_s=delay)
                _update(record, result=result)
                if delay:
                    await asyncio.sleep(delay)
                continue
            break
        if result.metadata.get("error") == LLM_ASSIST_REQUIRED:
            result = await self._llm_assist(step, result, span)
        _update(record, result=result)
        if result.status == "success":
            self._outputs[step.id] = result.output
            await self._finish(record, "completed", span)
        elif result.status == "suspended":
            await self._suspend_step(step, record, result, span)
        else:
            await self._finish(record, "failed", span, result.error or "the tool failed")

    async def _call_tool(
        self,
        step: Step,
        entry: ToolEntry,
        args: dict[str, Any],
        attempt: int,
        step_span: SpanContext,
    ) -> tuple[ToolResult, str | None]:
        """One tool execution; returns its result and, when a hook vetoed it, the reason."""
        tool = entry.tool
        run = self.run_context
        step_id = step.id
        span = step_span.child()
        call_id = f"{run.run_id}:{step_id}:{attempt}"
        name = tool.schema.name
        events = self._events
        interest = self._interest
        if interest.changes != events.changes:
            interest = self._interest = _Interest(events)
        if interest.tool_before:
            try:
                data = await events.emit(
                    "tool:before",
                    {
                        "step_id": step_id,
                        "tool": name,
                        "call_id": call_id,
                        "args": args,
                        "attempt": attempt,
                    },
                    thread_id=run.thread_id,
                    run_id=run.run_id,
                    span=span,
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
                return result, reason
            edited = data.get("args", args) if isinstance(data, dict) else args
            if edited is not args:
                args = edited
                if isinstance(edited, dict):
                    self._records[step_id].args = edited
        # A tool's own progress notes are logged; the start and end updates are not, so
        # they are emitted only when a hook, subscriber or stream is there to see them.
        wants_updates = interest.updates_wanted
        live_updates = interest.updates_listened
        if live_updates:
            await self._emit(
                "tool:update",
                {
                    "stage": "start",
                    "step_id": step_id,
                    "tool": name,
                    "call_id": call_id,
                    "args": args,
                    "attempt": attempt,
                },
                span,
            )
        relay = _ProgressRelay(self, step_id, name, call_id, span) if wants_updates else None
        token = run.cancellation.child()
        context = _call_context(
            self._context_template,
            {"call_id": call_id, "step_id": step_id, "attempt": attempt, "span": span},
            cancellation=token,
            reporter=relay.report if relay is not None else None,
        )
        self._tokens[step_id] = token
        run.stats.add_tool_call()
        started = time.perf_counter()
        self._in_tools += 1
        if self._idle is not None and self._idle_check is None and not self._ready:
            # Looked at once this worker yields: an instant tool has returned by then.
            self._idle_check = self._loop.call_soon(self._check_idle)  # type: ignore[union-attr]
        try:
            result = await invoke_tool(
                tool,
                args,
                context,
                registry=self.registry,
                thread_pool=None if entry.is_async else self._blocking_calls(),
                timeouts=self._timeouts,
            )
        finally:
            self._in_tools -= 1
            del self._tokens[step_id]
            token.detach()
            if relay is not None and (draining := relay.close()) is not None:
                await draining
        duration_ms = (time.perf_counter() - started) * 1000.0
        if live_updates:
            end: dict[str, Any] = {
                "stage": "end",
                "step_id": step_id,
                "tool": name,
                "call_id": call_id,
                "status": result.status,
                "duration_ms": duration_ms,
            }
            if result.status == "error":
                end["error"] = result.error
            else:
                end["result"] = result.output
            if tool.schema.mode == "display":
                end["display"] = True
            await self._emit("tool:update", end, span)
        if interest.tool_after:
            await self._emit(
                "tool:after",
                {
                    "step_id": step_id,
                    "tool": name,
                    "call_id": call_id,
                    "args": args,
                    "result": result,
                    "duration_ms": duration_ms,
                    "display": tool.schema.mode == "display",
                },
                span,
            )
        return result, None

    async def _llm_assist(self, step: Step, result: ToolResult, span: SpanContext) -> ToolResult:
        """The tool asked for the model's help (seed 000): one `step` call with its prompt."""
        prompt = _assist_prompt(result.output)
        metadata = {k: v for k, v in result.metadata.items() if k != "error"}
        metadata["llm_assisted"] = True
        if prompt is None:
            return result.model_copy(
                update={
                    "status": "error",
                    "error": "the tool asked for LLM assistance but gave no prompt in its output",
                    "metadata": {**metadata, "error_code": LLM_ASSIST_REQUIRED, "retryable": False},
                }
            )
        messages = [
            {"role": "system", "content": _STEP_SYSTEM_PROMPT},
            {"role": "user", "content": prompt},
        ]
        try:
            answer = await self._complete(messages, span)
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
        self, step: Step, record: StepRecord, result: ToolResult, span: SpanContext
    ) -> None:
        run = self.run_context
        suspension_id = str(result.metadata.get("suspension_id") or "") or _new_id()
        result.metadata["suspension_id"] = suspension_id
        suspension = Suspension(
            suspension_id=suspension_id,
            thread_id=run.thread_id,
            run_id=run.run_id,
            step_id=step.id,
            tool_name=result.tool_name,
            call_id=result.call_id,
            args=record.args or {},
            prompt=result.output,
        )
        if self._suspend is not None:
            await self._suspend(suspension)
        self._suspensions.append(suspension)
        if self._stop is None:
            self._stop = "suspended"  # let running steps finish; start nothing new
        record.status = "waiting"
        record.reason = "waiting for a human decision"
        await self._save(record)
        if (emitting := self._emit_status(record, span)) is not None:
            await emitting

    # -- reasoning steps ----------------------------------------------------------------
    async def _reasoning_step(self, step: Step, record: StepRecord, span: SpanContext) -> None:
        record.attempts += 1
        await self._start(record, span)
        run = self.run_context
        call_id = f"{run.run_id}:{step.id}:{record.attempts}"
        limit = self._config.tool_result_max_length
        inputs = {dep: self._outputs.get(dep) for dep in self._deps[step.id]}
        messages = reasoning_messages(self.query, step, inputs, limit)
        try:
            answer = await self._complete(messages, span.child())
        except (ModelError, HookVeto, TimeoutError) as exc:
            code = str(getattr(exc, "code", "") or "")
            record.result = ToolResult(
                call_id=call_id,
                tool_name=REASONING_TOOL_NAME,
                status="error",
                error=_error_text(exc),
                metadata={"error_code": code or "UNKNOWN", "retryable": False},
            )
            await self._finish(
                record, "failed", span, f"the reasoning call failed: {_error_text(exc)}"
            )
            return
        record.result = ToolResult(
            call_id=call_id, tool_name=REASONING_TOOL_NAME, status="success", output=answer
        )
        self._outputs[step.id] = answer
        await self._finish(record, "completed", span)

    async def _complete(self, messages: list[dict[str, Any]], span: SpanContext) -> str:
        if self.llm is None or self.model is None:
            raise ModelError(
                "this executor has no LLM client (reasoning and LLM-assisted steps need one)",
                ModelErrorCode.PROVIDER_NOT_CONFIGURED,
            )
        async with asyncio.timeout(self._config.step_timeout_s):
            result = await self.llm.complete(
                self.run_context, phase="step", model=self.model, messages=messages, span=span
            )
        return result.content

    # -- failures and policies ------------------------------------------------------------
    def _on_failure(self, record: StepRecord) -> None:
        policy = self._config.on_step_failure
        if policy == "fail":
            if self._stop in ("failed", "cancelled"):
                return
            self._stop = "failed"
            self._stop_error = RunError(
                code=RunErrorCode.STEP_FAILED,
                message=f"step {record.step_id} failed: {record.reason}",
            )
            self._cancel_running()
        elif policy == "replan":
            can_replan = self.planner is not None and self.replans < self._config.max_replans
            if can_replan and self._stop is None:
                self._stop = "replan"
        # skip_dependents: nothing to do; dependents are skipped when they become ready.

    def _cancel_running(self) -> None:
        self._cancelling = True
        reason = self._cancel_reason()
        for token in list(self._tokens.values()):
            token.cancel(reason)  # set before the tasks see CancelledError
        current = asyncio.current_task()
        for task in list(self._tasks.values()):
            if task is not current and not task.done():
                task.cancel()

    def _cancel_reason(self) -> str:
        if self._stop_error is not None and self._stop == "failed":
            return f"cancelled because {self._stop_error.message}"
        return f"cancelled: {self._stop_error.message if self._stop_error else 'the run stopped'}"

    async def _replan(self) -> bool:
        """Ask the planner for a new plan; False when the run must end as it is."""
        run = self.run_context
        failures = [r for r in self._records.values() if r.status == "failed"]
        try:
            new_plan = await self.planner.replan(
                run, self.query, self.history, self.plan, dict(self._records)
            )
        except PlanError as exc:
            self._stop = "failed"
            self._stop_error = RunError(
                code=RunErrorCode.PLAN_INVALID,
                message=f"replanning failed: {exc.message}",
                problems=list(exc.problems),
            )
            return False
        except ModelError as exc:
            self._stop = "failed"
            self._stop_error = RunError(code=str(exc.code), message=exc.message)
            return False
        self.replans += 1
        previous = self.plan
        self.plan = new_plan
        kept: dict[str, StepRecord] = {}
        new_ids = {step.id for step in new_plan.steps}
        for step_id, record in self._records.items():
            if record.status == "completed":
                kept[step_id] = record  # finished work is never run again
        for step in new_plan.steps:
            if step.id in kept:
                continue
            fresh = _pending_record(step)
            if step.id in self._records and self._records[step.id].status != "pending":
                await self._save(fresh)  # storage must not see the old attempt as finished
            kept[step.id] = fresh
        dropped = [sid for sid in self._records if sid not in kept and sid not in new_ids]
        self._records = kept
        if self._plan_updated is not None:
            await self._plan_updated(new_plan, self.replans)
        await self._emit_run(
            "plan:updated",
            {
                "plan": new_plan.to_wire(),
                "previous_title": previous.title,
                "replans": self.replans,
                "reason": "; ".join(f"{r.step_id}: {r.reason}" for r in failures),
                "dropped_steps": dropped,
            },
        )
        return True

    def _outcome(self) -> tuple[ExecutionOutcome, Counter[str]]:
        """The outcome, and how many of its records end in each status."""
        # `_steps` holds the last pass's plan in order, its ids already read.
        ordered = {sid: self._records[sid] for sid in self._steps if sid in self._records}
        for sid, record in self._records.items():
            ordered.setdefault(sid, record)  # completed steps of an earlier plan
        counts = Counter(record.status for record in ordered.values())  # one read each
        status: OutcomeStatus
        if self._stop == "cancelled":
            status = "cancelled"
        elif self._stop == "failed":
            status = "failed"
        elif counts["waiting"]:
            status = "suspended"
        elif counts["completed"] == len(ordered):
            status = "completed"
        else:
            status = "partial"
        outcome = ExecutionOutcome(
            status=status,
            plan=self.plan,
            records=ordered,
            suspensions=list(self._suspensions),
            replans=self.replans,
            error=self._stop_error if status in ("failed", "cancelled") else None,
        )
        return outcome, counts

    # -- records, persistence and events --------------------------------------------------
    async def _start(self, record: StepRecord, span: SpanContext, **values: Any) -> None:
        if record.started_at is None:
            values["started_at"] = utcnow()
        _update(record, status="in_progress", **values)
        if self._persist is not None:
            await self._persist(record)
        if (emitting := self._emit_status(record, span)) is not None:
            await emitting

    async def _finish(
        self, record: StepRecord, status: str, span: SpanContext, reason: str | None = None
    ) -> None:
        _update(record, status=status, reason=reason, ended_at=utcnow())
        if status != "completed":
            self._unsuccessful.add(record.step_id)
        if self._persist is not None:
            await self._persist(record)
        if (emitting := self._emit_status(record, span)) is not None:
            await emitting

    async def _save(self, record: StepRecord) -> None:
        # _start and _finish await `_persist` themselves: a coroutine less per status
        # change, two per step.
        if self._persist is not None:
            await self._persist(record)

    def _emit_status(self, record: StepRecord, span: SpanContext) -> Awaitable[Any] | None:
        """The record's `step:status` event: the emission to await when a hook, subscriber
        or stream sees it; else logged here, without a coroutine (one per step), unless
        it is `in_progress`, which the run's event log never keeps."""
        events = self._events
        interest = self._interest
        if interest.changes != events.changes:
            interest = self._interest = _Interest(events)
        if interest.status_listened:
            return self._emit("step:status", _status_data(record), span)
        if interest.status_wanted and record.status != "in_progress":
            # A finished step's event happened when the record says it ended.
            events.log_only("step:status", _status_data(record), span, record.ended_at)
        return None

    async def _emit(self, name: str, data: dict[str, Any], span: SpanContext) -> dict[str, Any]:
        run = self.run_context
        return await self._events.emit(
            name, data, thread_id=run.thread_id, run_id=run.run_id, span=span
        )

    async def _emit_run(self, name: str, data: dict[str, Any]) -> None:
        if self._events.wants(name):
            await self._emit(name, data, self.run_context.span)


class _Interest:
    """What the events of every step need, as the run's event bus stood at `changes`:
    read once per step and status change, instead of seven `wants`/`listened` calls
    per step. Made again when a hook or subscriber is added or removed."""

    __slots__ = (
        "changes",
        "status_listened",
        "status_wanted",
        "tool_after",
        "tool_before",
        "updates_listened",
        "updates_wanted",
    )

    def __init__(self, events: Any) -> None:
        self.changes: int = events.changes
        self.tool_before: bool = events.wants("tool:before")
        self.tool_after: bool = events.wants("tool:after")
        self.updates_wanted: bool = events.wants("tool:update")
        self.updates_listened: bool = events.listened("tool:update")
        self.status_wanted: bool = events.wants("step:status")
        self.status_listened: bool = events.listened("step:status")


# -- progress from tools ----------------------------------------------------------------------


class _ProgressRelay:
    """Carries one tool call's progress reports, from any thread, to `tool:update` events.

    Reports are queued in order and emitted by one drain task at a time, owned by the
    executor's TaskGroup. `close()` stops taking reports and returns the drain task
    still emitting earlier ones (await it, so the `end` update always comes last).
    One is made per tool call and most tools never report: it costs little until used.
    """

    __slots__ = (
        "_call_id",
        "_closed",
        "_executor",
        "_items",
        "_span",
        "_step_id",
        "_task",
        "_tool",
    )

    def __init__(
        self, executor: Executor, step_id: str, tool: str, call_id: str, span: SpanContext
    ) -> None:
        self._executor = executor
        self._step_id = step_id
        self._tool = tool
        self._call_id = call_id
        self._span = span
        self._items: deque[tuple[str, dict[str, Any]]] | None = None  # made by a report
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    def report(self, stage: str, payload: dict[str, Any]) -> None:
        if self._closed:
            return
        executor = self._executor
        if threading.get_ident() == executor._loop_thread:
            self._push(stage, payload)
            return
        loop = executor._loop
        # RuntimeError: the loop is closed, nobody is left to tell.
        with contextlib.suppress(RuntimeError):
            if loop is not None:
                loop.call_soon_threadsafe(self._push, stage, payload)

    def _push(self, stage: str, payload: dict[str, Any]) -> None:
        if self._closed:
            return
        if self._items is None:
            self._items = deque()
        self._items.append((stage, payload))
        if self._task is None or self._task.done():
            group = self._executor._group
            drain = self._drain()
            self._task = group.create_task(drain) if group else asyncio.ensure_future(drain)

    async def _drain(self) -> None:
        while self._items:  # a drain runs only after a report made the queue
            stage, payload = self._items.popleft()
            data = {
                "stage": stage,
                "step_id": self._step_id,
                "tool": self._tool,
                "call_id": self._call_id,
                **payload,
            }
            await self._executor._emit("tool:update", data, self._span)

    def close(self) -> asyncio.Task[None] | None:
        # Reports a worker thread made before its tool returned are already queued: the
        # loop runs their callbacks before the one that hands back the tool's result.
        self._closed = True
        task = self._task
        return task if task is not None and not task.done() else None


# -- prompts and helpers -----------------------------------------------------------------------

_STEP_SYSTEM_PROMPT = (
    "You carry out one step of a larger plan. Answer the step's task directly and "
    "concisely from the inputs given; do not describe what you would do."
)


def reasoning_messages(
    query: str, step: Step, inputs: Mapping[str, Any], max_length: int
) -> list[dict[str, Any]]:
    """The messages of a reasoning step's LLM call: the task and its inputs, each cut."""
    task = step.description or "reason over the inputs"
    parts = [f"Overall question: {query}" if query else "", f"Your task ({step.id}): {task}"]
    if inputs:
        parts.append("Inputs from earlier steps:")
        for dep, output in inputs.items():
            parts.append(f"[{dep}]\n{safe_stringify(output, max_length=max_length)}")
    return [
        {"role": "system", "content": _STEP_SYSTEM_PROMPT},
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


def _update(record: StepRecord, **values: Any) -> None:
    """Set fields of a record the executor owns, skipping pydantic's per-assignment
    handler (a few µs each, ten times per step); the values are of the declared types."""
    record.__dict__.update(values)
    record.__pydantic_fields_set__.update(values)


def _status_data(record: StepRecord) -> dict[str, Any]:
    """The data of a record's `step:status` event."""
    values = record.__dict__  # one attribute read: a model's are slow
    data: dict[str, Any] = {
        "step_id": values["step_id"],
        "tool": values["tool"],
        "status": values["status"],
        "attempt": values["attempts"],
    }
    if reason := values["reason"]:
        data["reason"] = reason
    return data


def _pending_record(step: Step) -> StepRecord:
    """A fresh record of a step that has not run, as `StepRecord(step_id=, tool=)` makes
    it, without validating (one per step of the plan)."""
    values = _PENDING.copy()
    values["step_id"] = step.id
    values["tool"] = step.tool
    return trusted(StepRecord, values, fields_set={"step_id", "tool"})


# A fresh record's values in field order: StepRecord's defaults, all immutable (None,
# "pending", 0), and the two fields every record sets.
_PENDING: dict[str, Any] = {
    name: None if info.is_required() else info.get_default(call_default_factory=True)
    for name, info in StepRecord.model_fields.items()
}


def _call_context(
    template: ExecutionContext,
    fields: dict[str, Any],
    *,
    cancellation: CancellationToken,
    reporter: Callable[..., None] | None,
) -> ExecutionContext:
    """The run's validated context with one call's fields and signals, not re-validated.

    pydantic resolves every default on each instantiation (~20 µs for this model); a
    1,000-step plan cannot afford that per call. `fields` are of their declared types.
    """
    return trusted(
        ExecutionContext,
        {**template.__dict__, **fields},
        private={"_cancellation": cancellation, "_reporter": reporter},
    )


def _worth_retrying(result: ToolResult) -> bool:
    if result.status != "error" or result.metadata.get("vetoed"):
        return False
    if result.retryable:
        return True
    # An exception the tool raised is retried unless a retry cannot change the answer.
    return (
        "exception_type" in result.metadata
        and result.metadata.get("error_code") not in _NOT_RETRIED
    )


def _skip_reason(dep: str, record: StepRecord | None) -> str:
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
