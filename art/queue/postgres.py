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
- **Poison runs.** A job its dead worker ran alone is charged the death (`art_queue_attempts`
  records every attempt and how it ended); at `max_worker_deaths` it fails, dead-lettered.
  Jobs that shared the dead worker go to the `<queue>#alone` queue, which a worker takes
  from only when it runs nothing else (`_Worker._fetch_jobs`).
- **Outages.** procrastinate's worker stops when its heartbeat or listener raises; art's
  keeps both going, waits for the database wherever it must write, and starts a new life
  (a new worker id) when it lost the database or was presumed dead.
- **Cancelling.** `cancel_job_by_id(abort=True)` cancels a waiting job, or asks the running
  one to abort (NOTIFY): art's task then cancels the run, which ends with code CANCELLED. A
  job whose cancel arrived after its worker died ends at the take-over (procrastinate's
  `retry_job` would fail it).
- A `art_queue_workers` table names each worker (host, pid) for `art workers`, and a
  unique index finds a run's job by the run's id (and keeps one job per run).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Required, TypedDict, TypeVar, Unpack

import psycopg
from procrastinate import App, BaseRetryStrategy, JobContext, PsycopgConnector, RetryDecision
from procrastinate import exceptions as pq_exceptions
from procrastinate import job_context as pq_job_context
from procrastinate import utils as pq_utils
from procrastinate import worker as pq_worker
from procrastinate.job_context import AbortReason
from procrastinate.jobs import Job, Status
from procrastinate.schema import SchemaManager
from psycopg_pool import AsyncConnectionPool

from art.adapters.postgres import fetch_value, redact_url
from art.core.json import JsonValue
from art.core.log import get_logger
from art.errors import StorageError
from art.queue.contract import QueueBackend, QueueWorker
from art.queue.execute import MAX_STORAGE_RETRY_S, RunJob, error_retry_delay, record_take_over
from art.queue.jobs import (
    WORKER_DIED,
    Attempt,
    CancelOutcome,
    JobSpec,
    JobState,
    JobView,
    QueuedRun,
    QueueStats,
    TakeOver,
    WorkerInfo,
    job_states_of,
    queued_run_state,
)
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
_FIRST_RETRY_S = 0.5
T = TypeVar("T")

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
    WHERE task_name = 'art.engine.run';
CREATE TABLE IF NOT EXISTS art_queue_attempts (
    run_id TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    worker_id BIGINT,
    worker TEXT,
    started_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    ended_at TIMESTAMPTZ,
    outcome TEXT,
    PRIMARY KEY (run_id, attempt)
)
"""

# The jobs of workers silent for `seconds`, as procrastinate's `get_stalled_jobs` finds
# them, with what taking them over needs besides.
_STALLED = """
SELECT j.id, j.args, j.worker_id, j.abort_requested, j.queue_name
  FROM procrastinate_jobs j
  LEFT JOIN procrastinate_workers w ON w.id = j.worker_id
 WHERE j.status = 'doing' AND j.task_name = %(task)s AND j.queue_name = ANY(%(queues)s)
   AND (j.worker_id IS NULL
        OR w.last_heartbeat < now() - make_interval(secs => %(seconds)s))
"""
# End a run's open attempt on a worker with `outcome` (recording one if its worker died before it
# could); how many times the run's worker died running it alone, this attempt included.
_END_ATTEMPT = """
WITH ended AS (
    UPDATE art_queue_attempts SET ended_at = now(), outcome = %(outcome)s
     WHERE run_id = %(run_id)s AND ended_at IS NULL AND worker_id = %(worker_id)s
    RETURNING outcome
), added AS (
    INSERT INTO art_queue_attempts (run_id, attempt, worker_id, ended_at, outcome)
    SELECT %(run_id)s, m.next, %(worker_id)s, now(), %(outcome)s
      FROM (SELECT COALESCE(MAX(attempt), 0) + 1 AS next FROM art_queue_attempts
             WHERE run_id = %(run_id)s) AS m
     WHERE %(record_missing)s AND NOT EXISTS (SELECT 1 FROM ended)
    RETURNING outcome
)
SELECT (SELECT COUNT(*) FROM art_queue_attempts
         WHERE run_id = %(run_id)s AND outcome = 'worker_died')
     + (SELECT COUNT(*) FROM ended WHERE outcome = 'worker_died')
     + (SELECT COUNT(*) FROM added WHERE outcome = 'worker_died') AS deaths
