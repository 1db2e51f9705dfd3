"""Queue test fixtures: a warm forkserver for worker processes, and handles on those workers."""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import pytest

# A fresh database on the session's PostgreSQL server (tests/storage/conftest.py).
from storage.conftest import postgres_database  # noqa: F401
from warm_processes import warm_forkserver


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
