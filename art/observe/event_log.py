"""A run's event log in storage: which events are kept, their compact stored form, and the
writer that stores them in the background while the run goes on.

The log keeps the run's lifecycle and each step's outcome. Per-token chunks,
tool:before/after, tool:update start/end and in_progress statuses are left out (the step
records hold the same facts), so a 1,000-step run stores about 1,000 events.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime

from art.core.models import ArtModel
from art.core.serialization import own_copy, safe_stringify, truncate
from art.core.spans import SpanIds
from art.observe.events import RunEvents
from art.storage.contract import EventSnapshot, StorageAdapter

__all__ = ["LOGGED_EVENTS", "EventLogWriter", "kept_in_log", "stored_events"]

LOGGED_EVENTS = frozenset(
    {
        "session:start",
        "session:end",
        "plan:created",
        "plan:updated",
        "message:before",
        "message:after",
        "tool:loop:before",
        "tool:loop:after",
        "step:status",
        "tool:update",
        "suspended",
        "resumed",
        "error",
    }
)
# Events whose data may quote a provider's error text: redacted before storage.
_REDACTED_EVENTS = frozenset({"error", "message:after", "session:end"})
# Logged events are written to storage in batches of about this many (and at the end).
EVENT_BATCH = 256
_STORED_TEXT_CHARS = 2000

LoggedEvent = tuple[str, dict[str, object], SpanIds | None, datetime]
#: Masks secrets in an event's stored data (`LLMClient.redact`).
Redact = Callable[[dict[str, object]], dict[str, object]]


def kept_in_log(name: str, data: Mapping[str, object]) -> bool:
    """Whether a logged event is kept: a step's in_progress status and a tool's start and
    end updates are not (the step records hold them)."""
    if name == "step:status":
        return data.get("status") != "in_progress"
    if name == "tool:update":
        return data.get("stage") in ("running", "streaming")  # a tool's own progress notes
    return True


def _stored_plan(data: dict[str, object]) -> dict[str, object]:
    plan = data.get("plan")
    if isinstance(plan, ArtModel):  # logged only (see art.engine.phases)
        # The wire form's keys and values, left as Python values: the event is dumped to
        # JSON right after, once, instead of converting each value here first.
        return {**data, "plan": plan.model_dump(by_alias=True, exclude_none=True)}
    return data


def _stored_prompt(data: dict[str, object]) -> dict[str, object]:
    messages = data.get("messages")
    if not isinstance(messages, Sequence):  # a hook's edit of the wrong type
        messages = []
    return {
        "phase": data.get("phase"),
        "model": data.get("model"),
        "messages": len(messages),
        "prompt_chars": sum(len(str(_content(m) or "")) for m in messages),
    }


def _content(message: object) -> object:
    return message.get("content") if isinstance(message, Mapping) else None


def _stored_reply(data: dict[str, object]) -> dict[str, object]:
    content = data.get("content")
    if isinstance(content, str):
        return {**data, "content": truncate(content, _STORED_TEXT_CHARS)}
    return data


def _stored_end(data: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in data.items() if k != "response"}


def _stored_output(data: dict[str, object]) -> dict[str, object]:
    """A tool's progress output or a step's output as text, cut: the step record keeps it
    whole."""
    if "output" in data:
        return {**data, "output": safe_stringify(data["output"], max_length=_STORED_TEXT_CHARS)}
    return data


# The compact form of an event's data kept in the event log, for the events whose
# stored data is not their data as emitted; every other event is stored as it is.
_STORED_DATA: dict[str, Callable[[dict[str, object]], dict[str, object]]] = {
    "plan:created": _stored_plan,
    "message:before": _stored_prompt,
    "message:after": _stored_reply,
    "session:end": _stored_end,
    "tool:update": _stored_output,
    "step:status": _stored_output,
}


def stored_events(
    batch: Sequence[LoggedEvent],
    thread_id: str,
    run_id: str,
    trace_id: str,
    redact: Redact,
) -> list[EventSnapshot]:
    """A run's logged events (what `RunEvents.drain` returns) as they are stored: compact,
    with secrets masked, each with its span's ids. Plain values, their data the log's own
    copies: the storage adapter makes the `StoredEvent`s (`EventSnapshot.stored`) when it
    writes them or is read."""
    stored = []
    for name, data, span, timestamp in batch:
        if name == "step:status":
            # A new dict of the record's scalars and its output as text: the log's own.
            data = _stored_output(data) if "output" in data else dict(data)
        else:
            compact = _STORED_DATA.get(name)
            data = own_copy(compact(data) if compact is not None else data)
            if name in _REDACTED_EVENTS:
                data = redact(data)
        if span is None:
            stored.append(
                EventSnapshot(thread_id, run_id, name, data, trace_id, None, None, timestamp)
            )
        else:
            stored.append(
                EventSnapshot(
                    thread_id,
                    run_id,
                    name,
                    data,
                    span.trace_id,
                    span.span_id,
                    span.parent_span_id,
                    timestamp,
                )
            )
    return stored


class EventLogWriter:
    """Writes a run's logged events to storage, one writer at a time, in order.

    `write_soon()` starts a background write (when a batch has gathered, and while the
    run waits for its tools); `finish()` writes the rest at the end. A failed background
    write is raised by `finish()`; nothing more is written before then.
    """

    def __init__(
        self,
        events: RunEvents,
        storage: StorageAdapter,
        *,
        thread_id: str,
        run_id: str,
        trace_id: str,
        redact: Redact,
    ) -> None:
        self._events = events
        self._storage = storage
        self._ids = (thread_id, run_id, trace_id)
        self._redact = redact
        self._lock = asyncio.Lock()
        self._writer: asyncio.Task[None] | None = None

    @property
    def batch_full(self) -> bool:
        return len(self._events.log) >= EVENT_BATCH

    def write_soon(self) -> None:
        """Write the logged events in the background, unless a write is under way."""
        writer = self._writer
        if writer is not None and (not writer.done() or _failed(writer)):
            return
        if self._events.log:
            self._writer = asyncio.get_running_loop().create_task(self._flush())

    async def finish(self) -> None:
        """Write the rest of the log, after a write begun in the background."""
        writer, self._writer = self._writer, None
        try:
            if writer is not None:
                await writer
        finally:
            await self._flush()

    async def _flush(self) -> None:
        async with self._lock:
            batch = self._events.drain()
            if not batch:
                return
            stored = stored_events(batch, *self._ids, self._redact)
            await self._storage.append_event_snapshots(stored)


def _failed(task: asyncio.Task[object]) -> bool:
    return not task.cancelled() and task.exception() is not None
