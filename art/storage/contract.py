"""The storage contract: runs, step records, suspensions, history, events and the thread lease.

Adapters live in `art.adapters` (memory, sqlite, postgres) and are chosen by URL
(`open_storage`). Every method commits before it returns: a step record saved with
`save_step` survives a SIGKILL the moment after.
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Any, Literal, NamedTuple

from pydantic import Field

from art.core.binary import JsonData, JsonDict
from art.core.models import ArtModel, builder
from art.core.usage import TokenUsage
from art.planning.plans import Plan
from art.responses import ConversationMessage, RunError, StepRecord, StepStatus, utcnow
from art.tooling.contract import ToolResult

RunState = Literal["running", "suspended", "completed", "partial", "failed", "abandoned"]
ACTIVE_RUN_STATES: frozenset[str] = frozenset({"running", "suspended"})


class ForkOrigin(ArtModel):
    """Where a fork came from: the run and step it was forked from, and the arguments it
    gave that step (None: the step's own)."""

    run_id: str
    step_id: str
    args: JsonDict | None = None


class RunRecord(ArtModel):
    """One `process` call on a thread, from plan to answer, as stored."""

    run_id: str
    thread_id: str
    trace_id: str
    query: str
    # The W3C traceparent of the OpenTelemetry span current when the run's first part
    # started (its `art.engine.run` span under `enable_tracing`): later parts link to it.
    trace_parent: str | None = None
    status: RunState = "running"
    user_id: str | None = None
    session_id: str | None = None
    # The id of the answer's message (`resp.response.message_id`), known from the start.
    message_id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    system_context: dict[str, Any] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)
    plan: Plan | None = None
    replans: int = 0
    steps: dict[str, StepRecord] = Field(default_factory=dict)
    # Counters carried across resumptions so the final response stays honest.
    llm_calls: int = 0
    tool_calls: int = 0
    usage: TokenUsage = Field(default_factory=TokenUsage)
    llm_cost: float | None = None
    # Working time of the calls so far (a suspended run's wait for a person left out).
    duration_ms: float = 0.0
    error: RunError | None = None
    answer: str | None = None
    # A fork's origin (`ArtInstance.afork`); None for a run of its own.
    forked_from: ForkOrigin | None = None
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)
    version: int = 0


class Suspension(ArtModel):
    """A blocking step waiting for a human decision."""

    suspension_id: str
    thread_id: str
    run_id: str
    step_id: str
    tool_name: str
    call_id: str
    args: JsonDict = Field(default_factory=dict)
    # What the tool returned with its suspended result: the question for the human.
    prompt: JsonData = None
    # The tool asked for input in the middle of a call (an MCP elicitation): an approval
    # runs it again with its own arguments and the decision's `modified_args` as
    # `ExecutionContext.decision["answer"]`; see `art.tooling.contract.ASKS_FOR_INPUT`.
    asks_for_input: bool = False
    created_at: datetime = Field(default_factory=utcnow)
    decision: dict[str, Any] | None = None
    decided_at: datetime | None = None

    @property
    def pending(self) -> bool:
        return self.decision is None


class StoredEvent(ArtModel):
    """An event as kept in a thread's event log."""

    seq: int | None = None
    thread_id: str
    run_id: str | None = None
    name: str
    data: dict[str, Any] = Field(default_factory=dict)
    trace_id: str | None = None
    span_id: str | None = None
    parent_span_id: str | None = None
    timestamp: datetime = Field(default_factory=utcnow)


_new_record = builder(StepRecord)
_new_event = builder(StoredEvent)


class StepSnapshot(NamedTuple):
    """A step's record as the engine had it when it saved it, in plain values: the
    `StepRecord` is made from it (`record()`) where one is needed, by an adapter that
    writes it or by a reader. `result`, `args` and `decision` are the engine's objects,
    which a tool, a hook or the caller may still hold: an adapter that keeps a snapshot
    after `save_step_snapshot` returns keeps copies of them."""

    step_id: str
    tool: str | None
    status: StepStatus
    result: ToolResult | None
    attempts: int
    started_at: datetime | None
    ended_at: datetime | None
    arrived_at: datetime | None
    args: dict[str, Any] | None
    reason: str | None
    decision: dict[str, Any] | None

    def record(self) -> StepRecord:
        """The public record of this snapshot."""
        return step_record(*self)


