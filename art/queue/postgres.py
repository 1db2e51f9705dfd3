"""Queued runs on PostgreSQL through procrastinate, in the database that holds the threads.

Each submitted run is a procrastinate job of the task `art.engine.run` on the queue
`QueueConfig.name`, with `lock=thread_id`: procrastinate starts a job only when no job of the
same lock is running and no older one waits, so a thread runs one queued run at a time, in
submission order, while different threads spread over every worker. Jobs are taken with
`FOR UPDATE SKIP LOCKED`, announced with LISTEN/NOTIFY, and polled every `poll_s` as a
fallback.

What art adds to procrastinate's worker (`_Worker`):

- **Taking over.** procrastinate records heartbeats (`update_heartbeat_interval`) and can
  list the jobs of workers whose heartbeat is older than a bound (`get_stalled_jobs`), but
  leaves retrying them to the application. Every art worker looks every `heartbeat_s`;
  one at a time (an advisory lock), it puts the stalled jobs back in the queue
  (`retry_job`, keeping their id and lock, hence their place in the thread) and prunes the
  dead workers. The job runs again and continues its run from the stored steps.
- **Handing back.** On SIGTERM procrastinate stops taking jobs, waits
  `shutdown_graceful_timeout` for running ones, then aborts them with reason SHUTDOWN; art's
  task then leaves the run as a crash would and raises `HandedBack`, which the task's retry
  strategy answers with an immediate retry: the job waits for the next worker.
- **Cancelling.** `cancel_job_by_id(abort=True)` cancels a waiting job, or asks the running
  one to abort (NOTIFY): art's task then cancels the run, which ends with code CANCELLED.
- A `art_queue_workers` table names each worker (host, pid) for `art workers`, and a
  unique index finds a run's job by the run's id (and keeps one job per run).
"""

from __future__ import annotations

import asyncio
import os
import socket
from typing import TYPE_CHECKING, Any

from procrastinate import App, BaseRetryStrategy, JobContext, PsycopgConnector, RetryDecision
from procrastinate import exceptions as pq_exceptions
from procrastinate import worker as pq_worker
from procrastinate.job_context import AbortReason
from procrastinate.jobs import Job
from procrastinate.schema import SchemaManager

from art.adapters.postgres import fetch_value, redact_url
from art.core.log import get_logger
from art.queue.contract import QueueBackend, QueueWorker
from art.queue.execute import RunJob, error_retry_delay
from art.queue.jobs import CancelOutcome, JobSpec, JobView, QueueStats, WorkerInfo
from art.queue.metrics import queue_metrics

if TYPE_CHECKING:
    from art.config import QueueConfig
    from art.queue.contract import QueueRunner
    from art.storage.contract import RunState

__all__ = ["TASK", "HandedBack", "ProcrastinateQueue", "ProcrastinateWorker"]

log = get_logger(__name__)

TASK = "art.engine.run"
# Advisory lock keys (art's storage migrations use (0x617274, 1)).
_SETUP_LOCK = (0x617274, 2)
_TAKE_OVER_LOCK = (0x617274, 3)

_ART_TABLES = """
CREATE TABLE IF NOT EXISTS art_queue_workers (
    worker_id BIGINT PRIMARY KEY REFERENCES procrastinate_workers (id) ON DELETE CASCADE,
    queue TEXT NOT NULL,
    name TEXT NOT NULL,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    started_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX IF NOT EXISTS art_queue_run_ids ON procrastinate_jobs ((args->>'run_id'))
    WHERE task_name = 'art.engine.run'
"""


class HandedBack(Exception):
    """A stopping worker gave its run back to the queue; the next worker continues it."""


class _Retry(BaseRetryStrategy):
    """Hand-backs go straight back to the queue; a raising worker retries after a backoff."""

    def get_retry_decision(self, *, exception: BaseException, job: Job) -> RetryDecision | None:
        if isinstance(exception, HandedBack):
            return RetryDecision(retry_in={"seconds": 0})
        if isinstance(exception, pq_exceptions.JobAborted | asyncio.CancelledError):
            return None
        delay = error_retry_delay(job.attempts)
        return None if delay is None else RetryDecision(retry_in={"seconds": int(delay)})


