"""MemoryStorage: the whole storage contract in one process's memory (tests, notebooks).

Records are stored as JSON text and parsed on every read, exactly as the durable adapters
do, so a caller never shares a mutable object with the store and a test that passes here
sees the same values SQLite or PostgreSQL would return. What the engine saves on every
step (`save_step_snapshot`, `append_event_snapshots`) is kept as plain values instead,
with copies of their containers (a finished step's as marshal's bytes) and the secrets
in force at the save, and written as JSON (those secrets masked) when it is first read:
most step records are replaced, and most event logs never read, in the same process.

One `threading.Lock` guards the state: it is safe across coroutines, event loops and
threads of one process. Nothing survives the process; the lease is per process.
"""

from __future__ import annotations

import itertools
import marshal
import threading
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple, cast

import pydantic_core
from pydantic import BaseModel

from art.core.binary import JSON_SCALARS
from art.core.redaction import Secrets, current_secrets
from art.core.serialization import own_copy
from art.errors import RunErrorCode, SuspensionError, ThreadBusyError
from art.responses import ConversationMessage, StepRecord, utcnow
from art.storage.codec import (
    as_utc,
    dump_json,
    load_json,
    merge_metadata,
    metadata_matches,
    thread_cursor,
)
from art.storage.contract import (
    ACTIVE_RUN_STATES,
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

__all__ = ["MemoryStorage"]


# A record saved as values, and the secrets in force when it was saved (None: none); its
# JSON text is written (those secrets masked) when it is read. A plain tuple of plain
# values: the garbage collector stops tracking it (not a NamedTuple), and a long run keeps
# one per step. The values: a step's start as handed over (StepSnapshot), a finished
# step's values in StepSnapshot order (`_step_values`), or a logged event's fields in
# EventSnapshot order.
_Unwritten = tuple[StepSnapshot | tuple[Any, ...], Secrets | None]


def _written(kept: str | _Unwritten, model: type[BaseModel]) -> str:
    """The JSON text of a kept record."""
    if isinstance(kept, str):
        return kept
    values, secrets = kept
    if isinstance(values, StepSnapshot):
        record: BaseModel = values.record()
    elif model is StepRecord:
        record = StepRecord.model_validate(_step_fields(values))
    else:
        record = EventSnapshot(*values).stored()
    return dump_json(record, secrets=secrets or _NO_SECRETS)


@dataclass
class _Thread:
    run_ids: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    suspension_ids: list[str] = field(default_factory=list)
    events: list[tuple[int, str, datetime, str | _Unwritten]] = field(default_factory=list)
    updated_at: datetime = field(default_factory=utcnow)
    created_at: datetime = field(default_factory=utcnow)
    touched: int = 0
    owner: str | None = None
    metadata: str = "{}"  # JSON, like every record here


@dataclass
class _Run:
    thread_id: str
    run_json: str
    status: str  # kept beside the JSON: finding a thread's active run parses only that run
    steps: dict[str, str | _Unwritten] = field(default_factory=dict)


class _Suspension(NamedTuple):
    thread_id: str
    text: str  # its JSON
    pending: bool  # kept beside the JSON: listing the pending ones parses only those


_NO_SECRETS = Secrets()


def _frozen(container: object) -> object:
    """A dict's or list's own copy: the bytes marshal writes for it, when it can write it
    (text, numbers, bytes, None inside), else a copy (`own_copy`). Bytes are not tracked
    by the garbage collector, which a long run keeping one copy per step spares every
    full collection; `_thawed` reads them back. A record is read through its JSON text,
    which marshal's own conversions cannot change (a bytearray is bytes there too)."""
    try:
        # Version 2: no shared references, so a value repeated is read back as copies,
        # as own_copy makes them.
        return marshal.dumps(container, 2)  # type: ignore[arg-type]  # ValueError if not
    except ValueError:  # something marshal does not write (a subclass, nested too deep)
        return own_copy(container)


def _thawed(kept: object) -> object:
    """What `_frozen` kept, as the container it was."""
    return marshal.loads(kept) if type(kept) is bytes else kept


def _step_values(snapshot: StepSnapshot) -> tuple[object, ...]:
    """The snapshot's values, its containers frozen (`_frozen`), its result as (call_id,
    tool_name, status, output, error, metadata, whether the output is frozen): tuples,
    made into the record's fields only when it is read (`_step_fields`), as most
    finished steps' records are not."""
    args, decision, result = snapshot.args, snapshot.decision, snapshot.result
    kept_result = None
    if result is not None:
        output, metadata = result.output, result.metadata
        plain = type(output) in JSON_SCALARS or type(output) is bytes
        kept_result = (
            result.call_id,
            result.tool_name,
            result.status,
            output if plain else _frozen(output),
            result.error,
            _frozen(metadata) if metadata else None,
            not plain,
        )
    return (
        snapshot.step_id,
        snapshot.tool,
        snapshot.status,
        kept_result,
        snapshot.attempts,
        snapshot.started_at,
        snapshot.ended_at,
        snapshot.arrived_at,
        None if args is None else _frozen(args),
        snapshot.reason,
        None if decision is None else _frozen(decision),
    )


def _step_fields(values: tuple[object, ...]) -> dict[str, object]:
    """The record's fields of what `_step_values` kept."""
    fields: dict[str, object] = dict(zip(StepSnapshot._fields, values, strict=True))
    fields["args"] = _thawed(fields["args"])
    fields["decision"] = _thawed(fields["decision"])
    result = fields.pop("result")
    if result is not None:
        call_id, tool_name, status, output, error, metadata, frozen = cast(
            tuple[object, ...], result
        )
        fields["result"] = {
            "call_id": call_id,
            "tool_name": tool_name,
            "status": status,
            "output": _thawed(output) if frozen else output,
            "error": error,
            "metadata": _thawed(metadata) or {},
        }
    return fields


class MemoryStorage(StorageAdapter):
    """In-process storage; `memory://`."""

    url = "memory://"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._threads: dict[str, _Thread] = {}
        self._runs: dict[str, _Run] = {}
        self._suspensions: dict[str, _Suspension] = {}
        self._event_seq = itertools.count(1)
        self._touch_seq = itertools.count(1)
        self._leases: set[str] = set()
        # Values are kept unwritten only when the methods they stand for are these.
        cls = type(self)
        self._own_save_step = cls.save_step is MemoryStorage.save_step
        self._own_append_events = cls.append_events is MemoryStorage.append_events

    def __repr__(self) -> str:
        return "MemoryStorage()"

    def _thread(self, thread_id: str) -> _Thread:
        thread = self._threads.get(thread_id)
        if thread is None:
            thread = self._threads[thread_id] = _Thread()
        return thread

    def _touch(self, thread: _Thread) -> None:
        thread.updated_at = utcnow()
        thread.touched = next(self._touch_seq)

    def _load_run(self, stored: _Run, *, steps: bool = True) -> RunRecord:
        """The stored run (under the lock); its unwritten step records are written now."""
        run = load_json(RunRecord, stored.run_json)
        if steps:
            texts: dict[str, str] = {}
            for step_id, kept in stored.steps.items():
                texts[step_id] = _written(kept, StepRecord)
            stored.steps.update(texts)  # written once
            run.steps = {step_id: load_json(StepRecord, text) for step_id, text in texts.items()}
        return run

    # -- runs ---------------------------------------------------------------------
    async def create_run(self, run: RunRecord) -> None:
        steps: dict[str, str | _Unwritten] = {
            step_id: dump_json(record) for step_id, record in run.steps.items()
        }
        run_json = dump_json(run, exclude={"steps"})
        with self._lock:
            if run.run_id in self._runs:
                raise ValueError(f"run {run.run_id!r} already exists")
            self._runs[run.run_id] = _Run(run.thread_id, run_json, run.status, steps)
            thread = self._thread(run.thread_id)
            thread.run_ids.append(run.run_id)
            self._touch(thread)

    async def get_run(self, run_id: str) -> RunRecord | None:
        with self._lock:
            stored = self._runs.get(run_id)
            return self._load_run(stored) if stored else None

    async def get_active_run(self, thread_id: str) -> RunRecord | None:
        with self._lock:
            thread = self._threads.get(thread_id)
            for run_id in reversed(thread.run_ids if thread else []):
                stored = self._runs[run_id]
                if stored.status in ACTIVE_RUN_STATES:
                    return self._load_run(stored)
            return None

    async def list_runs(self, thread_id: str) -> list[RunRecord]:
        with self._lock:
            thread = self._threads.get(thread_id)
            return [self._load_run(self._runs[r]) for r in (thread.run_ids if thread else [])]

    async def update_run(self, run: RunRecord) -> None:
        run_json = dump_json(run, exclude={"steps"})
        with self._lock:
            stored = self._runs.get(run.run_id)
            if stored is None:
                raise KeyError(f"no run {run.run_id!r}")
            stored.run_json, stored.status = run_json, run.status
            self._touch(self._thread(stored.thread_id))

    async def finish_run(self, run: RunRecord, messages: Sequence[ConversationMessage]) -> None:
        run_json = dump_json(run, exclude={"steps"})
        texts = [dump_json(message) for message in messages]
        with self._lock:
            stored = self._runs.get(run.run_id)
            if stored is None:
                raise KeyError(f"no run {run.run_id!r}")
            stored.run_json, stored.status = run_json, run.status
            thread = self._thread(stored.thread_id)
            thread.messages.extend(texts)
            self._touch(thread)

    async def save_step(self, run_id: str, record: StepRecord) -> None:
        self._keep_step(run_id, record.step_id, dump_json(record))

    async def save_step_snapshot(self, run_id: str, snapshot: StepSnapshot) -> None:
        if self._own_save_step:
            kept: _Unwritten
            if snapshot.status == "in_progress":
                # A step's start, which its end replaces a moment later: kept as handed
                # over (the engine replaces a record's values, it never edits them).
                kept = (snapshot, current_secrets() or None)
            else:
                kept = (_step_values(snapshot), current_secrets() or None)
            self._keep_step(run_id, snapshot.step_id, kept)
        else:  # a subclass's save_step sees every record
            await self.save_step(run_id, snapshot.record())

    def _keep_step(self, run_id: str, step_id: str, saved: str | _Unwritten) -> None:
        with self._lock:
            stored = self._runs.get(run_id)
            if stored is None:
                raise KeyError(f"no run {run_id!r}")
            stored.steps[step_id] = saved

    # -- suspensions --------------------------------------------------------------
    async def add_suspension(self, suspension: Suspension) -> None:
        text = dump_json(suspension)
        with self._lock:
            if suspension.suspension_id in self._suspensions:
                raise ValueError(f"suspension {suspension.suspension_id!r} already exists")
            self._suspensions[suspension.suspension_id] = _Suspension(
                suspension.thread_id, text, suspension.pending
            )
            self._thread(suspension.thread_id).suspension_ids.append(suspension.suspension_id)

    async def list_suspensions(
        self, thread_id: str, *, pending_only: bool = True
    ) -> list[Suspension]:
        with self._lock:
            thread = self._threads.get(thread_id)
            stored = [self._suspensions[s] for s in (thread.suspension_ids if thread else [])]
        return [load_json(Suspension, s.text) for s in stored if s.pending or not pending_only]

    async def decide_suspension(
        self, thread_id: str, suspension_id: str, decision: Mapping[str, object]
    ) -> Suspension:
        with self._lock:
            stored = self._suspensions.get(suspension_id)
            if stored is None or stored.thread_id != thread_id:
                raise SuspensionError(
                    f"no suspension {suspension_id!r} on thread {thread_id!r}",
                    code=RunErrorCode.SUSPENSION_NOT_FOUND,
                )
            suspension = load_json(Suspension, stored.text)
            if not suspension.pending:
                raise SuspensionError(
                    f"suspension {suspension_id!r} was already decided",
                    code=RunErrorCode.SUSPENSION_ALREADY_DECIDED,
                    details=suspension.decision,
                )
            suspension.decision = dict(decision)
            suspension.decided_at = utcnow()
            text = dump_json(suspension)
            self._suspensions[suspension_id] = _Suspension(thread_id, text, pending=False)
        return load_json(Suspension, text)

    # -- conversation -------------------------------------------------------------
    async def append_message(self, message: ConversationMessage) -> None:
        text = dump_json(message)
        with self._lock:
            thread = self._thread(message.thread_id)
            thread.messages.append(text)
            self._touch(thread)

    async def get_history(self, thread_id: str, *, limit: int = 20) -> list[ConversationMessage]:
        if limit <= 0:
            return []
        with self._lock:
            thread = self._threads.get(thread_id)
            texts = thread.messages[-limit:] if thread else []
        return [load_json(ConversationMessage, text) for text in texts]

    async def replace_history(
        self, thread_id: str, messages: Sequence[ConversationMessage]
    ) -> None:
        texts = [dump_json(message) for message in messages]
        with self._lock:
            thread = self._thread(thread_id)
            thread.messages = texts
            self._touch(thread)

    async def delete_run(self, run_id: str) -> bool:
        with self._lock:
            stored = self._runs.pop(run_id, None)
            if stored is None:
                return False
            thread = self._threads[stored.thread_id]
            thread.run_ids.remove(run_id)
            for suspension_id in list(thread.suspension_ids):
                if load_json(Suspension, self._suspensions[suspension_id].text).run_id == run_id:
                    thread.suspension_ids.remove(suspension_id)
                    del self._suspensions[suspension_id]
            thread.events = [
                row
                for row in thread.events
                if load_json(StoredEvent, _written(row[3], StoredEvent)).run_id != run_id
            ]
            return True

    async def delete_thread(self, thread_id: str) -> bool:
        with self._lock:
            thread = self._threads.pop(thread_id, None)
            if thread is None:
                return False
            for run_id in thread.run_ids:
                self._runs.pop(run_id, None)
            for suspension_id in thread.suspension_ids:
                self._suspensions.pop(suspension_id, None)
            return True

    # -- events -------------------------------------------------------------------
    async def append_events(self, events: Sequence[StoredEvent]) -> None:
        # Serialised before taking the lock; the number is kept beside the text and set
        # on read, so an event is dumped once and never copied. The time is kept as an
        # aware UTC datetime (the engine's already are), compared as timestamp_key orders.
        self._keep_events(
            [(e.thread_id, e.name, as_utc(e.timestamp), dump_json(e)) for e in events]
        )

    async def append_event_snapshots(self, snapshots: Sequence[EventSnapshot]) -> None:
        if not self._own_append_events:  # a subclass's append_events sees every event
            await self.append_events([snapshot.stored() for snapshot in snapshots])
            return
        # The snapshots' data are their own (EventSnapshot): kept as they are.
        secrets = current_secrets() or None
        self._keep_events(
            [(s.thread_id, s.name, as_utc(s.timestamp), (tuple(s), secrets)) for s in snapshots]
        )

    def _keep_events(self, rows: list[tuple[str, str, datetime, str | _Unwritten]]) -> None:
        with self._lock:
            thread_id, stored = None, []  # a batch is usually one run's: one thread
            for row_thread_id, name, moment, text in rows:
                if row_thread_id != thread_id:
                    thread_id, stored = row_thread_id, self._thread(row_thread_id).events
                stored.append((next(self._event_seq), name, moment, text))

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
        wanted = set(names) if names is not None else None
        since_key = as_utc(since) if since is not None else None
        until_key = as_utc(until) if until is not None else None
        with self._lock:
            thread = self._threads.get(thread_id)
            rows = list(thread.events) if thread else []
        found: list[StoredEvent] = []
        for seq, name, moment, saved in rows:
            if limit is not None and len(found) >= limit:
                break
            if after_seq is not None and seq <= after_seq:
                continue
            if wanted is not None and name not in wanted:
                continue
            if since_key is not None and moment < since_key:
                continue
            if until_key is not None and moment >= until_key:
                continue
            text = _written(saved, StoredEvent)
            event = load_json(StoredEvent, text)
            event.seq = seq
            found.append(event)
        return found

    # -- threads ------------------------------------------------------------------
    async def list_threads(self, *, limit: int = 100) -> list[ThreadSummary]:
        return self._search(ThreadQuery(), max(limit, 0)).threads

    def _summary(self, thread_id: str, thread: _Thread) -> ThreadSummary:
        last = (
            self._load_run(self._runs[thread.run_ids[-1]], steps=False) if thread.run_ids else None
        )
        return ThreadSummary(
            thread_id=thread_id,
            runs=len(thread.run_ids),
            last_query=last.query if last else None,
            last_status=last.status if last else None,
            updated_at=thread.updated_at,
            created_at=thread.created_at,
            owner=thread.owner,
            metadata=pydantic_core.from_json(thread.metadata),
        )

    async def get_thread(self, thread_id: str) -> ThreadSummary | None:
        with self._lock:
            thread = self._threads.get(thread_id)
            return self._summary(thread_id, thread) if thread and thread.touched else None

    async def claim_thread(
        self, thread_id: str, owner: str | None, metadata: Mapping[str, object] | None = None
    ) -> ThreadSummary:
        text = pydantic_core.to_json(metadata or {}).decode()
        with self._lock:
            thread = self._threads.get(thread_id)
            if thread is None or not thread.touched:
                thread = self._thread(thread_id)
                thread.owner, thread.metadata = owner, text
                thread.created_at = utcnow()
                self._touch(thread)
            return self._summary(thread_id, thread)

    async def update_thread(
        self, thread_id: str, metadata: dict[str, object]
    ) -> ThreadSummary | None:
        with self._lock:
            thread = self._threads.get(thread_id)
            if thread is None or not thread.touched:
                return None
            merged = merge_metadata(pydantic_core.from_json(thread.metadata), metadata)
            thread.metadata = pydantic_core.to_json(merged).decode()
            self._touch(thread)
            return self._summary(thread_id, thread)

    async def search_threads(self, query: ThreadQuery) -> ThreadPage:
        return self._search(query, query.limit)

    def _search(self, query: ThreadQuery, limit: int) -> ThreadPage:
        after = thread_cursor(query.cursor)
        with self._lock:
            ordered = sorted(
                ((tid, t) for tid, t in self._threads.items() if t.touched),
                key=lambda item: item[1].touched,
                reverse=True,
            )
            page: list[ThreadSummary] = []
            last_touched = None
            for thread_id, thread in ordered:
                if after is not None and thread.touched >= after:
                    continue
                if query.owner is not None and thread.owner != query.owner:
                    continue
                summary = self._summary(thread_id, thread)
                if query.status is not None and summary.last_status != query.status:
                    continue
                if not metadata_matches(summary.metadata, query.metadata):
                    continue
                if len(page) == limit:
                    if not page:  # a limit of 0: no page, so no cursor
                        return ThreadPage(threads=page)
                    return ThreadPage(threads=page, next_cursor=str(last_touched))
                page.append(summary)
                last_touched = thread.touched
        return ThreadPage(threads=page)

    # -- one worker per thread ----------------------------------------------------
    @asynccontextmanager
    async def lease(self, thread_id: str) -> AsyncIterator[None]:
        with self._lock:
            if thread_id in self._leases:
                raise ThreadBusyError(thread_id)
            self._leases.add(thread_id)
        try:
            yield
        finally:
            with self._lock:
                self._leases.discard(thread_id)

    async def close(self) -> None:
        """Nothing to release: the data lives as long as this object."""
