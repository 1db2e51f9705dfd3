"""One run under the thread's lease: its collaborators, its state, and the object the
phases (`art.engine.phases`, which drive it) work on and `cancel` reaches.

As in pydantic-ai's `_agent_graph.py`: `RunDeps` is what the instance lends a run and
never changes (`GraphAgentDeps`), `RunState` is what changes as the run goes
(`GraphAgentState`), and each phase is a node of its own. `Run` ties them together
with the run's events and its event log, and is what `ArtInstance.cancel` reaches.

Also here: how a `process` call finds or starts its run record (an idempotent retry
continues the thread's active run; another query abandons it) and how a resume finds
the suspended run a decision belongs to; both set the run up (`art.engine.setup`) first,
where a `run:before` hook may veto it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from art.config import ExecutionConfig, Persona, ProcessOptions
from art.core.log import get_logger
from art.core.serialization import escape_unencodable_data
from art.core.spans import SpanContext, new_trace_id
from art.engine.context import RunContext, RunStats
from art.engine.setup import RunSetup, set_up_run
from art.errors import (
    ConfigurationError,
    ModelError,
    RunErrorCode,
    StorageError,
    SuspensionError,
)
from art.observe.errors import error_data
from art.observe.event_log import LOGGED_EVENTS, EventLogWriter, kept_in_log
from art.observe.events import Event, EventBus, HookVeto, RunEvents, RunScope
from art.responses import (
    AgentFinalResponse,
    ConversationMessage,
    ExecutionMetadata,
    RunError,
)
from art.storage.contract import RunRecord, StepSnapshot, StorageAdapter, Suspension
from art.tooling.threads import ToolThreads

if TYPE_CHECKING:
    from art.engine.execute import PlanExecution
    from art.engine.suspension import Decision
    from art.llm.client import LLMClient
    from art.planning.planner import Planner
    from art.planning.plans import Plan
    from art.tooling.registry import ToolRegistry

__all__ = [
    "HISTORY_LIMIT",
    "Run",
    "RunDeps",
    "RunState",
    "call_error",
    "open_resumed_run",
    "open_run",
    "pending_suspensions",
    "refused_response",
]

log = get_logger(__name__)

#: How long a step's record is retried when the storage fails to save it.
STEP_SAVE_RETRY_S = 60.0
_FIRST_SAVE_RETRY_S = 0.1
_MAX_SAVE_RETRY_S = 5.0

#: How many earlier messages of the thread the planner and the synthesis see.
HISTORY_LIMIT = 20

EventSink = Callable[[Event], None]


@dataclass(frozen=True, slots=True)
class RunDeps:
    """What an instance lends one run."""

    storage: StorageAdapter
    setup: RunSetup  # the run's tools, system context and metadata
    llm: LLMClient
    planner: Planner
    model: str  # reasoning steps and tools that ask for the model's help
    synthesis_model: str
    persona: Persona
    tool_threads: ToolThreads | None  # where plain `def` tools run

    @property
    def registry(self) -> ToolRegistry:
        return self.setup.registry


@dataclass(slots=True)
class RunState:
    """What changes as the run goes: its stored record and what this call learned."""

    record: RunRecord
    started: float  # time.perf_counter() when the call began
    history: list[ConversationMessage] = field(default_factory=list)
    cancel_reason: str | None = None
    # The run's working time before this call (a resumed run's earlier parts).
    earlier_ms: float = 0.0

    def duration_ms(self) -> float:
        """The run's working time so far: its earlier calls and this one."""
        return self.earlier_ms + (time.perf_counter() - self.started) * 1000.0


