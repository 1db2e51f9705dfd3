"""The execute phase's state and collaborators, shared by the run loop, the step path and
the failure policies (as pydantic-ai's `GraphAgentState` and `GraphAgentDeps` are).

`ExecutionState` is what changes while a plan runs: the plan, the steps' `StepState`s,
the outputs later steps read, the suspensions, and why the run stopped starting steps.
`ExecutionDeps` is what the phase is lent and never changes: the run, the tools, the
model, the planner for replans, and where records, suspensions and plans are saved.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import Executor as ThreadPool
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from art.core.models import builder
from art.responses import RunError, StepRecord, StepStatus
from art.tooling.contract import ToolResult

if TYPE_CHECKING:
    from art.engine.context import RunContext
    from art.llm.client import LLMClient
    from art.planning.plans import Plan
    from art.planning.stream import StepArrivals
    from art.responses import ConversationMessage
    from art.storage.contract import Suspension
    from art.tooling.registry import ToolRegistry

__all__ = [
    "FINISHED",
    "ExecutionDeps",
    "ExecutionState",
    "Replanner",
    "StepState",
    "Stop",
]

#: Step statuses after which a step never runs again in this run.
FINISHED: frozenset[str] = frozenset({"completed", "failed", "skipped", "cancelled"})

#: Statuses after which the step path changes a record no more in this pass.
SETTLED: frozenset[str] = FINISHED | {"waiting"}

PersistStep = Callable[[StepRecord], Awaitable[None]]
_new_record = builder(StepRecord)
SaveSuspension = Callable[["Suspension"], Awaitable[None]]
PlanUpdated = Callable[["Plan", int], Awaitable[None]]


class Stop(enum.Enum):
    """Why the execute phase stopped starting steps."""

    SUSPENDED = "suspended"  # a step waits for a human; the running ones finish
    REPLAN = "replan"  # a step failed under `replan`; the running ones finish
    FAILED = "failed"  # a step failed under `fail`, or replanning failed
    CANCELLED = "cancelled"  # the caller cancelled the run


class Replanner(Protocol):
    """What the execute phase needs of a planner (`art.planning.planner.Planner`)."""

    async def replan(
        self,
        run: RunContext,
        query: str,
        history: Sequence[ConversationMessage],
        previous: Plan,
        records: Mapping[str, StepRecord],
    ) -> Plan: ...

    async def plan_streamed(
        self,
        run: RunContext,
        query: str,
        history: Sequence[ConversationMessage],
        arrivals: StepArrivals,
    ) -> Plan: ...


@dataclass(slots=True)
class StepState:
    """A step's record while its plan runs; `StepRecord` is its public and stored form.

    The step path edits its fields; every save takes a `StepRecord` made by `record()`.
    `saved` is the last one saved: the step path saves after a step's last change, so
    a settled step's saved record is its final one (`final()`).
    """

    step_id: str
    tool: str | None = None
    status: StepStatus = "pending"
    result: ToolResult | None = None
    attempts: int = 0
    started_at: datetime | None = None
    ended_at: datetime | None = None
    arrived_at: datetime | None = None
    args: dict[str, Any] | None = None
    reason: str | None = None
    decision: dict[str, Any] | None = None
    saved: StepRecord | None = None

    @classmethod
    def of(cls, record: StepRecord) -> StepState:
        """The state of a stored record (an earlier attempt of the run)."""
        return cls(
            record.step_id,
            record.tool,
            record.status,
            record.result,
            record.attempts,
            record.started_at,
            record.ended_at,
            record.arrived_at,
            record.args,
            record.reason,
            record.decision,
        )

    def record(self) -> StepRecord:
        """The public record of the state as it is now, to save (kept as `saved`)."""
        fields: dict[str, Any] = {
            "step_id": self.step_id,
            "tool": self.tool,
            "status": self.status,
            "attempts": self.attempts,
        }
        # Only the fields that are set: each one given costs a validation.
        if self.result is not None:
            fields["result"] = self.result
        if self.started_at is not None:
            fields["started_at"] = self.started_at
        if self.ended_at is not None:
            fields["ended_at"] = self.ended_at
        if self.arrived_at is not None:
            fields["arrived_at"] = self.arrived_at
        if self.args is not None:
            fields["args"] = self.args
        if self.reason is not None:
            fields["reason"] = self.reason
        if self.decision is not None:
            fields["decision"] = self.decision
        self.saved = record = _new_record(fields)
        return record

    def final(self) -> StepRecord:
        """The public record of a step at the end of its plan: a settled step's saved one."""
        saved = self.saved
        if saved is not None and self.status in SETTLED and saved.status == self.status:
            return saved
        return self.record()


@dataclass(frozen=True, slots=True)
class ExecutionDeps:
    """The collaborators of one execute phase.

    `llm` and `model` serve reasoning steps and tools that ask for the model's help;
    `planner` replans under the `replan` policy. `persist` is awaited with a step's
    record when it starts and when it ends; `suspend` with each new Suspension;
    `plan_updated` after a replan; `plan_created` when a streamed plan is complete.
    `thread_pool` runs the plain `def` tools (default: a
    pool of `max_concurrency` threads made for this phase). `idle` is called when every
    running step waits for its tool and no step is ready: time the run would otherwise
    spend waiting (the run writes its event log then).
    """

    run: RunContext
    registry: ToolRegistry
    llm: LLMClient | None = None
    model: str | None = None
    planner: Replanner | None = None
    query: str = ""
    history: Sequence[ConversationMessage] = ()
    persist: PersistStep | None = None
    suspend: SaveSuspension | None = None
    plan_updated: PlanUpdated | None = None
    plan_created: Callable[[Plan], Awaitable[None]] | None = None
    thread_pool: ThreadPool | None = None
    idle: Callable[[], None] | None = None


@dataclass(slots=True)
class ExecutionState:
    """What changes while a plan runs (and across its replans)."""

    plan: Plan
    records: dict[str, StepState]
    replans: int = 0
    # The outputs of completed steps, which later steps' references read.
    outputs: dict[str, Any] = field(default_factory=dict)
    suspensions: list[Suspension] = field(default_factory=list)
    stop: Stop | None = None
    error: RunError | None = None
    # Why replanning failed: the run goes on as `skip_dependents` and ends `partial`.
    replan_error: RunError | None = None
    # The run's error is a step's failure whose `error` event was sent as it happened.
    error_reported: bool = False
    # Finished steps of the current pass that did not complete (their dependents skip).
    unsuccessful: set[str] = field(default_factory=set)

    @property
    def cancelling(self) -> bool:
        """True when running steps are being cancelled (a `fail` policy, or a cancel)."""
        return self.stop is Stop.FAILED or self.stop is Stop.CANCELLED

    def cancel_reason(self) -> str:
        """What a step cancelled by the run records as its reason."""
        if self.error is not None and self.stop is Stop.FAILED:
            return f"cancelled because {self.error.message}"
        return f"cancelled: {self.error.message if self.error else 'the run stopped'}"
