"""Queued runs under real faults: runs that kill their worker, cancels while a worker is dead.

Worker processes come from the warm forkserver and are supervised (a dead one is replaced, as
systemd or Kubernetes would); a poison run kills its worker with `os._exit`, in planning or
1 s into a tool step, wherever it runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
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


def _url(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'art.db'}"
    return str(request.getfixturevalue("postgres_database"))


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def queue_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return _url(request.param, request, tmp_path)


@pytest.mark.parametrize(
    ("backend", "where"),
    [
        ("sqlite", "tool"),
        pytest.param("postgres", "plan", marks=pytest.mark.postgres),
        pytest.param("postgres", "tool", marks=pytest.mark.postgres),
    ],
)
def test_a_run_that_kills_its_worker_is_dead_lettered_and_spares_the_others(
    forkserver: Any, request: pytest.FixtureRequest, tmp_path: Path, backend: str, where: str
) -> None:
    """The poison run kills every worker it runs on: after `max_worker_deaths` deaths alone
    on a worker it ends failed, WORKER_DIED, and its thread's next run runs. The runs that
    shared its worker are taken over without being charged: with no step retries at all,
    their interrupted steps still run again and they complete."""
    log = tmp_path / "tools.log"
    queue_url = _url(backend, request, tmp_path)
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
            (listed,) = await queue.runs(["dead"])
            assert listed.run_id == poison.id
            assert [a.outcome for a in listed.attempts] == [
                "worker_died_with_others",
                "worker_died",
                "worker_died",
            ]
            assert len({a.worker_id for a in listed.attempts}) == 3  # three workers it killed
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

            async def stuck() -> bool:  # on a silent worker, nobody left to take it over
                return [r.run_id for r in await queue.runs(["stuck"])] == [handle.id]

            await wait_for(stuck, "the run to be listed stuck", QUEUE["stalled_after_s"] + 5)
            assert await queue.runs(["running"]) == []
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


# -- the database goes away ------------------------------------------------------------

# Longer than stalled_after_s: when it is back, every worker's heartbeat is stale.
OUTAGE_S = 8.0
# submit() and status calls give up within connect_timeout (5 s by default), plus slack.
FAIL_FAST_S = 7.0


async def started_steps(log: Path, count: int) -> None:
    async def enough() -> bool:
        return sum(line.event == "started" for line in read_log(log)) >= count

    await wait_for(enough, f"{count} steps to start", 60)


@pytest.mark.postgres
def test_workers_outlive_a_database_outage_and_clients_fail_fast(
    forkserver: Any, own_postgres: Any, tmp_path: Path
) -> None:
    """The server stops for longer than `stalled_after_s` while runs are in flight: submit()
    and a handle's status raise StorageError naming the server within seconds; the workers,
    one started during the outage too, wait, reconnect, and every run completes, one
    submitted afterwards too."""
    from art.errors import StorageError

    url, log = own_postgres.url, tmp_path / "tools.log"
    settings = app.Settings(storage=url, log=str(log), depth=3, step_s=0.3, queue=QUEUE)
    workers = [WorkerProcess.start(forkserver, app.work_queue, settings, f"w{n}") for n in range(2)]

    async def scenario() -> None:
        async with RunQueue(url, QUEUE) as queue:

            async def registered() -> bool:
                return len((await queue.stats()).workers) == 2

            await wait_for(registered, "2 workers", 120)
            handles = [
                await queue.submit(f"t{n}-r{r}", f"t{n}") for r in range(2) for n in range(6)
            ]
            await started_steps(log, 4)
            await asyncio.to_thread(own_postgres.stop)
            for call in (lambda: queue.submit("late", "t-late"), handles[0].astatus):
                began = time.monotonic()
                with pytest.raises(StorageError) as info:
                    await call()
                assert time.monotonic() - began < FAIL_FAST_S
                assert f"127.0.0.1:{own_postgres.port}" in info.value.message
            # A worker started during the outage waits for the database too.
            workers.append(WorkerProcess.start(forkserver, app.work_queue, settings, "late"))
            await asyncio.sleep(OUTAGE_S)
            await asyncio.to_thread(own_postgres.start)
            records = [await asyncio.wait_for(h.result(), 120) for h in handles]
            assert [r.status for r in records] == ["completed"] * len(handles), [
                (r.query, r.status, r.error) for r in records
            ]
            after = await queue.submit("t-after-r0", "t-after")
            assert (await asyncio.wait_for(after.result(), 60)).status == "completed"
            assert all(w.process.is_alive() for w in workers)

    try:
        asyncio.run(scenario())
    finally:
        for worker in workers:
            worker.stop_if_alive()


@pytest.mark.postgres
def test_a_connection_reaper_costs_no_run(
    forkserver: Any, postgres_database: str, tmp_path: Path
) -> None:
    """Every connection to the database is terminated (pg_terminate_backend) three times
    while runs are in flight: each run completes, and the workers stay up."""
    import psycopg

    log = tmp_path / "tools.log"
    settings = app.Settings(
        storage=postgres_database, log=str(log), depth=3, step_s=0.2, queue=QUEUE
    )
    workers = [WorkerProcess.start(forkserver, app.work_queue, settings, f"w{n}") for n in range(2)]

    async def reap() -> int:
        async with await psycopg.AsyncConnection.connect(postgres_database, autocommit=True) as c:
            cursor = await c.execute(
                "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            row = await cursor.fetchone()
            return int(row[0]) if row else 0

    async def scenario() -> None:
        async with RunQueue(postgres_database, QUEUE) as queue:

            async def registered() -> bool:
                return len((await queue.stats()).workers) == 2

            await wait_for(registered, "2 workers", 120)
            handles = [
                await queue.submit(f"t{n}-r{r}", f"t{n}") for r in range(3) for n in range(8)
            ]
            for round_ in range(3):
                await started_steps(log, 6 * (round_ + 1))
                assert await reap() > 0
            records = [await asyncio.wait_for(h.result(), 120) for h in handles]
            assert [r.status for r in records] == ["completed"] * len(handles), [
                (r.query, r.status, r.error) for r in records
            ]
            assert all(w.process.is_alive() for w in workers)

    try:
        asyncio.run(scenario())
    finally:
        for worker in workers:
            worker.stop_if_alive()