def step_record(
    step_id: str,
    tool: str | None,
    status: StepStatus,
    result: ToolResult | None,
    attempts: int,
    started_at: datetime | None,
    ended_at: datetime | None,
    arrived_at: datetime | None,
    args: dict[str, object] | None,
    reason: str | None,
    decision: dict[str, object] | None,
) -> StepRecord:
    """The public record of a step's values (a `StepSnapshot`'s fields, in its order)."""
    fields: dict[str, Any] = {
        "step_id": step_id,
        "tool": tool,
        "status": status,
        "attempts": attempts,
    }
    # Only the fields that are set: each one given costs a validation.
    if result is not None:
        fields["result"] = result
    if started_at is not None:
        fields["started_at"] = started_at
    if ended_at is not None:
        fields["ended_at"] = ended_at
    if arrived_at is not None:
        fields["arrived_at"] = arrived_at
    if args is not None:
        fields["args"] = args
    if reason is not None:
        fields["reason"] = reason
    if decision is not None:
        fields["decision"] = decision
    return _new_record(fields)


class EventSnapshot(NamedTuple):
    """A logged event as it is stored, in plain values: `stored()` makes the
    `StoredEvent`. `data` is the snapshot's own: nothing else holds its containers."""

    thread_id: str
    run_id: str | None
    name: str
    data: dict[str, Any]
    trace_id: str | None
    span_id: str | None
    parent_span_id: str | None
    timestamp: datetime

    def stored(self) -> StoredEvent:
        """The `StoredEvent` of this snapshot (its `seq` is the adapter's to set)."""
        return _new_event(self._asdict())


class ThreadSummary(ArtModel):
    thread_id: str
    runs: int
    last_query: str | None = None
    last_status: RunState | None = None
    updated_at: datetime | None = None
    created_at: datetime | None = None
    # Who created the thread (`art serve`'s user), None for a thread made outside a server
    # with users; set once, when the thread is first stored.
    owner: str | None = None
    metadata: JsonDict = Field(default_factory=dict)


class ThreadQuery(ArtModel):
    """Which threads `search_threads` returns: every filter given must hold."""

    owner: str | None = None
    # Each key must be in the thread's metadata with exactly this (scalar) value.
    metadata: dict[str, str | int | float | bool | None] = Field(default_factory=dict)
    # The status of the thread's newest run.
    status: RunState | None = None
    limit: int = Field(default=50, ge=1, le=500)
    # `next_cursor` of the page before: the threads after it, in the same order.
    cursor: str | None = None


class ThreadPage(ArtModel):
    """Threads most recently updated first, and the cursor of the next page (None: the last)."""

    threads: list[ThreadSummary]
    next_cursor: str | None = None


