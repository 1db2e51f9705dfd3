"""What a failed step does to the run: one small object per `on_step_failure` value.

A policy only decides; the step path carries the decision out (`art.engine.steps`). Dependents
of a failed step are skipped when they become ready, whatever the policy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from art.config import ExecutionConfig
from art.engine.execution_state import ExecutionState, StepState, Stop
from art.errors import RunErrorCode
from art.responses import RunError

__all__ = ["FailRun", "FailurePolicy", "Replan", "SkipDependents", "Verdict", "failure_policy"]


@dataclass(frozen=True, slots=True)
class Verdict:
    """Stop starting steps for `stop`; `error` is the run's when it fails or is cancelled."""

    stop: Stop
    error: RunError | None = None


class FailurePolicy(Protocol):
    def after_failure(self, record: StepState, state: ExecutionState) -> Verdict | None:
        """What the run does now that `record`'s step failed (None: it goes on)."""
        ...


class SkipDependents:
    """`skip_dependents`: the run goes on; only the failed step's dependents are skipped."""

    def after_failure(self, record: StepState, state: ExecutionState) -> Verdict | None:
        return None


class FailRun:
    """`fail`: the run fails with the first failure; running steps are cancelled."""

    def after_failure(self, record: StepState, state: ExecutionState) -> Verdict | None:
        if state.cancelling:
            return None  # the run is already ending
        message = f"step {record.step_id} failed: {record.reason}"
        return Verdict(Stop.FAILED, RunError(code=RunErrorCode.STEP_FAILED, message=message))


@dataclass(frozen=True, slots=True)
class Replan:
    """`replan`: running steps finish, then the planner writes the rest of the plan; with
    no planner, or `max_replans` used up, it is `skip_dependents`."""

    max_replans: int
    has_planner: bool

    def after_failure(self, record: StepState, state: ExecutionState) -> Verdict | None:
        if (
            self.has_planner
            and state.replans < self.max_replans
            and state.stop is None
            and state.replan_error is None
        ):
            return Verdict(Stop.REPLAN)
        return None


def failure_policy(config: ExecutionConfig, *, has_planner: bool) -> FailurePolicy:
    """The policy `config.on_step_failure` names."""
    if config.on_step_failure == "fail":
        return FailRun()
    if config.on_step_failure == "replan":
        return Replan(config.max_replans, has_planner)
    return SkipDependents()
