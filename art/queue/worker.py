"""`run_worker`: a process (or task) that runs an instance's queued runs until stopped.

What `art worker` runs. The worker takes runs from the queue of the instance's storage,
`QueueConfig.concurrency` at a time; SIGTERM or SIGINT (with `signals=True`, the default in
the main thread) stops it gracefully: no new runs, running ones get `shutdown_timeout_s` to
end, the rest go back to the queue and the next worker continues them. A second signal
exits at once (its runs are then taken over as after a crash).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from art.core.log import get_logger
from art.queue.backend import open_backend
from art.queue.schedule import Schedule, run_schedules

if TYPE_CHECKING:
    from art.instance import ArtInstance
    from art.queue.backend import QueueWorker
    from art.queue.contract import QueueBackend

__all__ = ["run_worker"]

log = get_logger(__name__)


async def run_worker(
    instance: ArtInstance,
    *,
    name: str | None = None,
    signals: bool | None = None,
    started: Callable[[QueueWorker[QueueBackend]], None] | None = None,
    schedules: Sequence[Schedule] = (),
) -> None:
    """Run `instance`'s queued runs until stopped; the queue is `instance.config.queue`.

    `signals`: stop gracefully on SIGTERM / SIGINT (default: when in the main thread).
    `started` is called with the worker once it is registered (to stop it, say).
    `schedules` are submitted at their fire times while the worker runs.
    """
    # Opens the storage as the instance's own first run would; a worker started while the
    # database is down waits for it (the others outlive an outage too).
    await _when_reachable(instance.aopen)
    if signals is None:
        signals = threading.current_thread() is threading.main_thread()
    backend = open_backend(instance.storage, instance.config.queue)
    await _when_reachable(backend.open)
    worker = backend.worker(instance, name=name, signals=signals)
    submitting = asyncio.get_running_loop().create_task(
        run_schedules(instance.queue, schedules), name="art-schedules"
    )
    try:
        if started is not None:
            started(worker)
        await worker.run()
    finally:
        submitting.cancel()
        await asyncio.gather(submitting, return_exceptions=True)
        await backend.close()


# What libpq says when no server answers (or one is starting or stopping), as opposed to
# one that refuses what it was asked.
_SERVER_AWAY = (
    "Connection refused",
    "timeout expired",
    "timed out",
    "couldn't get a connection",
    "server closed the connection",
    "No route to host",
    "the database system is starting up",
    "the database system is shutting down",
    "the database system is in recovery mode",
)


async def _when_reachable(call: Callable[[], Awaitable[None]]) -> None:
    """`call()`, retried with backoff while the database server does not answer at all
    (refused, timed out); a server that answers with an error (a wrong password, an unknown
    database) fails at once."""
    from art.errors import StorageError
    from art.queue.execute import MAX_STORAGE_RETRY_S

    delay = 0.5
    while True:
        try:
            await call()
            return
        except StorageError as exc:
            if not any(sign in exc.message for sign in _SERVER_AWAY):
                raise
            log.warning(
                "the database does not answer: the worker waits for it",
                retry_in_s=delay,
                error=exc.message,
            )
        await asyncio.sleep(delay)
        delay = min(delay * 2, MAX_STORAGE_RETRY_S)