class StorageAdapter(ABC):
    """Durable thread state. Implementations must make every write atomic and committed."""

    url: str = ""

    @property
    def backing(self) -> StorageAdapter:
        """The adapter that keeps the data: this one, or the one a wrapper (`art serve`'s
        journal) passes every call to. Queued runs choose their queue by it."""
        return self

    async def open(self) -> None:  # noqa: B027 - optional for adapters with nothing to open
        """Connect and migrate. Idempotent."""

    async def close(self) -> None:  # noqa: B027
        """Release connections and leases. Idempotent."""

    # -- runs ---------------------------------------------------------------------
    @abstractmethod
    async def create_run(self, run: RunRecord) -> None:
        """Store a new run. Its `run_id` is unique."""

    @abstractmethod
    async def get_run(self, run_id: str) -> RunRecord | None: ...

    @abstractmethod
    async def get_active_run(self, thread_id: str) -> RunRecord | None:
        """The thread's newest run whose status is `running` or `suspended`, if any."""

    @abstractmethod
    async def list_runs(self, thread_id: str) -> list[RunRecord]:
        """The thread's runs, oldest first."""

    @abstractmethod
    async def update_run(self, run: RunRecord) -> None:
        """Store the run's plan, status, counters, answer and error (not its steps)."""

    @abstractmethod
    async def save_step(self, run_id: str, record: StepRecord) -> None:
        """Insert or replace one step record, committed before returning."""

    async def save_step_snapshot(self, run_id: str, snapshot: StepSnapshot) -> None:
        """How the engine saves a step: `save_step(run_id, snapshot.record())`. An adapter
        that can keep plain values until they are read overrides it, and reads back the
        record `snapshot.record()` is."""
        await self.save_step(run_id, snapshot.record())

    async def finish_run(self, run: RunRecord, messages: Sequence[ConversationMessage]) -> None:
        """Store the run's final state and append `messages` (the exchange) to the history
        of its thread, as one write: after a crash both are stored or neither, so a
        finished run never lacks its exchange and a resumed one never adds it twice.

        This default writes one after the other, which is not atomic; the built-in
        adapters override it with one transaction, and so should any durable adapter.
        """
        await self.update_run(run)
        for message in messages:
            await self.append_message(message)

    # -- suspensions --------------------------------------------------------------
    @abstractmethod
    async def add_suspension(self, suspension: Suspension) -> None: ...

    @abstractmethod
    async def list_suspensions(
        self, thread_id: str, *, pending_only: bool = True
    ) -> list[Suspension]: ...

    @abstractmethod
    async def decide_suspension(
        self, thread_id: str, suspension_id: str, decision: dict[str, object]
    ) -> Suspension:
        """Record the decision atomically. Raises SuspensionError (code
        SUSPENSION_NOT_FOUND or SUSPENSION_ALREADY_DECIDED); of two concurrent
        calls exactly one succeeds."""

    # -- conversation -------------------------------------------------------------
    @abstractmethod
    async def append_message(self, message: ConversationMessage) -> None: ...

    @abstractmethod
    async def get_history(self, thread_id: str, *, limit: int = 20) -> list[ConversationMessage]:
        """The thread's last `limit` messages, oldest first."""

    async def replace_history(
        self, thread_id: str, messages: Sequence[ConversationMessage]
    ) -> None:
        """Make `messages` the thread's whole history (none: an empty one), in one write.
        The thread's runs, suspensions and events stay."""
        raise NotImplementedError(f"{type(self).__name__} cannot replace a thread's history")

    async def delete_run(self, run_id: str) -> bool:
        """Delete a run that ended without an exchange (a cancelled one): its record, step
        records, suspensions and events, in one write; False when there is no such run.
        The thread and its other runs stay."""
        raise NotImplementedError(f"{type(self).__name__} cannot delete a run")

    async def delete_thread(self, thread_id: str) -> bool:
        """Delete everything stored for the thread (runs, step records, suspensions,
        history, events), in one write; False when nothing was stored for it."""
        raise NotImplementedError(f"{type(self).__name__} cannot delete a thread")

    # -- events -------------------------------------------------------------------
    @abstractmethod
    async def append_events(self, events: Sequence[StoredEvent]) -> None: ...

    async def append_event_snapshots(self, snapshots: Sequence[EventSnapshot]) -> None:
        """How the engine writes its event log: `append_events` of each `stored()`. An
        adapter that can keep plain values until they are read overrides it."""
        await self.append_events([snapshot.stored() for snapshot in snapshots])

    @abstractmethod
    async def query_events(
        self,
        thread_id: str,
        *,
        names: Sequence[str] | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int | None = None,
        after_seq: int | None = None,
    ) -> list[StoredEvent]:
        """The thread's events in emission order, filtered by name and time; with
        `after_seq`, only those whose `seq` is greater (what a reader has not seen yet)."""

    # -- threads ------------------------------------------------------------------
    @abstractmethod
    async def list_threads(self, *, limit: int = 100) -> list[ThreadSummary]:
        """Threads, most recently updated first."""

    async def get_thread(self, thread_id: str) -> ThreadSummary | None:
        """The thread's summary with its owner and metadata; None when nothing is stored."""
        raise NotImplementedError(f"{type(self).__name__} cannot read a thread's owner")

    async def claim_thread(
        self, thread_id: str, owner: str | None, metadata: JsonDict | None = None
    ) -> ThreadSummary:
        """Store the thread with `owner` and `metadata` unless it exists, atomically (of two
        concurrent claims one creates it), and return the thread as stored: an existing
        thread keeps its owner and metadata."""
        raise NotImplementedError(f"{type(self).__name__} cannot store a thread's owner")

    async def update_thread(self, thread_id: str, metadata: JsonDict) -> ThreadSummary | None:
        """Merge `metadata` into the thread's (a key given None is removed); None when the
        thread does not exist."""
        raise NotImplementedError(f"{type(self).__name__} cannot store thread metadata")

    async def search_threads(self, query: ThreadQuery) -> ThreadPage:
        """One page of the threads `query` selects, most recently updated first."""
        raise NotImplementedError(f"{type(self).__name__} cannot search threads")

    # -- one worker per thread ----------------------------------------------------
    @abstractmethod
    def lease(self, thread_id: str) -> AbstractAsyncContextManager[None]:
        """Hold the thread for the `async with` block; raise ThreadBusyError if another
        holder (this process or another) has it. Released when the holder dies."""
