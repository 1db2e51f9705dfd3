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
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from art.queue.backend import open_backend
from art.queue.schedule import Schedule, run_schedules

if TYPE_CHECKING:
    from art.instance import ArtInstance
    from art.queue.backend import QueueWorker

__all__ = ["run_worker"]


async def run_worker(
    instance: ArtInstance,
    *,
    name: str | None = None,
    signals: bool | None = None,
    started: Callable[[QueueWorker[Any]], None] | None = None,
    schedules: Sequence[Schedule] = (),
) -> None:
    """Run `instance`'s queued runs until stopped; the queue is `instance.config.queue`.

    `signals`: stop gracefully on SIGTERM / SIGINT (default: when in the main thread).
    `started` is called with the worker once it is registered (to stop it, say).
    `schedules` are submitted at their fire times while the worker runs.
    """
    await instance.aopen()  # the storage opened as the instance's own first run would
    if signals is None:
        signals = threading.current_thread() is threading.main_thread()
    backend = open_backend(instance.storage, instance.config.queue)
    await backend.open()
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