class Run:
    """One `process` or resume of one run: what its phases share (`art.engine.phases.drive`
    runs them once) and what `cancel` stops."""

    def __init__(
        self,
        deps: RunDeps,
        record: RunRecord,
        config: ExecutionConfig,
        opts: ProcessOptions,
        *,
        bus: EventBus,
        sinks: Sequence[EventSink] = (),
        started: float,
    ) -> None:
        self.deps = deps
        self.state = RunState(record=record, started=started, earlier_ms=record.duration_ms)
        setup = deps.setup
        session_id = record.session_id or opts.session_id
        self.events = RunEvents(
            bus,
            sinks=sinks,
            logged=LOGGED_EVENTS,
            keep=kept_in_log,
            scope=RunScope(session_id, record.message_id, setup.metadata),
        )
        self.context = RunContext(
            thread_id=record.thread_id,
            run_id=record.run_id,
            span=setup.span,
            config=config,
            events=self.events,
            user_id=record.user_id or opts.user_id,
            session_id=session_id,
            message_id=record.message_id,
            agent=deps.persona.name,
            metadata=setup.metadata,
            system_context=setup.system_context,
            stats=RunStats(
                llm_calls=record.llm_calls,
                tool_calls=record.tool_calls,
                usage=record.usage,
                llm_cost=record.llm_cost,
            ),
        )
        # Written every few hundred events, while the run waits for its tools, and at the end.
        self.log = EventLogWriter(
            self.events,
            deps.storage,
            thread_id=record.thread_id,
            run_id=record.run_id,
            trace_id=record.trace_id,
            redact=deps.llm.redact,
        )
        self.loop = asyncio.get_running_loop()
        self.execution: PlanExecution | None = None  # the execute phase, while it runs
        # The task that drives the run, for its whole life: `cancel` cancels it wherever it
        # waits (a planner or synthesis call, a replan, storage) but inside a pass over the
        # plan, where the steps stop themselves and record how they ended.
        self._task: asyncio.Task[Any] | None = None
        self._cancelled_task = False
        self._ending = False  # the run's end is being stored: too late to cancel

    @property
    def thread_id(self) -> str:
        return self.context.thread_id

    def cancel(self, reason: str) -> None:
        """Stop the run (on its own loop) in whatever phase it is: a pass over the plan
        starts no new steps and cancels the running ones; anything else it waits for (a
        planner, replanner or synthesis call, storage) is cancelled, its request closed.
        The run then ends with code CANCELLED."""
        if self._ending or self.state.cancel_reason is not None:
            return
        self.state.cancel_reason = reason
        self.context.cancellation.cancel(reason)
        execution = self.execution
        if execution is not None and execution.cancel(reason):
            return  # the pass stops its steps and returns
        self._cancel_task()

    def attach(self, task: asyncio.Task[Any] | None) -> None:
        """The task that drives the run: `cancel` cancels it where it waits."""
        self._task = task

    async def storage_lost(self, lost: StorageError) -> None:
        """Report the storage failure that stops the run (the caller gets `lost` raised)."""
        log.error("run stopped by its storage", run_id=self.context.run_id, error=lost.message)
        data = error_data("storage", RunErrorCode.STORAGE_ERROR, lost.message, recoverable=False)
        await self.emit("error", data)
        with contextlib.suppress(Exception):
            await asyncio.shield(self.log.finish())

    def ending(self) -> None:
        """The run's end is being stored: a cancel from now on changes nothing."""
        self._ending = True

    def _cancel_task(self) -> None:
        task = self._task
        if task is not None and not task.done() and not self._cancelled_task:
            self._cancelled_task = True
            task.cancel()

    def cancel_was_ours(self) -> bool:
        """Whether the CancelledError being handled is `cancel`'s alone (then cleared)."""
        task = self._task
        if not self._cancelled_task or task is None:
            return False
        self._cancelled_task = False
        return task.uncancel() == 0

    # -- what the phases share ----------------------------------------------------------
    async def emit(self, name: str, data: dict[str, Any]) -> None:
        """Emit a run-level event (on the run's root span)."""
        run = self.context
        if self.events.wants(name):
            await self.events.emit(
                name, data, thread_id=run.thread_id, run_id=run.run_id, span=run.span
            )

    def persist_step(self, snapshot: StepSnapshot) -> Awaitable[None]:
        """Save a step record; once a batch of events has gathered, write the log beside it."""
        if self.log.batch_full:
            self.log.write_soon()
        return self._save_step(snapshot)

    async def _save_step(self, snapshot: StepSnapshot) -> None:
        """Save a step record, retrying a storage error (a failover, a restart, a reaped
        connection) with backoff for up to STEP_SAVE_RETRY_S: a blip costs a retry, not
        the step. Saving a record is idempotent (the step's latest record wins)."""
        storage, run_id = self.deps.storage, self.context.run_id
        deadline = time.monotonic() + STEP_SAVE_RETRY_S
        delay = _FIRST_SAVE_RETRY_S
        while True:
            try:
                await storage.save_step_snapshot(run_id, snapshot)
                return
            except StorageError as exc:
                if time.monotonic() + delay > deadline:
                    raise
                log.warning(
                    "saving a step's record failed: retrying",
                    run_id=run_id,
                    step_id=snapshot.step_id,
                    retry_in_s=delay,
                    error=exc.message,
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, _MAX_SAVE_RETRY_S)

    async def plan_created(self, plan: Plan) -> None:
        """Store the planner's plan with the run and emit `plan:created`."""
        record = self.state.record
        record.plan = plan
        record.status = "running"
        self.sync_counters()
        await self.deps.storage.update_run(record)
        # The plan's wire form is made when a hook or stream sees the event, or else
        # when the log is written (while the run waits for its tools).
        wire = plan.to_wire() if self.events.listened("plan:created") else plan
        await self.emit("plan:created", {"plan": wire, "steps": len(plan.steps)})

    async def plan_updated(self, plan: Plan, replans: int) -> None:
        record = self.state.record
        record.plan = plan
        record.replans = replans
        self.sync_counters()
        await self.deps.storage.update_run(record)

    def sync_counters(self) -> None:
        """Copy the run's LLM and tool counters onto its record (before it is stored)."""
        stats, record = self.context.stats, self.state.record
        record.llm_calls = stats.llm_calls
        record.tool_calls = stats.tool_calls
        record.usage = stats.usage
        record.llm_cost = stats.llm_cost
        record.duration_ms = self.state.duration_ms()


