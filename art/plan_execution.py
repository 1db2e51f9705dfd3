"""The execute phase: passes over the plan, each by a fresh `Executor`, with replanning
between them (LLMCompiler's outer loop around a fresh `TaskFetchingUnit`).

A pass runs every step it can; a step that fails under the `replan` policy ends the pass
once the running steps finish, the planner writes the rest of the plan from what is
known, and the next pass runs it, never running a completed step again.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from art._log import get_logger
from art.errors import ModelError, PlanError, RunErrorCode
from art.execution import Executor, step_dependencies
from art.execution_state import FINISHED, ExecutionDeps, ExecutionState, Stop, pending_record
from art.plans import Plan, Step
from art.policies import failure_policy
from art.responses import RunError, StepRecord
from art.state import Suspension
from art.steps import CallResources, StepRunner

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
    steps stay suspended.
    """

    def __init__(
        self,
        deps: ExecutionDeps,
        plan: Plan,
        *,
        records: Mapping[str, StepRecord] | None = None,
        replans: int = 0,
    ) -> None:
        self.deps = deps
        # Earlier records of steps not in this plan matter only for their outputs.
        kept: dict[str, StepRecord] = {}
        if records:
            plan_ids = {step.id for step in plan.steps}
            kept = {
                step_id: record
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
            while True:
                await self._pass(resources)
                if state.stop is not Stop.REPLAN or not await self._replan():
                    break
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

    def cancel(self, reason: str = "cancelled") -> None:
        """Stop the run: no new steps, running ones cancelled (their tools see it)."""
        state = self.state
        if state.cancelling:
            return
        error = RunError(code=RunErrorCode.CANCELLED, message=reason)
        self.deps.run.cancellation.cancel(reason)
        if self._runner is not None:
            self._runner.stop(Stop.CANCELLED, error)
        else:
            state.stop, state.error = Stop.CANCELLED, error

    # -- one pass over the DAG ----------------------------------------------------------
    async def _pass(self, resources: CallResources) -> None:
        state = self.state
        state.stop = None
        steps: dict[str, Step] = {}
        dependencies: dict[str, Sequence[str]] = {}
        records = state.records
        for step in state.plan.steps:
            # Each id is read once: pydantic's __getattr__ makes a model's attributes
            # slow to read.
            step_id = step.id
            steps[step_id] = step
            dependencies[step_id] = step_dependencies(step)
            if step_id not in records:
                records[step_id] = pending_record(step)
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

    async def _replan(self) -> bool:
        """Ask the planner for a new plan; False when the run must end as it is."""
        deps, state = self.deps, self.state
        failures = [r for r in state.records.values() if r.status == "failed"]
        assert deps.planner is not None  # the replan policy needs one
        try:
            new_plan = await deps.planner.replan(
                deps.run, deps.query, deps.history, state.plan, dict(state.records)
            )
        except PlanError as exc:
            state.stop = Stop.FAILED
            state.error = RunError(
                code=RunErrorCode.PLAN_INVALID,
                message=f"replanning failed: {exc.message}",
                problems=list(exc.problems),
            )
            return False
        except ModelError as exc:
            state.stop = Stop.FAILED
            state.error = RunError(code=str(exc.code), message=exc.message)
            return False
        state.replans += 1
        previous = state.plan
        state.plan = new_plan
        kept: dict[str, StepRecord] = {}
        new_ids = {step.id for step in new_plan.steps}
        for step_id, record in state.records.items():
            if record.status == "completed":
                kept[step_id] = record  # finished work is never run again
        for step in new_plan.steps:
            if step.id in kept:
                continue
            fresh = pending_record(step)
            earlier = state.records.get(step.id)
            if earlier is not None and earlier.status != "pending" and deps.persist is not None:
                await deps.persist(fresh)  # storage must not see the old attempt as finished
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

    def _outcome(self) -> tuple[ExecutionOutcome, Counter[str]]:
        """The outcome, and how many of its records end in each status."""
        state = self.state
        records = state.records
        ordered = {sid: records[sid] for sid in self._steps if sid in records}
        for sid, record in records.items():
            ordered.setdefault(sid, record)  # completed steps of an earlier plan
        counts = Counter(record.status for record in ordered.values())  # one read each
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
            error=state.error if status in ("failed", "cancelled") else None,
        )
        return outcome, counts

    async def _emit(self, name: str, data: dict[str, Any]) -> None:
        run = self.deps.run
        if run.events.wants(name):
            await run.events.emit(
                name, data, thread_id=run.thread_id, run_id=run.run_id, span=run.span
            )
