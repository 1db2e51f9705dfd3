"""Running one queued run on a worker, the same way on every backend.

A job runs `aprocess(query, thread_id, run_id=...)`: the run is created with the id the
submitter was given, and a job that runs again (its worker died, or handed it back)
continues that same run from its stored steps, as a retried `process` does. A run that has
already ended (its worker died after finishing it, before the queue heard) is not run again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from art.core.log import get_logger
from art.core.spans import new_trace_id
from art.errors import RunErrorCode, StorageError, ThreadBusyError
from art.responses import RunError, utcnow
from art.storage.contract import ACTIVE_RUN_STATES, RunRecord, RunState

if TYPE_CHECKING:
    from art.queue.contract import QueueBackend, QueueRunner
    from art.queue.jobs import JobSpec, TakeOver
    from art.queue.metrics import QueueMetrics
    from art.storage.contract import StorageAdapter

__all__ = [
    "MAX_ERROR_RETRIES",
    "MAX_STORAGE_RETRY_S",
    "RunJob",
    "ended_status",
    "error_retry_delay",
    "mark_cancelled",
    "mark_failed",
    "record_take_over",
    "reopen",
    "wait_for_storage",
    "worker_died_error",
]

log = get_logger(__name__)

_RUN_STATE: dict[str, RunState] = {
    "success": "completed",
    "partial": "partial",
    "suspended": "suspended",
    "error": "failed",
}
# How often a cancel that arrived before the run registered with its instance is retried.
_CANCEL_RETRY_S = 0.02
# A job whose worker raised (the database unreachable, say) is retried after 1, 2, 4, 8 and
# 16 s; the sixth failure fails it.
MAX_ERROR_RETRIES = 5
# Waiting for the storage to come back: 0.5 s, doubling up to 10 s between tries.
_FIRST_STORAGE_RETRY_S = 0.5
MAX_STORAGE_RETRY_S = 10.0


def error_retry_delay(attempts: int) -> float | None:
    """Seconds before retrying a job whose worker raised; None once it should fail."""
    return None if attempts >= MAX_ERROR_RETRIES else float(2**attempts)


async def ended_status(storage: StorageAdapter, run_id: str) -> RunState | None:
    """The run's status if it is stored and no longer active (it ran to an end), else None."""
    record = await storage.get_run(run_id)
    if record is None or record.status in ACTIVE_RUN_STATES:
        return None
    return record.status


async def mark_cancelled(storage: StorageAdapter, spec: JobSpec, reason: str) -> RunState:
    """Record a queued run cancelled before it ran to an end: failed, code CANCELLED."""
    return await mark_failed(storage, spec, RunError(code=RunErrorCode.CANCELLED, message=reason))


async def mark_failed(storage: StorageAdapter, spec: JobSpec, error: RunError) -> RunState:
    """Record a queued run that will not run (again) as `failed` with `error`.

    A run that never started gets a new record (no worker can start it any more, so no
    lease is needed: its thread may well be running the run before it). One that started
    and was interrupted is updated under the thread's lease, as a run's end is. A run that
    has ended meanwhile keeps its status, which is returned.
    """
    record = await storage.get_run(spec.run_id)
    if record is None:
        record = RunRecord(
            run_id=spec.run_id,
            thread_id=spec.thread_id,
            trace_id=new_trace_id(),
            query=spec.query,
            status="failed",
            user_id=spec.options.get("user_id"),
            session_id=spec.options.get("session_id"),
            error=error,
        )
        try:
            await storage.create_run(record)
            return "failed"
        except ValueError:  # created meanwhile
            record = await storage.get_run(spec.run_id)
            assert record is not None
    if record.status not in ACTIVE_RUN_STATES:
        return record.status
    try:
        async with storage.lease(spec.thread_id):
            current = await storage.get_run(spec.run_id)
            assert current is not None
            if current.status in ACTIVE_RUN_STATES:
                current.status = "failed"
                current.error = error
                current.updated_at = utcnow()
                await storage.update_run(current)
            return current.status
    except ThreadBusyError:
        # Someone runs the thread outside the queue right now; the interrupted run stays
        # as a crash leaves it (their `process` continues or abandons it).
        log.warning("ended run left as it was: its thread is busy", run_id=spec.run_id)
        return record.status


async def reopen(storage: StorageAdapter, run_id: str) -> None:
    """Make a dead-lettered run `running` again (as a crash leaves it), for its job to be
    retried: the next worker continues it from its stored steps."""
    record = await storage.get_run(run_id)
    if record is not None and record.status == "failed":
        record.status = "running"
        record.error = None
        record.updated_at = utcnow()
        await storage.update_run(record)


def worker_died_error(deaths: int | None) -> RunError:
    """Why a run is not run again after its worker died `deaths` times running it."""
    times = "" if deaths is None else f", {deaths} time(s)"
    return RunError(
        code=RunErrorCode.WORKER_DIED,
        message=(
            f"its worker died while running it{times} (the process exited or was "
            "killed: a crash, the OOM killer, os._exit in a tool or the planner); it is not "
            "run again (QueueConfig.max_worker_deaths)"
        ),
    )