# -- finding the run a call continues -------------------------------------------------------


async def open_run(
    storage: StorageAdapter,
    tools: ToolRegistry,
    bus: EventBus,
    query: str,
    thread_id: str,
    opts: ProcessOptions,
) -> tuple[RunRecord, bool, RunSetup]:
    """The record `process(query)` runs on the thread, whether it continues one, and the
    run's setup. Raises HookVeto when a `run:before` hook refuses the run (nothing stored).

    The same query as the thread's active run is an idempotent retry: it continues where
    the run stopped (with `opts.run_id`, the run of that id is continued instead, and a
    new run gets that id). Another query marks that run abandoned and starts a new one.
    """
    active = await storage.get_active_run(thread_id)
    # The same run: the one the caller names (queued runs name theirs), else the same query.
    continued = active is not None and (
        active.run_id == opts.run_id if opts.run_id else active.query == query
    )
    record = active if continued and active is not None else None
    if record is None:
        record = RunRecord(
            run_id=opts.run_id or uuid.uuid4().hex,
            thread_id=thread_id,
            trace_id=new_trace_id(),
            query=query,
            user_id=opts.user_id,
            session_id=opts.session_id,
        )
    setup = await _set_up(tools, record, opts, bus, continued=continued)
    if active is not None and not continued:
        log.info("run abandoned", thread_id=thread_id, run_id=active.run_id)
        active.status = "abandoned"
        await storage.update_run(active)
    if not continued:
        await storage.create_run(record)
    return record, continued, setup


async def open_resumed_run(
    storage: StorageAdapter,
    tools: ToolRegistry,
    bus: EventBus,
    thread_id: str,
    suspension_id: str,
    decision: Decision,
    opts: ProcessOptions,
) -> tuple[RunRecord, Suspension, RunSetup]:
    """Record `decision` on a pending suspension; return its run, the decided suspension
    and the run's setup. Raises SuspensionError for an unknown or already-decided one,
    ConfigurationError when a step still to run names a tool this instance lacks, and
    HookVeto when a `run:before` hook refuses the run (the decision is not recorded in
    either case)."""
    every = await storage.list_suspensions(thread_id, pending_only=False)
    target = next((s for s in every if s.suspension_id == suspension_id), None)
    if target is None:
        raise SuspensionError(
            f"no suspension {suspension_id!r} on thread {thread_id!r}",
            code=RunErrorCode.SUSPENSION_NOT_FOUND,
        )
    if not target.pending:
        raise SuspensionError(
            f"suspension {suspension_id!r} was already decided",
            code=RunErrorCode.SUSPENSION_ALREADY_DECIDED,
            details=target.decision,
        )
    record = await storage.get_run(target.run_id)
    if record is None or record.status != "suspended":
        status = record.status if record is not None else "missing"
        raise SuspensionError(
            f"suspension {suspension_id!r} belongs to run {target.run_id!r}, which is "
            f"no longer suspended (status {status})",
            code=RunErrorCode.SUSPENSION_NOT_FOUND,
        )
    setup = await _set_up(tools, record, opts, bus, continued=True)
    _check_remaining_tools(record, setup.registry)
    # Atomic: of two concurrent decisions (other processes included) one succeeds.
    decided = await storage.decide_suspension(thread_id, suspension_id, _decision_data(decision))
    return record, decided, setup


