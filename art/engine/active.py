"""ActiveRuns: the one path of `process` and resume under the thread's lease, and the runs
an instance has under way there, for `cancel`.

A call is reachable by `cancel` from the moment it asks for the lease: until its run
exists (taking the lease, `run:before` hooks) it is a `StartingCall`, whose cancel
cancels the call's task; then the `Run` itself, whose cancel stops it in whatever phase
it is.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field

from art.config import ExecutionConfig, ProcessOptions
from art.engine.phases import drive
from art.engine.run import Run, RunDeps, call_error, refused_response
from art.engine.setup import RunSetup
from art.errors import RunErrorCode, ThreadBusyError
from art.observe.events import Event, EventBus, HookVeto
from art.responses import AgentFinalResponse, RunError
from art.storage.contract import RunRecord, StorageAdapter, Suspension

__all__ = ["ActiveRuns", "OpenedRun", "StartingCall"]

EventSink = Callable[[Event], None]


@dataclass(frozen=True, slots=True)
class OpenedRun:
    """The run a process or resume call found under the lease, and what its
    `session:start` says beyond `continued` and `tools`."""

    record: RunRecord
    setup: RunSetup
    continued: bool
    start: dict[str, object] = field(default_factory=dict)
    resumed: Suspension | None = None


class StartingCall:
    """A `process` or resume call before its run exists: `cancel` cancels its task, which
    then answers CANCELLED; once handed over, a cancel goes to the run."""

    def __init__(
        self, task: asyncio.Task[object] | None, loop: asyncio.AbstractEventLoop, run_id: str | None
    ) -> None:
        self.task = task
        self.loop = loop
        self.run_id = run_id
        self.reason: str | None = None
        self._run: Run | None = None

    def hand_over(self, run: Run) -> None:
        self._run = run

    def cancel(self, reason: str) -> None:
        """On the call's loop."""
        if self._run is not None:
            self._run.cancel(reason)  # it started meanwhile
        elif self.reason is None and self.task is not None and not self.task.done():
            self.reason = reason
            self.task.cancel()

    def owns_cancel(self) -> bool:
        """Whether the CancelledError being handled is `cancel`'s alone (then cleared)."""
        return self.reason is not None and self.task is not None and self.task.uncancel() == 0


class ActiveRuns:
    """The runs under way through one instance, and the calls about to start one."""

    def __init__(self, bus: EventBus) -> None:
        self._bus = bus
        self._running: dict[str, Run] = {}
        self._starting: dict[str, list[StartingCall]] = {}

    async def lease_and_drive(
        self,
        storage: StorageAdapter,
        thread_id: str,
        opts: ProcessOptions,
        config: ExecutionConfig,
        started: float,
        open_: Callable[[], Awaitable[OpenedRun]],
        deps_for: Callable[[RunSetup], RunDeps],
        *,
        sinks: Sequence[EventSink],
    ) -> AgentFinalResponse:
        """Take the thread's lease from `storage`, find the run (`open_`, where a
        `run:before` hook may veto it), give it its collaborators (`deps_for`) and drive
        it. A busy thread, a veto or a cancel before the run exists come back as a
        response."""
        with self._start(thread_id, opts.run_id) as starting:
            try:
                async with storage.lease(thread_id):
                    try:
                        opened = await open_()
                    except HookVeto as veto:
                        error = call_error(veto)
                        return await refused_response(
                            self._bus, thread_id, error, started, sinks=sinks
                        )
                    run = Run(
                        deps_for(opened.setup),
                        opened.record,
                        config,
                        opts,
                        bus=self._bus,
                        sinks=sinks,
                        started=started,
                    )
                    start = {
                        "continued": opened.continued,
                        "tools": opened.setup.registry.names(),
                        **opened.start,
                    }
                    starting.hand_over(run)
                    return await self._drive(run, start, resumed=opened.resumed)
            except ThreadBusyError as busy:
                error = RunError(
                    code=RunErrorCode.THREAD_BUSY,
                    message=busy.message,
                    retry_after_s=busy.retry_after_s,
                )
                return await refused_response(
                    self._bus, thread_id, error, started, sinks=sinks, source="lease"
                )
            except asyncio.CancelledError:
                if not starting.owns_cancel():
                    raise
                # Cancelled before its run existed: nothing was stored.
                reason = starting.reason or "cancelled"
                error = RunError(code=RunErrorCode.CANCELLED, message=reason)
                return await refused_response(self._bus, thread_id, error, started, sinks=sinks)

    def cancel(self, thread_id: str, reason: str, *, run_id: str | None = None) -> bool:
        """Stop the run under way on `thread_id` (only if its id is `run_id`, when given),
        or the calls about to start one; False when there is none. Safe from any thread."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        run = self._running.get(thread_id)
        if run is None:
            # Not started yet (taking the thread's lease, in run:before hooks): stop there.
            calls = [
                s
                for s in list(self._starting.get(thread_id, ()))
                if run_id is None or s.run_id == run_id
            ]
            for starting in calls:
                if running is starting.loop:
                    starting.cancel(reason)
                else:
                    starting.loop.call_soon_threadsafe(starting.cancel, reason)
            return bool(calls)
        if run_id is not None and run.context.run_id != run_id:
            return False
        if running is run.loop:
            run.cancel(reason)
        else:
            # The run lives on another loop (the sync methods' private one, say).
            run.context.cancellation.cancel(reason)  # tools see it at once
            run.loop.call_soon_threadsafe(run.cancel, reason)
        return True

    async def _drive(
        self, run: Run, start_data: dict[str, object], *, resumed: Suspension | None = None
    ) -> AgentFinalResponse:
        """Drive `run`, reachable by `cancel` while it runs."""
        self._running[run.thread_id] = run
        try:
            # In a task of its own, so what the run makes current in its context (its
            # tracing span) ends with it; cancelling this call cancels the task.
            return await asyncio.create_task(drive(run, start_data, resumed=resumed))
        finally:
            if self._running.get(run.thread_id) is run:
                del self._running[run.thread_id]

    @contextlib.contextmanager
    def _start(self, thread_id: str, run_id: str | None) -> Iterator[StartingCall]:
        """The call's place in `_starting` until it hands over to its run (or ends)."""
        starting = StartingCall(asyncio.current_task(), asyncio.get_running_loop(), run_id)
        self._starting.setdefault(thread_id, []).append(starting)
        try:
            yield starting
        finally:
            calls = self._starting.get(thread_id, [])
            if starting in calls:
                calls.remove(starting)
            if not calls:
                self._starting.pop(thread_id, None)
