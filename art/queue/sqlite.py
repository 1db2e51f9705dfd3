"""Queued runs on SQLite (and memory storage): a job table in the same database file.

procrastinate, the queue art uses on PostgreSQL, needs PostgreSQL; on one machine the same
model fits in two tables of the SQLite file that already holds the threads:

- `queue_jobs`: one row per submitted run, `todo` → `doing` (taken by a worker) → a final
  state. A job may start only when no other job of its thread is `doing` and no older job of
  its thread is waiting (procrastinate's `lock`), so each thread runs its queued runs one at
  a time, in submission order, while different threads spread over every worker.
- `queue_workers`: one row per live worker with its heartbeat. A worker silent for
  `stalled_after_s` is presumed dead: its `doing` jobs go back to `todo` (taken over by the
  next free worker, continuing from their stored steps) and its row is removed.

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
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from art.core.log import get_logger
from art.errors import ConfigurationError
from art.queue.contract import QueueBackend, QueueWorker
from art.queue.execute import RunJob, error_retry_delay
from art.queue.jobs import CancelOutcome, JobSpec, JobState, JobView, QueueStats, WorkerInfo
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
)

_NEXT_JOB = """
    SELECT id, spec, attempts FROM queue_jobs AS j
    WHERE queue = ?1 AND status = 'todo' AND (scheduled_at IS NULL OR scheduled_at <= ?2)
      AND NOT EXISTS (
          SELECT 1 FROM queue_jobs AS o
          WHERE o.thread_id = j.thread_id
            AND (o.status = 'doing' OR (o.status = 'todo' AND o.id < j.id))
      )
    ORDER BY id LIMIT 1
"""


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


def _view(row: tuple[Any, ...]) -> JobView:
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

    def __repr__(self) -> str:
        return f"SQLiteQueue({self.path!r}, queue={self.config.name!r})"

    # -- plumbing -----------------------------------------------------------------
    async def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="art-queue")
        return await asyncio.get_running_loop().run_in_executor(self._executor, self._run, fn)

    def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._conn is None:
            conn = sqlite3.connect(self.path, isolation_level=None, timeout=30.0)
            if self.path != ":memory:":
                conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
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

        return await self._call(insert)

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

    async def claim(self, worker_id: int, limit: int) -> list[JobView]:
        """Take up to `limit` jobs that may start now, oldest first."""
        queue = self.config.name

        def write(conn: sqlite3.Connection) -> list[JobView]:
            now = _now()
            taken: list[JobView] = []
            with _transaction(conn):
                for _ in range(limit):
                    row = conn.execute(_NEXT_JOB, (queue, now)).fetchone()
                    if row is None:
                        break
                    job_id, spec, attempts = row
                    conn.execute(
                        "UPDATE queue_jobs SET status = 'doing', worker_id = ?, started_at = ?,"
                        " abort_requested = 0 WHERE id = ?",
                        (worker_id, now, job_id),
                    )
                    spec_ = JobSpec.from_args(json.loads(spec))
                    taken.append(JobView(spec_, "doing", attempts, worker_id))
            return taken

        return await self._call(write)

    async def finish(
        self, run_id: str, worker_id: int, state: JobState, error: str | None = None
    ) -> None:
        """End a job this worker holds (a job taken over meanwhile is left to its new holder)."""

        def write(conn: sqlite3.Connection) -> None:
            with _transaction(conn):
                conn.execute(
                    "UPDATE queue_jobs SET status = ?, finished_at = ?, error = ?"
                    " WHERE run_id = ? AND status = 'doing' AND worker_id = ?",
                    (state, _now(), error, run_id, worker_id),
                )

        await self._call(write)

    async def give_back(self, run_id: str, worker_id: int, *, delay_s: float = 0.0) -> None:
        """Put a job this worker holds back in the queue (its thread keeps its place)."""
        scheduled = timestamp_key(utcnow() + timedelta(seconds=delay_s)) if delay_s else None

        def write(conn: sqlite3.Connection) -> None:
            with _transaction(conn):
                conn.execute(
                    "UPDATE queue_jobs SET status = 'todo', worker_id = NULL,"
                    " attempts = attempts + 1, scheduled_at = ?"
                    " WHERE run_id = ? AND status = 'doing' AND worker_id = ?",
                    (scheduled, run_id, worker_id),
                )

        await self._call(write)

    async def take_over(self) -> list[str]:
        """Put the jobs of workers silent for `stalled_after_s` back in the queue and remove
        those workers; the run ids taken over."""
        queue, cutoff = self.config.name, self.config.stalled_after_s

        def write(conn: sqlite3.Connection) -> list[str]:
            with _transaction(conn):
                stale = _ago(cutoff)
                rows = conn.execute(
                    "UPDATE queue_jobs SET status = 'todo', worker_id = NULL,"
                    " attempts = attempts + 1"
                    " WHERE queue = ?1 AND status = 'doing' AND (worker_id IS NULL OR worker_id IN"
                    " (SELECT id FROM queue_workers WHERE last_heartbeat < ?2))"
                    " RETURNING run_id",
                    (queue, stale),
                ).fetchall()
                conn.execute(
                    "DELETE FROM queue_workers WHERE queue = ? AND last_heartbeat < ?",
                    (queue, stale),
                )
            return [run_id for (run_id,) in rows]

        return await self._call(write)

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

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.worker_id: int | None = None
        self._running: dict[str, tuple[RunJob, asyncio.Task[None]]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop = asyncio.Event()
        self._wake = asyncio.Event()
        self._check_aborts = False

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
            if free > 0:
                jobs = await self.queue.claim(self.worker_id, free)
                for job in jobs:
                    self._start(job)
                if len(jobs) == free:
                    continue  # there may be more
            await _first_of(self._wake.wait(), self._stop.wait(), within_s=self.config.poll_s)

    def _start(self, job: JobView) -> None:
        execution = RunJob(
            self.instance, job.spec, busy_wait_s=self.config.poll_s, metrics=self.metrics
        )
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
            if delay is None:
                await self.queue.finish(run_id, worker_id, "failed", f"{type(exc).__name__}: {exc}")
            else:
                await self.queue.give_back(run_id, worker_id, delay_s=delay)
        else:
            state: JobState = "aborted" if execution.cancel_reason else "succeeded"
            await self.queue.finish(run_id, worker_id, state)
        finally:
            self._running.pop(run_id, None)
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
        taken = await self.queue.take_over()
        if taken:
            log.warning("runs of a dead worker taken over", run_ids=taken)
            self._wake.set()
        if self.metrics is not None:
            self.metrics.taken_over(len(taken))
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


async def _first_of(*waits: Any, within_s: float) -> None:
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
