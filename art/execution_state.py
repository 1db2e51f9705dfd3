"""The execute phase's state and collaborators, shared by the run loop, the step path and
the failure policies (as pydantic-ai's `GraphAgentState` and `GraphAgentDeps` are).

`ExecutionState` is what changes while a plan runs: the plan, the step records, the
outputs later steps read, the suspensions, and why the run stopped starting steps.
`ExecutionDeps` is what the phase is lent and never changes: the run, the tools, the
model, the planner for replans, and where records, suspensions and plans are saved.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import Executor as ThreadPool
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from art.responses import RunError, StepRecord

if TYPE_CHECKING:
    from art.context import RunContext
    from art.llm import LLMClient
    from art.plan_stream import StepArrivals
    from art.plans import Plan
    from art.registry import ToolRegistry
    from art.responses import ConversationMessage
    from art.state import Suspension

__all__ = [
    "FINISHED",
    "ExecutionDeps",
    "ExecutionState",
    "Replanner",
    "Stop",
]

#: Step statuses after which a step never runs again in this run.
FINISHED: frozenset[str] = frozenset({"completed", "failed", "skipped", "cancelled"})

PersistStep = Callable[[StepRecord], Awaitable[None]]
SaveSuspension = Callable[["Suspension"], Awaitable[None]]
PlanUpdated = Callable[["Plan", int], Awaitable[None]]


class Stop(enum.Enum):
    """Why the execute phase stopped starting steps."""

    SUSPENDED = "suspended"  # a step waits for a human; the running ones finish
    REPLAN = "replan"  # a step failed under `replan`; the running ones finish
    FAILED = "failed"  # a step failed under `fail`, or replanning failed
    CANCELLED = "cancelled"  # the caller cancelled the run


class Replanner(Protocol):
    """What the execute phase needs of a planner (`art.planning.Planner`)."""

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
    records: dict[str, StepRecord]
    replans: int = 0
    # The outputs of completed steps, which later steps' references read.
    outputs: dict[str, Any] = field(default_factory=dict)
    suspensions: list[Suspension] = field(default_factory=list)
    stop: Stop | None = None
    error: RunError | None = None
    # Why replanning failed: the run goes on as `skip_dependents` and ends `partial`.
    replan_error: RunError | None = None
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
