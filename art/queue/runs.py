"""Submitting runs to the queue and following them: `RunQueue` and `RunHandle`.

`RunQueue.submit` stores a job and returns a `RunHandle` at once; the run's id is fixed at
submission and becomes its `RunRecord.run_id`, so `get_state` finds it once it starts. With
an instance and `in_process` on (the default on SQLite and memory storage), the queue also
runs a worker inside the process, from the first use until the instance closes.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable, Coroutine, Generator, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import ValidationError

from art.config import ProcessOptions, QueueConfig, process_options
from art.core.log import get_logger
from art.core.spans import new_trace_id
from art.errors import ConfigurationError, RunErrorCode, StorageError
from art.queue.backend import QueueWorker, open_backend
from art.queue.execute import mark_cancelled, worker_died_error
from art.queue.jobs import (
    FINAL_JOB_STATES,
    QUEUED_RUN_STATES,
    WORKER_DIED,
    JobSpec,
    JobView,
    QueuedRun,
    QueueStats,
    RunStatus,
)
from art.responses import RunError, utcnow
from art.storage.codec import timestamp_key
from art.storage.contract import ACTIVE_RUN_STATES, RunRecord, StorageAdapter
from art.storage.opening import open_storage

if TYPE_CHECKING:
    from art.queue.contract import QueueBackend, QueueRunner
    from art.storage.contract import StorageAdapter

__all__ = ["RunHandle", "RunQueue"]

log = get_logger(__name__)
T = TypeVar("T")
SyncRunner = Callable[[Coroutine[Any, Any, Any]], Any]

# How often a waiting handle looks at its job: soon at first, then every 100 ms.
_FIRST_POLL_S = 0.005
_MAX_POLL_S = 0.1
# ... and every second while the database does not answer.
_OUTAGE_POLL_S = 1.0


class RunQueue:
    """Queued runs on one storage: submit, look up, cancel, count; optionally run them here.

    Works without a model (a web process that only submits): `RunQueue(storage)`. Built by
    an instance (`inst.submit`), it can also run the queue's jobs in-process.
    """

    def __init__(
        self,
        storage: StorageAdapter | str | None = None,
        config: QueueConfig | Mapping[str, object] | None = None,
        *,
        instance: QueueRunner | None = None,
        sync: SyncRunner | None = None,
    ) -> None:
        self.storage = open_storage(storage)
        # A storage URL is opened (and closed) here; an adapter belongs to its owner.
        self._owns_storage = instance is None and not isinstance(storage, StorageAdapter)
        try:
            self.config = (
                config if isinstance(config, QueueConfig) else QueueConfig(**(config or {}))
            )
        except ValidationError as exc:
            raise ConfigurationError(f"invalid queue configuration: {exc}") from None
        self.backend = open_backend(self.storage, self.config)
        self.instance = instance
        self._sync = sync
        self._opened = False
        self._closed = False
        self._worker: QueueWorker[QueueBackend] | None = None
        self._worker_task: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"RunQueue({self.backend!r})"

    @property
    def in_process(self) -> bool:
        """Whether this process runs the queue's jobs too (needs an instance)."""
        if self.instance is None:
            return False
        if self.config.in_process is not None:
            return self.config.in_process
        return self.backend.kind != "postgresql"

    # -- lifecycle ----------------------------------------------------------------
    async def open(self) -> None:
        if self._closed:
            raise ConfigurationError("this RunQueue is closed")
        if not self._opened:
            await self.storage.open()
            await self.backend.open()
            self._opened = True
        if self.in_process and self._worker_task is None:
            self._start_worker()

    def _start_worker(self) -> None:
        assert self.instance is not None
        worker = self.backend.worker(self.instance, name=None, signals=False)
        self._worker = worker
        self._worker_task = asyncio.get_running_loop().create_task(
            self._serve(worker), name="art-queue-in-process"
        )

    @staticmethod
    async def _serve(worker: QueueWorker[QueueBackend]) -> None:
        try:
            await worker.run()
        except Exception:
            log.exception("the in-process queue worker stopped")

    async def aclose(self) -> None:
        """Stop the in-process worker (its runs end within `shutdown_timeout_s` or go back
        to the queue), then close the queue's connections. Idempotent."""
        if self._closed:
            return
        self._closed = True
        worker, task = self._worker, self._worker_task
        self._worker = self._worker_task = None
        if worker is not None and task is not None:
            worker.stop()
            await task
        await self.backend.close()
        if self._owns_storage and self._opened:
            await self.storage.close()

    async def __aenter__(self) -> RunQueue:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- submitting ---------------------------------------------------------------
    async def submit(
        self,
        query: str,
        thread_id: str,
        options: ProcessOptions | Mapping[str, object] | None = None,
    ) -> RunHandle:
        """Queue `query` on `thread_id`; returns once the job is stored (committed).

        `options` are `process`'s; its `run_id` names the run (default: a new id). Submitting
        a `run_id` again returns the same run's handle (an idempotent retry) when the query
        and thread match, and raises ValueError otherwise.
        """
        if not isinstance(query, str) or not query.strip():
            raise ConfigurationError("submit needs a non-empty query")
        if not isinstance(thread_id, str) or not thread_id:
            raise ConfigurationError("submit needs a non-empty thread_id")
        opts = process_options(options)
        if opts.tools and not all(isinstance(tool, str) for tool in opts.tools):
            raise ConfigurationError(
                "a queued run names its tools (registered on the workers' instance); "
                "a tool object cannot be stored in the queue"
            )
        try:
            stored = json.loads(json.dumps(opts.model_dump(exclude_none=True, exclude={"run_id"})))
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(f"a queued run's options must be JSON: {exc}") from None
        run_id = opts.run_id or uuid.uuid4().hex
        spec = JobSpec(
            run_id=run_id,
            thread_id=thread_id,
            query=query,
            options=stored,
            submitted_at=timestamp_key(utcnow()),
        )
        await self.open()
        try:
            await self.backend.enqueue(spec)
        except Exception as exc:
            existing = await self.backend.job(run_id) if opts.run_id else None
            if existing is None:
                raise
            if (existing.spec.thread_id, existing.spec.query) != (thread_id, query):
                raise ValueError(
                    f"run {run_id!r} was already submitted, with another query or thread"
                ) from exc
            spec = existing.spec
        if self._worker is not None:
            self._worker.wake()
        return RunHandle(self, spec)

    async def get(self, run_id: str) -> RunHandle:
        """The handle of a submitted run (from any process), its job deleted or not.
        KeyError if there is none."""
        await self.open()
        job = await self.backend.job(run_id)
        if job is not None:
            return RunHandle(self, job.spec)
        record = await _ended_run(self.storage, run_id)
        spec = JobSpec(
            run_id=run_id,
            thread_id=record.thread_id,
            query=record.query,
            options={},
            submitted_at=timestamp_key(record.created_at),
        )
        return RunHandle(self, spec)

    async def stats(self) -> QueueStats:
        """The queue's depth, jobs by state and workers (what `art workers` shows)."""
        await self.open()
        return await self.backend.stats()

    async def runs(
        self,
        states: Iterable[str] | None = None,
        *,
        thread_id: str | None = None,
        limit: int = 100,
    ) -> list[QueuedRun]:
        """The queue's runs, newest first, with every attempt at each: all, or those in
        `states` (`queued`, `running`, `stuck`, `dead`, `ended`), of one thread or all."""
        wanted = set(states or ())
        unknown = wanted.difference(QUEUED_RUN_STATES)
        if unknown:
            raise ConfigurationError(
                f"unknown run state(s) {sorted(unknown)}: use {', '.join(QUEUED_RUN_STATES)}"
            )
        await self.open()
        return await self.backend.runs(states=wanted or None, thread_id=thread_id, limit=limit)

    async def retry(self, run_id: str) -> bool:
        """Put a dead-lettered run back in the queue: it runs alone on the next free worker,
        continuing from its stored steps, its worker deaths forgotten. False if the run is
        not dead-lettered. Its thread may have run later runs meanwhile."""
        from art.queue.execute import reopen

        await self.open()
        job = await self.backend.job(run_id)
        if job is None or job.state != "failed":
            return False
        await reopen(self.storage, run_id)
        retried = await self.backend.retry(run_id)
        if retried and self._worker is not None:
            self._worker.wake()
        return retried

    async def discard(self, run_id: str) -> bool:
        """Delete a dead-lettered run's job; the run stays `failed` in storage. False if the
        run is not dead-lettered."""
        await self.open()
        return await self.backend.discard(run_id)

    def run_sync(self, coro: Coroutine[object, None, T]) -> T:
        if self._sync is None:
            coro.close()
            raise RuntimeError(
                "this queue has no sync bridge: await the handle's async methods "
                "(astatus, result, acancel), or use inst.submit for sync handles"
            )
        result: T = self._sync(coro)
        return result


