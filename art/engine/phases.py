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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from art.core.log import get_logger
from art.core.serialization import truncate
from art.engine.run import Run, call_error
from art.engine.suspension import apply_decision, latest_by_step, suspended_message
from art.errors import ModelError, PlanError, RunErrorCode
from art.observe.errors import error_data
from art.observe.events import HookVeto
from art.responses import (
    AgentFinalResponse,
    ConversationMessage,
    DisplayOutput,
    ExecutionMetadata,
    MessageMetadata,
    RunError,
    RunStatusName,
)
from art.storage.contract import Suspension

if TYPE_CHECKING:
    from art.engine.execute import ExecutionOutcome
    from art.llm.client import LLMResult
    from art.responses import StepRecord
    from art.tooling.registry import ToolRegistry

__all__ = [
    "ApplyDecisions",
    "End",
    "ExecutePlan",
    "Fail",
    "MakePlan",
    "Phase",
    "Suspend",
    "Synthesize",
    "display_outputs",
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
        from art.engine.execute import PlanExecution
        from art.engine.execution_state import ExecutionDeps
        from art.engine.run import pending_suspensions

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
        from art.engine.synthesis import SynthesisInput, incomplete_answer, synthesize

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
    from art.engine.synthesis import gather_sources

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


def display_outputs(steps: Iterable[StepRecord], registry: ToolRegistry) -> list[DisplayOutput]:
    """The completed display steps among `steps`, in order, each with its tool's
    `display_config` (`AgentFinalResponse.display`)."""
    found = []
    for record in steps:
        tool = registry.get(record.tool) if record.tool else None
        if record.status == "completed" and tool is not None and tool.schema.mode == "display":
            found.append(
                DisplayOutput(
                    step_id=record.step_id,
                    tool_name=record.tool or "",
                    output=record.output,
                    config=tool.schema.display_config,
                )
            )
    return found