"""


def unreachable(exc: BaseException) -> bool:
    """Whether `exc` says the database could not be reached (or dropped the connection),
    as opposed to refusing what was asked."""
    if isinstance(exc, StorageError):
        return True
    if isinstance(exc, pq_exceptions.ConnectorException):
        exc = exc.__cause__ or exc
    return isinstance(exc, psycopg.OperationalError | OSError)


async def patiently(what: str, call: Callable[[], Awaitable[T]]) -> T:
    """`call()`, retried with backoff for as long as the database is unreachable."""
    delay = _FIRST_RETRY_S
    while True:
        try:
            return await call()
        except Exception as exc:
            if not unreachable(exc):
                raise
            log.warning(
                f"{what} failed: the database is unreachable", retry_in_s=delay, error=str(exc)
            )
        await asyncio.sleep(delay)
        delay = min(delay * 2, MAX_STORAGE_RETRY_S)


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

    def __init__(
        self,
        url: str,
        config: QueueConfig,
        *,
        max_connections: int = 5,
        connect_timeout_s: int | None = None,
    ) -> None:
        from art.adapters.postgres import PostgresStorage

        self.url = url
        self.config = config
        # Names the server (never the password) in errors, as the storage does.
        self._server = PostgresStorage(url, connect_timeout_s=connect_timeout_s)
        self.connect_timeout_s = self._server.connect_timeout_s
        self._max_connections = max(max_connections, 3)
        self.connector = PsycopgConnector()
        self.app = App(connector=self.connector)
        self._pool: AsyncConnectionPool | None = None
        self._open = False
        self._open_lock: asyncio.Lock | None = None

    @property
    def alone_queue(self) -> str:
        """Where runs that shared a worker that died wait to run alone (see `take_over`)."""
        return f"{self.config.name}#alone"

    @property
    def queues(self) -> list[str]:
        return [self.config.name, self.alone_queue]

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
            # Our own pool, so that waiting for a connection and opening one give up after
            # `connect_timeout_s` (procrastinate's waits 30 s for a connection, and opens
            # its pool without a limit); dead connections are replaced (`check`).
            timeout = self.connect_timeout_s
            pool = AsyncConnectionPool(
                self.url,
                min_size=1,
                max_size=self._max_connections,
                timeout=timeout,
                kwargs={"connect_timeout": timeout},
                check=AsyncConnectionPool.check_connection,
                name="art-queue",
                open=False,
            )
            try:
                async with self.reaching():
                    await pool.open(wait=True, timeout=timeout * 2)
                    await self.app.open_async(pool)
                    await self._create_tables()
            except BaseException:
                await self.app.close_async()
                await pool.close()
                raise
            self._pool = pool
            self._open = True

    @contextlib.asynccontextmanager
    async def reaching(self) -> AsyncIterator[None]:
        """Lost connections and unreachable servers as `StorageError` naming the server."""
        try:
            yield
        except pq_exceptions.ConnectorException as exc:
            cause = exc.__cause__
            if isinstance(cause, psycopg.OperationalError | OSError):
                raise self._server._error(cause) from cause
            raise
        except (psycopg.OperationalError, OSError) as exc:
            raise self._server._error(exc) from exc

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
            pool, self._pool = self._pool, None
            if pool is not None:
                await pool.close()

    async def _rows(self, query: Any, **args: Any) -> list[dict[str, Any]]:
        await self.open()
        async with self.reaching():
            rows: list[dict[str, Any]] = await self.connector.execute_query_all_async(query, **args)
        return rows

    async def ping(self) -> None:
        """Return once the database answered; StorageError if it does not."""
        await self._rows("SELECT 1 AS ok")

    # -- submitting and following -------------------------------------------------
    async def enqueue(self, spec: JobSpec) -> None:
        await self.open()
        deferrer = self.app.configure_task(TASK, lock=spec.thread_id, queue=self.config.name)
        async with self.reaching():
            await deferrer.defer_async(**spec.to_args())

    async def _job_row(self, run_id: str) -> dict[str, Any] | None:
        rows = await self._rows(
            "SELECT id, status::text AS status, args, attempts, worker_id, queue_name,"
            " (SELECT outcome FROM art_queue_attempts a WHERE a.run_id = %(run_id)s"
            "  ORDER BY attempt DESC LIMIT 1) AS last_outcome"
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
        died = row["status"] == "failed" and row["last_outcome"] == "worker_died"
        return JobView(
            spec,
            row["status"],
            row["attempts"],
            row["worker_id"],
            error=WORKER_DIED if died else None,
            isolated=row["queue_name"] == self.alone_queue,
        )

    async def cancel(self, run_id: str) -> CancelOutcome:
        row = await self._job_row(run_id)
        if row is None:
            return "missing"
        manager = self.app.job_manager
        async with self.reaching():
            if not await manager.cancel_job_by_id_async(row["id"], abort=True):
                return "ended"
            status = await manager.get_job_status_async(row["id"])
        return "cancelled" if status.value == "cancelled" else "aborting"

    async def stats(self) -> QueueStats:
        jobs = await self._rows(
            "SELECT status::text AS status, COUNT(*) AS n FROM procrastinate_jobs"
            " WHERE queue_name = ANY(%(queues)s) AND task_name = %(task)s GROUP BY status",
            queues=self.queues,
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
            " WHERE j.queue_name = ANY(%(queues)s) AND j.task_name = %(task)s"
            " AND j.status NOT IN ('todo', 'doing')"
            " AND NOT EXISTS (SELECT 1 FROM procrastinate_events e WHERE e.job_id = j.id"
            "  AND e.at >= now() - make_interval(secs => %(seconds)s))"
            " RETURNING 1) SELECT COUNT(*) AS n FROM gone",
            queues=self.queues,
            task=TASK,
            seconds=older_than_s,
        )
        return int(rows[0]["n"])

    async def take_over(self, worker_id: int) -> TakeOver:
        """Put the jobs of workers silent for `stalled_after_s` back in the queue and prune
        those workers; one worker at a time does it. A job its dead worker ran alone is
        charged the death: after `max_worker_deaths` it fails (dead-lettered) instead. Jobs
        that shared the worker are not charged and go to the `alone_queue`, where each runs
        alone on a worker. A job whose cancel had arrived is to end `aborted` (procrastinate's
        `retry_job` would fail it). Those two go to `worker_id`, which stores the run's end,
        then `settle`s the job."""
        manager, seconds = self.app.job_manager, self.config.stalled_after_s
        requeued: list[str] = []
        dead: list[tuple[JobSpec, int]] = []
        cancelled: list[JobSpec] = []
        async with self.connector.pool.connection() as conn:
            cursor = await conn.execute("SELECT pg_try_advisory_lock(%s, %s)", _TAKE_OVER_LOCK)
            if not await fetch_value(cursor):
                return TakeOver(requeued, dead, cancelled)
            try:
                stalled = await self._rows(_STALLED, task=TASK, queues=self.queues, seconds=seconds)
                shared = Counter(row["worker_id"] for row in stalled)
                for row in stalled:
                    spec = JobSpec.from_args(row["args"])
                    alone = row["worker_id"] is not None and shared[row["worker_id"]] == 1
                    ended = await self._rows(
                        _END_ATTEMPT,
                        run_id=spec.run_id,
                        worker_id=row["worker_id"],
                        outcome="worker_died" if alone else "worker_died_with_others",
                        record_missing=True,
                    )
                    deaths = int(ended[0]["deaths"])
                    try:
                        if row["abort_requested"] or deaths >= self.config.max_worker_deaths:
                            held = await self._rows(
                                "UPDATE procrastinate_jobs SET worker_id = %(me)s"
                                " WHERE id = %(id)s AND status = 'doing' RETURNING id",
                                me=worker_id,
                                id=row["id"],
                            )
                            if not held:
                                continue
                            if row["abort_requested"]:
                                cancelled.append(spec)
                            else:
                                dead.append((spec, deaths))
                        else:
                            await manager.retry_job_by_id_async(
                                row["id"],
                                retry_at=datetime.now(UTC),
                                queue=None if alone else self.alone_queue,
                            )
                            requeued.append(spec.run_id)
                    except pq_exceptions.ConnectorException:
                        continue  # it changed meanwhile (ended, or taken by another)
                await manager.prune_stalled_workers(seconds)
            finally:
                await conn.execute("SELECT pg_advisory_unlock(%s, %s)", _TAKE_OVER_LOCK)
        return TakeOver(requeued, dead, cancelled)

    async def runs(
        self, *, states: set[str] | None = None, thread_id: str | None = None, limit: int = 100
    ) -> list[QueuedRun]:
        rows = await self._rows(
            "SELECT j.args, j.status::text AS status, j.worker_id,"
            " (w.id IS NULL OR w.last_heartbeat < now() - make_interval(secs => %(stale)s))"
            "  AS stale_worker"
            " FROM procrastinate_jobs j LEFT JOIN procrastinate_workers w ON w.id = j.worker_id"
            " WHERE j.task_name = %(task)s AND j.queue_name = ANY(%(queues)s)"
            " AND (%(statuses)s::text[] IS NULL OR j.status::text = ANY(%(statuses)s::text[]))"
            " AND (%(thread)s::text IS NULL OR j.lock = %(thread)s)"
            " ORDER BY j.id DESC",
            stale=self.config.stalled_after_s,
            task=TASK,
            queues=self.queues,
            statuses=job_states_of(states),
            thread=thread_id,
        )
        picked = []
        for row in rows:
            state = queued_run_state(row["status"], stale_worker=row["stale_worker"])
            if not states or state in states:
                picked.append((row, state))
            if len(picked) >= limit:
                break
        specs = [JobSpec.from_args(row["args"]) for row, _ in picked]
        attempts: dict[str, list[Attempt]] = {spec.run_id: [] for spec in specs}
        for row in await self._rows(
            "SELECT run_id, attempt, worker_id, worker, started_at, ended_at, outcome"
            " FROM art_queue_attempts WHERE run_id = ANY(%(ids)s) ORDER BY run_id, attempt",
            ids=list(attempts),
        ):
            attempts[row.pop("run_id")].append(Attempt.model_validate(row))
        found = []
        for (row, state), spec in zip(picked, specs, strict=True):
            tried = attempts[spec.run_id]
            died = state == "dead" and bool(tried) and tried[-1].outcome == "worker_died"
            found.append(
                QueuedRun(
                    run_id=spec.run_id,
                    thread_id=spec.thread_id,
                    query=spec.query,
                    state=state,
                    job_state=row["status"],
                    worker_id=row["worker_id"],
                    submitted_at=spec.submitted_at,
                    error=WORKER_DIED if died else None,
                    attempts=tried,
                )
            )
        return found

    async def retry(self, run_id: str) -> bool:
        row = await self._job_row(run_id)
        if row is None or row["status"] != "failed":
            return False
        await self._rows(  # its deaths so far no longer count towards max_worker_deaths
            "UPDATE art_queue_attempts SET outcome = 'worker_died_before_retry'"
            " WHERE run_id = %(run_id)s AND outcome = 'worker_died' RETURNING 1",
            run_id=run_id,
        )
        async with self.reaching():
            await self.app.job_manager.retry_job_by_id_async(
                row["id"], retry_at=datetime.now(UTC), queue=self.alone_queue
            )
        return True

    async def discard(self, run_id: str) -> bool:
        rows = await self._rows(
            "DELETE FROM procrastinate_jobs WHERE args->>'run_id' = %(run_id)s"
            " AND task_name = 'art.engine.run' AND status = 'failed' RETURNING id",
            run_id=run_id,
        )
        return bool(rows)

    async def settle(self, run_id: str, worker_id: int, state: JobState) -> None:
        """End a job `take_over` gave this worker to end (`failed`: dead-lettered)."""
        row = await self._job_row(run_id)
        if row is None or row["worker_id"] != worker_id or row["status"] != "doing":
            return
        status = Status.FAILED if state == "failed" else Status.ABORTED
        await self.app.job_manager.finish_job_by_id_async(row["id"], status, delete_job=False)

    async def alone_waiting(self) -> bool:
        """Whether a run waits in the `alone_queue` with no run of its thread running."""
        rows = await self._rows(
            "SELECT 1 AS waiting FROM procrastinate_jobs j WHERE j.queue_name = %(queue)s"
            " AND j.status = 'todo' AND (j.scheduled_at IS NULL OR j.scheduled_at <= now())"
            " AND NOT EXISTS (SELECT 1 FROM procrastinate_jobs o"
            "  WHERE o.lock = j.lock AND o.status = 'doing') LIMIT 1",
            queue=self.alone_queue,
        )
        return bool(rows)

    async def start_attempt(self, run_id: str, worker_id: int, worker: str) -> None:
        await self._rows(
            "INSERT INTO art_queue_attempts (run_id, attempt, worker_id, worker)"
            " SELECT %(run_id)s, COALESCE(MAX(attempt), 0) + 1, %(worker_id)s, %(worker)s"
            " FROM art_queue_attempts WHERE run_id = %(run_id)s RETURNING attempt",
            run_id=run_id,
            worker_id=worker_id,
            worker=worker,
        )

    async def end_attempt(self, run_id: str, worker_id: int, outcome: str) -> None:
        await self._rows(
            _END_ATTEMPT, run_id=run_id, worker_id=worker_id, outcome=outcome, record_missing=False
        )


class _WorkerOptions(TypedDict, total=False):
    """The procrastinate Worker settings art's worker gives."""

    app: Required[App]
    queues: list[str]
    name: str
    concurrency: int
    fetch_job_polling_interval: float
    abort_job_polling_interval: float
    shutdown_graceful_timeout: float | None
    install_signal_handlers: bool
    update_heartbeat_interval: float
    stalled_worker_timeout: float


