"""The execute phase: passes over the plan, each by a fresh `Executor`, with replanning
between them (LLMCompiler's outer loop around a fresh `TaskFetchingUnit`).

A pass runs every step it can; a step that fails under the `replan` policy ends the pass
once the running steps finish, the planner writes the rest of the plan from what is
known, and the next pass runs it, never running a completed step again.

Without a plan (eager execution) the first pass runs while the planner streams it: each
step joins the executor when its object is complete and valid (`art.planning.stream`), and
the pass ends once the plan is complete (repairs included) and the steps have run.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from art.core.log import get_logger
from art.engine.execution_state import FINISHED, ExecutionDeps, ExecutionState, StepState, Stop
from art.engine.policies import failure_policy
from art.engine.scheduler import Executor, step_dependencies
from art.engine.steps import CallResources, StepRunner
from art.errors import ModelError, PlanError, RunErrorCode
from art.observe.errors import error_data
from art.observe.events import HookVeto
from art.planning.plans import Plan, Step
from art.planning.references import resolve_references
from art.planning.stream import StepArrivals
from art.responses import RunError, StepRecord
from art.storage.contract import Suspension

__all__ = ["ExecutionOutcome", "PlanExecution"]

log = get_logger(__name__)

OutcomeStatus = Literal["completed", "partial", "suspended", "failed", "cancelled"]


@dataclass
class ExecutionOutcome:
    """What executing a plan produced."""

    status: OutcomeStatus
    plan: Plan
    records: dict[str, StepRecord]
    suspensions: list[Suspension] = field(default_factory=list)
    replans: int = 0
    error: RunError | None = None
    error_reported: bool = False  # `error` was a step's failure, reported as it happened

    @property
    def outputs(self) -> dict[str, Any]:
        return {
            step_id: record.result.output if record.result is not None else None
            for step_id, record in self.records.items()
            if record.status == "completed"
        }


class PlanExecution:
    """Runs one plan, and its replans, to the end, a suspension, or a stop. Use once:
    `await PlanExecution(deps, plan).run()`.

    `records` carries the step records of an earlier attempt of the same run (an
    idempotent retry or a resume): completed steps are not run again and their outputs
    are reused; `in_progress` steps run again with the next attempt number; `waiting`
    steps stay suspended. `plan=None` streams the plan from `deps.planner` (eager
    execution); a completed record is then reused by a streamed step with the same id,
    tool and arguments.
    """

    def __init__(
        self,
        deps: ExecutionDeps,
        plan: Plan | None,
        *,
        records: Mapping[str, StepRecord] | None = None,
        replans: int = 0,
    ) -> None:
        self.deps = deps
        self._streamed = plan is None
        # A streamed plan's steps that were in progress when an earlier attempt stopped:
        # one that arrives again keeps its record (and attempt count).
        self._interrupted = {
            step_id: StepState.of(record)
            for step_id, record in (records or {}).items()
            if self._streamed and record.status == "in_progress"
        }
        plan = plan if plan is not None else Plan()
        # Earlier records of steps not in this plan matter only for their outputs.
        kept: dict[str, StepState] = {}
        if records:
            plan_ids = {step.id for step in plan.steps}
            kept = {
                step_id: StepState.of(record)
                for step_id, record in records.items()
                if step_id in plan_ids or record.status == "completed"
            }
        self.state = ExecutionState(
            plan=plan,
            records=kept,
            replans=replans,
            outputs={
                step_id: record.result.output if record.result is not None else None
                for step_id, record in kept.items()
                if record.status == "completed"
            },
        )
        self._policy = failure_policy(deps.run.config, has_planner=deps.planner is not None)
        self._runner: StepRunner | None = None  # the current pass's
        self._steps: dict[str, Step] = {}  # the last pass's plan, in order
        self._used = False

    async def run(self) -> ExecutionOutcome:
        """Execute the plan (and its replans) and return the outcome."""
        if self._used:
            raise RuntimeError("a PlanExecution runs once; build a new one")
        self._used = True
        state = self.state
        await self._emit(
            "tool:loop:before", {"steps": len(state.plan.steps), "title": state.plan.title}
        )
        resources = CallResources(self.deps)
        try:
            if self._streamed:
                await self._streamed_pass(resources)
            else:
                await self._pass(resources)
            while state.stop is Stop.REPLAN and await self._replan():
                await self._pass(resources)
        finally:
            resources.close()
        outcome, counts = self._outcome()
        await self._emit(
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
        log.debug("plan executed", run_id=self.deps.run.run_id, status=outcome.status)
        return outcome

    def cancel(self, reason: str = "cancelled") -> bool:
        """Stop the run: no new steps, running ones cancelled (their tools see it). True
        when a pass was running and stops by itself; False between passes (a replan),
        where the caller must cancel the task that waits."""
        state = self.state
        if state.cancelling:
            return True
        error = RunError(code=RunErrorCode.CANCELLED, message=reason)
        self.deps.run.cancellation.cancel(reason)
        if self._runner is not None:
            self._runner.stop(Stop.CANCELLED, error)
            return True
        state.stop, state.error = Stop.CANCELLED, error
        return False

    def records(self) -> dict[str, StepRecord]:
        """The step records as they stand (what a run cancelled between passes keeps)."""
        return {step_id: record.record() for step_id, record in self.state.records.items()}

    # -- one pass over the DAG ----------------------------------------------------------
    async def _pass(self, resources: CallResources) -> None:
        state = self.state
        state.stop = None
        steps: dict[str, Step] = {}
        dependencies: dict[str, Sequence[str]] = {}
        records = state.records
        for step in state.plan.steps:
            steps[step.id] = step
            dependencies[step.id] = step_dependencies(step)
            if step.id not in records:
                records[step.id] = StepState(step.id, step.tool)
        self._steps = steps
        finished = [sid for sid, rec in records.items() if rec.status in FINISHED]
        state.unsuccessful = {sid for sid in finished if records[sid].status != "completed"}
        held = frozenset(sid for sid, rec in records.items() if rec.status == "waiting")
        executor = Executor(
            dependencies,
            max_concurrency=self.deps.run.config.max_concurrency,
            finished=finished,
            held=held,
        )
        runner = StepRunner(
            self.deps, state, self._policy, executor, resources, steps, dependencies
        )
        self._runner = runner
        try:
            await executor.run(runner.run)
        finally:
            self._runner = None
            runner.close()

    async def _streamed_pass(self, resources: CallResources) -> None:
        """The first pass, run while the planner streams the plan."""
        deps, state = self.deps, self.state
        assert deps.planner is not None  # streamed planning needs one
        state.stop = None
        records, outputs = state.records, state.outputs
        steps: dict[str, Step] = {}
        dependencies: dict[str, Sequence[str]] = {}
        self._steps = steps
        executor = Executor({}, max_concurrency=deps.run.config.max_concurrency, streaming=True)
        runner = StepRunner(deps, state, self._policy, executor, resources, steps, dependencies)
        self._runner = runner

        def intake(step: Step, arrived_at: datetime) -> None:
            step_id = step.id
            steps[step_id] = step
            dependencies[step_id] = step_dependencies(step)
            earlier = records.get(step_id)
            if earlier is not None and _reusable(earlier, step, outputs):
                earlier.arrived_at = arrived_at
                executor.add_finished(step_id)  # finished before a crash: not run again
                return
            record = self._interrupted.pop(step_id, None)
            if record is None or record.tool != step.tool:
                record = StepState(step.id, step.tool)
            records[step_id] = record
            record.arrived_at = arrived_at
            executor.add(step_id, dependencies[step_id])

        arrivals = StepArrivals(deps.registry, intake)
        executing = asyncio.ensure_future(executor.run(runner.run))
        planning = asyncio.ensure_future(
            deps.planner.plan_streamed(deps.run, deps.query, deps.history, arrivals)
        )
        try:
            await asyncio.wait({executing, planning}, return_when=asyncio.FIRST_COMPLETED)
            if not planning.done():
                planning.cancel()  # the run stopped (a cancel, or `fail`): no plan needed
            plan, error = await _planned(planning)
            if error is not None and not state.cancelling:
                runner.stop(Stop.FAILED, error)
            if plan is not None:
                state.plan = plan
                if deps.plan_created is not None:
                    await deps.plan_created(plan)
            else:  # the steps that arrived, as the run's plan
                state.plan = Plan(steps=list(arrivals.taken.values()))
            executor.close()
            await executing
        finally:
            pending = [task for task in (planning, executing) if not task.done()]
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending)
            self._runner = None
            runner.close()

    async def _replan(self) -> bool:
        """Ask the planner for a new plan; True when a pass follows: over the new plan, or
        over the old one as `skip_dependents` when replanning failed (the run then ends
        `partial`, its completed steps kept for the answer)."""
        deps, state = self.deps, self.state
        failures = [r for r in state.records.values() if r.status == "failed"]
        assert deps.planner is not None  # the replan policy needs one
        try:
            records = {step_id: record.record() for step_id, record in state.records.items()}
            new_plan = await deps.planner.replan(
                deps.run, deps.query, deps.history, state.plan, records
            )
        except PlanError as exc:
            state.replan_error = RunError(
                code=RunErrorCode.PLAN_INVALID,
                message=f"replanning failed: {exc.message}",
                problems=list(exc.problems),
            )
            log.warning("replanning failed; the run goes on without it", error=exc.message)
            await self._replan_failed("planning", state.replan_error)
            return True
        except ModelError as exc:
            state.replan_error = RunError(
                code=str(exc.code), message=f"replanning failed: {exc.message}"
            )
            log.warning("replanning failed; the run goes on without it", error=exc.message)
            await self._replan_failed("llm", state.replan_error)
            return True
        state.replans += 1
        previous = state.plan
        state.plan = new_plan
        kept: dict[str, StepState] = {}
        new_ids = {step.id for step in new_plan.steps}
        for step_id, record in state.records.items():
            if record.status == "completed":
                kept[step_id] = record  # finished work is never run again
        for step in new_plan.steps:
            if step.id in kept:
                continue
            fresh = StepState(step.id, step.tool)
            earlier = state.records.get(step.id)
            if earlier is not None and earlier.status != "pending" and deps.persist is not None:
                # Storage must not see the old attempt as finished.
                await deps.persist(fresh.snapshot())
            kept[step.id] = fresh
        dropped = [sid for sid in state.records if sid not in kept and sid not in new_ids]
        state.records = kept
        if deps.plan_updated is not None:
            await deps.plan_updated(new_plan, state.replans)
        await self._emit(
            "plan:updated",
            {
                "plan": new_plan.to_wire(),
                "previous_title": previous.title,
                "replans": state.replans,
                "reason": "; ".join(f"{r.step_id}: {r.reason}" for r in failures),
                "dropped_steps": dropped,
            },
        )
        return True

    async def _replan_failed(self, source: str, error: RunError) -> None:
        """The `error` event of a failed replan: the run goes on without one."""
        data = error_data(
            source,
            error.code,
            error.message,
            recoverable=True,
            phase="replan",
            problems=error.problems,
            suggestion="the run goes on with the plan it has; the answer uses what completed",
        )
        await self._emit("error", data)

    def _outcome(self) -> tuple[ExecutionOutcome, Counter[str]]:
        """The outcome, and how many of its records end in each status."""
        state = self.state
        records = state.records
        ordered = {sid: records[sid].record() for sid in self._steps if sid in records}
        for sid, record in records.items():
            if sid not in ordered:  # completed steps of an earlier plan
                ordered[sid] = record.record()
        counts: Counter[str] = Counter(record.status for record in ordered.values())
        status: OutcomeStatus
        if state.stop is Stop.CANCELLED:
            status = "cancelled"
        elif state.stop is Stop.FAILED:
            status = "failed"
        elif counts["waiting"]:
            status = "suspended"
        elif counts["completed"] == len(ordered):
            status = "completed"
        else:
            status = "partial"
        outcome = ExecutionOutcome(
            status=status,
            plan=state.plan,
            records=ordered,
            suspensions=list(state.suspensions),
            replans=state.replans,
            error=state.error if status in ("failed", "cancelled") else state.replan_error,
            error_reported=state.error_reported,
        )
        return outcome, counts

    async def _emit(self, name: str, data: dict[str, Any]) -> None:
        run = self.deps.run
        if run.events.wants(name):
            await run.events.emit(
                name, data, thread_id=run.thread_id, run_id=run.run_id, span=run.span
            )


async def _planned(planning: asyncio.Future[Plan]) -> tuple[Plan | None, RunError | None]:
    """The streamed plan, or why there is none (None, None: planning was stopped)."""
    try:
        return await planning, None
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if planning.cancelled() and (task is None or not task.cancelling()):
            return None, None
        raise
    except PlanError as exc:
        return None, RunError(
            code=RunErrorCode.PLAN_INVALID, message=exc.message, problems=list(exc.problems)
        )
    except ModelError as exc:
        return None, RunError(
            code=str(exc.code), message=exc.message, retry_after_s=exc.retry_after_s
        )
    except HookVeto as exc:
        return None, RunError(code=RunErrorCode.VETOED, message=str(exc))


def _reusable(record: StepState, step: Step, outputs: Mapping[str, Any]) -> bool:
    """Whether a completed record of an earlier attempt is this step's: same tool, and
    the arguments it ran with are the step's (its references read from `outputs`)."""
    if record.status != "completed" or record.tool != step.tool:
        return False
    try:
        args = resolve_references(step.args, outputs) if step.referencing_args else step.args
    except Exception:
        return False
    return (record.args is None and not args) or record.args == args