class ProcrastinateQueue(QueueBackend):
    """Jobs in procrastinate's tables, in the PostgreSQL database at `url`."""

    kind = "postgresql"

    def __init__(self, url: str, config: QueueConfig, *, max_connections: int = 5) -> None:
        self.url = url
        self.config = config
        self.connector = PsycopgConnector(
            conninfo=url, min_size=1, max_size=max(max_connections, 3), name="art-queue"
        )
        self.app = App(connector=self.connector)
        self._open = False
        self._open_lock: asyncio.Lock | None = None

    def __repr__(self) -> str:
        return f"ProcrastinateQueue({redact_url(self.url)!r}, queue={self.config.name!r})"

    # -- plumbing -----------------------------------------------------------------
    async def open(self) -> None:
        if self._open:
            return
        if self._open_lock is None:
            self._open_lock = asyncio.Lock()
        async with self._open_lock:
            if self._open:
                return
            await self.app.open_async()
            try:
                await self._create_tables()
            except BaseException:
                await self.app.close_async()
                raise
            self._open = True

    async def _create_tables(self) -> None:
        """procrastinate's schema if the database lacks it, then art's table and index; once,
        under an advisory lock, however many processes start together."""
        async with self.connector.pool.connection() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", _SETUP_LOCK)
            cursor = await conn.execute("SELECT to_regclass('procrastinate_jobs') IS NOT NULL")
            present = await fetch_value(cursor)
            if not present:
                await conn.execute(SchemaManager.get_schema())
            for statement in _ART_TABLES.split(";"):
                await conn.execute(statement)

    async def close(self) -> None:
        if self._open:
            self._open = False
            await self.app.close_async()

    async def _rows(self, query: Any, **args: Any) -> list[dict[str, Any]]:
        await self.open()
        rows: list[dict[str, Any]] = await self.connector.execute_query_all_async(query, **args)
        return rows

    # -- submitting and following -------------------------------------------------
    async def enqueue(self, spec: JobSpec) -> None:
        await self.open()
        deferrer = self.app.configure_task(TASK, lock=spec.thread_id, queue=self.config.name)
        await deferrer.defer_async(**spec.to_args())

    async def _job_row(self, run_id: str) -> dict[str, Any] | None:
        rows = await self._rows(
            "SELECT id, status::text AS status, args, attempts, worker_id"
            " FROM procrastinate_jobs WHERE args->>'run_id' = %(run_id)s"
            " AND task_name = 'art.engine.run'",  # the unique index's predicate, as written there
            run_id=run_id,
        )
        return rows[0] if rows else None

    async def job(self, run_id: str) -> JobView | None:
        row = await self._job_row(run_id)
        if row is None:
            return None
        spec = JobSpec.from_args(row["args"])
        return JobView(spec, row["status"], row["attempts"], row["worker_id"])

    async def cancel(self, run_id: str) -> CancelOutcome:
        row = await self._job_row(run_id)
        if row is None:
            return "missing"
        manager = self.app.job_manager
        if not await manager.cancel_job_by_id_async(row["id"], abort=True):
            return "ended"
        status = await manager.get_job_status_async(row["id"])
        return "cancelled" if status.value == "cancelled" else "aborting"

    async def stats(self) -> QueueStats:
        jobs = await self._rows(
            "SELECT status::text AS status, COUNT(*) AS n FROM procrastinate_jobs"
            " WHERE queue_name = %(queue)s AND task_name = %(task)s GROUP BY status",
            queue=self.config.name,
            task=TASK,
        )
        workers = await self._rows(
            "SELECT w.id, w.last_heartbeat, EXTRACT(EPOCH FROM now() - w.last_heartbeat) AS age,"
            " a.name, a.host, a.pid, a.started_at,"
            " (SELECT COUNT(*) FROM procrastinate_jobs j"
            "  WHERE j.worker_id = w.id AND j.status = 'doing') AS running"
            " FROM procrastinate_workers w JOIN art_queue_workers a ON a.worker_id = w.id"
            " WHERE a.queue = %(queue)s ORDER BY w.id",
            queue=self.config.name,
        )
        return QueueStats(
            queue=self.config.name,
            backend=self.kind,
            jobs={row["status"]: row["n"] for row in jobs},
            workers=[
                WorkerInfo(
                    worker_id=row["id"],
                    name=row["name"],
                    host=row["host"],
                    pid=row["pid"],
                    started_at=row["started_at"],
                    last_heartbeat=row["last_heartbeat"],
                    heartbeat_age_s=max(float(row["age"]), 0.0),
                    running=row["running"],
                    stalled=float(row["age"]) > self.config.stalled_after_s,
                )
                for row in workers
            ],
        )

    def worker(
        self, instance: QueueRunner, *, name: str | None = None, signals: bool = False
    ) -> ProcrastinateWorker:
        return ProcrastinateWorker(self, instance, name=name, signals=signals)

    # -- what workers do ----------------------------------------------------------
    async def describe_worker(self, worker_id: int, name: str) -> None:
        await self._rows(
            "INSERT INTO art_queue_workers (worker_id, queue, name, host, pid)"
            " VALUES (%(id)s, %(queue)s, %(name)s, %(host)s, %(pid)s)"
            " ON CONFLICT (worker_id) DO NOTHING RETURNING worker_id",
            id=worker_id,
            queue=self.config.name,
            name=name,
            host=socket.gethostname(),
            pid=os.getpid(),
        )

    async def holds(self, job_id: int, worker_id: int) -> bool:
        """Whether the worker still holds the job (it was not taken over meanwhile)."""
        rows = await self._rows(
            "SELECT 1 AS held FROM procrastinate_jobs"
            " WHERE id = %(id)s AND worker_id = %(worker)s AND status = 'doing'",
            id=job_id,
            worker=worker_id,
        )
        return bool(rows)

    async def registered(self, worker_id: int) -> bool:
        rows = await self._rows(
            "SELECT 1 AS present FROM procrastinate_workers WHERE id = %(id)s", id=worker_id
        )
        return bool(rows)

    async def delete_finished(self, older_than_s: float) -> int:
        """Delete ended jobs whose last event (procrastinate's log of state changes) is older
        than `older_than_s`; their events go with them (ON DELETE CASCADE)."""
        rows = await self._rows(
            "WITH gone AS (DELETE FROM procrastinate_jobs j"
            " WHERE j.queue_name = %(queue)s AND j.task_name = %(task)s"
            " AND j.status NOT IN ('todo', 'doing')"
            " AND NOT EXISTS (SELECT 1 FROM procrastinate_events e WHERE e.job_id = j.id"
            "  AND e.at >= now() - make_interval(secs => %(seconds)s))"
            " RETURNING 1) SELECT COUNT(*) AS n FROM gone",
            queue=self.config.name,
            task=TASK,
            seconds=older_than_s,
        )
        return int(rows[0]["n"])

    async def take_over(self) -> list[str]:
        """Put the jobs of workers silent for `stalled_after_s` back in the queue and prune
        those workers; the run ids taken over. One worker at a time does it."""
        manager, seconds = self.app.job_manager, self.config.stalled_after_s
        taken: list[str] = []
        async with self.connector.pool.connection() as conn:
            cursor = await conn.execute("SELECT pg_try_advisory_lock(%s, %s)", _TAKE_OVER_LOCK)
            if not await fetch_value(cursor):
                return taken
            try:
                stalled = await manager.get_stalled_jobs(
                    queue=self.config.name, task_name=TASK, seconds_since_heartbeat=seconds
                )
                for job in stalled:
                    try:
                        await manager.retry_job(job)
                    except pq_exceptions.ConnectorException:
                        continue  # it changed meanwhile (ended, or taken by another)
                    taken.append(str(job.task_kwargs["run_id"]))
                await manager.prune_stalled_workers(seconds)
            finally:
                await conn.execute("SELECT pg_advisory_unlock(%s, %s)", _TAKE_OVER_LOCK)
        return taken


