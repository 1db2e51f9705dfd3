"""Queue test fixtures: databases with the queue's tables, a warm forkserver for worker
processes, and handles on those workers."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import pytest

# Databases on the session's PostgreSQL server (tests/storage/conftest.py).
from postgres_databases import fresh_database
from storage.conftest import emptied, postgres_database, sqlite_directory  # noqa: F401
from warm_processes import warm_forkserver


@pytest.fixture(scope="session")
def queue_tables(postgres_server: str) -> Iterator[str]:
    """A database of the session's with art's tables and the queue's (procrastinate's)."""
    from art.queue import RunQueue

    async def create_tables() -> None:
        async with RunQueue(url):  # opening the queue creates them
            pass

    with fresh_database(postgres_server) as url:
        asyncio.run(create_tables())
        yield url


@pytest.fixture
def queue_database(queue_tables: str) -> str:
    """A database with art's and the queue's tables, empty (the session's, emptied)."""
    return emptied(queue_tables)


@pytest.fixture(scope="session")
def forkserver() -> Any:
    """A multiprocessing context whose forkserver has imported the app (art, litellm,
    procrastinate) and run one queued run, so each worker starts in milliseconds."""
    return warm_forkserver()


@dataclass
class WorkerProcess:
    """A process running queued runs: `app.work_queue` or `app.submit_and_serve`."""

    process: Any
    pipe: Connection

    @classmethod
    def start(cls, context: Any, target: Any, *args: Any) -> WorkerProcess:
        parent_end, child_end = context.Pipe()
        process = context.Process(target=target, args=(*args, child_end), daemon=True)
        process.start()
        child_end.close()
        return cls(process, parent_end)

    @property
    def pid(self) -> int:
        return int(self.process.pid)

    def kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)
        self.process.join(10)
        assert self.process.exitcode == -signal.SIGKILL

    def terminate(self, timeout: float = 60) -> None:
        """SIGTERM, then wait for a clean exit (the worker reports it stopped)."""
        os.kill(self.pid, signal.SIGTERM)
        self.process.join(timeout)
        assert self.process.exitcode == 0, f"worker {self.pid} exited {self.process.exitcode}"
        assert self.pipe.poll(1) and self.pipe.recv() == ("stopped",)

    def stop_if_alive(self) -> None:
        if self.process.is_alive():
            os.kill(self.pid, signal.SIGKILL)
            self.process.join(10)
