"""The seam between queued runs and the task queue that holds them.

A `QueueBackend` keeps one job per submitted run, locked by thread: of a thread's jobs only
the oldest waiting one may start, and only when none of them is running, so a thread runs
one queued run at a time, in the order they were submitted. Its `QueueWorker` takes jobs,
runs them with an `ArtInstance`, heartbeats, and takes over the jobs of workers that stopped
heartbeating. Two backends, chosen by the instance's storage (`open_backend`):

- PostgreSQL: procrastinate (`art.queue.postgres`), in the same database;
- SQLite and memory: a job table in the same SQLite file (`art.queue.sqlite`).
"""

from __future__ import annotations

import os
import socket
import time
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from art.core.log import get_logger
from art.errors import ConfigurationError

if TYPE_CHECKING:
    from art.config import QueueConfig
    from art.instance import ArtInstance
    from art.queue.jobs import CancelOutcome, JobSpec, JobState, JobView, QueuedRun, QueueStats
    from art.queue.metrics import QueueMetrics
    from art.storage.contract import StorageAdapter

__all__ = ["CLEAN_UP_EVERY_S", "QueueBackend", "QueueWorker", "open_backend"]

log = get_logger(__name__)

#: The longest a worker waits between two deletions of finished jobs.
CLEAN_UP_EVERY_S = 300.0


BackendT = TypeVar("BackendT", bound="QueueBackend")


class QueueWorker(ABC, Generic[BackendT]):
    """Takes a queue's jobs and runs them with one instance, `concurrency` at a time."""

    def __init__(
        self,
        queue: BackendT,
        instance: ArtInstance,
        *,
        name: str | None = None,
        signals: bool = False,
    ) -> None:
        self.queue = queue
        self.instance = instance
        self.config = queue.config
        self.name = name or f"{socket.gethostname()}:{os.getpid()}"
        self.signals = signals  # stop gracefully on SIGTERM / SIGINT
        # Set before `run()` to report to a meter provider of your own.
        self.metrics: QueueMetrics | None = None
        self._next_clean_up = 0.0

    @abstractmethod
    async def run(self) -> None:
        """Work until `stop()` (or SIGTERM / SIGINT, when installing signal handlers), then
        wait up to `shutdown_timeout_s` for running runs and hand the rest back."""

    @abstractmethod
    def stop(self) -> None:
        """Stop taking runs and shut down (safe from any thread, idempotent)."""

    async def delete_finished(self) -> None:
        """Delete the jobs that ended more than `keep_finished_s` ago; called every
        heartbeat, it deletes at most every `min(keep_finished_s, CLEAN_UP_EVERY_S)`."""
        keep, now = self.config.keep_finished_s, time.monotonic()
        if keep is None or now < self._next_clean_up:
            return
        self._next_clean_up = now + min(keep, CLEAN_UP_EVERY_S)
        deleted = await self.queue.delete_finished(keep)
        if deleted:
            log.info("finished queue jobs deleted", jobs=deleted, older_than_s=keep)

    def wake(self) -> None:
        """Something changed in this process (a run submitted or cancelled): look now."""


class QueueBackend(ABC):
    """Where queued runs wait: enqueue, look up, cancel, count; and the worker that runs them."""

    kind: str = ""
    config: QueueConfig

    @abstractmethod
    async def open(self) -> None:
        """Connect and create the queue's tables if missing. Idempotent."""

    @abstractmethod
    async def close(self) -> None: ...

    @abstractmethod
    async def enqueue(self, spec: JobSpec) -> None:
        """Add a job for `spec`, committed before returning."""

    @abstractmethod
    async def job(self, run_id: str) -> JobView | None:
        """The job of run `run_id`, or None."""

    @abstractmethod
    async def cancel(self, run_id: str) -> CancelOutcome:
        """Take a waiting job out of the queue, or ask the worker running it to stop."""

    @abstractmethod
    async def stats(self) -> QueueStats:
        """Jobs by state and the registered workers."""

    @abstractmethod
    async def delete_finished(self, older_than_s: float) -> int:
        """Delete this queue's jobs that ended more than `older_than_s` ago; how many."""

    @abstractmethod
    async def runs(
        self, *, states: set[str] | None = None, thread_id: str | None = None, limit: int = 100
    ) -> list[QueuedRun]:
        """This queue's runs in `states` (see `QueuedRunState`), newest first, with their
        attempts."""

    @abstractmethod
    async def retry(self, run_id: str) -> bool:
        """Put a dead-lettered run's job back in the queue, to run alone, its worker deaths
        forgotten; False if its job is not dead-lettered (its stored run is reopened by the
        caller first)."""

    @abstractmethod
    async def discard(self, run_id: str) -> bool:
        """Delete a dead-lettered run's job (the run stays `failed` in storage)."""

    @abstractmethod
    async def settle(self, run_id: str, worker_id: int, state: JobState) -> None:
        """End a job that taking over gave `worker_id` to end (its run's end is stored)."""

    @abstractmethod
    def worker(
        self, instance: ArtInstance, *, name: str | None = None, signals: bool = False
    ) -> QueueWorker[Any]:
        """A worker running this queue's jobs with `instance` (same storage)."""


def open_backend(storage: StorageAdapter, config: QueueConfig) -> QueueBackend:
    """The backend for `storage`: procrastinate on PostgreSQL, a SQLite job table otherwise.

    Built, not opened. Raises ConfigurationError for a storage adapter art does not ship
    (queued runs need a database both the submitter and the workers reach).
    """
    from art.adapters.memory import MemoryStorage
    from art.adapters.sqlite import SQLiteStorage

    storage = storage.backing
    if isinstance(storage, SQLiteStorage):
        from art.queue.sqlite import SQLiteQueue

        return SQLiteQueue(str(storage.path), config, kind="sqlite")
    if isinstance(storage, MemoryStorage):
        from art.queue.sqlite import SQLiteQueue

        return SQLiteQueue(":memory:", config, kind="memory")
    if type(storage).__name__ == "PostgresStorage":  # importing it needs psycopg
        from art.queue.postgres import ProcrastinateQueue

        return ProcrastinateQueue(
            storage.url, config, connect_timeout_s=getattr(storage, "connect_timeout_s", None)
        )
    raise ConfigurationError(
        f"queued runs need SQLite, PostgreSQL or memory storage, not {type(storage).__name__}"
    )
