"""Queued runs on SQLite (and memory storage): a job table in the same database file.

procrastinate, the queue art uses on PostgreSQL, needs PostgreSQL; on one machine the same
model fits in two tables of the SQLite file that already holds the threads:

- `queue_jobs`: one row per submitted run, `todo` → `doing` (taken by a worker) → a final
  state. A job may start only when no other job of its thread is `doing` and no older job of
  its thread is waiting (procrastinate's `lock`), so each thread runs its queued runs one at
  a time, in submission order, while different threads spread over every worker.
- `queue_workers`: one row per live worker with its heartbeat (ids never reused). A worker
  silent for `stalled_after_s` is presumed dead: its `doing` jobs go back to `todo` (taken
  over by the next free worker, continuing from their stored steps) and its row is removed.
  A job the dead worker ran alone is charged the death (`deaths`; at `max_worker_deaths`
  it fails: dead-lettered); jobs that shared it are `isolated`: each runs alone next.
- `queue_attempts`: every time a worker took a run, and how that ended.

Taking jobs, taking over and cancelling are each one `BEGIN IMMEDIATE` transaction, so
workers in several processes never take the same job. All SQL runs on one connection in
one thread per queue. Memory storage gets the same tables in an in-memory database: its
queued runs live, and run, inside the one process.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import sqlite3
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, TypeVar

from art.adapters.sqlite import connect
from art.core.log import get_logger
from art.errors import ConfigurationError
from art.queue.contract import QueueBackend, QueueWorker
from art.queue.execute import RunJob, error_retry_delay, record_take_over
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
from art.responses import utcnow
from art.storage.codec import timestamp_key

if TYPE_CHECKING:
    from art.config import QueueConfig
    from art.queue.contract import QueueRunner

__all__ = ["MIGRATIONS", "SQLiteQueue", "SQLiteWorker"]

log = get_logger(__name__)
T = TypeVar("T")

# Ordered, append-only, as the storage's own (their version table is `queue_schema_version`).
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE queue_jobs (
        id INTEGER PRIMARY KEY,
        queue TEXT NOT NULL,
        run_id TEXT NOT NULL UNIQUE,
        thread_id TEXT NOT NULL,
        spec TEXT NOT NULL,
        status TEXT NOT NULL DEFAULT 'todo',
        attempts INTEGER NOT NULL DEFAULT 0,
        worker_id INTEGER,
        abort_requested INTEGER NOT NULL DEFAULT 0,
        scheduled_at TEXT,
        created_at TEXT NOT NULL,
        started_at TEXT,
        finished_at TEXT,
        error TEXT
    );
    CREATE INDEX queue_jobs_waiting ON queue_jobs (queue, status, id);
    CREATE INDEX queue_jobs_by_thread ON queue_jobs (thread_id, status, id);
    CREATE INDEX queue_jobs_by_worker ON queue_jobs (worker_id, status);
    CREATE TABLE queue_workers (
        id INTEGER PRIMARY KEY,
        queue TEXT NOT NULL,
        name TEXT NOT NULL,
        host TEXT NOT NULL,
        pid INTEGER NOT NULL,
        started_at TEXT NOT NULL,
        last_heartbeat TEXT NOT NULL
    );
    """,
    # Worker ids are never reused (AUTOINCREMENT, counting on from every id a job names),
    # so a worker presumed dead that comes back cannot heartbeat its successor's row; jobs
    # count the deaths of workers that ran them alone, and runs that shared a dead worker
    # run alone next (`isolated`); every attempt at a run is kept.
    """
    ALTER TABLE queue_jobs ADD COLUMN deaths INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE queue_jobs ADD COLUMN isolated INTEGER NOT NULL DEFAULT 0;
    CREATE TABLE queue_workers_v2 (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        queue TEXT NOT NULL,
        name TEXT NOT NULL,
        host TEXT NOT NULL,
        pid INTEGER NOT NULL,
        started_at TEXT NOT NULL,
        last_heartbeat TEXT NOT NULL
    );
    INSERT INTO queue_workers_v2 SELECT id, queue, name, host, pid, started_at, last_heartbeat
        FROM queue_workers;
    DROP TABLE queue_workers;
    ALTER TABLE queue_workers_v2 RENAME TO queue_workers;
    DELETE FROM sqlite_sequence WHERE name = 'queue_workers';
    INSERT INTO sqlite_sequence (name, seq) SELECT 'queue_workers', MAX(
        (SELECT COALESCE(MAX(id), 0) FROM queue_workers),
        (SELECT COALESCE(MAX(worker_id), 0) FROM queue_jobs));
    CREATE TABLE queue_attempts (
        run_id TEXT NOT NULL,
        attempt INTEGER NOT NULL,
        worker_id INTEGER,
        worker TEXT,
        started_at TEXT NOT NULL,
        ended_at TEXT,
        outcome TEXT,
        PRIMARY KEY (run_id, attempt)
    )
    """,
)

