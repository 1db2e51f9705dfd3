"""The phases of a run, one node each: `run(run)` does the phase and returns the next
node, or `End` with the response (pydantic-ai's `_agent_graph.py` nodes).

    ApplyDecisions -> MakePlan -> ExecutePlan -> Synthesize -> End
          |              |            |
          +--------------+------------+-> Suspend -> End,  Fail -> End

`ApplyDecisions` completes (or fails) the steps whose suspensions were decided while
the run was suspended; `MakePlan` asks the planner unless the run already has a plan;
`ExecutePlan` runs it (`art.engine.execute`); `Synthesize` writes the answer and stores the
run's end with its exchange in one write. `Suspend` and `Fail` store the run's status
and answer with what it is waiting for or why it failed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from art.core.log import get_logger
from art.core.serialization import truncate
from art.core.spans import current_traceparent
from art.engine.execute import ExecutionOutcome, PlanExecution
from art.engine.execution_state import ExecutionDeps
from art.engine.run import HISTORY_LIMIT, Run, call_error, pending_suspensions
from art.engine.suspension import apply_decision, latest_by_step, suspended_message
from art.engine.synthesis import SynthesisInput, gather_sources, incomplete_answer, synthesize
from art.errors import ModelError, PlanError, RunErrorCode, StorageError
from art.observe.errors import error_data
from art.observe.events import HookVeto
from art.responses import (
    AgentFinalResponse,
    ConversationMessage,
    ExecutionMetadata,
    MessageMetadata,
    RunError,
    RunStatusName,
    display_outputs,
)
from art.storage.contract import Suspension

if TYPE_CHECKING:
    from art.llm.client import LLMResult

__all__ = [
    "ApplyDecisions",
    "End",
    "ExecutePlan",
    "Fail",
    "MakePlan",
    "Phase",
    "Suspend",
    "Synthesize",
    "drive",
    "run_phases",
    "session_end_data",
]

log = get_logger(__name__)


@dataclass(frozen=True, slots=True)
class End:
    """The run's response: no phase follows."""

    response: AgentFinalResponse


class Phase(Protocol):
    async def run(self, run: Run) -> Phase | End: ...


async def drive(
    run: Run, start_data: dict[str, Any], *, resumed: Suspension | None = None
) -> AgentFinalResponse:
    """Run `run`'s phases to a response; the event log is written whatever happens."""
    state = run.state
    record = state.record
    start = {"query": record.query, **start_data}
    if record.trace_parent is not None:  # a later part of the run
        start["trace_parent"] = record.trace_parent
    await run.emit("session:start", start)
    if record.trace_parent is None:
        # Stored with the record (at the plan, at the latest), for a resume elsewhere.
        record.trace_parent = current_traceparent()
    if resumed is not None:
        await run.emit(
            "resumed",
            {
                "suspension_id": resumed.suspension_id,
                "step_id": resumed.step_id,
                "tool": resumed.tool_name,
                "decision": resumed.decision,
            },
        )
    run.attach(asyncio.current_task())
    try:
        try:
            if state.cancel_reason is None:  # else cancelled as it started
                state.history = await run.deps.storage.get_history(
                    run.thread_id, limit=HISTORY_LIMIT
                )
                response = await run_phases(run)
            else:
                response = await _cancelled(run)
        except asyncio.CancelledError:
            if not run.cancel_was_ours():
                raise
            # `cancel` stopped the run where it waited; what finished is stored already.
            response = await _cancelled(run)
    except asyncio.CancelledError:
        # Left as a crash leaves it (the same query continues it); keep the log.
        with contextlib.suppress(Exception):
            await asyncio.shield(run.log.finish())
        raise
    except Exception as exc:
        if (lost := _storage_error(exc)) is not None:
            # The storage stopped answering (past the retries of a step's record): the
            # run stays as a crash leaves it, and the same query continues it.
            await run.storage_lost(lost)
            raise lost from exc
        log.exception("run failed inside the engine", run_id=run.context.run_id)
        error = RunError(
            code=RunErrorCode.INTERNAL_ERROR, message=f"{type(exc).__name__}: {_unwrap(exc)}"
        )
        response = (await Fail(error).run(run)).response
    finally:
        # The execute phase refers back to this run (its persist and idle callbacks):
        # without that cycle a finished run's objects are freed as soon as the caller
        # drops the response, not at some later collection.
        run.execution = None
    await run.emit("session:end", session_end_data(response))
    await run.log.finish()
    _log_summary(response)
    return response


