"""Queued runs: submit now, run on any worker, survive any one worker dying.

`inst.submit(query, thread_id)` (or `art.submit`) stores a job and returns a `RunHandle` at
once; workers (`art worker`, `run_worker`, or the submitting process itself on SQLite) take
jobs, one run per thread at a time and in submission order, and a run whose worker died is
taken over by another within `QueueConfig.stalled_after_s` (plus a heartbeat), continuing
from its stored steps. On PostgreSQL the queue is procrastinate's; on SQLite, two tables in
the same file. See docs/deployment.md.

Names load on first use, so the `art` command can register its queue commands cheaply.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

_EXPORTS: dict[str, str] = {
    "QueueConfig": "art.config",
    "Attempt": "art.queue.jobs",
    "QueuedRun": "art.queue.jobs",
    "QueueStats": "art.queue.jobs",
    "RunStatus": "art.queue.jobs",
    "WorkerInfo": "art.queue.jobs",
    "RunHandle": "art.queue.runs",
    "RunQueue": "art.queue.runs",
    "Schedule": "art.queue.schedule",
    "run_worker": "art.queue.worker",
}

__all__ = [
    "Attempt",
    "QueueConfig",
    "QueueStats",
    "QueuedRun",
    "RunHandle",
    "RunQueue",
    "RunStatus",
    "Schedule",
    "WorkerInfo",
    "run_worker",
]


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'art.queue' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:
    from art.config import QueueConfig
    from art.queue.jobs import Attempt, QueuedRun, QueueStats, RunStatus, WorkerInfo
    from art.queue.runs import RunHandle, RunQueue
    from art.queue.schedule import Schedule
    from art.queue.worker import run_worker
