"""SQLiteStorage: the embedded default. One file, WAL mode, every write committed.

All SQL runs on one connection in one dedicated worker thread; coroutines (from any event
loop) hand it jobs and await the result. Writes that arrive together are committed as one
transaction (group commit), each inside its own savepoint so one failing write does not undo
the others. A write's coroutine resumes only after its COMMIT.

Durability (`synchronous`): with the default ``normal`` a committed write survives the
process being killed (even SIGKILL) but the last few commits may be lost if the machine
loses power or the OS crashes; ``sqlite:///path.db?synchronous=full`` fsyncs at every commit
and survives power loss too, at a cost of a disk flush per commit.

The thread lease is an OS file lock (`flock`) on ``<db>.locks/<sha1(thread_id)>.lock``: the
kernel releases it the moment the holding process dies, so a retry after a crash succeeds at
once. It is exclusive between processes and between coroutines of one process.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import queue
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import filelock

from art.errors import (
    ConfigurationError,
    RunErrorCode,
    StorageError,
    SuspensionError,
    ThreadBusyError,
)
from art.responses import ConversationMessage, StepRecord, utcnow
from art.storage.codec import (
    dump_json,
    load_json,
    merge_metadata,
    thread_cursor,
    timestamp_key,
)
from art.storage.contract import (
    ACTIVE_RUN_STATES,
    RunRecord,
    StorageAdapter,
    StoredEvent,
    Suspension,
    ThreadPage,
    ThreadQuery,
    ThreadSummary,
)

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "SQLiteStorage", "connect", "storage_error"]

T = TypeVar("T")

# Ordered migrations: MIGRATIONS[n - 1] takes a database from version n - 1 to n. Never edit
# a released one; append a new one (an upgrade must never lose a thread).
MIGRATIONS: tuple[str, ...] = (
    # 1: runs, step records, suspensions, conversation history and the event log.
    """
    CREATE TABLE runs (
        seq INTEGER PRIMARY KEY,
        run_id TEXT NOT NULL UNIQUE,
        thread_id TEXT NOT NULL,
        status TEXT NOT NULL,
        query TEXT NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        data TEXT NOT NULL
    );
    CREATE INDEX runs_by_thread ON runs (thread_id, seq);
    CREATE TABLE steps (
        seq INTEGER PRIMARY KEY,
        run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
        step_id TEXT NOT NULL,
        data TEXT NOT NULL,
        UNIQUE (run_id, step_id)
    );
    CREATE TABLE suspensions (
        seq INTEGER PRIMARY KEY,
        suspension_id TEXT NOT NULL UNIQUE,
        thread_id TEXT NOT NULL,
        run_id TEXT NOT NULL,
        data TEXT NOT NULL,
        decision TEXT,
        decided_at TEXT
    );
    CREATE INDEX suspensions_by_thread ON suspensions (thread_id, seq);
    CREATE TABLE messages (
        seq INTEGER PRIMARY KEY,
        message_id TEXT NOT NULL,
        thread_id TEXT NOT NULL,
        timestamp TEXT NOT NULL,
        data TEXT NOT NULL
    );
    CREATE INDEX messages_by_thread ON messages (thread_id, seq);
    CREATE TABLE events (
        seq INTEGER PRIMARY KEY,
        thread_id TEXT NOT NULL,
        run_id TEXT,
        name TEXT NOT NULL,
        timestamp TEXT NOT NULL,
        data TEXT NOT NULL
    );
    CREATE INDEX events_by_thread ON events (thread_id, seq);
    """,
    # 2: a thread table for list_threads (backfilled from runs and history), and an index
    # for event queries by name and time.
    """
    CREATE TABLE threads (
        thread_id TEXT PRIMARY KEY,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        touched INTEGER NOT NULL
    );
    INSERT INTO threads (thread_id, created_at, updated_at, touched)
    SELECT thread_id, MIN(first_at), MAX(last_at),
           ROW_NUMBER() OVER (ORDER BY MAX(last_at), thread_id)
    FROM (
        SELECT thread_id, created_at AS first_at, updated_at AS last_at FROM runs
        UNION ALL
        SELECT thread_id, timestamp, timestamp FROM messages
    )
    GROUP BY thread_id;
    CREATE INDEX threads_by_touch ON threads (touched);
    CREATE INDEX events_by_thread_name_time ON events (thread_id, name, timestamp);
    """,
    # 3: a thread's owner (the server's user who created it) and its metadata.
    """
    ALTER TABLE threads ADD COLUMN owner TEXT;
    ALTER TABLE threads ADD COLUMN metadata TEXT NOT NULL DEFAULT '{}';
    CREATE INDEX threads_by_owner ON threads (owner, touched);
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)