_NEXT_JOB = """
    SELECT id, spec, attempts, abort_requested, isolated FROM queue_jobs AS j
    WHERE queue = ?1 AND status = 'todo' AND (scheduled_at IS NULL OR scheduled_at <= ?2)
      AND isolated = ?3
      AND NOT EXISTS (
          SELECT 1 FROM queue_jobs AS o
          WHERE o.thread_id = j.thread_id
            AND (o.status = 'doing' OR (o.status = 'todo' AND o.id < j.id))
      )
    ORDER BY id LIMIT 1
"""

_END_ATTEMPT = (
    "UPDATE queue_attempts SET ended_at = ?1, outcome = ?2 WHERE run_id = ?3 AND ended_at IS NULL"
)


def _now() -> str:
    return timestamp_key(utcnow())


def _parse(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _ago(seconds: float) -> str:
    return timestamp_key(utcnow() - timedelta(seconds=seconds))


@contextlib.contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[None]:
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _migrate(conn: sqlite3.Connection) -> None:
    with _transaction(conn):
        conn.execute(
            "CREATE TABLE IF NOT EXISTS queue_schema_version"
            " (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)"
        )
        found = conn.execute("SELECT COALESCE(MAX(version), 0) FROM queue_schema_version")
        version = found.fetchone()[0]
        if version > len(MIGRATIONS):
            raise ConfigurationError(
                f"the queue tables are version {version}, newer than this art understands "
                f"({len(MIGRATIONS)}): upgrade art"
            )
        for number in range(version + 1, len(MIGRATIONS) + 1):
            for statement in MIGRATIONS[number - 1].split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute(
                "INSERT INTO queue_schema_version (version, applied_at) VALUES (?, ?)",
                (number, _now()),
            )


def _view(row: tuple[str, JobState, int, int | None, str | None]) -> JobView:
    spec, status, attempts, worker_id, error = row
    state: JobState = status
    return JobView(JobSpec.from_args(json.loads(spec)), state, attempts, worker_id, error)


class SQLiteQueue(QueueBackend):
    """The job and worker tables in a SQLite file (or an in-memory database)."""

    def __init__(self, path: str, config: QueueConfig, *, kind: str = "sqlite") -> None:
        self.path = path
        self.config = config
        self.kind = kind
        self._executor: ThreadPoolExecutor | None = None
        self._conn: sqlite3.Connection | None = None
        self._worker_names: dict[int, str] = {}  # this process's workers, for their attempts

    def __repr__(self) -> str:
        return f"SQLiteQueue({self.path!r}, queue={self.config.name!r})"

    # -- plumbing -----------------------------------------------------------------
    async def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="art-queue")
        return await asyncio.get_running_loop().run_in_executor(self._executor, self._run, fn)

    def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._conn is None:
            if self.path == ":memory:":
                conn = sqlite3.connect(self.path, isolation_level=None)
            else:
                conn = connect(self.path)
            _migrate(conn)
            self._conn = conn
        return fn(self._conn)

    async def open(self) -> None:
        await self._call(lambda conn: None)

    async def close(self) -> None:
        executor, self._executor = self._executor, None
        if executor is None:
            return

        def close_connection() -> None:
            conn, self._conn = self._conn, None
            if conn is not None:
                conn.close()

        await asyncio.get_running_loop().run_in_executor(executor, close_connection)
        executor.shutdown(wait=True)  # its thread is idle now: it ends at once

    # -- submitting and following -------------------------------------------------
    async def enqueue(self, spec: JobSpec) -> None:
        row = (self.config.name, spec.run_id, spec.thread_id, json.dumps(spec.to_args()), _now())

        def insert(conn: sqlite3.Connection) -> None:
            with _transaction(conn):
                conn.execute(
                    "INSERT INTO queue_jobs (queue, run_id, thread_id, spec, created_at)"
                    " VALUES (?, ?, ?, ?, ?)",
                    row,
                )

        await self._call(insert)

    async def job(self, run_id: str) -> JobView | None:
        def read(conn: sqlite3.Connection) -> JobView | None:
            row = conn.execute(
                "SELECT spec, status, attempts, worker_id, error FROM queue_jobs WHERE run_id = ?",
                (run_id,),
            ).fetchone()
            return _view(row) if row else None

        return await self._call(read)

    async def cancel(self, run_id: str) -> CancelOutcome:
        def write(conn: sqlite3.Connection) -> CancelOutcome:
            with _transaction(conn):
                row = conn.execute(
                    "SELECT status FROM queue_jobs WHERE run_id = ?", (run_id,)
                ).fetchone()
                if row is None:
                    return "missing"
                if row[0] == "todo":
                    conn.execute(
                        "UPDATE queue_jobs SET status = 'cancelled', finished_at = ?"
                        " WHERE run_id = ?",
                        (_now(), run_id),
                    )
                    return "cancelled"
                if row[0] == "doing":
                    conn.execute(
                        "UPDATE queue_jobs SET abort_requested = 1 WHERE run_id = ?", (run_id,)
                    )
                    return "aborting"
                return "ended"

        return await self._call(write)

    async def stats(self) -> QueueStats:
        queue, stalled_after = self.config.name, self.config.stalled_after_s

        def read(conn: sqlite3.Connection) -> QueueStats:
            jobs = dict(
                conn.execute(
                    "SELECT status, COUNT(*) FROM queue_jobs WHERE queue = ? GROUP BY status",
                    (queue,),
                ).fetchall()
            )
            now = utcnow()
            workers = []
            for wid, name, host, pid, started, beat, running in conn.execute(
                "SELECT w.id, w.name, w.host, w.pid, w.started_at, w.last_heartbeat,"
                " (SELECT COUNT(*) FROM queue_jobs j WHERE j.worker_id = w.id"
                "  AND j.status = 'doing')"
                " FROM queue_workers w WHERE w.queue = ? ORDER BY w.id",
                (queue,),
            ):
                age = (now - _parse(beat)).total_seconds()
                workers.append(
                    WorkerInfo(
                        worker_id=wid,
                        name=name,
                        host=host,
                        pid=pid,
                        started_at=_parse(started),
                        last_heartbeat=_parse(beat),
                        heartbeat_age_s=max(age, 0.0),
                        running=running,
                        stalled=age > stalled_after,
                    )
                )
            return QueueStats(queue=queue, backend=self.kind, jobs=jobs, workers=workers)

        return await self._call(read)

    def worker(
        self, instance: QueueRunner, *, name: str | None = None, signals: bool = False
    ) -> SQLiteWorker:
        return SQLiteWorker(self, instance, name=name, signals=signals)

    # -- what workers do ----------------------------------------------------------
    async def register(self, name: str) -> int:
        row = (self.config.name, name, socket.gethostname(), os.getpid(), _now())

        def insert(conn: sqlite3.Connection) -> int:
            with _transaction(conn):
                cursor = conn.execute(
                    "INSERT INTO queue_workers (queue, name, host, pid, started_at,"
                    " last_heartbeat) VALUES (?1, ?2, ?3, ?4, ?5, ?5)",
                    row,
                )
                return int(cursor.lastrowid or 0)

        worker_id = await self._call(insert)
        self._worker_names[worker_id] = name
        return worker_id

    async def unregister(self, worker_id: int) -> None:
        def delete(conn: sqlite3.Connection) -> None:
            with _transaction(conn):
                conn.execute("DELETE FROM queue_workers WHERE id = ?", (worker_id,))

        await self._call(delete)

    async def heartbeat(self, worker_id: int) -> bool:
        """Record that the worker is alive; False if it was presumed dead (row removed)."""

        def write(conn: sqlite3.Connection) -> bool:
            with _transaction(conn):
                cursor = conn.execute(
                    "UPDATE queue_workers SET last_heartbeat = ? WHERE id = ?", (_now(), worker_id)
                )
                return cursor.rowcount == 1

        return await self._call(write)

    async def claim(self, worker_id: int, limit: int, *, running: int = 0) -> list[JobView]:
        """Take up to `limit` jobs that may start now, oldest first. A job that must run
        alone (`isolated`) comes first: it is taken only by a worker running nothing
        (`running == 0`), which then takes nothing else; a busy worker takes nothing while
        one waits, so that some worker empties and takes it."""
        queue, name = self.config.name, self._worker_names.get(worker_id)

        def write(conn: sqlite3.Connection) -> list[JobView]:
            now = _now()
            taken: list[JobView] = []
            with _transaction(conn):
                alone = conn.execute(_NEXT_JOB, (queue, now, 1)).fetchone()
                if alone is not None and running:
                    return taken
                for _ in range(1 if alone is not None else limit):
                    row = alone or conn.execute(_NEXT_JOB, (queue, now, 0)).fetchone()
                    if row is None:
                        break
                    job_id, spec, attempts, abort, isolated = row
                    conn.execute(
                        "UPDATE queue_jobs SET status = 'doing', worker_id = ?, started_at = ?"
                        " WHERE id = ?",
                        (worker_id, now, job_id),
                    )
                    spec_ = JobSpec.from_args(json.loads(spec))
                    conn.execute(
                        "INSERT INTO queue_attempts (run_id, attempt, worker_id, worker,"
                        " started_at) SELECT ?1, COALESCE(MAX(attempt), 0) + 1, ?2, ?3, ?4"
                        " FROM queue_attempts WHERE run_id = ?1",
                        (spec_.run_id, worker_id, name, now),
                    )
                    taken.append(
                        JobView(
                            spec_,
                            "doing",
                            attempts,
                            worker_id,
                            abort_requested=bool(abort),
                            isolated=bool(isolated),
                        )
                    )
            return taken

        return await self._call(write)

    async def finish(
        self,
        run_id: str,
        worker_id: int,
        state: JobState,
        error: str | None = None,
        *,
        outcome: str | None = None,
    ) -> None:
        """End a job this worker holds (a job taken over meanwhile is left to its new holder);
        `outcome` ends its attempt (default: the job's state)."""

        def write(conn: sqlite3.Connection) -> None:
            now = _now()
            with _transaction(conn):
                cursor = conn.execute(
                    "UPDATE queue_jobs SET status = ?, finished_at = ?, error = ?"
                    " WHERE run_id = ? AND status = 'doing' AND worker_id = ?",
                    (state, now, error, run_id, worker_id),
                )
                if cursor.rowcount:
                    conn.execute(_END_ATTEMPT, (now, outcome or state, run_id))

        await self._call(write)

    async def give_back(
        self, run_id: str, worker_id: int, *, delay_s: float = 0.0, outcome: str = "handed_back"
    ) -> None:
        """Put a job this worker holds back in the queue (its thread keeps its place)."""
        scheduled = timestamp_key(utcnow() + timedelta(seconds=delay_s)) if delay_s else None

        def write(conn: sqlite3.Connection) -> None:
            with _transaction(conn):
                cursor = conn.execute(
                    "UPDATE queue_jobs SET status = 'todo', worker_id = NULL,"
                    " attempts = attempts + 1, scheduled_at = ?"
                    " WHERE run_id = ? AND status = 'doing' AND worker_id = ?",
                    (scheduled, run_id, worker_id),
                )
                if cursor.rowcount:
                    conn.execute(_END_ATTEMPT, (_now(), outcome, run_id))

        await self._call(write)

    async def take_over(self, worker_id: int) -> TakeOver:
        """Put the jobs of workers silent for `stalled_after_s` back in the queue and remove
        those workers. A job its dead worker ran alone is charged the death: after
        `max_worker_deaths` it is to fail (dead-lettered); jobs that shared the worker are
        not charged and run alone next; a job whose cancel had arrived is to end `aborted`.
        Those two go to `worker_id`, which stores the run's end, then `settle`s the job."""
        queue, cutoff, bound = (
            self.config.name,
            self.config.stalled_after_s,
            self.config.max_worker_deaths,
        )

        def write(conn: sqlite3.Connection) -> TakeOver:
            requeued: list[str] = []
            dead: list[tuple[JobSpec, int]] = []
            cancelled: list[JobSpec] = []
            now = _now()
            with _transaction(conn):
                stale = _ago(cutoff)
                rows = conn.execute(
                    "SELECT id, spec, worker_id, deaths, abort_requested FROM queue_jobs"
                    " WHERE queue = ?1 AND status = 'doing' AND (worker_id IS NULL OR worker_id"
                    " IN (SELECT id FROM queue_workers WHERE last_heartbeat < ?2))",
                    (queue, stale),
                ).fetchall()
                shared = Counter(worker_id for _, _, worker_id, _, _ in rows)
                for job_id, spec_text, dead_id, deaths, abort in rows:
                    spec = JobSpec.from_args(json.loads(spec_text))
                    alone = dead_id is not None and shared[dead_id] == 1
                    if alone:
                        deaths += 1
                    outcome = "worker_died" if alone else "worker_died_with_others"
                    conn.execute(_END_ATTEMPT, (now, outcome, spec.run_id))
                    if not abort and deaths < bound:
                        conn.execute(
                            "UPDATE queue_jobs SET status = 'todo', worker_id = NULL,"
                            " attempts = attempts + 1, deaths = ?, isolated = ?"
                            " WHERE id = ?",
                            (deaths, int(not alone), job_id),
                        )
                        requeued.append(spec.run_id)
                        continue
                    conn.execute(
                        "UPDATE queue_jobs SET worker_id = ?, deaths = ? WHERE id = ?",
                        (worker_id, deaths, job_id),
                    )
                    if abort:
                        cancelled.append(spec)
                    else:
                        dead.append((spec, deaths))
                conn.execute(
                    "DELETE FROM queue_workers WHERE queue = ? AND last_heartbeat < ?",
                    (queue, stale),
                )
            return TakeOver(requeued, dead, cancelled)

        return await self._call(write)

    async def runs(
        self, *, states: set[str] | None = None, thread_id: str | None = None, limit: int = 100
    ) -> list[QueuedRun]:
        queue, stale = self.config.name, _ago(self.config.stalled_after_s)
        job_states = job_states_of(states)

        def read(conn: sqlite3.Connection) -> list[QueuedRun]:
            where, args = ["j.queue = ?"], [queue]
            if job_states is not None:
                where.append(f"j.status IN ({', '.join('?' * len(job_states))})")
                args.extend(job_states)
            if thread_id is not None:
                where.append("j.thread_id = ?")
                args.append(thread_id)
            rows = conn.execute(
                "SELECT j.spec, j.status, j.worker_id, j.error,"
                " w.id IS NULL OR w.last_heartbeat < ? FROM queue_jobs j"
                " LEFT JOIN queue_workers w ON w.id = j.worker_id"
                f" WHERE {' AND '.join(where)} ORDER BY j.id DESC",
                [stale, *args],
            )
            found: list[QueuedRun] = []
            for spec_text, status, worker_id, error, stale_worker in rows:
                state = queued_run_state(status, stale_worker=bool(stale_worker))
                if states and state not in states:
                    continue
                spec = JobSpec.from_args(json.loads(spec_text))
                attempts = [
                    Attempt(
                        attempt=n,
                        worker_id=wid,
                        worker=name,
                        started_at=_parse(started) if started else None,
                        ended_at=_parse(ended) if ended else None,
                        outcome=outcome,
                    )
                    for n, wid, name, started, ended, outcome in conn.execute(
                        "SELECT attempt, worker_id, worker, started_at, ended_at, outcome"
                        " FROM queue_attempts WHERE run_id = ? ORDER BY attempt",
                        (spec.run_id,),
                    )
                ]
                found.append(
                    QueuedRun(
                        run_id=spec.run_id,
                        thread_id=spec.thread_id,
                        query=spec.query,
                        state=state,
                        job_state=status,
                        worker_id=worker_id,
                        submitted_at=spec.submitted_at,
                        error=error,
                        attempts=attempts,
                    )
                )
                if len(found) >= limit:
                    break
            return found

        return await self._call(read)

    async def retry(self, run_id: str) -> bool:
        def write(conn: sqlite3.Connection) -> bool:
            with _transaction(conn):
                cursor = conn.execute(
                    "UPDATE queue_jobs SET status = 'todo', worker_id = NULL, deaths = 0,"
                    " isolated = 1, error = NULL, finished_at = NULL, scheduled_at = NULL,"
                    " attempts = attempts + 1 WHERE run_id = ? AND status = 'failed'",
                    (run_id,),
                )
                conn.execute(
                    "UPDATE queue_attempts SET outcome = 'worker_died_before_retry'"
                    " WHERE run_id = ? AND outcome = 'worker_died'",
                    (run_id,),
                )
                return cursor.rowcount == 1

        return await self._call(write)

    async def discard(self, run_id: str) -> bool:
        def write(conn: sqlite3.Connection) -> bool:
            with _transaction(conn):
                cursor = conn.execute(
                    "DELETE FROM queue_jobs WHERE run_id = ? AND status = 'failed'", (run_id,)
                )
                return cursor.rowcount == 1

        return await self._call(write)

    async def settle(self, run_id: str, worker_id: int, state: JobState) -> None:
        """End a job `take_over` gave this worker to end (`failed`: dead-lettered)."""
        error = WORKER_DIED if state == "failed" else None
        await self.finish(run_id, worker_id, state, error)

    async def delete_finished(self, older_than_s: float) -> int:
        queue, cutoff = self.config.name, _ago(older_than_s)

        def write(conn: sqlite3.Connection) -> int:
            with _transaction(conn):
                return conn.execute(
                    "DELETE FROM queue_jobs WHERE queue = ? AND status NOT IN ('todo', 'doing')"
                    " AND finished_at < ?",
                    (queue, cutoff),
                ).rowcount

        return await self._call(write)

    async def abort_requested(self, worker_id: int) -> list[str]:
        def read(conn: sqlite3.Connection) -> list[str]:
            rows = conn.execute(
                "SELECT run_id FROM queue_jobs WHERE worker_id = ? AND status = 'doing'"
                " AND abort_requested = 1",
                (worker_id,),
            ).fetchall()
            return [run_id for (run_id,) in rows]

        return await self._call(read)


