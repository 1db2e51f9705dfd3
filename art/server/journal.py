"""The server's event log: every event of the runs it executes, stored at once and in order.

The engine keeps a compact event log, written in batches (a run's lifecycle and each
step's outcome). A server needs more: every event a client is shown (token groups, tool
stages, steps starting) must be in storage with its id before it is streamed, so that a
client that reconnects with `Last-Event-ID`, to this process or another, replays exactly
what it missed. So the server's instance runs on a `JournaledStorage`:

- `EventJournal` subscribes to the instance's events and writes each event of a thread
  whose lease this process holds, as soon as the write before it has finished (one writer
  per thread, so storage order is emission order), then wakes the streams waiting on it;
- `JournaledStorage` delegates to the real adapter, except that the engine's own compact
  log is not written (the journal holds a superset of it), and that releasing a thread's
  lease first waits for the journal to finish writing that thread (so the next holder,
  in any process, appends after it).

Per-token `chunk:*` events are not journaled: `buffer:flush` carries the same text in
groups (seed 004's buffered stream). Each event takes the engine's stored form (a
prompt's size rather than the prompt, secrets masked), and large values are cut.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime

from art.core.binary import JsonDict
from art.core.json import JsonValue
from art.core.log import get_logger
from art.core.serialization import safe_stringify, truncate
from art.observe.event_log import Redact, stored_events
from art.observe.events import Event
from art.responses import AgentFinalResponse, ConversationMessage, StepRecord, utcnow
from art.storage.contract import (
    EventSnapshot,
    RunRecord,
    StepSnapshot,
    StorageAdapter,
    StoredEvent,
    Suspension,
    ThreadPage,
    ThreadQuery,
    ThreadSummary,
)

__all__ = ["MAX_VALUE_CHARS", "EventJournal", "JournaledStorage", "stored_event"]

log = get_logger("art.server")

#: A value in a stored event (a tool's output, a step's arguments) longer than this as
#: JSON is stored as its text cut to this length; the full value is in the step record.
MAX_VALUE_CHARS = 20_000
_NOT_JOURNALED = frozenset({"chunk:before", "chunk:after"})
# Events whose `output` is kept as a value (cut like any other), not as the engine's text.
_OUTPUT_VALUES = frozenset({"step:status", "tool:update"})


def _bounded(value: object, limit: int = MAX_VALUE_CHARS) -> JsonValue:
    """`value` as JSON-compatible data if its JSON fits in `limit` characters, else its
    text cut to `limit` (a string)."""
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        return truncate(value, limit)
    text = safe_stringify(value, max_length=limit + 1)
    if len(text) > limit:
        return truncate(text, limit)
    parsed: JsonValue = json.loads(text)
    return parsed


def _with_totals(data: dict[str, object]) -> dict[str, object]:
    """`session:end` data with the run's usage, cost and display outputs, which its
    `response` carries and the stored form leaves out (with the response itself)."""
    response = data.get("response")
    if not isinstance(response, AgentFinalResponse):
        return data
    meta = response.metadata
    return {
        **data,
        "run_id": meta.run_id,
        "usage": meta.usage.model_dump(mode="json"),
        "llm_cost": meta.llm_cost,
        "display": [d.model_dump(mode="json") for d in response.display],
    }


def stored_event(event: Event, redact: Redact) -> StoredEvent:
    """`event` as the journal stores it: the engine's stored form of its data (a prompt's
    size, not the prompt; secrets masked), a run's end with its usage and cost, and every
    value but a plan cut to MAX_VALUE_CHARS of JSON (a plan is kept whole: the inspector
    draws it, and the planner bounds its size)."""
    data = _with_totals(event.data) if event.name == "session:end" else event.data
    [snapshot] = stored_events(
        [(event.name, data, event.span, event.timestamp)],
        event.thread_id or "",
        event.run_id or "",
        event.trace_id or "",
        redact,
    )
    stored = snapshot.stored()
    stored.data = {k: v if k == "plan" else _bounded(v) for k, v in stored.data.items()}
    if event.name in _OUTPUT_VALUES and "output" in event.data:
        # The value, not the engine's text of it: clients rebuild step state from these.
        stored.data["output"] = _bounded(event.data["output"])
    return stored


class EventJournal:
    """Writes the events of the threads this process holds to storage, in order, at once."""

    def __init__(self, storage: StorageAdapter, redact: Redact) -> None:
        self._storage = storage
        self._redact = redact
        self._holding: set[str] = set()
        self._pending: dict[str, list[StoredEvent]] = {}
        self._writers: dict[str, asyncio.Task[None]] = {}
        self._written: dict[str, asyncio.Event] = {}

    # -- the lease's view -----------------------------------------------------------------
    def hold(self, thread_id: str) -> None:
        """Start journaling `thread_id` (its lease was taken in this process)."""
        self._holding.add(thread_id)

    async def release(self, thread_id: str) -> None:
        """Stop journaling `thread_id` and wait until its events are written."""
        self._holding.discard(thread_id)
        writer = self._writers.get(thread_id)
        if writer is not None:
            await asyncio.shield(writer)

    # -- recording ------------------------------------------------------------------------
    def record(self, event: Event) -> None:
        """The instance's event subscriber: queue the event and make sure a writer runs."""
        thread_id = event.thread_id
        # Events without a run (a refused lease, plan-only calls) are not the thread's.
        if thread_id not in self._holding or event.run_id is None:
            return
        if event.name in _NOT_JOURNALED:
            return
        self._pending.setdefault(thread_id, []).append(stored_event(event, self._redact))
        if thread_id not in self._writers:
            loop = asyncio.get_running_loop()
            self._writers[thread_id] = loop.create_task(self._write(thread_id))

    async def _write(self, thread_id: str) -> None:
        try:
            while batch := self._pending.pop(thread_id, None):
                try:
                    await self._storage.append_events(batch)
                except Exception:
                    # The run's state is in its records; a lost event is logged, not fatal.
                    log.exception("event journal write failed", thread_id=thread_id)
                self.notify(thread_id)
        finally:
            del self._writers[thread_id]

    async def append(self, event: StoredEvent) -> None:
        """Write an event the server itself records (not one the engine emitted)."""
        await self._storage.append_events([event])
        self.notify(event.thread_id)

    # -- readers --------------------------------------------------------------------------
    def notify(self, thread_id: str) -> None:
        """Wake the streams waiting for new events of `thread_id`."""
        waiters = self._written.pop(thread_id, None)
        if waiters is not None:
            waiters.set()

    def waiter(self, thread_id: str) -> asyncio.Event:
        """An event set the next time this process writes events of `thread_id`. Take it
        before reading the log, so a write between the read and the wait is not missed."""
        waiters = self._written.get(thread_id)
        if waiters is None:
            waiters = self._written[thread_id] = asyncio.Event()
        return waiters