def _check_remaining_tools(record: RunRecord, registry: ToolRegistry) -> None:
    """Refuse to resume a run whose unfinished steps name tools this instance lacks: the
    approval would be used up on a run that can only fail."""
    steps = record.plan.steps if record.plan is not None else []
    finished = {"completed", "failed", "skipped", "cancelled"}
    missing = sorted(
        {
            step.tool
            for step in steps
            if step.tool
            and getattr(record.steps.get(step.id), "status", "pending") not in finished
            and registry.entry(step.tool) is None
        }
    )
    if missing:
        known = ", ".join(registry.names()) or "none"
        raise ConfigurationError(
            f"cannot resume: the run's remaining steps use {', '.join(map(repr, missing))}, "
            f"which this instance does not have (registered: {known}); resume with the "
            "tools the run was started with (the CLI: the same --tools and --mcp-config); "
            "the suspension stays open"
        )


def _decision_data(decision: Decision) -> dict[str, Any]:
    """The decision as JSON data, its text escaped as a query is (art.core.serialization)."""
    from pydantic_core import to_jsonable_python

    data: dict[str, Any] = to_jsonable_python(escape_unencodable_data(decision.model_dump()))
    return data


async def _set_up(
    tools: ToolRegistry,
    record: RunRecord,
    opts: ProcessOptions,
    bus: EventBus,
    *,
    continued: bool,
) -> RunSetup:
    """The run's tools, system context and metadata, after the `run:before` hooks;
    stored on `record` for a continued run or a resume to find."""
    setup = await set_up_run(
        tools, record, opts, bus, continued=continued, span=SpanContext.root(record.trace_id)
    )
    record.system_context = setup.system_context
    record.metadata = setup.metadata
    return setup


async def refused_response(
    bus: EventBus,
    thread_id: str,
    error: RunError,
    started: float,
    *,
    sinks: Sequence[EventSink] = (),
    source: str = "run",
) -> AgentFinalResponse:
    """The response of a run that never started (a busy thread, a vetoed run)."""
    span = SpanContext.root()
    events = RunEvents(bus, sinks=sinks)
    if events.wants("error"):
        await events.emit(
            "error",
            error_data(source, error.code, error.message, recoverable=False, phase="setup"),
            thread_id=thread_id,
            span=span,
        )
    return AgentFinalResponse(
        response=ConversationMessage(
            thread_id=thread_id, role="assistant", content=f"{error.code}: {error.message}"
        ),
        metadata=ExecutionMetadata(
            thread_id=thread_id,
            trace_id=span.trace_id,
            status="error",
            total_duration_ms=(time.perf_counter() - started) * 1000.0,
            error=error,
        ),
    )


def call_error(exc: ModelError | HookVeto) -> RunError:
    """The run error of a failed planning or synthesis call, or of a vetoed run."""
    if isinstance(exc, ModelError):
        return RunError(code=str(exc.code), message=exc.message, retry_after_s=exc.retry_after_s)
    return RunError(code=RunErrorCode.VETOED, message=str(exc))


async def pending_suspensions(
    storage: StorageAdapter, thread_id: str, run_id: str
) -> list[Suspension]:
    """The undecided suspensions of one run."""
    found = await storage.list_suspensions(thread_id, pending_only=True)
    return [s for s in found if s.run_id == run_id]
