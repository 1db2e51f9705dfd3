"""PostgresStorage: several worker processes (or hosts) on one database. psycopg 3, async, pooled.

Every method runs in autocommit mode or in one explicit transaction, so each write is
committed by the server before the method returns. The schema and its migrations mirror the
SQLite adapter's (a `schema_version` table; migrations run under an advisory lock, so
workers starting together migrate once).

The thread lease is a session-level advisory lock, `pg_try_advisory_lock(hashtextextended(
thread_id, 0))`, taken on one connection this adapter keeps for leases alone. PostgreSQL
releases a session's advisory locks when the session ends, so when a worker dies (even by
SIGKILL: the kernel closes its socket) its threads are free at once. The pool and the lease
connection belong to the event loop that opened the adapter.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime

import psycopg
from psycopg import errors as pg_errors
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool
from pydantic import TypeAdapter

from art.core.json import JsonObject
from art.core.redaction import redact
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
    load_json_as,
    merge_metadata,
    thread_cursor,
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

__all__ = ["DEFAULT_CONNECT_TIMEOUT_S", "MIGRATIONS", "SCHEMA_VERSION", "PostgresStorage"]

#: How long connecting may take, unless the URL says `?connect_timeout=N` (whole seconds,
#: at least 2, as libpq counts them) or `PostgresStorage(connect_timeout_s=...)` does.
DEFAULT_CONNECT_TIMEOUT_S = 5

# The key of the advisory lock that serializes migrations (any constant no thread hashes to
# matters little: the two-int form lives in a different key space from the bigint form).
_MIGRATION_LOCK = (0x617274, 1)

MIGRATIONS: tuple[str, ...] = (
    # 1: runs, step records, suspensions, conversation history and the event log.
    """
    CREATE TABLE runs (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        run_id TEXT NOT NULL UNIQUE,
        thread_id TEXT NOT NULL,
        status TEXT NOT NULL,
        query TEXT NOT NULL,
        created_at TIMESTAMPTZ NOT NULL,
        updated_at TIMESTAMPTZ NOT NULL,
        data JSON NOT NULL
    );
    CREATE INDEX runs_by_thread ON runs (thread_id, seq);
    CREATE TABLE steps (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
        step_id TEXT NOT NULL,
        data JSON NOT NULL,
        UNIQUE (run_id, step_id)
    );
    CREATE TABLE suspensions (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        suspension_id TEXT NOT NULL UNIQUE,
        thread_id TEXT NOT NULL,
        run_id TEXT NOT NULL,
        data JSON NOT NULL,
        decision JSON,
        decided_at TIMESTAMPTZ
    );
    CREATE INDEX suspensions_by_thread ON suspensions (thread_id, seq);
    CREATE TABLE messages (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        message_id TEXT NOT NULL,
        thread_id TEXT NOT NULL,
        timestamp TIMESTAMPTZ NOT NULL,
        data JSON NOT NULL
    );
    CREATE INDEX messages_by_thread ON messages (thread_id, seq);
    CREATE TABLE events (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        thread_id TEXT NOT NULL,
        run_id TEXT,
        name TEXT NOT NULL,
        timestamp TIMESTAMPTZ NOT NULL,
        data JSON NOT NULL
    );
    CREATE INDEX events_by_thread ON events (thread_id, seq);
    """,
    # 2: a thread table for list_threads (backfilled from runs and history), and an index
    # for event queries by name and time.
    """
    CREATE TABLE threads (
        thread_id TEXT PRIMARY KEY,
        created_at TIMESTAMPTZ NOT NULL,
        updated_at TIMESTAMPTZ NOT NULL,
        touched BIGINT NOT NULL
    );
    CREATE SEQUENCE threads_touch_seq;
    INSERT INTO threads (thread_id, created_at, updated_at, touched)
    SELECT thread_id, MIN(first_at), MAX(last_at),
           ROW_NUMBER() OVER (ORDER BY MAX(last_at), thread_id)
    FROM (
        SELECT thread_id, created_at AS first_at, updated_at AS last_at FROM runs
        UNION ALL
        SELECT thread_id, timestamp, timestamp FROM messages
    ) AS activity
    GROUP BY thread_id;
    SELECT setval('threads_touch_seq', COALESCE((SELECT MAX(touched) FROM threads), 0) + 1,
                  false);
    CREATE INDEX threads_by_touch ON threads (touched);
    CREATE INDEX events_by_thread_name_time ON events (thread_id, name, timestamp);
    """,
    # 3: a thread's owner (the server's user who created it) and its metadata.
    """
    ALTER TABLE threads ADD COLUMN owner TEXT;
    ALTER TABLE threads ADD COLUMN metadata JSONB NOT NULL DEFAULT '{}';
    CREATE INDEX threads_by_owner ON threads (owner, touched);
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)