_TOUCH_THREAD = """
    INSERT INTO threads (thread_id, created_at, updated_at, touched)
    VALUES (?1, ?2, ?2, (SELECT COALESCE(MAX(touched), 0) + 1 FROM threads))
    ON CONFLICT (thread_id) DO UPDATE SET updated_at = excluded.updated_at,
                                          touched = excluded.touched
"""
_SELECT_THREADS = """
    SELECT t.touched, t.thread_id, t.created_at, t.updated_at, t.owner, t.metadata,
           (SELECT COUNT(*) FROM runs r WHERE r.thread_id = t.thread_id),
           (SELECT r.query FROM runs r WHERE r.thread_id = t.thread_id
            ORDER BY r.seq DESC LIMIT 1),
           (SELECT r.status FROM runs r WHERE r.thread_id = t.thread_id
            ORDER BY r.seq DESC LIMIT 1)
    FROM threads t
"""
# How json_each's row must look for a metadata filter's value, by the value's kind.
_JSON_VALUE_MATCH = {
    "null": "m.type = 'null'",
    "true": "m.type = 'true'",
    "false": "m.type = 'false'",
    "text": "m.type = 'text' AND m.value = ?",
    "number": "m.type IN ('integer', 'real') AND m.value = ?",
}


def _json_kind(value: str | int | float | bool | None) -> str:
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    return "text" if isinstance(value, str) else "number"


#: A row of _SELECT_THREADS: touched, thread_id, created_at, updated_at, owner, metadata
#: (JSON text), runs, the last run's query and status.
_ThreadRow = tuple[int, str, str, str, str | None, str, int, str | None, str | None]


def _thread_summary(row: _ThreadRow) -> ThreadSummary:
    _, thread_id, created_at, updated_at, owner, metadata, runs, query, status = row
    return ThreadSummary(
        thread_id=thread_id,
        runs=runs,
        last_query=query,
        last_status=status,
        updated_at=datetime.fromisoformat(updated_at),
        created_at=datetime.fromisoformat(created_at),
        owner=owner,
        metadata=json.loads(metadata),
    )


_SAVE_STEP = """
    INSERT INTO steps (run_id, step_id, data) VALUES (?, ?, ?)
    ON CONFLICT (run_id, step_id) DO UPDATE SET data = excluded.data
"""


def connect(
    path: str | Path, *, synchronous: str = "normal", timeout_s: float = 30.0
) -> sqlite3.Connection:
    """A connection to `path` in WAL mode that waits up to `timeout_s` for other writers.

    SQLite does not wait for the exclusive lock that switches a new file to WAL: while
    another process opens the same new file it answers "database is locked" at once, so
    the switch is retried here within the same timeout.
    """
    conn = sqlite3.connect(path, isolation_level=None, timeout=timeout_s)
    deadline = time.monotonic() + timeout_s
    delay_s = 0.005
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            break
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() + delay_s > deadline:
                conn.close()
                raise
            time.sleep(delay_s)
            delay_s = min(delay_s * 2, 0.25)
    conn.execute(f"PRAGMA synchronous={synchronous.upper()}")
    return conn


