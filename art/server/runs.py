"""RunManager: the runs this server executes, owned by the server rather than by requests.

A run started through the API is a task of the manager's: the request that started it
may wait for it, stream it or go away; the run finishes and is stored either way. At
shutdown the manager gives its runs `grace_s` to finish, then cancels the rest, which
leaves them as a crash would (status `running`, finished steps stored): the same query
on the same thread continues them, on this server or another.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from art.core.log import get_logger
from art.engine.suspension import Decision
from art.errors import ArtError, RunErrorCode, ThreadBusyError
from art.instance import ArtInstance
from art.observe.events import Event
from art.queue.runs import RunHandle
from art.responses import AgentFinalResponse, RunError, utcnow
from art.server.journal import EventJournal
from art.server.problems import Problem
from art.server.webhooks import WebhookSender
from art.storage.contract import RunRecord, StoredEvent

__all__ = ["ActiveRun", "MultitaskStrategy", "QueuedRun", "RunManager"]

#: What a new run does when the thread is busy: `reject` it (409), `enqueue` it after the
#: runs before it, `interrupt` the current run (cancelled, its finished steps kept), or
#: `rollback` the current run (cancelled and deleted).
MultitaskStrategy = Literal["reject", "enqueue", "interrupt", "rollback"]

log = get_logger("art.server")


@dataclass
class ActiveRun:
    """A run (or a resume) this process is executing."""

    thread_id: str
    task: asyncio.Task[AgentFinalResponse]
    #: When it was launched: every event of its session is stored with a later time.
    since: datetime
    run_id: str | None = None
    #: The run's own webhook URL (besides the server's).
    webhook: str | None = None
    started: asyncio.Future[str] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )

    async def wait(self) -> AgentFinalResponse:
        """The run's response, without cancelling the run if the caller is cancelled."""
        await asyncio.wait({self.task})
        return self.task.result()


@dataclass
class QueuedRun:
    """A run waiting for its thread (the `enqueue` strategy): it starts, with `run_id`,
    when the runs before it have ended."""

    thread_id: str
    run_id: str
    task: asyncio.Task[AgentFinalResponse]

    async def wait(self) -> AgentFinalResponse:
        await asyncio.wait({self.task})
        return self.task.result()