async def _cancelled(run: Run) -> AgentFinalResponse:
    error = RunError(code=RunErrorCode.CANCELLED, message=run.state.cancel_reason or "")
    return (await Fail(error).run(run)).response


async def run_phases(run: Run) -> AgentFinalResponse:
    """Run the phases from the first to `End`."""
    node: Phase | End = ApplyDecisions()
    while not isinstance(node, End):
        node = await node.run(run)
    return node.response


@dataclass(frozen=True, slots=True)
class ApplyDecisions:
    """Decisions taken while the run was suspended complete (or fail) their steps."""

    async def run(self, run: Run) -> Phase | End:
        record, storage = run.state.record, run.deps.storage
        waiting = [r for r in record.steps.values() if r.status == "waiting"]
        if not waiting:
            return MakePlan()
        everything = await storage.list_suspensions(run.thread_id, pending_only=False)
        by_step = latest_by_step(everything, record.run_id)
        for step_record in waiting:
            suspension = by_step.get(step_record.step_id)
            if suspension is not None and not suspension.pending:
                tool = run.deps.registry.get(suspension.tool_name)
                rerun = tool is not None and (
                    tool.schema.runs_on_approval or suspension.asks_for_input
                )
                apply_decision(step_record, suspension, run_on_approval=rerun)
                await storage.save_step(record.run_id, step_record)
        remaining = [r.step_id for r in waiting if r.status == "waiting"]
        if remaining:
            pending = [by_step[sid] for sid in remaining if sid in by_step]
            return Suspend([s for s in pending if s.pending])
        return MakePlan()


@dataclass(frozen=True, slots=True)
class MakePlan:
    """The planner writes the plan, unless the run has one (a continued or resumed run)."""

    async def run(self, run: Run) -> Phase | End:
        record, storage = run.state.record, run.deps.storage
        if record.plan is None and run.context.config.eager_execution:
            pass  # ExecutePlan streams the plan and starts its steps as they arrive
        elif record.plan is None:
            try:
                plan = await run.deps.planner.plan(run.context, record.query, run.state.history)
            except PlanError as exc:
                invalid = RunError(
                    code=RunErrorCode.PLAN_INVALID, message=exc.message, problems=list(exc.problems)
                )
                return Fail(invalid, source="planning", phase="planning")
            except (ModelError, HookVeto) as exc:
                return Fail(call_error(exc), source=_source_of(exc), phase="planning")
            await run.plan_created(plan)
        elif record.status != "running":
            record.status = "running"
            await storage.update_run(record)
        if run.context.cancellation.cancelled:
            reason = run.state.cancel_reason or "cancelled"
            return Fail(RunError(code=RunErrorCode.CANCELLED, message=reason))
        return ExecutePlan()


@dataclass(frozen=True, slots=True)
class ExecutePlan:
    """Run the plan's steps (and replans) to the end, a suspension, or a stop; without a
    plan (eager execution), while the planner streams it."""

    async def run(self, run: Run) -> Phase | End:
        record, deps = run.state.record, run.deps
        execution = PlanExecution(
            ExecutionDeps(
                run=run.context,
                registry=deps.registry,
                llm=deps.llm,
                model=deps.model,
                planner=deps.planner,
                query=record.query,
                history=run.state.history,
                persist=run.persist_step,
                suspend=deps.storage.add_suspension,
                plan_updated=run.plan_updated,
                plan_created=run.plan_created,
                thread_pool=deps.tool_threads,
                idle=run.log.write_soon,
            ),
            record.plan,
            records=record.steps,
            replans=record.replans,
        )
        run.execution = execution
        try:
            outcome = await execution.run()
        except asyncio.CancelledError:
            record.steps = execution.records()  # stopped between passes: keep what finished
            raise
        finally:
            run.execution = None
        record.steps = outcome.records
        record.plan = outcome.plan
        record.replans = outcome.replans
        if outcome.status == "suspended":
            pending = await pending_suspensions(deps.storage, run.thread_id, record.run_id)
            return Suspend(pending or outcome.suspensions)
        if outcome.status in ("failed", "cancelled"):
            failed = RunError(code=RunErrorCode.STEP_FAILED, message="a step failed")
            error = outcome.error or failed
            # Not a step's failure: the streamed plan's (invalid, or its call failed).
            by_steps = error.code in (RunErrorCode.STEP_FAILED, RunErrorCode.CANCELLED)
            source = "run" if by_steps else "planning"
            return Fail(error, source=source, phase="execute", reported=outcome.error_reported)
        return Synthesize(outcome)