class RunHandle:
    """A queued run: `id` at once, `status()`, its end (`await handle` or `wait()`), `cancel()`.

    The end is the stored `RunRecord` (status `completed`, `partial`, `failed`, `suspended`
    or `abandoned`; a run cancelled before it ran is `failed` with code CANCELLED).
    """

    def __init__(self, queue: RunQueue, spec: JobSpec) -> None:
        self.queue = queue
        self.spec = spec

    @property
    def id(self) -> str:
        """The run's id (its `RunRecord.run_id` once a worker starts it)."""
        return self.spec.run_id

    @property
    def thread_id(self) -> str:
        return self.spec.thread_id

    @property
    def query(self) -> str:
        return self.spec.query

    def __repr__(self) -> str:
        return f"RunHandle(id={self.id!r}, thread_id={self.thread_id!r})"

    # -- status -------------------------------------------------------------------
    async def astatus(self) -> RunStatus:
        """`queued`, `running`, or the run's own status once it has ended."""
        job = await self.queue.backend.job(self.id)
        if job is None:
            return (await _ended_run(self.queue.storage, self.id)).status
        if job.state == "todo":
            return "queued"
        record = await self.queue.storage.get_run(self.id)
        if job.state == "doing":
            return "running" if record is None or record.status == "running" else record.status
        return _final(record, job).status

    def status(self) -> RunStatus:
        """Sync `astatus`."""
        return self.queue.run_sync(self.astatus())

    # -- waiting ------------------------------------------------------------------
    async def result(self) -> RunRecord:
        """Wait for the run's end and return it as stored (bound it with `asyncio.timeout`).
        It waits through a database outage: the workers do too."""
        delay = _FIRST_POLL_S
        while True:
            try:
                job = await self.queue.backend.job(self.id)
                if job is None:
                    return await _ended_run(self.queue.storage, self.id)
                if job.state in FINAL_JOB_STATES:
                    return _final(await self.queue.storage.get_run(self.id), job)
            except StorageError as exc:
                log.warning("a run's end cannot be read yet", run_id=self.id, error=exc.message)
                delay = _OUTAGE_POLL_S
            await asyncio.sleep(delay)
            delay = min(delay * 1.5, _MAX_POLL_S)

    def __await__(self) -> Generator[object, None, RunRecord]:
        return self.result().__await__()

    def wait(self, timeout: float | None = None) -> RunRecord:
        """Sync `result`; TimeoutError if the run has not ended after `timeout` s."""
        return self.queue.run_sync(self._result_within(timeout))

    async def _result_within(self, limit_s: float | None) -> RunRecord:
        try:
            async with asyncio.timeout(limit_s):
                return await self.result()
        except TimeoutError:
            raise TimeoutError(f"run {self.id} has not ended after {limit_s} s") from None

    # -- cancelling ---------------------------------------------------------------
    async def acancel(self) -> bool:
        """Take the run out of the queue, or stop it on its worker (it ends `failed` with code
        CANCELLED, keeping the steps it finished). False if it had already ended."""
        outcome = await self.queue.backend.cancel(self.id)
        if outcome == "missing":
            await _ended_run(self.queue.storage, self.id)  # its job deleted, or no such run
            return False
        if outcome == "cancelled":
            await mark_cancelled(self.queue.storage, self.spec, "cancelled before it ran")
        elif outcome == "aborting" and self.queue._worker is not None:
            self.queue._worker.wake()  # in case it runs here
        return outcome != "ended"

    def cancel(self) -> bool:
        """Sync `acancel`."""
        return self.queue.run_sync(self.acancel())