class RunManager:
    """Starts, tracks, cancels and drains the runs of one instance."""

    def __init__(
        self,
        instance: ArtInstance,
        journal: EventJournal,
        poll_interval_s: float = 0.5,
        webhooks: WebhookSender | None = None,
    ) -> None:
        self.instance = instance
        self.journal = journal
        self.poll_interval_s = poll_interval_s
        self.webhooks = webhooks
        # A run's own webhook URL, kept until the run ends (a suspended run keeps it).
        self._run_webhooks: dict[str, str] = {}
        self._active: dict[str, ActiveRun] = {}
        # The newest queued run of each thread: the next one queued waits for it.
        self._queued: dict[str, QueuedRun] = {}
        # Runs queued in the run queue that this process follows for their webhooks.
        self._following: set[asyncio.Task[None]] = set()
        self._deadline: float | None = None
        self._unsubscribe = instance.events.subscribe(self._on_event)

    @property
    def draining(self) -> bool:
        return self._deadline is not None

    def webhooks_allow(self, url: str) -> bool:
        """Whether a run may name `url` as its own webhook."""
        return self.webhooks is not None and self.webhooks.policy.allows(url)

    def executing(self, thread_id: str) -> ActiveRun | None:
        """The run this process executes on `thread_id`, if any."""
        return self._active.get(thread_id)

    # -- starting -------------------------------------------------------------------------
    async def start(
        self,
        thread_id: str,
        query: str,
        options: Mapping[str, object] | None = None,
        strategy: MultitaskStrategy = "reject",
        webhook: str | None = None,
    ) -> ActiveRun:
        """Start `query` on `thread_id`; returns once the run exists (its id is known).

        With `strategy` `interrupt` or `rollback` the thread's current run (executing here,
        suspended, or left by a crash) is cancelled first, and with `rollback` deleted.
        Raises Problem 409 THREAD_BUSY when another run holds the thread (here or in
        another process), 503 while the server shuts down."""
        if strategy in ("interrupt", "rollback"):
            await self._make_way(thread_id, delete=strategy == "rollback")
        coro = self.instance.aprocess(query, thread_id, options)
        return await self._launch(thread_id, coro, webhook)

    async def fork(
        self,
        thread_id: str,
        run_id: str,
        step_id: str,
        args: Mapping[str, object] | None = None,
        options: Mapping[str, object] | None = None,
        webhook: str | None = None,
    ) -> ActiveRun:
        """Start a fork of `run_id` from `step_id` (see `ArtInstance.afork`); raises its
        ForkError or ThreadBusyError when the fork cannot start."""
        coro = self.instance.afork(thread_id, run_id, step_id, args=args, options=options)
        return await self._launch(thread_id, coro, webhook)

    def enqueue(
        self,
        thread_id: str,
        query: str,
        options: Mapping[str, object] | None = None,
        webhook: str | None = None,
    ) -> QueuedRun:
        """Queue `query` to run on `thread_id` once the runs before it (here, queued here,
        or in another process) have ended; its run id is known at once."""
        if self.draining:
            raise Problem(503, "the server is shutting down; retry on another server")
        run_id = uuid.uuid4().hex
        before = self._queued.get(thread_id)
        run_options = {**(options or {}), "run_id": run_id}

        async def when_free() -> AgentFinalResponse:
            if before is not None:
                await asyncio.wait({before.task})
            while True:
                current = self._active.get(thread_id)
                if current is not None:
                    await asyncio.wait({current.task})
                    continue
                try:
                    coro = self.instance.aprocess(query, thread_id, run_options)
                    active = await self._launch(thread_id, coro, webhook)
                except Problem as busy:  # a run of another process holds the thread
                    if busy.status != 409 or self.draining:
                        raise
                    await asyncio.sleep(self.poll_interval_s)
                    continue
                return await active.wait()

        task = asyncio.get_running_loop().create_task(when_free(), name=f"art-queued-{run_id}")
        queued = QueuedRun(thread_id, run_id, task)
        self._queued[thread_id] = queued
        task.add_done_callback(lambda _: self._dequeued(queued))
        return queued

    async def submit(
        self,
        thread_id: str,
        query: str,
        options: Mapping[str, object] | None = None,
        webhook: str | None = None,
    ) -> RunHandle:
        """Queue `query` in the run queue (`enqueue_to_queue`), where a worker runs it after
        the thread's current run. This process follows the run while it lives, to call the
        webhooks when it ends or suspends."""
        if self.draining:
            raise Problem(503, "the server is shutting down; retry on another server")
        handle = await self.instance.asubmit(query, thread_id, options)
        if self.webhooks is not None and self.webhooks.urls_for(webhook):
            task = asyncio.get_running_loop().create_task(
                self._follow(handle, webhook), name=f"art-following-{handle.id}"
            )
            self._following.add(task)
            task.add_done_callback(self._following.discard)
        return handle

    async def _follow(self, handle: RunHandle, webhook: str | None) -> None:
        try:
            record = await handle.result()
        except KeyError:  # its job and record were deleted before it ended
            log.warning("a queued run vanished before it ended", run_id=handle.id)
            return
        if self.webhooks is None:
            return
        suspension_ids = []
        if record.status == "suspended":
            pending = await self.instance.storage.list_suspensions(record.thread_id)
            suspension_ids = [s.suspension_id for s in pending if s.run_id == record.run_id]
            if webhook is not None:  # kept for the part that resumes it, as for a run here
                self._run_webhooks[record.run_id] = webhook
        self.webhooks.run_stored(record, suspension_ids, webhook)

    def _dequeued(self, queued: QueuedRun) -> None:
        if self._queued.get(queued.thread_id) is queued:
            del self._queued[queued.thread_id]
        if not queued.task.cancelled() and queued.task.exception() is not None:
            log.error(
                "a queued run could not start",
                thread_id=queued.thread_id,
                run_id=queued.run_id,
                exc_info=queued.task.exception(),
            )

    async def _make_way(self, thread_id: str, *, delete: bool) -> None:
        """Cancel the thread's current run (and with `delete` remove it)."""
        active = self._active.get(thread_id)
        if active is not None:
            either: set[asyncio.Future[Any]] = {active.task, active.started}
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
            run_id = active.run_id or (
                active.started.result()
                if active.started.done() and not active.started.cancelled()
                else None
            )
            if run_id is None:  # it ended before it began
                await asyncio.wait({active.task})
                return
        else:
            record = await self.instance.storage.get_active_run(thread_id)
            if record is None:
                return
            run_id = record.run_id
        reason = "a newer run on the thread interrupted it"
        if active is not None and active.run_id is None:
            active.run_id = run_id
        await self.cancel(thread_id, run_id, reason)
        if delete:
            await self.instance.storage.delete_run(run_id)

    async def resume(
        self,
        thread_id: str,
        suspension_id: str,
        decision: Decision,
        options: Mapping[str, object] | None = None,
    ) -> ActiveRun:
        """Record `decision` and continue the suspended run (see `start`). Raises the
        engine's SuspensionError for an unknown or already-decided suspension."""
        coro = self.instance.aresume_execution(thread_id, suspension_id, decision, options)
        try:
            return await self._launch(thread_id, coro)
        except Problem as busy:
            if busy.code != RunErrorCode.THREAD_BUSY:
                raise
            # Busy because someone decided it first (here or in another process) and the
            # run goes on: that is the answer, not a busy thread.
            decided = await self._decided(thread_id, suspension_id)
            if decided is None:
                raise
            raise Problem(
                409,
                f"suspension {suspension_id!r} was decided already ({decided}); the run continues",
                code=RunErrorCode.SUSPENSION_ALREADY_DECIDED,
            ) from None

    async def _decided(self, thread_id: str, suspension_id: str) -> str | None:
        """How `suspension_id` was decided ("approved" / "rejected"), or None if pending."""
        everything = await self.instance.storage.list_suspensions(thread_id, pending_only=False)
        for suspension in everything:
            if suspension.suspension_id == suspension_id and suspension.decision is not None:
                return "approved" if suspension.decision.get("approved") else "rejected"
        return None

    async def _launch(
        self,
        thread_id: str,
        coro: Coroutine[object, None, AgentFinalResponse],
        webhook: str | None = None,
    ) -> ActiveRun:
        if self.draining:
            coro.close()
            raise Problem(503, "the server is shutting down; retry on another server")
        if thread_id in self._active:
            coro.close()
            raise _busy(thread_id)
        since = datetime.now(UTC)
        task = asyncio.get_running_loop().create_task(coro, name=f"art-run-{thread_id}")
        active = ActiveRun(thread_id, task, since, webhook=webhook)
        self._active[thread_id] = active
        task.add_done_callback(lambda _: self._ended(active))
        either: set[asyncio.Future[Any]] = {task, active.started}
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        if active.started.done() and not active.started.cancelled():
            active.run_id = active.started.result()
            return active
        # The run ended before a session started: the thread was busy, or the engine
        # refused the call (an unknown suspension, bad options); that is the caller's answer.
        response = task.result()
        error = response.metadata.error
        if error is not None and error.code == RunErrorCode.THREAD_BUSY:
            raise _busy(thread_id, error.message, error.retry_after_s)
        active.run_id = response.metadata.run_id
        return active

    def _on_event(self, event: Event) -> None:
        if event.name != "session:start" or event.thread_id is None:
            return
        active = self._active.get(event.thread_id)
        if active is not None and not active.started.done() and event.run_id is not None:
            active.started.set_result(event.run_id)

    def _ended(self, active: ActiveRun) -> None:
        if self._active.get(active.thread_id) is active:
            del self._active[active.thread_id]
        began = active.started.done() and not active.started.cancelled()
        if not active.started.done():
            active.started.cancel()
        task = active.task
        error = None if task.cancelled() else task.exception()
        if began and error is None and not task.cancelled():
            self._call_back(task.result(), active.webhook)
        # An ArtError (a decided suspension, bad options) is the caller's answer, not a fault.
        if error is not None and not isinstance(error, ArtError):
            log.error("run task failed", thread_id=active.thread_id, exc_info=error)

    def _call_back(self, response: AgentFinalResponse, webhook: str | None) -> None:
        """Send the run's end (or suspension) to its webhooks; a suspended run's own URL
        is kept for the part that resumes it."""
        run_id = response.metadata.run_id
        if run_id is None:
            return
        run_url = webhook or self._run_webhooks.pop(run_id, None)
        if run_url is not None and response.metadata.status == "suspended":
            self._run_webhooks[run_id] = run_url
        if self.webhooks is not None:
            self.webhooks.run_ended(response, run_url)

    # -- cancelling -----------------------------------------------------------------------
    async def cancel(self, thread_id: str, run_id: str, reason: str) -> RunRecord:
        """Stop a run: the one executing here, or one nobody executes (suspended, or left
        running by a crash), which is marked failed with code CANCELLED."""
        active = self._active.get(thread_id)
        if active is not None and active.run_id == run_id:
            self.instance.cancel(thread_id, reason)
            await active.wait()
            record = await self.instance.storage.get_run(run_id)
            assert record is not None
            return record
        storage = self.instance.storage
        record = await storage.get_run(run_id)
        if record is None or record.thread_id != thread_id:
            raise Problem(404, f"no run {run_id!r} on thread {thread_id!r}")
        if record.status not in ("running", "suspended"):
            raise Problem(
                409, f"run {run_id!r} has ended (status {record.status})", code="RUN_ENDED"
            )

        try:
            async with storage.lease(thread_id):
                record = await storage.get_run(run_id)
                assert record is not None
                if record.status in ("running", "suspended"):
                    await self._mark_cancelled(record, reason)
        except ThreadBusyError:
            raise Problem(
                409,
                f"run {run_id!r} is executing in another server process; cancel it there",
                code="RUN_EXECUTING_ELSEWHERE",
            ) from None
        return record

    async def _mark_cancelled(self, record: RunRecord, reason: str) -> None:
        storage = self.instance.storage
        error = RunError(code=RunErrorCode.CANCELLED, message=reason)
        record.status = "failed"
        record.error = error
        record.updated_at = utcnow()
        await storage.update_run(record)
        # The run's streams end on its session:end; nobody else will write one.
        end = StoredEvent(
            thread_id=record.thread_id,
            run_id=record.run_id,
            name="session:end",
            data={
                "status": "error",
                "answer": "",
                "llm_calls": record.llm_calls,
                "tool_calls": record.tool_calls,
                "error": error.model_dump(mode="json"),
                "suspension_ids": [],
                "run_id": record.run_id,
            },
            trace_id=record.trace_id,
        )
        await self.journal.append(end)

    # -- shutting down --------------------------------------------------------------------
    def begin_drain(self, grace_s: float) -> None:
        """Refuse new runs from now on; running ones have `grace_s` seconds left."""
        if self._deadline is None:
            self._deadline = time.monotonic() + grace_s
            log.info("draining runs", runs=len(self._active), grace_s=grace_s)

    async def shutdown(self, grace_s: float) -> None:
        """Wait for the runs until the drain's deadline, then interrupt the rest. Runs
        still queued here are dropped (they never started)."""
        self.begin_drain(grace_s)
        for queued in list(self._queued.values()):
            queued.task.cancel("the server is shutting down")
        for following in list(self._following):
            following.cancel("the server is shutting down")
        assert self._deadline is not None
        tasks = {active.task for active in self._active.values()}
        if tasks:
            left = max(0.0, self._deadline - time.monotonic())
            _, late = await asyncio.wait(tasks, timeout=left) if left else (set(), tasks)
            for task in late:
                task.cancel("the server is shutting down")
            if late:
                log.warning("runs interrupted; the same query continues them", runs=len(late))
                await asyncio.wait(late)
        self._unsubscribe()


def _busy(
    thread_id: str, message: str | None = None, retry_after_s: float | None = None
) -> Problem:
    return Problem(
        409,
        message or f"thread {thread_id!r} is being run by another run; wait for it to end",
        code=RunErrorCode.THREAD_BUSY,
        retry_after_s=retry_after_s,
    )