def migrate(conn: sqlite3.Connection, target: int = SCHEMA_VERSION) -> int:
    """Bring the database to `target` (holding the write lock); return the version found."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_version"
            " (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)"
        )
        found = schema_version(conn)
        if found > SCHEMA_VERSION:
            raise ConfigurationError(
                f"the database schema is version {found}, newer than this art understands "
                f"({SCHEMA_VERSION}): upgrade art"
            )
        for version in range(found + 1, target + 1):
            for statement in _split_sql(MIGRATIONS[version - 1]):
                conn.execute(statement)
            conn.execute(
                "INSERT INTO schema_version (version, applied_at) VALUES (?, ?)",
                (version, timestamp_key(utcnow())),
            )
        conn.execute("COMMIT")
        return found
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _split_sql(script: str) -> list[str]:
    # executescript() would commit the open transaction; run the statements one by one.
    return [part.strip() for part in script.split(";") if part.strip()]


def schema_version(conn: sqlite3.Connection) -> int:
    version: int = conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()[
        0
    ]
    return version


def storage_error(path: Path, exc: BaseException) -> StorageError:
    """`exc` (sqlite3's or the OS's) as a StorageError naming `path` and what to check."""
    text = str(exc) or type(exc).__name__
    lowered = text.lower()
    if "not a database" in lowered or "malformed" in lowered:
        hint = (
            "the file is not an art database or is damaged: move it away (art starts a new "
            "one) or choose another path"
        )
    elif "readonly" in lowered or "read-only" in lowered:
        hint = "the file or its directory is read-only: make it writable or choose another path"
    elif "locked" in lowered or "busy" in lowered:
        hint = "another process holds the database: retry, or use PostgreSQL for many workers"
    elif "disk" in lowered or "full" in lowered:
        hint = "check the disk: it is full or failing"
    else:
        hint = "check that the directory exists or can be created, and that art may write there"
    return StorageError(f"SQLite storage {path}: {text} ({hint})", details={"path": str(path)})


class _Job:
    __slots__ = ("fn", "future", "loop", "write")

    def __init__(
        self,
        fn: Callable[[sqlite3.Connection], object],
        write: bool,
        loop: asyncio.AbstractEventLoop | None,
        # the jobs of one queue return different types: their futures' are erased here
        future: asyncio.Future[Any] | None,
    ) -> None:
        self.fn = fn
        self.write = write
        self.loop = loop
        self.future = future


def _notify(job: _Job, result: object, error: BaseException | None) -> None:
    # A cursor must not leave the connection's thread: when another thread drops it, its
    # finalizer resets the prepared statement while this thread may be running the same
    # cached statement (SQLite then reports "bad parameter or other API misuse"). Jobs
    # return plain values; a cursor that slips through is closed here, on this thread.
    if isinstance(result, sqlite3.Cursor):
        result.close()
        result = None
    if job.loop is None:
        return
    # RuntimeError: the caller's event loop is closed, so nobody is waiting.
    with contextlib.suppress(RuntimeError):
        job.loop.call_soon_threadsafe(_settle, job.future, result, error)


def _settle(
    future: asyncio.Future[Any] | None, result: object, error: BaseException | None
) -> None:
    if future is None or future.done():  # a cancelled caller: the write itself stands
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class _Worker(threading.Thread):
    """Owns the connection; runs jobs in arrival order, consecutive writes in one commit."""

    MAX_BATCH = 256

    def __init__(self, path: Path, synchronous: str) -> None:
        super().__init__(name=f"art-sqlite:{path.name}", daemon=True)
        self.path = path
        self.synchronous = synchronous
        self.jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self.ready = threading.Event()
        self.startup_error: BaseException | None = None

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = connect(self.path, synchronous=self.synchronous)
        conn.execute("PRAGMA foreign_keys=ON")
        migrate(conn)
        return conn

    def run(self) -> None:
        try:
            conn = self._connect()
        except BaseException as exc:
            failed = isinstance(exc, sqlite3.Error | OSError)
            self.startup_error = storage_error(self.path, exc) if failed else exc
            if failed:
                self.startup_error.__cause__ = exc  # the traceback says which statement
            self.ready.set()
            self._fail_all(exc)
            return
        self.ready.set()
        try:
            while True:
                job = self.jobs.get()
                if job is None:
                    break
                batch = [job]
                stop = False
                while len(batch) < self.MAX_BATCH:
                    try:
                        more = self.jobs.get_nowait()
                    except queue.Empty:
                        break
                    if more is None:
                        stop = True
                        break
                    batch.append(more)
                self._run_batch(conn, batch)
                if stop:
                    break
        finally:
            conn.close()

    def _fail_all(self, error: BaseException) -> None:
        while True:
            try:
                job = self.jobs.get_nowait()
            except queue.Empty:
                return
            if job is not None:
                _notify(job, None, error)

    def _run_batch(self, conn: sqlite3.Connection, batch: list[_Job]) -> None:
        writes: list[_Job] = []
        for job in batch:
            if job.write:
                writes.append(job)
                continue
            if writes:
                self._commit(conn, writes)
                writes = []
            self._run_read(conn, job)
        if writes:
            self._commit(conn, writes)

    @staticmethod
    def _run_read(conn: sqlite3.Connection, job: _Job) -> None:
        try:
            if job.fn is _checkpoint:  # must run outside any transaction
                result, error = job.fn(conn), None
            else:
                conn.execute("BEGIN")  # one snapshot for the reads of this job
                try:
                    result, error = job.fn(conn), None
                finally:
                    conn.execute("COMMIT")
        except Exception as exc:
            result, error = None, exc
        _notify(job, result, error)

    @staticmethod
    def _commit(conn: sqlite3.Connection, writes: list[_Job]) -> None:
        outcomes: list[tuple[object, BaseException | None]] = []
        try:
            conn.execute("BEGIN IMMEDIATE")
            if len(writes) == 1:
                outcomes.append((writes[0].fn(conn), None))
            else:
                for job in writes:
                    conn.execute("SAVEPOINT job")
                    try:
                        outcomes.append((job.fn(conn), None))
                    except Exception as exc:
                        conn.execute("ROLLBACK TO job")
                        outcomes.append((None, exc))
                    conn.execute("RELEASE job")
            conn.execute("COMMIT")
        except Exception as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            outcomes = [(None, exc)] * len(writes)
        for job, (result, error) in zip(writes, outcomes, strict=True):
            _notify(job, result, error)


class _InlineWriter:
    """A second connection for short writes made on the caller's own thread.

    Handing a write to the worker thread costs a thread switch each way, several times the
    ~20 µs an uncontended commit takes with synchronous=NORMAL. So a write first tries this
    connection without waiting: if another coroutine or thread is using it, or another
    process holds the database's write lock (busy_timeout is 0 here), the write goes to the
    worker, which waits its turn. WAL checkpoints, which fsync, are left to the worker.
    """

    CHECKPOINT_EVERY = 1000

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None, timeout=0, check_same_thread=False)
        self.conn.execute("PRAGMA synchronous=NORMAL")
        self.conn.execute("PRAGMA foreign_keys=ON")
        self.conn.execute("PRAGMA wal_autocheckpoint=0")
        self.lock = threading.Lock()
        self.commits = 0

    def try_write(self, fn: Callable[[sqlite3.Connection], T]) -> tuple[T] | None:
        """(result,) once committed; None when the worker must do it."""
        if not self.lock.acquire(blocking=False):
            return None
        try:
            try:
                self.conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError:  # another process is writing
                return None
            try:
                result = fn(self.conn)
                if isinstance(result, sqlite3.Cursor):  # other threads share this connection
                    result.close()
                self.conn.execute("COMMIT")
            except BaseException:
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
                raise
            self.commits += 1
            return (result,)
        finally:
            self.lock.release()

    def try_statement(self, sql: str, args: Sequence[object]) -> bool:
        """Run one statement as its own transaction (autocommit: no BEGIN/COMMIT round
        trips); True once committed, False when the worker must do it."""
        if not self.lock.acquire(blocking=False):
            return False
        try:
            try:
                self.conn.execute(sql, args)
            except sqlite3.OperationalError as exc:
                if exc.sqlite_errorcode & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED):
                    return False  # another process is writing: nothing was written
                raise
            self.commits += 1
            return True
        finally:
            self.lock.release()

    def close(self) -> None:
        with self.lock:
            self.conn.close()


_SQLITE_BUSY, _SQLITE_LOCKED = 5, 6


def _execute(conn: sqlite3.Connection, sql: str, args: Sequence[object]) -> None:
    """One statement whose cursor stays here (see `_notify`)."""
    conn.execute(sql, args)


def _checkpoint(conn: sqlite3.Connection) -> None:
    conn.execute("PRAGMA wal_checkpoint(PASSIVE)")


def _run_update(run: RunRecord) -> Callable[[sqlite3.Connection], None]:
    """The write that stores a run's state (not its steps); the JSON is made now."""
    data = dump_json(run, exclude={"steps"})
    args = (run.status, run.query, timestamp_key(run.updated_at), data, run.run_id)
    now = timestamp_key(utcnow())

    def write(conn: sqlite3.Connection) -> None:
        cursor = conn.execute(
            "UPDATE runs SET status = ?, query = ?, updated_at = ?, data = ? WHERE run_id = ?",
            args,
        )
        if cursor.rowcount == 0:
            raise KeyError(f"no run {run.run_id!r}")
        conn.execute(_TOUCH_THREAD, (run.thread_id, now))

    return write