async def _ended_run(storage: StorageAdapter, run_id: str) -> RunRecord:
    """A run whose job is gone (deleted `keep_finished_s` after it ended), as stored.
    KeyError if it is not stored or not ended (then it never was a queued run)."""
    record = await storage.get_run(run_id)
    if record is None or record.status in ACTIVE_RUN_STATES:
        raise KeyError(f"no queued run {run_id!r}")
    return record


def _final(record: RunRecord | None, job: JobView) -> RunRecord:
    """The run's end as stored, or (its job ended without one) what happened to it."""
    if record is not None and record.status not in ACTIVE_RUN_STATES:
        return record
    if job.state == "cancelled":
        error = RunError(code=RunErrorCode.CANCELLED, message="cancelled before it ran")
    elif job.state == "aborted":
        error = RunError(code=RunErrorCode.CANCELLED, message="cancelled through the queue")
    elif job.error == WORKER_DIED:
        error = worker_died_error(None)
    else:
        reason = job.error or "see the worker's log"
        error = RunError(
            code=RunErrorCode.INTERNAL_ERROR, message=f"its worker could not run it: {reason}"
        )
    base = record or RunRecord(
        run_id=job.spec.run_id,
        thread_id=job.spec.thread_id,
        trace_id=new_trace_id(),
        query=job.spec.query,
    )
    return base.model_copy(update={"status": "failed", "error": error})