_TOUCH_THREAD = """
    INSERT INTO threads (thread_id, created_at, updated_at, touched)
    VALUES (%(thread_id)s, %(now)s, %(now)s, nextval('threads_touch_seq'))
    ON CONFLICT (thread_id) DO UPDATE SET updated_at = excluded.updated_at,
                                          touched = excluded.touched
"""
_SELECT_THREADS = """
    SELECT t.touched, t.thread_id, t.created_at, t.updated_at, t.owner, t.metadata,
           (SELECT COUNT(*) FROM runs r WHERE r.thread_id = t.thread_id),
           last.query, last.status
    FROM threads t
    LEFT JOIN LATERAL (
        SELECT r.query, r.status FROM runs r WHERE r.thread_id = t.thread_id
        ORDER BY r.seq DESC LIMIT 1
    ) AS last ON true
"""


#: A row of _SELECT_THREADS: touched, thread_id, created_at, updated_at, owner, metadata,
#: runs, the last run's query and status.
_ThreadRow = tuple[
    int, str, datetime, datetime, str | None, JsonObject, int, str | None, str | None
]


def _thread_summary(row: _ThreadRow) -> ThreadSummary:
    _, thread_id, created_at, updated_at, owner, metadata, runs, query, status = row
    return ThreadSummary(
        thread_id=thread_id,
        runs=runs,
        last_query=query,
        last_status=status,
        updated_at=updated_at,
        created_at=created_at,
        owner=owner,
        metadata=metadata,
    )


_SELECT_RUNS = """
    SELECT r.data::text,
           COALESCE((SELECT json_agg(json_build_array(s.step_id, s.data) ORDER BY s.seq)
                     FROM steps s WHERE s.run_id = r.run_id), '[]')::text
    FROM runs r
"""


async def fetch_value(cursor: psycopg.AsyncCursor[TupleRow]) -> object:
    """The first column of the row a query that always returns one row gave."""
    row = await cursor.fetchone()
    if row is None:
        raise StorageError("the database returned no row where one always comes back")
    return row[0]


async def _fetch_int(cursor: psycopg.AsyncCursor[TupleRow]) -> int:
    """The number in the first column of the one row a query returned."""
    value = await fetch_value(cursor)
    if not isinstance(value, int):
        raise StorageError(f"the database returned {value!r} where a number always comes back")
    return value