class _Worker(pq_worker.Worker):
    """procrastinate's worker with art's take-over loop; it ends only the jobs it still holds
    (not one taken over while it was presumed dead), and looks for the next run of a thread
    at once when a run of it ends (procrastinate announces new jobs, not freed locks)."""

    def __init__(self, owner: ProcrastinateWorker, **options: Unpack[_WorkerOptions]) -> None:
        super().__init__(**options)
        self.owner = owner

    def stop(self) -> None:
        """Stop (a signal, or `ProcrastinateWorker.stop`); after `restart()`, only this one
        of the worker's lives ends."""
        if not self.owner.restarting:
            self.owner.stopped = True
        super().stop()  # type: ignore[no-untyped-call]  # procrastinate's, unannotated

    def _start_side_tasks(self) -> list[asyncio.Task[None]]:
        # procrastinate's side tasks stop the worker when one raises, as its heartbeat and
        # listener do when the database goes away; these outlive an outage of any length.
        # (Its periodic deferrer is left out: art's queue has no periodic task.)
        tasks = [
            asyncio.create_task(self._heartbeats(), name="update_heartbeats"),
            asyncio.create_task(
                self._poll_jobs_to_abort(),  # type: ignore[no-untyped-call]  # procrastinate's
                name="poll_jobs_to_abort",
            ),
            asyncio.create_task(self.owner.look_after(self), name="art-take-over"),
        ]
        if self.listen_notify:
            tasks.append(asyncio.create_task(self._listen(), name="listener"))
        return tasks

    async def _heartbeats(self) -> None:
        assert self.worker_id is not None
        manager, worker_id = self.app.job_manager, self.worker_id
        while True:
            await asyncio.sleep(self.update_heartbeat_interval)
            try:
                await manager.update_heartbeat(worker_id)
            except Exception as exc:
                log.warning("heartbeat failed", worker_id=worker_id, error=str(exc))

    async def _listen(self) -> None:
        """Hear of new jobs and cancels (LISTEN); reconnect with backoff when cut off."""
        delay = _FIRST_RETRY_S
        while True:
            started = time.monotonic()
            try:
                await self.app.job_manager.listen_for_jobs(
                    on_notification=self._handle_notification, queues=self.queues
                )
            except Exception as exc:
                if time.monotonic() - started > MAX_STORAGE_RETRY_S:
                    delay = _FIRST_RETRY_S  # it had been listening: a new outage
                log.warning("listening for new runs failed", retry_in_s=delay, error=str(exc))
            await asyncio.sleep(delay)
            delay = min(delay * 2, MAX_STORAGE_RETRY_S)
            self._new_job_event.set()  # look for what was announced meanwhile

    async def _persist_job_status(
        self,
        job: Job,
        status: Status,
        retry_decision: RetryDecision | None,
        context: JobContext,
        job_result: pq_job_context.JobResult | None,
    ) -> None:
        assert job.id is not None and self.worker_id is not None
        job_id, worker_id = job.id, self.worker_id
        if not await patiently(
            "recording a run's end", lambda: self.owner.queue.holds(job_id, worker_id)
        ):
            # Presumed dead (no heartbeat reached the database), its job was taken over:
            # the job is its new worker's to end, and the run's lease kept the two apart.
            log.warning("a run's job was taken over from this worker", job_id=job.id)
            self._job_ids_to_abort.pop(job.id, None)
            return

        async def persist() -> None:
            async with self.owner.queue.reaching():
                await super(_Worker, self)._persist_job_status(
                    job=job,
                    status=status,
                    retry_decision=retry_decision,
                    context=context,
                    job_result=job_result,
                )

        await patiently("recording a run's end", persist)
        self._new_job_event.set()

    async def _fetch_and_process_jobs(self) -> None:
        try:
            await self._fetch_jobs()
        except Exception as exc:
            queue = self.owner.queue
            if unreachable(exc):
                # Nothing is taken until the database answers; the loop then goes on.
                log.warning("taking runs failed: the database is unreachable", error=str(exc))
                await patiently("reaching the database", queue.ping)
                return
            if not isinstance(exc, pq_exceptions.ConnectorException):
                raise
            # Taking a job names this worker, which the others removed if they took it for
            # dead: then start again, as `look_after` would a moment later; else a failure.
            if self.worker_id is None or await queue.registered(self.worker_id):
                raise
            self.owner.presumed_dead(self)

    def look_now(self) -> None:
        self._new_job_event.set()

    async def _fetch_jobs(self) -> None:
        """procrastinate's `_fetch_and_process_jobs` (3.x), taking the runs that must run alone
        (`ProcrastinateQueue.alone_queue`): a worker running one takes nothing else, and a
        worker that sees one waiting takes no other run until it has emptied, then takes it."""
        queue = self.owner.queue
        while not self._stop_event.is_set() and self.owner.alone is None:
            acquire = asyncio.create_task(self._job_semaphore.acquire())
            job = None
            try:
                await pq_utils.wait_any(acquire, self._stop_event.wait())
                if self._stop_event.is_set():
                    break
                assert self.worker_id is not None
                manager = self.app.job_manager
                if await queue.alone_waiting():
                    if self._running_jobs:
                        break  # empty first
                    job = await manager.fetch_job(
                        queues=[queue.alone_queue], worker_id=self.worker_id
                    )
                if job is None:
                    job = await manager.fetch_job(queues=self.queues, worker_id=self.worker_id)
            finally:
                if (not job or self._stop_event.is_set()) and acquire.done():
                    self._job_semaphore.release()
                self._new_job_event.clear()
            if not job:
                break
            if job.queue == queue.alone_queue:
                self.owner.alone = job.id
            self._start_job(job)

    def _start_job(self, job: Job) -> None:
        job_id = job.id
        context = pq_job_context.JobContext(
            app=self.app,
            worker_name=self.worker_name,
            worker_queues=self.queues,
            additional_context=self.additional_context.copy() if self.additional_context else {},
            job=job,
            abort_reason=lambda: self._job_ids_to_abort.get(job_id) if job_id else None,
            start_timestamp=time.time(),
        )
        task = asyncio.create_task(
            self._process_job(context),
            name=f"process job {job.task_name}[{job.id}]",
        )
        self._running_jobs[task] = context

        def on_job_complete(task: asyncio.Task[None]) -> None:
            del self._running_jobs[task]
            self._job_semaphore.release()
            if self.owner.alone == job_id:
                self.owner.alone = None
                self._new_job_event.set()

        task.add_done_callback(on_job_complete)