class _Worker(pq_worker.Worker):
    """procrastinate's worker with art's take-over loop; it ends only the jobs it still holds
    (not one taken over while it was presumed dead), and looks for the next run of a thread
    at once when a run of it ends (procrastinate announces new jobs, not freed locks)."""

    def __init__(self, owner: ProcrastinateWorker, **options: Any) -> None:
        super().__init__(**options)
        self.owner = owner

    def _start_side_tasks(self) -> list[asyncio.Task[Any]]:
        tasks = super()._start_side_tasks()
        tasks.append(asyncio.create_task(self.owner.look_after(self), name="art-take-over"))
        return tasks

    async def _persist_job_status(self, *args: Any, **kwargs: Any) -> None:
        job: Job = kwargs["job"]
        assert job.id is not None and self.worker_id is not None
        if not await self.owner.queue.holds(job.id, self.worker_id):
            # Presumed dead (no heartbeat reached the database), its job was taken over:
            # the job is its new worker's to end, and the run's lease kept the two apart.
            log.warning("a run's job was taken over from this worker", job_id=job.id)
            self._job_ids_to_abort.pop(job.id, None)
            return
        await super()._persist_job_status(*args, **kwargs)
        self._new_job_event.set()

    async def _fetch_and_process_jobs(self) -> None:
        try:
            await super()._fetch_and_process_jobs()  # type: ignore[no-untyped-call]  # procrastinate's
        except pq_exceptions.ConnectorException:
            # Taking a job names this worker, which the others removed if they took it for
            # dead: then stop, as `look_after` would a moment later; else a real failure.
            if self.worker_id is None or await self.owner.queue.registered(self.worker_id):
                raise
            self.owner.presumed_dead(self)

    def look_now(self) -> None:
        self._new_job_event.set()