class SQLiteWorker(QueueWorker[SQLiteQueue]):
    """Takes jobs from a `SQLiteQueue` and runs them, `concurrency` at a time."""

    def __init__(
        self,
        queue: SQLiteQueue,
        instance: QueueRunner,
        *,
        name: str | None = None,
        signals: bool = False,
    ) -> None:
        super().__init__(queue, instance, name=name, signals=signals)
        self.worker_id: int | None = None
        self._running: dict[str, tuple[RunJob, asyncio.Task[None]]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop = asyncio.Event()
        self._wake = asyncio.Event()
        self._check_aborts = False
        self._alone: str | None = None  # the run of an isolated job, while it runs

    def stop(self) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._stop.set)
        else:
            self._stop.set()

    def wake(self) -> None:
        self._check_aborts = True
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._wake.set)

    async def run(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop.clear()
        if self.metrics is None:
            self.metrics = queue_metrics(self.config.name)
        await self.queue.open()
        self.worker_id = await self.queue.register(self.name)
        log.info("queue worker started", worker_id=self.worker_id, queue=self.config.name)
        side = asyncio.create_task(self._heartbeats(), name="art-queue-heartbeats")
        try:
            with _stop_on_signals(self._loop, self.stop) if self.signals else _nothing():
                await self._take_jobs()
        finally:
            side.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await side
            await self._shutdown()

    async def _take_jobs(self) -> None:
        assert self.worker_id is not None
        await self._look_after_others()
        while not self._stop.is_set():
            self._wake.clear()
            if self._check_aborts:
                await self._abort_requested()
            free = self.config.concurrency - len(self._running)
            if free > 0 and self._alone is None:
                jobs = await self.queue.claim(self.worker_id, free, running=len(self._running))
                for job in jobs:
                    self._start(job)
                if len(jobs) == free:
                    continue  # there may be more
            await _first_of(self._wake.wait(), self._stop.wait(), within_s=self.config.poll_s)

    def _start(self, job: JobView) -> None:
        execution = RunJob(
            self.instance, job.spec, busy_wait_s=self.config.poll_s, metrics=self.metrics
        )
        if job.abort_requested:  # cancelled while a worker that died had it
            execution.cancel("cancelled through the queue")
        if job.isolated:
            self._alone = job.spec.run_id
        task = asyncio.create_task(self._process(execution, job), name=f"art-run:{job.spec.run_id}")
        self._running[job.spec.run_id] = (execution, task)

    async def _process(self, execution: RunJob, job: JobView) -> None:
        assert self.worker_id is not None
        run_id, worker_id = job.spec.run_id, self.worker_id
        try:
            await execution.run()
        except asyncio.CancelledError:
            # Shutting down past the timeout: the run stays as a crash leaves it, and the
            # next worker continues it from its stored steps.
            await self.queue.give_back(run_id, worker_id)
            log.info("run handed back", run_id=run_id, worker_id=worker_id)
        except Exception as exc:
            delay = error_retry_delay(job.attempts)
            log.exception("queued run raised", run_id=run_id, retry_in_s=delay)
            reason = f"{type(exc).__name__}: {exc}"
            if delay is None:
                await self.queue.finish(run_id, worker_id, "failed", reason, outcome="raised")
            else:
                await self.queue.give_back(run_id, worker_id, delay_s=delay, outcome="raised")
        else:
            state: JobState = "aborted" if execution.cancel_reason else "succeeded"
            await self.queue.finish(run_id, worker_id, state, outcome=execution.outcome)
        finally:
            self._running.pop(run_id, None)
            if self._alone == run_id:
                self._alone = None
            self._wake.set()  # a slot is free, and the thread's next run may start

    async def _heartbeats(self) -> None:
        assert self.worker_id is not None
        while True:
            await asyncio.sleep(self.config.heartbeat_s)
            try:
                if not await self.queue.heartbeat(self.worker_id):
                    log.error(
                        "this worker was presumed dead (no heartbeat for stalled_after_s) and "
                        "its runs were taken over: stopping",
                        worker_id=self.worker_id,
                    )
                    self.stop()
                    return
                await self._look_after_others()
                await self._abort_requested()
                await self.delete_finished()
            except Exception:
                log.exception("queue heartbeat failed", worker_id=self.worker_id)

    async def _look_after_others(self) -> None:
        assert self.worker_id is not None
        taken = await self.queue.take_over(self.worker_id)
        await record_take_over(self.instance.storage, taken, self.queue, self.worker_id)
        if taken.run_ids:
            self._wake.set()
        if self.metrics is not None:
            self.metrics.taken_over(len(taken.run_ids))
            if self.metrics.wants_stats():
                self.metrics.observe(await self.queue.stats())

    async def _abort_requested(self) -> None:
        assert self.worker_id is not None
        self._check_aborts = False
        for run_id in await self.queue.abort_requested(self.worker_id):
            running = self._running.get(run_id)
            if running is not None:
                running[0].cancel("cancelled through the queue")

    async def _shutdown(self) -> None:
        tasks = [task for _, task in self._running.values()]
        if tasks and self.config.shutdown_timeout_s > 0:
            log.info("waiting for running runs", runs=len(tasks))
            await asyncio.wait(tasks, timeout=self.config.shutdown_timeout_s)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self.worker_id is not None:
            await self.queue.unregister(self.worker_id)
            log.info("queue worker stopped", worker_id=self.worker_id)
            self.worker_id = None


async def _first_of(*waits: Awaitable[object], within_s: float) -> None:
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, timeout=within_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()


@contextlib.contextmanager
def _nothing() -> Iterator[None]:
    yield


@contextlib.contextmanager
def _stop_on_signals(loop: asyncio.AbstractEventLoop, stop: Callable[[], None]) -> Iterator[None]:
    """SIGTERM and SIGINT stop the worker gracefully; a second one exits at once."""
    import signal

    signals = (signal.SIGTERM, signal.SIGINT)

    def first() -> None:
        for each in signals:  # the next signal gets Python's default: exit now
            loop.remove_signal_handler(each)
        stop()

    for each in signals:
        loop.add_signal_handler(each, first)
    try:
        yield
    finally:
        for each in signals:
            loop.remove_signal_handler(each)
