"""PostgreSQL specifics: migrations (also when workers start together), and the advisory-lock
lease freed the moment its holder's process dies."""

from __future__ import annotations

import asyncio
import signal
import sys
import time

import pytest

from art.errors import ConfigurationError, ThreadBusyError

pytestmark = pytest.mark.postgres


async def test_a_version_1_database_is_migrated_without_losing_threads(
    postgres_database: str,
) -> None:
    import psycopg

    from art.adapters.postgres import SCHEMA_VERSION, PostgresStorage, migrate
    from art.responses import StepRecord
    from art.storage.contract import RunRecord

    run = RunRecord(run_id="r-old", thread_id="t-old", trace_id="0", query="old", answer="42")
    async with await psycopg.AsyncConnection.connect(postgres_database, autocommit=True) as conn:
        assert await migrate(conn, target=1) == 0
        await conn.execute(
            "INSERT INTO runs (run_id, thread_id, status, query, created_at, updated_at, data)"
            " VALUES ('r-old', 't-old', 'completed', 'old', '2024-05-01T10:00:00Z',"
            " '2024-05-01T10:00:05Z', %s)",
            (run.model_dump_json(exclude={"steps"}),),
        )
        await conn.execute(
            "INSERT INTO steps (run_id, step_id, data) VALUES ('r-old', 's1', %s)",
            (StepRecord(step_id="s1", status="completed").model_dump_json(),),
        )
        await conn.execute(
            "INSERT INTO messages (message_id, thread_id, timestamp, data) VALUES"
            " ('m1', 't-chat', '2024-06-01T00:00:00Z', %s)",
            ('{"thread_id": "t-chat", "role": "user", "content": "hi"}',),
        )

    storage = PostgresStorage(postgres_database)
    await storage.open()
    try:
        assert await storage.schema_version() == SCHEMA_VERSION
        threads = await storage.list_threads()
        assert [(t.thread_id, t.runs) for t in threads] == [("t-chat", 0), ("t-old", 1)]
        loaded = await storage.get_run("r-old")
        assert loaded is not None and loaded.answer == "42"
        assert loaded.steps["s1"].status == "completed"
        await storage.create_run(RunRecord(run_id="r-new", thread_id="t-new", trace_id="0",
                                           query="new"))  # fmt: skip
        assert (await storage.list_threads())[0].thread_id == "t-new"
    finally:
        await storage.close()


async def test_workers_starting_together_migrate_once(postgres_database: str) -> None:
    from art.adapters.postgres import SCHEMA_VERSION, PostgresStorage

    workers = [PostgresStorage(postgres_database, max_size=2) for _ in range(4)]
    await asyncio.gather(*(w.open() for w in workers))
    try:
        assert {await w.schema_version() for w in workers} == {SCHEMA_VERSION}
    finally:
        await asyncio.gather(*(w.close() for w in workers))


async def test_a_newer_schema_is_refused(postgres_database: str) -> None:
    import psycopg

    from art.adapters.postgres import SCHEMA_VERSION, PostgresStorage

    storage = PostgresStorage(postgres_database)
    await storage.open()
    await storage.close()
    async with await psycopg.AsyncConnection.connect(postgres_database, autocommit=True) as conn:
        await conn.execute("INSERT INTO schema_version VALUES (%s)", (SCHEMA_VERSION + 1,))

    with pytest.raises(ConfigurationError, match="upgrade art"):
        await PostgresStorage(postgres_database).open()


HOLDER = """
import asyncio, sys
from art.adapters.postgres import PostgresStorage

async def main():
    storage = PostgresStorage(sys.argv[1])
    await storage.open()
    async with storage.lease(sys.argv[2]):
        print("held", flush=True)
        await asyncio.sleep(60)

asyncio.run(main())
"""


async def test_the_lease_is_freed_the_moment_its_holder_is_killed(postgres_tables: str) -> None:
    from art.adapters.postgres import PostgresStorage

    holder = await asyncio.create_subprocess_exec(
        sys.executable, "-c", HOLDER, postgres_tables, "t-held", stdout=asyncio.subprocess.PIPE
    )
    storage = PostgresStorage(postgres_tables)
    try:
        assert holder.stdout is not None
        assert (await asyncio.wait_for(holder.stdout.readline(), 30)).strip() == b"held"
        with pytest.raises(ThreadBusyError):
            async with storage.lease("t-held"):
                pytest.fail("two processes held one thread")

        holder.send_signal(signal.SIGKILL)
        await holder.wait()

        # The server notices the closed socket at once; allow it a moment to end the session.
        deadline = time.monotonic() + 2
        while True:
            try:
                async with storage.lease("t-held"):
                    break
            except ThreadBusyError:
                assert time.monotonic() < deadline, "the dead holder's lease was not released"
                await asyncio.sleep(0.02)
    finally:
        if holder.returncode is None:
            holder.kill()
            await holder.wait()
        await storage.close()


async def test_a_lease_connection_lost_is_replaced(postgres_tables: str) -> None:
    from art.adapters.postgres import PostgresStorage

    storage = PostgresStorage(postgres_tables)
    try:
        async with storage.lease("t-a"):
            pass
        # private: the lease's connection is closed under the adapter.
        assert storage._lease_conn is not None
        await storage._lease_conn.close()  # e.g. the server restarted
        async with storage.lease("t-a"):
            pass
        assert storage._lease_conn is not None and not storage._lease_conn.closed
    finally:
        await storage.close()


async def test_an_unknown_database_is_a_storage_error_naming_the_server(
    postgres_server: str,
) -> None:
    from urllib.parse import urlsplit, urlunsplit

    from art.adapters.postgres import PostgresStorage
    from art.errors import StorageError

    missing = urlunsplit(urlsplit(postgres_server)._replace(path="/art_no_such_database"))
    with pytest.raises(StorageError) as info:
        await PostgresStorage(missing).open()
    assert 'database "art_no_such_database" does not exist' in info.value.message
    assert urlsplit(postgres_server).hostname in info.value.message
    password = urlsplit(postgres_server).password
    assert not password or password not in info.value.message
