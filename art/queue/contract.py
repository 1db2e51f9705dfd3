"""The queue's contract: a `QueueBackend` holds the jobs of queued runs, its `QueueWorker`
runs them with a `QueueRunner` (an `ArtInstance`). See art.queue.backend for the two
backends and how one is chosen."""

from __future__ import annotations

import os
import socket
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from art.core.log import get_logger

if TYPE_CHECKING:
    from art.config import ProcessOptions, QueueConfig
    from art.queue.jobs import CancelOutcome, JobSpec, JobState, JobView, QueuedRun, QueueStats
    from art.queue.metrics import QueueMetrics
    from art.responses import AgentFinalResponse
    from art.storage.contract import StorageAdapter

__all__ = ["CLEAN_UP_EVERY_S", "QueueBackend", "QueueRunner", "QueueWorker"]

log = get_logger(__name__)

#: The longest a worker waits between two deletions of finished jobs.
CLEAN_UP_EVERY_S = 300.0


class QueueRunner(Protocol):
    """What a worker runs the queue's jobs with: an `ArtInstance` on the queue's storage."""

    @property
    def storage(self) -> StorageAdapter: ...

    async def aprocess(
        self,
        query: str,
        thread_id: str,
        options: ProcessOptions | Mapping[str, object] | None = None,
    ) -> AgentFinalResponse: ...

    def cancel(self, thread_id: str, reason: str = ..., *, run_id: str | None = None) -> bool: ...


# covariant: a worker of one kind of queue is a worker of a QueueBackend
BackendT = TypeVar("BackendT", bound="QueueBackend", covariant=True)


class QueueWorker(ABC, Generic[BackendT]):
    """Takes a queue's jobs and runs them with one instance, `concurrency` at a time."""

    def __init__(
        self,
        queue: BackendT,
        instance: QueueRunner,
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
        self, instance: QueueRunner, *, name: str | None = None, signals: bool = False
    ) -> QueueWorker[QueueBackend]:
        """A worker running this queue's jobs with `instance` (same storage)."""