class ProcrastinateWorker(QueueWorker[ProcrastinateQueue]):
    """A procrastinate worker running art's `art.engine.run` jobs with one instance."""

    def __init__(
        self,
        queue: ProcrastinateQueue,
        instance: QueueRunner,
        *,
        name: str | None = None,
        signals: bool = False,
    ) -> None:
        super().__init__(queue, instance, name=name, signals=signals)
        self._worker: _Worker | None = None
        self.stopped = False
        # Set while one of the worker's lives ends so that another begins (`restart`).
        self.restarting = False
        # The job of a run that runs alone on this worker (see `_Worker._fetch_jobs`).
        self.alone: int | None = None

    def stop(self) -> None:
        self.stopped = True
        if self._worker is not None:
            self._worker.stop()

    async def run(self) -> None:
        """Work until stopped. A life of the worker that loses the database, or that the
        others presumed dead, ends; once the database answers, the next one registers anew
        and goes on taking runs: an outage of any length stops no worker."""
        config = self.config
        if self.metrics is None:
            self.metrics = queue_metrics(config.name)
        await patiently("opening the queue", self.queue.open)
        app = App(connector=self.queue.connector)
        app.task(name=TASK, queue=config.name, pass_context=True, retry=_Retry())(self._run_job)
        while not self.stopped:
            self.restarting = False
            self.alone = None
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
            try:
                await self._worker.run()  # type: ignore[no-untyped-call]  # procrastinate's
            except Exception as exc:
                if not unreachable(exc):
                    raise
                log.error("the worker lost the database", error=str(exc))
            else:
                if not self.restarting:
                    return
            if self.stopped:
                return
            await patiently("reaching the database", self.queue.ping)
            log.info("the database answers: the worker starts again", name=self.name)

    async def _run_job(self, context: JobContext, /, **args: JsonValue) -> RunState:
        spec = JobSpec.from_args(args)
        worker_id = self._worker.worker_id if self._worker is not None else None
        assert worker_id is not None
        await patiently(
            "recording a run's start",
            lambda: self.queue.start_attempt(spec.run_id, worker_id, self.name),
        )
        execution = RunJob(
            self.instance, spec, busy_wait_s=self.config.poll_s, metrics=self.metrics
        )
        runner = asyncio.create_task(execution.run(), name=f"art-run:{spec.run_id}")
        outcome = "raised"
        try:
            await asyncio.wait({runner})  # procrastinate cancels this task, not the run
        except asyncio.CancelledError:
            if context.abort_reason() == AbortReason.USER_REQUEST:
                execution.cancel("cancelled through the queue")
                await asyncio.wait({runner})
                outcome = "cancelled"
                raise pq_exceptions.JobAborted(f"run {spec.run_id} cancelled") from None
            # Shutting down past the timeout: the run stays as a crash leaves it.
            runner.cancel()
            await asyncio.wait({runner})
            outcome = "handed_back"
            raise HandedBack(f"run {spec.run_id} handed back by a stopping worker") from None
        else:
            result = runner.result()
            outcome = execution.outcome or result
            return result
        finally:
            await patiently(
                "recording a run's end",
                lambda: self.queue.end_attempt(spec.run_id, worker_id, outcome),
            )

    def presumed_dead(self, worker: _Worker) -> None:
        """The other workers took this one for dead and took its runs over: end this life
        of the worker (its runs are their new workers' now) and begin another."""
        log.error(
            "this worker was presumed dead (no heartbeat for stalled_after_s) and its runs "
            "were taken over: it starts again under a new id",
            worker_id=worker.worker_id,
        )
        self.restarting = True
        worker.stop()

    async def _take_over(self, worker: _Worker, worker_id: int) -> None:
        taken = await self.queue.take_over(worker_id)
        await record_take_over(self.instance.storage, taken, self.queue, worker_id)
        if taken.run_ids:
            worker.look_now()
        await self.delete_finished()
        if self.metrics is not None:
            self.metrics.taken_over(len(taken.run_ids))
            if self.metrics.wants_stats():
                self.metrics.observe(await self.queue.stats())

    async def look_after(self, worker: _Worker) -> None:
        """Name this worker, then every `heartbeat_s` take over the runs of dead workers.

        After losing the database it judges no other worker for `stalled_after_s`: every
        heartbeat is old then, and the live workers need that long to refresh theirs (a
        live worker taken for dead would run its runs beside their new workers, their
        leases having gone with the server's sessions)."""
        assert worker.worker_id is not None
        worker_id = worker.worker_id
        await patiently(
            "naming this worker", lambda: self.queue.describe_worker(worker_id, self.name)
        )
        judge_after = time.monotonic() + self.config.stalled_after_s
        while True:
            try:
                if not await self.queue.registered(worker_id):
                    self.presumed_dead(worker)
                    return
                await worker.app.job_manager.update_heartbeat(worker_id)
                if time.monotonic() >= judge_after:
                    await self._take_over(worker, worker_id)
            except Exception as exc:
                if not unreachable(exc):
                    log.exception("taking over stalled runs failed", worker_id=worker_id)
                else:
                    log.warning("taking over stalled runs failed", error=str(exc))
                    judge_after = time.monotonic() + self.config.stalled_after_s
            await asyncio.sleep(self.config.heartbeat_s)