async def record_take_over(
    storage: StorageAdapter, taken: TakeOver, queue: QueueBackend, worker_id: int
) -> None:
    """Log a take-over, and end the runs it did not put back (it gave their jobs to this
    worker): dead-lettered (failed, WORKER_DIED) or cancelled. The run's end is stored
    before its job ends, so a handle that sees the job ended reads the run's end."""
    if taken.requeued:
        log.warning("runs of a dead worker taken over", run_ids=taken.requeued)
    for spec, deaths in taken.dead:
        log.error(
            "run dead-lettered: its worker died running it", run_id=spec.run_id, deaths=deaths
        )
        await mark_failed(storage, spec, worker_died_error(deaths))
        await queue.settle(spec.run_id, worker_id, "failed")
    for spec in taken.cancelled:
        log.warning("cancelled run ended: its worker had died", run_id=spec.run_id)
        await mark_cancelled(storage, spec, "cancelled through the queue")
        await queue.settle(spec.run_id, worker_id, "aborted")


async def wait_for_storage(storage: StorageAdapter, run_id: str, error: StorageError) -> None:
    """Wait until the storage answers again, however long, retrying with backoff."""
    delay = _FIRST_STORAGE_RETRY_S
    while True:
        log.warning(
            "the storage is unreachable: the run waits for it",
            run_id=run_id,
            retry_in_s=delay,
            error=error.message,
        )
        await asyncio.sleep(delay)
        try:
            await storage.get_run(run_id)
        except StorageError as exc:
            error = exc
            delay = min(delay * 2, MAX_STORAGE_RETRY_S)
        else:
            log.info("the storage answers again: the run goes on", run_id=run_id)
            return


class RunJob:
    """One queued run on a worker: `run()` to its end; `cancel()` stops it on request."""

    def __init__(
        self,
        instance: QueueRunner,
        spec: JobSpec,
        *,
        busy_wait_s: float,
        metrics: QueueMetrics | None = None,
    ) -> None:
        self.instance = instance
        self.spec = spec
        self.busy_wait_s = busy_wait_s
        self.metrics = metrics
        self.cancel_reason: str | None = None
        #: How the run ended on this worker (the attempt's outcome), once `run()` returned.
        self.outcome: str | None = None
        self._running = False

    async def run(self) -> RunState:
        """Run (or continue) the run; its final status. A cancelled task leaves the run as
        a crash would: the next attempt continues it."""
        metrics, started = self.metrics, time.monotonic()
        if metrics is None:
            self.outcome = await self._run()
            return self.outcome
        metrics.run_started(self.spec)
        outcome = "error"
        try:
            outcome = self.outcome = await self._run()
            return outcome
        except asyncio.CancelledError:
            outcome = "handed_back"
            raise
        finally:
            metrics.run_ended(outcome, time.monotonic() - started)

    async def _run(self) -> RunState:
        spec, storage = self.spec, self.instance.storage
        # Worker deaths are the queue's to bound (max_worker_deaths), not the steps'.
        execution = {
            "count_interrupted_attempts": False,
            **spec.options.get("execution_config", {}),
        }
        options = {**spec.options, "run_id": spec.run_id, "execution_config": execution}
        self._running = True
        try:
            while True:
                try:
                    state = await self._attempt(options)
                except StorageError as exc:
                    # The database went away mid-run (the run stays as a crash leaves it):
                    # wait for it, however long, then continue the run from its steps.
                    await wait_for_storage(storage, spec.run_id, exc)
                    continue
                if state is not None:
                    return state
                # Held outside the queue (a direct `process`, or a worker presumed dead that
                # is still running): wait for the lease; the queue keeps the thread's order.
                await asyncio.sleep(self.busy_wait_s)
        finally:
            self._running = False

    async def _attempt(self, options: Mapping[str, object]) -> RunState | None:
        """Run the run once; its end, or None when its thread was busy."""
        spec, storage = self.spec, self.instance.storage
        if self.cancel_reason is not None:
            return await mark_cancelled(storage, spec, self.cancel_reason)
        ended = await ended_status(storage, spec.run_id)
        if ended is not None:
            return ended
        try:
            response = await self.instance.aprocess(spec.query, spec.thread_id, options)
        except ValueError:
            # The run was created meanwhile by a worker presumed dead that was not.
            if (ended := await ended_status(storage, spec.run_id)) is not None:
                return ended
            raise
        error = response.metadata.error
        if error is None or error.code != RunErrorCode.THREAD_BUSY:
            return _RUN_STATE[response.metadata.status]
        return None

    def cancel(self, reason: str) -> None:
        """Stop the run (its response ends with code CANCELLED). Call on the worker's loop."""
        if self.cancel_reason is None:
            self.cancel_reason = reason
            self._cancel_running()

    def _cancel_running(self) -> None:
        if not self._running:
            return
        spec = self.spec
        if not self.instance.cancel(spec.thread_id, self.cancel_reason or "", run_id=spec.run_id):
            # Not registered with the instance yet (or between attempts): try again shortly.
            asyncio.get_running_loop().call_later(_CANCEL_RETRY_S, self._cancel_running)
