"""Queued runs under real faults: runs that kill their worker, cancels while a worker is dead.

Worker processes come from the warm forkserver and are supervised (a dead one is replaced, as
systemd or Kubernetes would); a poison run kills its worker with `os._exit`, in planning or
1 s into a tool step, wherever it runs.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from art.queue import RunQueue

from . import app
from .conftest import WorkerProcess
from .test_workers import read_log, wait_for

pytestmark = pytest.mark.slow

QUEUE = {
    "concurrency": 8,
    "heartbeat_s": 0.5,
    "stalled_after_s": 2.0,
    "poll_s": 0.2,
    "shutdown_timeout_s": 5.0,
    "max_worker_deaths": 2,
}


class Supervisor:
    """Keeps `size` worker processes running: a dead one is replaced at once."""

    def __init__(self, context: Any, settings: app.Settings, size: int) -> None:
        self.context, self.settings, self.size = context, settings, size
        self.workers: list[WorkerProcess] = []
        self.deaths = 0

    def _start(self) -> None:
        name = f"w{len(self.workers)}"
        self.workers.append(WorkerProcess.start(self.context, app.work_queue, self.settings, name))

    async def _watch(self) -> None:
        while True:
            alive = [w for w in self.workers if w.process.is_alive()]
            self.deaths = len(self.workers) - len(alive)
            for _ in range(self.size - len(alive)):
                self._start()
            await asyncio.sleep(0.1)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Supervisor]:
        watcher = asyncio.create_task(self._watch())
        try:
            yield self
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            for worker in self.workers:
                worker.stop_if_alive()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def queue_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'art.db'}"
    return str(request.getfixturevalue("postgres_database"))


@pytest.mark.parametrize("where", ["plan", "tool"])
def test_a_run_that_kills_its_worker_is_dead_lettered_and_spares_the_others(
    forkserver: Any, queue_url: str, tmp_path: Path, where: str
) -> None:
    """The poison run kills every worker it runs on: after `max_worker_deaths` deaths alone
    on a worker it ends failed, WORKER_DIED, and its thread's next run runs. The runs that
    shared its worker are taken over without being charged: with no step retries at all,
    their interrupted steps still run again and they complete."""
    log = tmp_path / "tools.log"
    settings = app.Settings(
        storage=queue_url,
        log=str(log),
        depth=2,
        step_s=1.5,
        queue=QUEUE,
        poison={"tp-r0": where},
        poison_after_s=1.0 if where == "tool" else 0.8,
        step_max_retries=0,
    )
    supervisor = Supervisor(forkserver, settings, size=1)

    async def scenario() -> None:
        async with RunQueue(queue_url, QUEUE) as queue, supervisor.running():
            poison = await queue.submit("tp-r0", "tp")
            after = await queue.submit("tp-r1", "tp")
            innocent = [await queue.submit(f"t{n}-r0", f"t{n}") for n in range(4)]
            records = [await asyncio.wait_for(h.result(), 90) for h in [poison, after, *innocent]]
            dead, *others = records
            assert dead.status == "failed", dead
            assert dead.error is not None and dead.error.code == "WORKER_DIED", dead.error
            assert "2 time(s)" in dead.error.message
            assert [r.status for r in others] == ["completed"] * 5, [
                (r.query, r.status, r.error) for r in others
            ]
            assert await poison.astatus() == "failed"
            # First with the others (not charged), then twice alone (charged, then dead).
            assert supervisor.deaths == 3

    asyncio.run(scenario())
    starts = [line for line in read_log(log) if line.event == "started"]
    innocent_steps = [(line.tag, line.step_id, line.attempt) for line in starts]
    if where == "tool":
        # Each innocent run's s1 was cut short by the poison's first kill and ran again.
        for n in range(4):
            assert (f"t{n}-r0", "s1", 2) in innocent_steps
    assert ("tp-r1", "s2", 1) in innocent_steps


def test_a_cancel_while_the_worker_is_dead_ends_the_run_cancelled(
    forkserver: Any, queue_url: str, tmp_path: Path
) -> None:
    """Cancelling a run whose worker just died: the take-over ends it `failed`, CANCELLED,
    in storage and in its handle, and never runs it again."""
    log = tmp_path / "tools.log"
    settings = app.Settings(storage=queue_url, log=str(log), depth=2, step_s=30, queue=QUEUE)
    first = WorkerProcess.start(forkserver, app.work_queue, settings, "first")
    workers = [first]

    async def scenario() -> None:
        async with RunQueue(queue_url, QUEUE) as queue:
            handle = await queue.submit("t0-r0", "t0")

            async def in_step() -> bool:
                return any(line.event == "started" for line in read_log(log))

            await wait_for(in_step, "the step to start", 60)
            first.kill()
            assert await handle.acancel() is True
            workers.append(WorkerProcess.start(forkserver, app.work_queue, settings, "second"))
            record = await asyncio.wait_for(handle.result(), 60)
            assert record.status == "failed" and record.error is not None
            assert record.error.code == "CANCELLED", record.error
            stored = await queue.storage.get_run(handle.id)
            assert stored is not None and stored.status == "failed"
            assert stored.error is not None and stored.error.code == "CANCELLED"
            assert await handle.astatus() == "failed"
            await asyncio.sleep(QUEUE["stalled_after_s"])  # nothing starts it again
            assert [line.pid for line in read_log(log)] == [first.pid]

    try:
        asyncio.run(scenario())
    finally:
        for worker in workers:
            worker.stop_if_alive()