@dataclass(frozen=True, slots=True)
class Synthesize:
    """One LLM call writes the answer; the run's end and its exchange are stored together."""

    outcome: ExecutionOutcome

    async def run(self, run: Run) -> Phase | End:
        record, deps, outcome = run.state.record, run.deps, self.outcome
        data = SynthesisInput(
            query=record.query,
            records=list(outcome.records.values()),
            plan=outcome.plan,
            history=run.state.history,
            display_tools=deps.setup.display_tools,
            persona=deps.persona.synthesis,
            system_context=run.context.system_context,
            max_length=run.context.config.tool_result_max_length,
        )
        try:
            result = await synthesize(run.context, deps.llm, deps.synthesis_model, data)
        except (ModelError, HookVeto) as exc:
            return Fail(call_error(exc), source=_source_of(exc), phase="synthesis")
        run.ending()
        cut_off = incomplete_answer(result.finish_reason)
        answer, limit = result.content, run.context.config.max_answer_chars
        if len(answer) > limit:
            answer = truncate(answer, limit)
            cut_off = f"the answer was cut to {limit} characters (max_answer_chars)"
        complete = outcome.status == "completed" and cut_off is None
        status: RunStatusName = "success" if complete else "partial"
        record.status = "completed" if complete else "partial"
        record.answer = answer
        record.error = (
            RunError(code=RunErrorCode.ANSWER_INCOMPLETE, message=cut_off)
            if cut_off
            else outcome.error  # e.g. why replanning failed
        )
        run.sync_counters()
        response = build_response(run, status, answer, error=record.error, answered_by=result)
        question = ConversationMessage(thread_id=run.thread_id, role="user", content=record.query)
        # The run's end and its exchange in one write: a crash keeps both or neither.
        await deps.storage.finish_run(record, [question, response.response])
        return End(response)


@dataclass(frozen=True, slots=True)
class Suspend:
    """The run waits for human decisions on `pending`."""

    pending: Sequence[Suspension]

    async def run(self, run: Run) -> End:
        run.ending()
        record, pending = run.state.record, self.pending
        record.status = "suspended"
        run.sync_counters()
        await run.deps.storage.update_run(record)
        ids = [s.suspension_id for s in pending]
        await run.emit(
            "suspended",
            {
                "suspension_id": ids[0] if ids else None,
                "suspension_ids": ids,
                "steps": [
                    {
                        "suspension_id": s.suspension_id,
                        "step_id": s.step_id,
                        "tool": s.tool_name,
                        "args": s.args,
                        "prompt": s.prompt,
                        "config": _blocking_config(run, s.tool_name),
                    }
                    for s in pending
                ],
            },
        )
        content = suspended_message(pending)
        return End(build_response(run, "suspended", content, suspension_ids=ids))


@dataclass(frozen=True, slots=True)
class Fail:
    """The run failed with `error` (its message redacted before it is stored); `source`
    and `phase` say what failed where, for the `error` event, which is left out when the
    failure was reported already (a step's, under `on_step_failure="fail"`)."""

    error: RunError
    source: str = "run"
    phase: str | None = None
    reported: bool = False

    async def run(self, run: Run) -> End:
        run.ending()
        error = self.error.model_copy(update={"message": run.deps.llm.redact(self.error.message)})
        record = run.state.record
        record.status = "failed"
        record.error = error
        run.sync_counters()
        try:
            await run.deps.storage.update_run(record)
        except Exception as exc:  # the response still tells the caller why the run failed
            log.error("the failed run could not be stored", run_id=record.run_id, error=repr(exc))
        if not self.reported:
            data = error_data(
                self.source,
                error.code,
                error.message,
                recoverable=False,
                phase=self.phase,
                problems=error.problems,
            )
            await run.emit("error", data)
        content = f"The run failed ({error.code}): {error.message}"
        return End(build_response(run, "error", content, error=error))