class ProcrastinateWorker(QueueWorker[ProcrastinateQueue]):
    """A procrastinate worker running art's `art.engine.run` jobs with one instance."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._worker: _Worker | None = None
        self._stopped = False

    def stop(self) -> None:
        self._stopped = True
        if self._worker is not None:
            self._worker.stop()  # type: ignore[no-untyped-call]  # procrastinate's, unannotated

    async def run(self) -> None:
        config = self.config
        if self.metrics is None:
            self.metrics = queue_metrics(config.name)
        await self.queue.open()
        app = App(connector=self.queue.connector)
        app.task(name=TASK, queue=config.name, pass_context=True, retry=_Retry())(self._run_job)
        self._worker = _Worker(
            self,
            app=app,
            queues=[config.name],
            name=self.name,
            concurrency=config.concurrency,
            fetch_job_polling_interval=config.poll_s,
            abort_job_polling_interval=config.poll_s,
            shutdown_graceful_timeout=config.shutdown_timeout_s,
            install_signal_handlers=self.signals,
            update_heartbeat_interval=config.heartbeat_s,
            stalled_worker_timeout=config.stalled_after_s,
        )
        if self._stopped:
            return
        await self._worker.run()  # type: ignore[no-untyped-call]  # procrastinate's

    async def _run_job(self, context: JobContext, /, **args: Any) -> RunState:
        spec = JobSpec.from_args(args)
        execution = RunJob(
            self.instance, spec, busy_wait_s=self.config.poll_s, metrics=self.metrics
        )
        runner = asyncio.create_task(execution.run(), name=f"art-run:{spec.run_id}")
        try:
            await asyncio.wait({runner})  # procrastinate cancels this task, not the run
        except asyncio.CancelledError:
            if context.abort_reason() == AbortReason.USER_REQUEST:
                execution.cancel("cancelled through the queue")
                await asyncio.wait({runner})
                raise pq_exceptions.JobAborted(f"run {spec.run_id} cancelled") from None
            # Shutting down past the timeout: the run stays as a crash leaves it.
            runner.cancel()
            await asyncio.wait({runner})
            raise HandedBack(f"run {spec.run_id} handed back by a stopping worker") from None
        return runner.result()

    def presumed_dead(self, worker: _Worker) -> None:
        """The other workers took this one for dead and took its runs over: stop."""
        log.error(
            "this worker was presumed dead (no heartbeat for stalled_after_s) and its runs "
            "were taken over: stopping",
            worker_id=worker.worker_id,
        )
        worker.stop()  # type: ignore[no-untyped-call]  # procrastinate's, unannotated

    async def look_after(self, worker: _Worker) -> None:
        """Name this worker, then every `heartbeat_s` take over the runs of dead workers."""
        assert worker.worker_id is not None
        worker_id = worker.worker_id
        await self.queue.describe_worker(worker_id, self.name)
        while True:
            try:
                if not await self.queue.registered(worker_id):
                    self.presumed_dead(worker)
                    return
                taken = await self.queue.take_over()
                if taken:
                    log.warning("runs of a dead worker taken over", run_ids=taken)
                    worker.look_now()
                await self.delete_finished()
                if self.metrics is not None:
                    self.metrics.taken_over(len(taken))
                    if self.metrics.wants_stats():
                        self.metrics.observe(await self.queue.stats())
            except Exception:
                log.exception("taking over stalled runs failed", worker_id=worker_id)
            await asyncio.sleep(self.config.heartbeat_s)
