"""Storage fixtures: every adapter behind one factory, and databases on the session's
PostgreSQL server (`postgres_server`, tests/conftest.py)."""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from postgres_databases import fresh_database

from art.storage.contract import StorageAdapter


@pytest.fixture
def postgres_database(postgres_server: str) -> Iterator[str]:
    """A fresh, empty database on the test server, dropped after the test."""
    with fresh_database(postgres_server) as url:
        yield url


@pytest.fixture(scope="session")
def postgres_tables(postgres_server: str) -> str:
    """The session's database with art's tables created (once)."""
    from art.adapters.postgres import PostgresStorage

    async def create_tables() -> None:
        storage = PostgresStorage(postgres_server)
        await storage.open()
        await storage.close()

    asyncio.run(create_tables())
    return postgres_server


def emptied(url: str) -> str:
    """The database at `url` as a fresh one with its tables would be, and cheaper than a
    database per test: sessions earlier tests left are ended, and every table but the
    schema version is emptied, its sequences restarted."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            " AND usename = current_user AND backend_type = 'client backend'"
        )
        tables = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
            " AND tablename <> 'schema_version'"
        ).fetchall()
        conn.execute(f"TRUNCATE {', '.join(name for (name,) in tables)} RESTART IDENTITY")
    return url


ADAPTERS = [
    "memory",
    "sqlite",
    "sqlite_full",
    pytest.param("postgres", marks=pytest.mark.postgres),
]
DURABLE_ADAPTERS = [
    "sqlite",
    pytest.param("postgres", marks=pytest.mark.postgres),
]

StorageFactory = Callable[[], Awaitable[StorageAdapter]]


# A RAM-backed file system, where it exists: creating and closing an SQLite database fsyncs
# several times, 40 ms a test on a busy disk and nothing there.
RAM_DIRECTORY = Path("/dev/shm")


@pytest.fixture
def sqlite_directory(request: pytest.FixtureRequest) -> Iterator[Path]:
    """A directory of the test's own for SQLite databases, in RAM when possible (behaviour
    is the same on any file system; crash tests keep theirs in tmp_path, on disk)."""
    if not (RAM_DIRECTORY.is_dir() and os.access(RAM_DIRECTORY, os.W_OK)):
        yield Path(request.getfixturevalue("tmp_path"))
        return
    with tempfile.TemporaryDirectory(prefix="art-storage-test-", dir=RAM_DIRECTORY) as scratch:
        yield Path(scratch)


def _target(kind: str, request: pytest.FixtureRequest) -> str:
    if kind == "memory":
        return "memory://"
    if kind in ("sqlite", "sqlite_full"):
        # only SQLite needs a directory: the other kinds leave no empty one behind
        path = request.getfixturevalue("sqlite_directory") / "art.db"
        return f"sqlite:///{path}" + ("?synchronous=full" if kind == "sqlite_full" else "")
    if kind == "postgres":
        return emptied(request.getfixturevalue("postgres_tables"))
    raise AssertionError(kind)


@pytest.fixture(params=ADAPTERS)
def storage_target(request: pytest.FixtureRequest) -> str:
    """A storage URL of each kind; durable kinds start empty."""
    return _target(request.param, request)


@pytest.fixture(params=DURABLE_ADAPTERS)
def durable_target(request: pytest.FixtureRequest) -> str:
    return _target(request.param, request)


@asynccontextmanager
async def _factory(target: str) -> AsyncIterator[StorageFactory]:
    from art.storage.opening import open_storage

    opened: list[StorageAdapter] = []

    async def make() -> StorageAdapter:
        storage = open_storage(target)
        await storage.open()
        opened.append(storage)
        return storage

    try:
        yield make
    finally:
        for storage in opened:
            await storage.close()


@pytest.fixture
async def storage_factory(storage_target: str) -> AsyncIterator[StorageFactory]:
    """Builds (and opens) adapters of one kind; on durable kinds all share one database."""
    async with _factory(storage_target) as make:
        yield make


@pytest.fixture
async def durable_factory(durable_target: str) -> AsyncIterator[StorageFactory]:
    async with _factory(durable_target) as make:
        yield make


@pytest.fixture
async def storage(storage_factory: StorageFactory) -> StorageAdapter:
    return await storage_factory()
