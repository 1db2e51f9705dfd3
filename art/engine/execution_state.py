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

from art.responses import RunError, StepRecord, StepStatus
from art.storage.contract import StepSnapshot, step_record
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

PersistStep = Callable[[StepSnapshot], Awaitable[None]]
SaveSuspension = Callable[["Suspension"], Awaitable[None]]
PlanUpdated = Callable[["Plan", int], Awaitable[None]]


_new_snapshot = tuple.__new__


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

    The step path edits its fields; every save hands storage a `StepSnapshot` of them
    (`snapshot()`), from which the adapter makes the `StepRecord` when it writes or is
    read. The public record is made once, for the outcome (`record()`).
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

    def snapshot(self) -> StepSnapshot:
        """The state as it is now, in plain values: what a save hands to storage."""
        # The tuple made directly (what StepSnapshot._make does, without the check of its
        # length): the NamedTuple's __new__ is a Python call of eleven arguments, and a
        # step is saved twice.
        return _new_snapshot(
            StepSnapshot,
            (
                self.step_id,
                self.tool,
                self.status,
                self.result,
                self.attempts,
                self.started_at,
                self.ended_at,
                self.arrived_at,
                self.args,
                self.reason,
                self.decision,
            ),
        )

    def record(self) -> StepRecord:
        """The public record of the state as it is now (the outcome's, a replan's)."""
        return step_record(
            self.step_id,
            self.tool,
            self.status,
            self.result,
            self.attempts,
            self.started_at,
            self.ended_at,
            self.arrived_at,
            self.args,
            self.reason,
            self.decision,
        )


@dataclass(frozen=True, slots=True)
class ExecutionDeps:
    """The collaborators of one execute phase.

    `llm` and `model` serve reasoning steps and tools that ask for the model's help;
    `planner` replans under the `replan` policy. `persist` is awaited with a snapshot of
    a step's record when it starts and when it ends; `suspend` with each new Suspension;
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
