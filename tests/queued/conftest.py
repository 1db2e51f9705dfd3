"""Queue test fixtures: databases with the queue's tables, a warm forkserver for worker
processes, and handles on those workers."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

# Databases on the session's PostgreSQL server (tests/storage/conftest.py).
from postgres_databases import fresh_database
from storage.conftest import emptied, postgres_database, sqlite_directory  # noqa: F401
from warm_processes import warm_forkserver

ROOT = Path(__file__).resolve().parents[2]


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


class OwnPostgres:
    """A PostgreSQL server of one test's own (`.ci/postgres.sh`), which it may stop and
    start again on the same port: a database outage, as a restart or failover makes it."""

    def __init__(self) -> None:
        env = {**os.environ, "ART_PG_OWNER": str(os.getpid())}
        out = subprocess.run(
            ["bash", str(ROOT / ".ci" / "postgres.sh"), "start"],
            check=True,
            capture_output=True,
            text=True,
            env=env,
        ).stdout
        exported = dict(
            line.removeprefix("export ").split("=", 1) for line in out.splitlines() if "=" in line
        )
        self.url = exported["ART_TEST_POSTGRES_URL"]
        self.dir = Path(exported["ART_TEST_POSTGRES_DIR"])
        self.port = urlsplit(self.url).port
        bindirs = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
        self.pg_ctl = str(bindirs[-1]) if bindirs else shutil.which("pg_ctl") or "pg_ctl"

    def _pg_ctl(self, *args: str) -> None:
        command = [self.pg_ctl, "-D", str(self.dir / "data"), *args]
        if os.getuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(command, check=True, capture_output=True, timeout=120)

    def stop(self) -> None:
        self._pg_ctl("-m", "immediate", "-w", "stop")

    def start(self) -> None:
        options = (
            f"-c listen_addresses=127.0.0.1 -c port={self.port} -c unix_socket_directories="
            f"{self.dir} -c fsync=off -c max_connections=200"
        )
        self._pg_ctl("-l", str(self.dir / "server.log"), "-w", "-t", "60", "start", "-o", options)

    def remove(self) -> None:
        subprocess.run(
            ["bash", str(ROOT / ".ci" / "postgres.sh"), "stop", str(self.dir)],
            check=False,
            capture_output=True,
        )


@pytest.fixture
def own_postgres() -> Iterator[OwnPostgres]:
    """A throwaway PostgreSQL server this test may stop and start (see OwnPostgres)."""
    if not (shutil.which("pg_ctl") or list(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))):
        pytest.fail("no PostgreSQL binaries: run .ci/postgres.sh install")
    server = OwnPostgres()
    try:
        yield server
    finally:
        server.remove()