async def migrate(conn: psycopg.AsyncConnection[TupleRow], target: int = SCHEMA_VERSION) -> int:
    """Bring the database to `target`; return the version found. Safe to run concurrently."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", _MIGRATION_LOCK)
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_version"
            " (version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
        )
        cursor = await conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version")
        found = await _fetch_int(cursor)
        if found > SCHEMA_VERSION:
            raise ConfigurationError(
                f"the database schema is version {found}, newer than this art understands "
                f"({SCHEMA_VERSION}): upgrade art"
            )
        for version in range(found + 1, target + 1):
            for statement in _split_sql(MIGRATIONS[version - 1]):
                await conn.execute(statement)
            await conn.execute("INSERT INTO schema_version (version) VALUES (%s)", (version,))
    return found


def _split_sql(script: str) -> list[str]:
    return [part.strip() for part in script.split(";") if part.strip()]


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


# A run's step records as the query aggregates them: [[step_id, record], ...], read as JSON
# (so that bytes in outputs come back as bytes, see art.core.binary).
_STEPS: TypeAdapter[list[tuple[str, StepRecord]]] = TypeAdapter(list[tuple[str, StepRecord]])


def _load_run(data: str, steps: str) -> RunRecord:
    run = load_json(RunRecord, data)
    records: list[tuple[str, StepRecord]] = load_json_as(_STEPS, steps)
    run.steps = dict(records)
    return run


def _load_suspension(data: str, decision: str | None, decided_at: datetime | None) -> Suspension:
    suspension = load_json(Suspension, data)
    if decision is not None:
        suspension.decision = json.loads(decision)
        suspension.decided_at = decided_at
    return suspension


class PostgresStorage(StorageAdapter):
    """Storage in PostgreSQL; `postgresql://user:password@host:5432/dbname`."""

    def __init__(
        self,
        url: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        connect_timeout_s: int | None = None,
    ) -> None:
        self.url = url
        self.min_size = min_size
        self.max_size = max_size
        self.connect_timeout_s = _connect_timeout(url, connect_timeout_s)
        self._pool: AsyncConnectionPool | None = None
        self._open_lock: asyncio.Lock | None = None
        self._lease_conn: psycopg.AsyncConnection[TupleRow] | None = None
        self._lease_lock: asyncio.Lock | None = None
        self._held: set[str] = set()

    def __repr__(self) -> str:
        return f"PostgresStorage({redact_url(self.url)!r})"

    # -- plumbing -----------------------------------------------------------------
    async def open(self) -> None:
        if self._pool is not None:
            return
        if self._open_lock is None:
            self._open_lock = asyncio.Lock()
        async with self._open_lock:
            if self._pool is not None:
                return
            # One connection first: its failure says why (refused, unknown host, bad
            # password, no such database), where a pool would only time out.
            conn = await self._connect()
            try:
                await migrate(conn)
            finally:
                await conn.close()
            pool = AsyncConnectionPool(
                self.url,
                min_size=self.min_size,
                max_size=self.max_size,
                kwargs={"autocommit": True, "connect_timeout": self.connect_timeout_s},
                # A call waits at most this for a connection (the server may be gone), and
                # a connection the server dropped is replaced before it is handed out.
                timeout=self.connect_timeout_s,
                check=AsyncConnectionPool.check_connection,
                open=False,
                name="art",
            )
            try:
                await pool.open(wait=True, timeout=self.connect_timeout_s * 2)
            except psycopg.Error as exc:
                await pool.close()
                raise self._error(exc) from exc
            self._pool = pool

    async def _connect(self) -> psycopg.AsyncConnection[TupleRow]:
        try:
            return await psycopg.AsyncConnection.connect(
                self.url, autocommit=True, connect_timeout=self.connect_timeout_s
            )
        except (psycopg.Error, OSError) as exc:
            raise self._error(exc) from exc

    def _error(self, exc: BaseException) -> StorageError:
        """`exc` as a StorageError naming the server (never the password) and what to check."""
        where = redact_url(self.url)
        reason = " ".join(str(exc).split()) or type(exc).__name__
        reason = redact(reason, [_password(self.url)])
        return StorageError(
            f"PostgreSQL storage {where}: {reason} (check that the server is running and "
            "reachable from here, and the user, password and database in the URL; connecting "
            f"gives up after {self.connect_timeout_s} s, ?connect_timeout=N changes that)",
            details={"url": where},
        )

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        lease_conn, self._lease_conn = self._lease_conn, None
        if lease_conn is not None:
            await lease_conn.close()
        if pool is not None:
            await pool.close()

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[psycopg.AsyncConnection[TupleRow]]:
        if self._pool is None:
            await self.open()
        assert self._pool is not None
        try:
            async with self._pool.connection() as conn:
                yield conn
        except psycopg.OperationalError as exc:  # the server went away, or the pool timed out
            raise self._error(exc) from exc

    async def schema_version(self) -> int:
        async with self._connection() as conn:
            cursor = await conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version")
            return await _fetch_int(cursor)

    # -- runs ---------------------------------------------------------------------
    async def create_run(self, run: RunRecord) -> None:
        steps = [(run.run_id, sid, dump_json(rec)) for sid, rec in run.steps.items()]
        async with self._connection() as conn, conn.transaction():
            try:
                await conn.execute(
                    "INSERT INTO runs (run_id, thread_id, status, query, created_at, updated_at,"
                    " data) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                    (
                        run.run_id,
                        run.thread_id,
                        run.status,
                        run.query,
                        _aware(run.created_at),
                        _aware(run.updated_at),
                        dump_json(run, exclude={"steps"}),
                    ),
                )
            except pg_errors.UniqueViolation as exc:
                raise ValueError(f"run {run.run_id!r} already exists") from exc
            if steps:
                async with conn.cursor() as cursor:
                    await cursor.executemany(
                        "INSERT INTO steps (run_id, step_id, data) VALUES (%s, %s, %s)", steps
                    )
            await conn.execute(_TOUCH_THREAD, {"thread_id": run.thread_id, "now": utcnow()})

    async def _select_runs(self, where: str, args: Sequence[object]) -> list[RunRecord]:
        async with self._connection() as conn:
            cursor = await conn.execute(_SELECT_RUNS + where, args)
            return [_load_run(data, steps) for data, steps in await cursor.fetchall()]

    async def get_run(self, run_id: str) -> RunRecord | None:
        runs = await self._select_runs("WHERE r.run_id = %s", (run_id,))
        return runs[0] if runs else None

    async def get_active_run(self, thread_id: str) -> RunRecord | None:
        runs = await self._select_runs(
            "WHERE r.thread_id = %s AND r.status = ANY(%s) ORDER BY r.seq DESC LIMIT 1",
            (thread_id, sorted(ACTIVE_RUN_STATES)),
        )
        return runs[0] if runs else None

    async def list_runs(self, thread_id: str) -> list[RunRecord]:
        return await self._select_runs("WHERE r.thread_id = %s ORDER BY r.seq", (thread_id,))

    async def update_run(self, run: RunRecord) -> None:
        async with self._connection() as conn, conn.transaction():
            await self._update_run(conn, run)

    async def finish_run(self, run: RunRecord, messages: Sequence[ConversationMessage]) -> None:
        async with self._connection() as conn, conn.transaction():
            cursor = await conn.execute(
                "SELECT status FROM runs WHERE run_id = %s FOR UPDATE", (run.run_id,)
            )
            row = await cursor.fetchone()
            if row is not None and row[0] not in ACTIVE_RUN_STATES:
                # Ended already, by a worker that ran it too: its lease went with a server
                # restart while its run went on. One end, one exchange: the first.
                return
            await self._update_run(conn, run)
            for message in messages:
                await self._insert_message(conn, message)

    @staticmethod
    async def _update_run(conn: psycopg.AsyncConnection[TupleRow], run: RunRecord) -> None:
        cursor = await conn.execute(
            "UPDATE runs SET status = %s, query = %s, updated_at = %s, data = %s WHERE run_id = %s",
            (
                run.status,
                run.query,
                _aware(run.updated_at),
                dump_json(run, exclude={"steps"}),
                run.run_id,
            ),
        )
        if cursor.rowcount == 0:
            raise KeyError(f"no run {run.run_id!r}")
        await conn.execute(_TOUCH_THREAD, {"thread_id": run.thread_id, "now": utcnow()})

    async def save_step(self, run_id: str, record: StepRecord) -> None:
        async with self._connection() as conn:
            try:
                await conn.execute(
                    "INSERT INTO steps (run_id, step_id, data) VALUES (%s, %s, %s)"
                    " ON CONFLICT (run_id, step_id) DO UPDATE SET data = excluded.data",
                    (run_id, record.step_id, dump_json(record)),
                )
            except pg_errors.ForeignKeyViolation as exc:
                raise KeyError(f"no run {run_id!r}") from exc

    # -- suspensions --------------------------------------------------------------
    async def add_suspension(self, suspension: Suspension) -> None:
        decision = json.dumps(suspension.decision) if suspension.decision is not None else None
        async with self._connection() as conn:
            try:
                await conn.execute(
                    "INSERT INTO suspensions (suspension_id, thread_id, run_id, data, decision,"
                    " decided_at) VALUES (%s, %s, %s, %s, %s, %s)",
                    (
                        suspension.suspension_id,
                        suspension.thread_id,
                        suspension.run_id,
                        dump_json(suspension, exclude={"decision", "decided_at"}),
                        decision,
                        suspension.decided_at,
                    ),
                )
            except pg_errors.UniqueViolation as exc:
                raise ValueError(f"suspension {suspension.suspension_id!r} already exists") from exc

    async def list_suspensions(
        self, thread_id: str, *, pending_only: bool = True
    ) -> list[Suspension]:
        pending = " AND decision IS NULL" if pending_only else ""
        async with self._connection() as conn:
            cursor = await conn.execute(
                "SELECT data::text, decision::text, decided_at FROM suspensions"
                f" WHERE thread_id = %s{pending} ORDER BY seq",
                (thread_id,),
            )
            return [_load_suspension(*row) for row in await cursor.fetchall()]

    async def decide_suspension(
        self, thread_id: str, suspension_id: str, decision: Mapping[str, object]
    ) -> Suspension:
        async with self._connection() as conn:
            # Of two concurrent UPDATEs the second waits for the first's row lock, then
            # re-checks `decision IS NULL` and matches nothing: exactly one wins.
            cursor = await conn.execute(
                "UPDATE suspensions SET decision = %s, decided_at = %s"
                " WHERE suspension_id = %s AND thread_id = %s AND decision IS NULL"
                " RETURNING data::text, decision::text, decided_at",
                (json.dumps(decision, default=repr), utcnow(), suspension_id, thread_id),
            )
            row = await cursor.fetchone()
            if row is not None:
                return _load_suspension(*row)
            cursor = await conn.execute(
                "SELECT decision::text FROM suspensions WHERE suspension_id = %s"
                " AND thread_id = %s",
                (suspension_id, thread_id),
            )
            found = await cursor.fetchone()
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

    # -- conversation -------------------------------------------------------------
    async def append_message(self, message: ConversationMessage) -> None:
        async with self._connection() as conn, conn.transaction():
            await self._insert_message(conn, message)

    @staticmethod
    async def _insert_message(
        conn: psycopg.AsyncConnection[TupleRow], message: ConversationMessage
    ) -> None:
        await conn.execute(
            "INSERT INTO messages (message_id, thread_id, timestamp, data) VALUES (%s, %s, %s, %s)",
            (message.message_id, message.thread_id, _aware(message.timestamp), dump_json(message)),
        )
        await conn.execute(_TOUCH_THREAD, {"thread_id": message.thread_id, "now": utcnow()})

    async def get_history(self, thread_id: str, *, limit: int = 20) -> list[ConversationMessage]:
        if limit <= 0:
            return []
        async with self._connection() as conn:
            cursor = await conn.execute(
                "SELECT data::text FROM messages WHERE thread_id = %s ORDER BY seq DESC LIMIT %s",
                (thread_id, limit),
            )
            rows = await cursor.fetchall()
        return [load_json(ConversationMessage, data) for (data,) in reversed(rows)]

    async def replace_history(
        self, thread_id: str, messages: Sequence[ConversationMessage]
    ) -> None:
        async with self._connection() as conn, conn.transaction():
            await conn.execute("DELETE FROM messages WHERE thread_id = %s", (thread_id,))
            for message in messages:
                await self._insert_message(conn, message)
            await conn.execute(_TOUCH_THREAD, {"thread_id": thread_id, "now": utcnow()})

    async def delete_run(self, run_id: str) -> bool:
        async with self._connection() as conn, conn.transaction():
            for table in ("suspensions", "events"):
                await conn.execute(f"DELETE FROM {table} WHERE run_id = %s", (run_id,))
            # Steps go with their run (ON DELETE CASCADE).
            cursor = await conn.execute("DELETE FROM runs WHERE run_id = %s", (run_id,))
            return cursor.rowcount > 0

    async def delete_thread(self, thread_id: str) -> bool:
        found = 0
        async with self._connection() as conn, conn.transaction():
            # Steps go with their runs (ON DELETE CASCADE).
            for table in ("threads", "runs", "suspensions", "messages", "events"):
                cursor = await conn.execute(
                    f"DELETE FROM {table} WHERE thread_id = %s",
                    (thread_id,),
                )
                found += cursor.rowcount
        return found > 0

    # -- events -------------------------------------------------------------------
    async def append_events(self, events: Sequence[StoredEvent]) -> None:
        rows = [
            (e.thread_id, e.run_id, e.name, _aware(e.timestamp), dump_json(e, exclude={"seq"}))
            for e in events
        ]
        if not rows:
            return
        async with self._connection() as conn, conn.transaction(), conn.cursor() as cursor:
            await cursor.executemany(
                "INSERT INTO events (thread_id, run_id, name, timestamp, data)"
                " VALUES (%s, %s, %s, %s, %s)",
                rows,
            )

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
        where = ["thread_id = %s"]
        args: list[object] = [thread_id]
        if after_seq is not None:
            where.append("seq > %s")
            args.append(after_seq)
        if names is not None:
            names = list(names)
            if not names:
                return []
            where.append("name = ANY(%s)")
            args.append(names)
        if since is not None:
            where.append("timestamp >= %s")
            args.append(_aware(since))
        if until is not None:
            where.append("timestamp < %s")
            args.append(_aware(until))
        sql = f"SELECT seq, data::text FROM events WHERE {' AND '.join(where)} ORDER BY seq"
        if limit is not None:
            sql += " LIMIT %s"
            args.append(max(limit, 0))
        async with self._connection() as conn:
            cursor = await conn.execute(sql, args)
            rows = await cursor.fetchall()
        found = []
        for seq, data in rows:
            event = load_json(StoredEvent, data)
            event.seq = seq
            found.append(event)
        return found

    # -- threads ------------------------------------------------------------------
    async def list_threads(self, *, limit: int = 100) -> list[ThreadSummary]:
        return (await self._search(ThreadQuery(), max(limit, 0))).threads

    async def search_threads(self, query: ThreadQuery) -> ThreadPage:
        return await self._search(query, query.limit)

    async def _search(self, query: ThreadQuery, limit: int) -> ThreadPage:
        where: list[str] = ["true"]
        args: list[object] = []  # the query's parameters: text, JSON, the cursor
        after = thread_cursor(query.cursor)
        if after is not None:
            where.append("t.touched < %s")
            args.append(after)
        if query.owner is not None:
            where.append("t.owner = %s")
            args.append(query.owner)
        if query.metadata:
            where.append("t.metadata @> %s::jsonb")  # scalars: numbers equal by value
            args.append(json.dumps(query.metadata, allow_nan=False))
        if query.status is not None:
            where.append("last.status = %s")
            args.append(query.status)
        sql = f"{_SELECT_THREADS} WHERE {' AND '.join(where)} ORDER BY t.touched DESC LIMIT %s"
        args.append(limit + 1)
        async with self._connection() as conn:
            rows = await (await conn.execute(sql, args)).fetchall()
        threads = [_thread_summary(row) for row in rows[:limit]]
        if len(rows) > limit and threads:
            return ThreadPage(threads=threads, next_cursor=str(rows[limit - 1][0]))
        return ThreadPage(threads=threads)

    async def get_thread(self, thread_id: str) -> ThreadSummary | None:
        async with self._connection() as conn:
            cursor = await conn.execute(f"{_SELECT_THREADS} WHERE t.thread_id = %s", (thread_id,))
            row = await cursor.fetchone()
        return _thread_summary(row) if row else None

    async def claim_thread(
        self, thread_id: str, owner: str | None, metadata: Mapping[str, object] | None = None
    ) -> ThreadSummary:
        text = json.dumps(metadata or {}, allow_nan=False)
        async with self._connection() as conn, conn.transaction():
            await conn.execute(
                "INSERT INTO threads (thread_id, created_at, updated_at, touched, owner, "
                "metadata) VALUES (%s, now(), now(), nextval('threads_touch_seq'), %s, "
                "%s::jsonb) ON CONFLICT (thread_id) DO NOTHING",
                (thread_id, owner, text),
            )
            cursor = await conn.execute(f"{_SELECT_THREADS} WHERE t.thread_id = %s", (thread_id,))
            row = await cursor.fetchone()
        assert row is not None
        return _thread_summary(row)

    async def update_thread(
        self, thread_id: str, metadata: dict[str, object]
    ) -> ThreadSummary | None:
        async with self._connection() as conn, conn.transaction():
            cursor = await conn.execute(
                "SELECT metadata FROM threads WHERE thread_id = %s FOR UPDATE", (thread_id,)
            )
            found = await cursor.fetchone()
            if found is None:
                return None
            merged = merge_metadata(found[0], metadata)
            await conn.execute(
                "UPDATE threads SET metadata = %s::jsonb, updated_at = now(), "
                "touched = nextval('threads_touch_seq') WHERE thread_id = %s",
                (json.dumps(merged, allow_nan=False), thread_id),
            )
            cursor = await conn.execute(f"{_SELECT_THREADS} WHERE t.thread_id = %s", (thread_id,))
            row = await cursor.fetchone()
        assert row is not None
        return _thread_summary(row)

    # -- one worker per thread ----------------------------------------------------
    async def _lease_connection(self) -> psycopg.AsyncConnection[TupleRow]:
        conn = self._lease_conn
        if conn is None or conn.closed or conn.broken:
            # A new session: whatever the old one held died with it.
            conn = await self._connect()
            self._lease_conn = conn
        return conn

    @asynccontextmanager
    async def lease(self, thread_id: str) -> AsyncIterator[None]:
        # Advisory locks are re-entrant within a session, so holders in this process are
        # told apart here first.
        if thread_id in self._held:
            raise ThreadBusyError(thread_id)
        self._held.add(thread_id)
        try:
            if self._lease_lock is None:
                self._lease_lock = asyncio.Lock()
            async with self._lease_lock:
                conn = await self._lease_connection()
                cursor = await conn.execute(
                    "SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", (thread_id,)
                )
                acquired = await fetch_value(cursor)
            if not acquired:
                raise ThreadBusyError(thread_id)
            try:
                yield
            finally:
                async with self._lease_lock:
                    if conn is self._lease_conn and not (conn.closed or conn.broken):
                        await conn.execute(
                            "SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (thread_id,)
                        )
        finally:
            self._held.discard(thread_id)


def _connect_timeout(url: str, given: int | None) -> int:
    """Seconds connecting may take: `given`, else the URL's connect_timeout, else the default."""
    if given is not None:
        if given < 2:
            raise ConfigurationError("PostgresStorage connect_timeout_s must be at least 2")
        return int(given)
    try:
        from psycopg.conninfo import conninfo_to_dict

        found = conninfo_to_dict(url).get("connect_timeout")
    except psycopg.Error as exc:
        raise ConfigurationError(f"bad PostgreSQL URL {redact_url(url)!r}: {exc}") from None
    if found is None:
        return DEFAULT_CONNECT_TIMEOUT_S
    try:
        seconds = int(float(str(found)))
    except ValueError:
        raise ConfigurationError(
            f"bad PostgreSQL URL {redact_url(url)!r}: connect_timeout must be whole seconds"
        ) from None
    return max(seconds, 2) if seconds > 0 else DEFAULT_CONNECT_TIMEOUT_S


def _password(url: str) -> str:
    try:
        from psycopg.conninfo import conninfo_to_dict

        return str(conninfo_to_dict(url).get("password") or "")
    except psycopg.Error:
        return ""


def redact_url(url: str) -> str:
    """The URL (or key=value conninfo) without its password, for repr and logs."""
    from urllib.parse import urlsplit, urlunsplit

    if "://" in url:
        parts = urlsplit(url)
        if parts.password is not None:
            netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
            parts = parts._replace(netloc=netloc)
        if "password=" in parts.query.lower():
            query = re.sub(r"(?i)(^|&)(password=)[^&]*", r"\1\2***", parts.query)
            parts = parts._replace(query=query)
        return urlunsplit(parts)
    try:
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        params = conninfo_to_dict(url)
    except psycopg.Error:
        return "<conninfo>"
    if "password" in params:
        params["password"] = "***"
    return make_conninfo("", **params)