def _message_insert(message: ConversationMessage) -> Callable[[sqlite3.Connection], None]:
    """The write that appends one message to its thread's history."""
    args = (
        message.message_id,
        message.thread_id,
        timestamp_key(message.timestamp),
        dump_json(message),
    )
    now = timestamp_key(utcnow())

    def write(conn: sqlite3.Connection) -> None:
        conn.execute(
            "INSERT INTO messages (message_id, thread_id, timestamp, data) VALUES (?, ?, ?, ?)",
            args,
        )
        conn.execute(_TOUCH_THREAD, (message.thread_id, now))

    return write


class SQLiteStorage(StorageAdapter):
    """Storage in one SQLite file; `sqlite:///relative.db`, `sqlite:////abs/path.db`."""

    def __init__(self, path: str | Path, *, synchronous: str = "normal") -> None:
        self.path = Path(path).expanduser().absolute()
        self.synchronous = synchronous.lower()
        suffix = "" if self.synchronous == "normal" else f"?synchronous={self.synchronous}"
        self.url = f"sqlite:///{self.path}{suffix}"
        self.locks_dir = self.path.with_name(self.path.name + ".locks")
        self._worker: _Worker | None = None
        self._inline: _InlineWriter | None = None
        self._start_lock = threading.Lock()
        self._held: set[str] = set()
        self._held_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"SQLiteStorage({str(self.path)!r})"

    # -- plumbing -----------------------------------------------------------------
    def _ensure_worker(self) -> _Worker:
        worker = self._worker
        if worker is not None and worker.is_alive():
            return worker
        with self._start_lock:
            if self._worker is None or not self._worker.is_alive():
                worker = _Worker(self.path, self.synchronous)
                worker.start()
                worker.ready.wait()
                if worker.startup_error is not None:
                    raise worker.startup_error
                self._worker = worker
                # synchronous=FULL fsyncs at every commit: never on the caller's thread.
                if self.synchronous == "normal" and self._inline is None:
                    self._inline = _InlineWriter(self.path)
            return self._worker

    async def _call(self, fn: Callable[[sqlite3.Connection], T], *, write: bool) -> T:
        with self._errors_named():
            worker = self._ensure_worker()
            loop = asyncio.get_running_loop()
            future: asyncio.Future[T] = loop.create_future()
            worker.jobs.put(_Job(fn, write, loop, future))
            return await future

    async def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        inline = self._inline
        if inline is not None:
            with self._errors_named():
                written = inline.try_write(fn)
            if written is not None:
                self._after_inline_commit(inline)
                return written[0]
        return await self._call(fn, write=True)

    @contextlib.contextmanager
    def _errors_named(self) -> Iterator[None]:
        """SQLite's own failures as StorageError naming the file; an IntegrityError is
        left to the method that made it (a duplicate id, a missing run)."""
        try:
            yield
        except sqlite3.IntegrityError:
            raise
        except sqlite3.Error as exc:
            raise storage_error(self.path, exc) from exc

    def _after_inline_commit(self, inline: _InlineWriter) -> None:
        if inline.commits % inline.CHECKPOINT_EVERY == 0 and self._worker is not None:
            self._worker.jobs.put(_Job(_checkpoint, False, None, None))

    async def open(self) -> None:
        worker = self._worker
        if worker is None or not worker.is_alive():
            with self._errors_named():
                await asyncio.to_thread(self._ensure_worker)

    async def close(self) -> None:
        worker, self._worker = self._worker, None
        inline, self._inline = self._inline, None
        if inline is not None:
            inline.close()
        if worker is not None and worker.is_alive():
            worker.jobs.put(None)
            await asyncio.to_thread(worker.join)

    async def schema_version(self) -> int:
        return await self._call(schema_version, write=False)

    # -- runs ---------------------------------------------------------------------
    async def create_run(self, run: RunRecord) -> None:
        data = dump_json(run, exclude={"steps"})
        steps = [(run.run_id, sid, dump_json(rec)) for sid, rec in run.steps.items()]
        created, updated = timestamp_key(run.created_at), timestamp_key(run.updated_at)
        now = timestamp_key(utcnow())

        def write(conn: sqlite3.Connection) -> None:
            try:
                conn.execute(
                    "INSERT INTO runs (run_id, thread_id, status, query, created_at,"
                    " updated_at, data) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (run.run_id, run.thread_id, run.status, run.query, created, updated, data),
                )
            except sqlite3.IntegrityError as exc:
                raise ValueError(f"run {run.run_id!r} already exists") from exc
            conn.executemany(_SAVE_STEP, steps)
            conn.execute(_TOUCH_THREAD, (run.thread_id, now))

        await self._write(write)

    @staticmethod
    def _load_runs(
        conn: sqlite3.Connection, where: str, args: tuple[object, ...]
    ) -> list[RunRecord]:
        rows = conn.execute(f"SELECT run_id, data FROM runs WHERE {where}", args).fetchall()
        runs = []
        for run_id, data in rows:
            run = load_json(RunRecord, data)
            run.steps = {
                step_id: load_json(StepRecord, step)
                for step_id, step in conn.execute(
                    "SELECT step_id, data FROM steps WHERE run_id = ? ORDER BY seq", (run_id,)
                )
            }
            runs.append(run)
        return runs

    async def get_run(self, run_id: str) -> RunRecord | None:
        runs = await self._call(
            lambda conn: self._load_runs(conn, "run_id = ?", (run_id,)), write=False
        )
        return runs[0] if runs else None

    async def get_active_run(self, thread_id: str) -> RunRecord | None:
        states = tuple(sorted(ACTIVE_RUN_STATES))
        marks = ", ".join("?" * len(states))
        runs = await self._call(
            lambda conn: self._load_runs(
                conn,
                f"thread_id = ? AND status IN ({marks}) ORDER BY seq DESC LIMIT 1",
                (thread_id, *states),
            ),
            write=False,
        )
        return runs[0] if runs else None

    async def list_runs(self, thread_id: str) -> list[RunRecord]:
        return await self._call(
            lambda conn: self._load_runs(conn, "thread_id = ? ORDER BY seq", (thread_id,)),
            write=False,
        )

    async def update_run(self, run: RunRecord) -> None:
        await self._write(_run_update(run))

    async def finish_run(self, run: RunRecord, messages: Sequence[ConversationMessage]) -> None:
        writes = [_run_update(run), *(_message_insert(message) for message in messages)]

        def write(conn: sqlite3.Connection) -> None:  # one transaction: all or nothing
            for each in writes:
                each(conn)

        await self._write(write)

    async def save_step(self, run_id: str, record: StepRecord) -> None:
        # One statement, no read: the hot path (twice per step).
        args = (run_id, record.step_id, dump_json(record))
        inline = self._inline
        try:
            if inline is not None:
                with self._errors_named():
                    written = inline.try_statement(_SAVE_STEP, args)
                if written:
                    self._after_inline_commit(inline)
                    return
            await self._call(lambda conn: _execute(conn, _SAVE_STEP, args), write=True)
        except sqlite3.IntegrityError as exc:  # the foreign key: no such run
            raise KeyError(f"no run {run_id!r}") from exc

    # -- suspensions --------------------------------------------------------------
    async def add_suspension(self, suspension: Suspension) -> None:
        data = dump_json(suspension, exclude={"decision", "decided_at"})
        decision = json.dumps(suspension.decision) if suspension.decision is not None else None
        decided_at = timestamp_key(suspension.decided_at) if suspension.decided_at else None
        args = (
            suspension.suspension_id,
            suspension.thread_id,
            suspension.run_id,
            data,
            decision,
            decided_at,
        )

        def write(conn: sqlite3.Connection) -> None:
            try:
                conn.execute(
                    "INSERT INTO suspensions (suspension_id, thread_id, run_id, data, decision,"
                    " decided_at) VALUES (?, ?, ?, ?, ?, ?)",
                    args,
                )
            except sqlite3.IntegrityError as exc:
                raise ValueError(f"suspension {suspension.suspension_id!r} already exists") from exc

        await self._write(write)

    @staticmethod
    def _load_suspension(data: str, decision: str | None, decided_at: str | None) -> Suspension:
        suspension = load_json(Suspension, data)
        if decision is not None:
            suspension.decision = json.loads(decision)
            suspension.decided_at = datetime.fromisoformat(decided_at) if decided_at else None
        return suspension

    async def list_suspensions(
        self, thread_id: str, *, pending_only: bool = True
    ) -> list[Suspension]:
        pending = " AND decision IS NULL" if pending_only else ""

        def read(conn: sqlite3.Connection) -> list[Suspension]:
            rows = conn.execute(
                "SELECT data, decision, decided_at FROM suspensions"
                f" WHERE thread_id = ?{pending} ORDER BY seq",
                (thread_id,),
            )
            return [self._load_suspension(*row) for row in rows]

        return await self._call(read, write=False)

    async def decide_suspension(
        self, thread_id: str, suspension_id: str, decision: Mapping[str, object]
    ) -> Suspension:
        decision_json = json.dumps(decision, default=repr)
        decided_at = timestamp_key(utcnow())

        def write(conn: sqlite3.Connection) -> Suspension:
            row = conn.execute(
                "UPDATE suspensions SET decision = ?, decided_at = ?"
                " WHERE suspension_id = ? AND thread_id = ? AND decision IS NULL"
                " RETURNING data, decision, decided_at",
                (decision_json, decided_at, suspension_id, thread_id),
            ).fetchone()
            if row is not None:
                return self._load_suspension(*row)
            found = conn.execute(
                "SELECT decision FROM suspensions WHERE suspension_id = ? AND thread_id = ?",
                (suspension_id, thread_id),
            ).fetchone()
            if found is None:
                raise SuspensionError(
                    f"no suspension {suspension_id!r} on thread {thread_id!r}",
                    code=RunErrorCode.SUSPENSION_NOT_FOUND,
                )
            raise SuspensionError(
                f"suspension {suspension_id!r} was already decided",
                code=RunErrorCode.SUSPENSION_ALREADY_DECIDED,
                details=json.loads(found[0]),
            )

        return await self._write(write)

    # -- conversation -------------------------------------------------------------
    async def append_message(self, message: ConversationMessage) -> None:
        await self._write(_message_insert(message))

    async def get_history(self, thread_id: str, *, limit: int = 20) -> list[ConversationMessage]:
        if limit <= 0:
            return []

        def read(conn: sqlite3.Connection) -> list[ConversationMessage]:
            rows = conn.execute(
                "SELECT data FROM messages WHERE thread_id = ? ORDER BY seq DESC LIMIT ?",
                (thread_id, limit),
            ).fetchall()
            return [load_json(ConversationMessage, data) for (data,) in reversed(rows)]

        return await self._call(read, write=False)

    async def replace_history(
        self, thread_id: str, messages: Sequence[ConversationMessage]
    ) -> None:
        inserts = [_message_insert(message) for message in messages]
        now = timestamp_key(utcnow())

        def write(conn: sqlite3.Connection) -> None:  # one transaction: all or nothing
            conn.execute("DELETE FROM messages WHERE thread_id = ?", (thread_id,))
            for insert in inserts:
                insert(conn)
            conn.execute(_TOUCH_THREAD, (thread_id, now))

        await self._write(write)

    async def delete_run(self, run_id: str) -> bool:
        def write(conn: sqlite3.Connection) -> bool:
            for table in ("suspensions", "events"):
                conn.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))
            # steps: cascade
            return conn.execute("DELETE FROM runs WHERE run_id = ?", (run_id,)).rowcount > 0

        return await self._write(write)

    async def delete_thread(self, thread_id: str) -> bool:
        def write(conn: sqlite3.Connection) -> bool:
            found = conn.execute("DELETE FROM threads WHERE thread_id = ?", (thread_id,)).rowcount
            for table in ("runs", "suspensions", "messages", "events"):  # steps: cascade
                found += conn.execute(
                    f"DELETE FROM {table} WHERE thread_id = ?", (thread_id,)
                ).rowcount
            return found > 0

        return await self._write(write)

    # -- events -------------------------------------------------------------------
    async def append_events(self, events: Sequence[StoredEvent]) -> None:
        rows = [
            (
                e.thread_id,
                e.run_id,
                e.name,
                timestamp_key(e.timestamp),
                dump_json(e, exclude={"seq"}),
            )
            for e in events
        ]
        if not rows:
            return

        def write(conn: sqlite3.Connection) -> None:
            conn.executemany(
                "INSERT INTO events (thread_id, run_id, name, timestamp, data)"
                " VALUES (?, ?, ?, ?, ?)",
                rows,
            )

        await self._write(write)

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
        where = ["thread_id = ?"]
        args: list[object] = [thread_id]
        if after_seq is not None:
            where.append("seq > ?")
            args.append(after_seq)
        if names is not None:
            names = list(names)
            if not names:
                return []
            where.append(f"name IN ({', '.join('?' * len(names))})")
            args.extend(names)
        if since is not None:
            where.append("timestamp >= ?")
            args.append(timestamp_key(since))
        if until is not None:
            where.append("timestamp < ?")
            args.append(timestamp_key(until))
        sql = f"SELECT seq, data FROM events WHERE {' AND '.join(where)} ORDER BY seq"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(max(limit, 0))

        def read(conn: sqlite3.Connection) -> list[StoredEvent]:
            found = []
            for seq, data in conn.execute(sql, args):
                event = load_json(StoredEvent, data)
                event.seq = seq
                found.append(event)
            return found

        return await self._call(read, write=False)

    # -- threads ------------------------------------------------------------------
    async def list_threads(self, *, limit: int = 100) -> list[ThreadSummary]:
        return (await self._search(ThreadQuery(), max(limit, 0))).threads

    async def search_threads(self, query: ThreadQuery) -> ThreadPage:
        return await self._search(query, query.limit)

    async def _search(self, query: ThreadQuery, limit: int) -> ThreadPage:
        where: list[str] = ["1 = 1"]
        args: list[object] = []  # the query's parameters: text, numbers, the cursor
        after = thread_cursor(query.cursor)
        if after is not None:
            where.append("t.touched < ?")
            args.append(after)
        if query.owner is not None:
            where.append("t.owner = ?")
            args.append(query.owner)
        for key, value in query.metadata.items():
            where.append(
                "EXISTS (SELECT 1 FROM json_each(t.metadata) m WHERE m.key = ? AND "
                + _JSON_VALUE_MATCH[_json_kind(value)]
                + ")"
            )
            args.append(key)
            if value is not None and not isinstance(value, bool):
                args.append(value)
        if query.status is not None:
            where.append(
                "(SELECT r.status FROM runs r WHERE r.thread_id = t.thread_id "
                "ORDER BY r.seq DESC LIMIT 1) = ?"
            )
            args.append(query.status)
        sql = f"{_SELECT_THREADS} WHERE {' AND '.join(where)} ORDER BY t.touched DESC LIMIT ?"
        args.append(limit + 1)

        def read(conn: sqlite3.Connection) -> ThreadPage:
            rows = conn.execute(sql, args).fetchall()
            threads = [_thread_summary(row) for row in rows[:limit]]
            if len(rows) > limit and threads:
                return ThreadPage(threads=threads, next_cursor=str(rows[limit - 1][0]))
            return ThreadPage(threads=threads)

        return await self._call(read, write=False)

    async def get_thread(self, thread_id: str) -> ThreadSummary | None:
        def read(conn: sqlite3.Connection) -> ThreadSummary | None:
            row = conn.execute(f"{_SELECT_THREADS} WHERE t.thread_id = ?", (thread_id,)).fetchone()
            return _thread_summary(row) if row else None

        return await self._call(read, write=False)

    async def claim_thread(
        self, thread_id: str, owner: str | None, metadata: Mapping[str, object] | None = None
    ) -> ThreadSummary:
        now = timestamp_key(utcnow())
        text = json.dumps(metadata or {}, allow_nan=False)

        def write(conn: sqlite3.Connection) -> ThreadSummary:
            conn.execute(
                "INSERT INTO threads (thread_id, created_at, updated_at, touched, owner, "
                "metadata) VALUES (?1, ?2, ?2, (SELECT COALESCE(MAX(touched), 0) + 1 FROM "
                "threads), ?3, ?4) ON CONFLICT (thread_id) DO NOTHING",
                (thread_id, now, owner, text),
            )
            row = conn.execute(f"{_SELECT_THREADS} WHERE t.thread_id = ?", (thread_id,)).fetchone()
            return _thread_summary(row)

        return await self._write(write)

    async def update_thread(
        self, thread_id: str, metadata: dict[str, object]
    ) -> ThreadSummary | None:
        now = timestamp_key(utcnow())

        def write(conn: sqlite3.Connection) -> ThreadSummary | None:
            found = conn.execute(
                "SELECT metadata FROM threads WHERE thread_id = ?", (thread_id,)
            ).fetchone()
            if found is None:
                return None
            merged = merge_metadata(json.loads(found[0]), metadata)
            conn.execute(
                "UPDATE threads SET metadata = ?, updated_at = ?, touched = (SELECT "
                "COALESCE(MAX(touched), 0) + 1 FROM threads) WHERE thread_id = ?",
                (json.dumps(merged, allow_nan=False), now, thread_id),
            )
            row = conn.execute(f"{_SELECT_THREADS} WHERE t.thread_id = ?", (thread_id,)).fetchone()
            return _thread_summary(row)

        return await self._write(write)

    # -- one worker per thread ----------------------------------------------------
    def lock_path(self, thread_id: str) -> Path:
        # surrogatepass: every str hashes, lone surrogates included.
        key = thread_id.encode("utf-8", "surrogatepass")
        digest = hashlib.sha1(key, usedforsecurity=False).hexdigest()
        return self.locks_dir / f"{digest}.lock"

    @asynccontextmanager
    async def lease(self, thread_id: str) -> AsyncIterator[None]:
        with self._held_lock:
            if thread_id in self._held:
                raise ThreadBusyError(thread_id)
            self._held.add(thread_id)
        try:
            lock = filelock.FileLock(
                self.lock_path(thread_id),
                timeout=0,
                thread_local=False,
                preserve_lock_file=True,  # unlinking a lock file races with a new holder
                fallback_to_soft=False,  # a soft lock would outlive a crashed holder
            )
            try:
                self.locks_dir.mkdir(parents=True, exist_ok=True)
                lock.acquire()
            except filelock.Timeout:
                raise ThreadBusyError(thread_id) from None
            except OSError as exc:
                raise storage_error(self.locks_dir, exc) from exc
            try:
                yield
            finally:
                lock.release()
        finally:
            with self._held_lock:
                self._held.discard(thread_id)
