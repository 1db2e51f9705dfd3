"""The seam between queued runs and the task queue that holds them, and the choice of
backend (the classes themselves are in art.queue.contract).

A `QueueBackend` keeps one job per submitted run, locked by thread: of a thread's jobs only
the oldest waiting one may start, and only when none of them is running, so a thread runs
one queued run at a time, in the order they were submitted. Its `QueueWorker` takes jobs,
runs them with an `ArtInstance`, heartbeats, and takes over the jobs of workers that stopped
heartbeating. Two backends, chosen by the instance's storage (`open_backend`):

- PostgreSQL: procrastinate (`art.queue.postgres`), in the same database;
- SQLite and memory: a job table in the same SQLite file (`art.queue.sqlite`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from art.errors import ConfigurationError
from art.queue.contract import CLEAN_UP_EVERY_S, QueueBackend, QueueRunner, QueueWorker

if TYPE_CHECKING:
    from art.config import QueueConfig
    from art.storage.contract import StorageAdapter

# The contract's names too (art.queue.contract): one import gives the whole seam.
__all__ = ["CLEAN_UP_EVERY_S", "QueueBackend", "QueueRunner", "QueueWorker", "open_backend"]


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