class JournaledStorage(StorageAdapter):
    """A storage adapter whose event log is the journal's (see the module docstring)."""

    def __init__(self, inner: StorageAdapter, journal: EventJournal) -> None:
        self.inner = inner
        self.url = inner.url
        self.journal = journal

    @property
    def backing(self) -> StorageAdapter:
        return self.inner.backing

    def __repr__(self) -> str:
        return f"JournaledStorage({self.inner!r})"

    async def open(self) -> None:
        await self.inner.open()

    async def close(self) -> None:
        await self.inner.close()

    # -- the engine's compact log: the journal writes a superset of it ----------------------
    async def append_events(self, events: Sequence[StoredEvent]) -> None:
        return None

    async def append_event_snapshots(self, snapshots: Sequence[EventSnapshot]) -> None:
        return None

    @asynccontextmanager
    async def lease(self, thread_id: str) -> AsyncIterator[None]:
        async with self.inner.lease(thread_id):
            self.journal.hold(thread_id)
            try:
                yield
            finally:
                await self.journal.release(thread_id)

    # -- everything else is the adapter's -------------------------------------------------
    async def create_run(self, run: RunRecord) -> None:
        await self.inner.create_run(run)

    async def get_run(self, run_id: str) -> RunRecord | None:
        return await self.inner.get_run(run_id)

    async def get_active_run(self, thread_id: str) -> RunRecord | None:
        return await self.inner.get_active_run(thread_id)

    async def list_runs(self, thread_id: str) -> list[RunRecord]:
        return await self.inner.list_runs(thread_id)

    # A run's record says when it last changed (the engine leaves that to storage).
    async def update_run(self, run: RunRecord) -> None:
        run.updated_at = utcnow()
        await self.inner.update_run(run)

    async def finish_run(self, run: RunRecord, messages: Sequence[ConversationMessage]) -> None:
        run.updated_at = utcnow()
        await self.inner.finish_run(run, messages)

    async def save_step(self, run_id: str, record: StepRecord) -> None:
        await self.inner.save_step(run_id, record)

    async def save_step_snapshot(self, run_id: str, snapshot: StepSnapshot) -> None:
        await self.inner.save_step_snapshot(run_id, snapshot)

    async def add_suspension(self, suspension: Suspension) -> None:
        await self.inner.add_suspension(suspension)

    async def list_suspensions(
        self, thread_id: str, *, pending_only: bool = True
    ) -> list[Suspension]:
        return await self.inner.list_suspensions(thread_id, pending_only=pending_only)

    async def decide_suspension(
        self, thread_id: str, suspension_id: str, decision: dict[str, object]
    ) -> Suspension:
        return await self.inner.decide_suspension(thread_id, suspension_id, decision)

    async def append_message(self, message: ConversationMessage) -> None:
        await self.inner.append_message(message)

    async def get_history(self, thread_id: str, *, limit: int = 20) -> list[ConversationMessage]:
        return await self.inner.get_history(thread_id, limit=limit)

    async def replace_history(
        self, thread_id: str, messages: Sequence[ConversationMessage]
    ) -> None:
        await self.inner.replace_history(thread_id, messages)

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
        return await self.inner.query_events(
            thread_id, names=names, since=since, until=until, limit=limit, after_seq=after_seq
        )

    async def list_threads(self, *, limit: int = 100) -> list[ThreadSummary]:
        return await self.inner.list_threads(limit=limit)

    async def get_thread(self, thread_id: str) -> ThreadSummary | None:
        return await self.inner.get_thread(thread_id)

    async def claim_thread(
        self, thread_id: str, owner: str | None, metadata: JsonDict | None = None
    ) -> ThreadSummary:
        return await self.inner.claim_thread(thread_id, owner, metadata)

    async def update_thread(self, thread_id: str, metadata: JsonDict) -> ThreadSummary | None:
        return await self.inner.update_thread(thread_id, metadata)

    async def search_threads(self, query: ThreadQuery) -> ThreadPage:
        return await self.inner.search_threads(query)

    async def delete_run(self, run_id: str) -> bool:
        return await self.inner.delete_run(run_id)

    async def delete_thread(self, thread_id: str) -> bool:
        return await self.inner.delete_thread(thread_id)