# -- the response ---------------------------------------------------------------------------


def build_response(
    run: Run,
    status: RunStatusName,
    content: str,
    *,
    error: RunError | None = None,
    suspension_ids: Sequence[str] = (),
    answered_by: LLMResult | None = None,
) -> AgentFinalResponse:
    """The run's response as it stands: its answer, steps, displays, counters and timing."""
    context, record = run.context, run.state.record
    steps = list(record.steps.values())
    display = display_outputs(steps, run.deps.registry)
    message = ConversationMessage(
        message_id=record.message_id,
        thread_id=context.thread_id,
        role="assistant",
        content=content,
        metadata=MessageMetadata(sources=gather_sources(steps)),
    )
    stats = context.stats
    metadata = ExecutionMetadata(
        thread_id=context.thread_id,
        trace_id=context.trace_id,
        run_id=context.run_id,
        user_id=context.user_id,
        session_id=context.session_id,
        status=status,
        total_duration_ms=run.state.duration_ms(),
        llm_calls=stats.llm_calls,
        tool_calls=stats.tool_calls,
        usage=stats.usage,
        llm_cost=stats.llm_cost,
        error=error,
        suspension_id=suspension_ids[0] if suspension_ids else None,
        suspension_ids=list(suspension_ids),
        warnings=_warnings(run, status),
        model=answered_by.model if answered_by else None,
        finish_reason=answered_by.finish_reason if answered_by else None,
    )
    return AgentFinalResponse(
        response=message, metadata=metadata, plan=record.plan, steps=steps, display=display
    )


def _warnings(run: Run, status: RunStatusName) -> list[str]:
    """What the response should point out although the run did not fail."""
    plan, registry = run.state.record.plan, run.deps.registry
    if status == "success" and plan is not None and not plan.steps and len(registry):
        names = ", ".join(registry.names()[:10]) + (", ..." if len(registry) > 10 else "")
        return [
            f"the plan has no steps, so no tool ran ({len(registry)} available: {names}); "
            "the answer comes from the model alone"
        ]
    return []


def session_end_data(response: AgentFinalResponse) -> dict[str, Any]:
    """The data of the `session:end` event (`response` is left out of the stored log)."""
    meta = response.metadata
    return {
        "status": meta.status,
        "answer": response.content if meta.status in ("success", "partial") else "",
        "llm_calls": meta.llm_calls,
        "tool_calls": meta.tool_calls,
        "duration_ms": meta.total_duration_ms,
        "error": meta.error.model_dump(mode="json") if meta.error else None,
        "suspension_ids": list(meta.suspension_ids),
        "response": response,
    }


def _source_of(exc: ModelError | HookVeto) -> str:
    return "llm" if isinstance(exc, ModelError) else "hook"


def _blocking_config(run: Run, tool_name: str) -> dict[str, Any] | None:
    tool = run.deps.registry.get(tool_name)
    return tool.schema.blocking_config if tool is not None else None


def _log_summary(response: AgentFinalResponse) -> None:
    """One INFO line per finished run: what it did and cost (-v in the CLI shows it)."""
    meta = response.metadata
    steps = response.steps
    log.info(
        "run finished",
        thread_id=meta.thread_id,
        run_id=meta.run_id,
        status=meta.status,
        steps=len(steps),
        steps_completed=sum(1 for s in steps if s.status == "completed"),
        llm_calls=meta.llm_calls,
        tool_calls=meta.tool_calls,
        tokens=meta.usage.total_tokens,
        duration_ms=round(meta.total_duration_ms, 1),
        error=meta.error.code if meta.error is not None else None,
    )


def _storage_error(exc: BaseException) -> StorageError | None:
    """The StorageError that ended a run, looking inside exception groups (its steps')."""
    if isinstance(exc, StorageError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            if (found := _storage_error(inner)) is not None:
                return found
    return None


def _unwrap(exc: BaseException) -> str:
    """The message of an engine fault, looking inside a one-exception group."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return str(exc) or type(exc).__name__
