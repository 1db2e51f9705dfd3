"""Queued runs on real worker processes, one of them killed with SIGKILL mid-way.

- PostgreSQL (procrastinate): 3 `run_worker` processes, 200 runs over 50 threads submitted
  by the test process;
- SQLite, the in-process path: 3 application processes each submit their threads' runs with
  `inst.submit` and run the queue in-process; 60 runs over 15 threads.

Either way one worker is killed while it runs runs, and afterwards: every run ended exactly
once (one completed record, one exchange in its thread's history, never two `session:end`), no
step that had finished ran again (only steps in flight on the killed worker ran twice, with
the next attempt number), each thread's runs ran one at a time in submission order, the
dead worker's runs were taken over within the configured time, and the queue drained.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from art.queue import RunQueue

from . import app
from .conftest import WorkerProcess

pytestmark = pytest.mark.slow

QUEUE = {
    "concurrency": 8,
    "heartbeat_s": 0.5,
    "stalled_after_s": 2.0,
    "poll_s": 0.2,
    "shutdown_timeout_s": 10.0,
}
# The dead worker's runs start again within stalled_after_s + heartbeat_s + poll_s, plus
# this much for a loaded machine (2 shared cores).
TAKE_OVER_SLACK_S = 4.0

# Each thread's runs in submission order: thread id -> [(run id, query)].
Submitted = dict[str, list[tuple[str, str]]]


@dataclass
class LogLine:
    event: str
    tag: str
    step_id: str
    attempt: int
    pid: int
    at: float


def read_log(path: Path) -> list[LogLine]:
    if not path.exists():
        return []
    lines = []
    for raw in path.read_text().splitlines():
        event, tag, step_id, attempt, pid, at = raw.split(" ")
        lines.append(LogLine(event, tag, step_id, int(attempt), int(pid), float(at)))
    return lines


def thread_of(tag: str) -> str:
    return tag.split("-")[0]


async def wait_for(check: Any, what: str, limit_s: float) -> Any:
    deadline = time.monotonic() + limit_s
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {limit_s} s waiting for {what}")
        await asyncio.sleep(0.1)


async def drive(
    queue: RunQueue, workers: list[WorkerProcess], total: int, log: Path
) -> tuple[WorkerProcess, float]:
    """Kill the busiest worker once a third of the runs have ended; wait for the queue to
    drain; return the killed worker and when it was killed."""

    async def a_third_done() -> bool:
        stats = await queue.stats()
        return stats.jobs.get("succeeded", 0) >= total // 3

    await wait_for(a_third_done, "a third of the runs to end", 120)
    by_pid = {w.pid: w for w in workers}

    async def busy_worker() -> WorkerProcess | None:
        """A worker running runs, one of them inside a step right now."""
        stats = await queue.stats()
        in_step: dict[int, set[tuple[str, str]]] = defaultdict(set)
        for line in read_log(log):
            steps = in_step[line.pid]
            if line.event == "started":
                steps.add((line.tag, line.step_id))
            else:
                steps.discard((line.tag, line.step_id))
        for info in sorted(stats.workers, key=lambda w: -w.running):
            if info.running >= 2 and in_step[info.pid or 0] and info.pid in by_pid:
                return by_pid[info.pid]
        return None

    victim = await wait_for(busy_worker, "a worker running a step", 30)
    victim.kill()
    killed_at = time.time()

    async def drained() -> bool:
        stats = await queue.stats()
        return stats.jobs == {"succeeded": total}

    await wait_for(drained, "the queue to drain", 180)
    return victim, killed_at


async def check_storage(queue: RunQueue, submitted: Submitted) -> None:
    """Every run completed once, in order, with one exchange each in its thread's history."""
    storage = queue.storage
    for thread_id, runs in submitted.items():
        records = await storage.list_runs(thread_id)
        assert [r.run_id for r in records] == [run_id for run_id, _ in runs], thread_id
        assert [r.status for r in records] == ["completed"] * len(runs), thread_id
        # A run ends once: one `session:end` at most (a worker killed after storing a run's
        # end and before writing its last events leaves none, as a crash may).
        ends = Counter(
            e.run_id for e in await storage.query_events(thread_id, names=["session:end"])
        )
        assert set(ends) <= {run_id for run_id, _ in runs} and set(ends.values()) <= {1}, ends
        history = await storage.get_history(thread_id, limit=1000)
        assert [m.content for m in history if m.role == "user"] == [q for _, q in runs]
        assert len(history) == 2 * len(runs)
        for run_id, _ in runs:
            handle = await queue.get(run_id)
            assert await handle.astatus() == "completed"


def check_log(log: Path, submitted: Submitted, victim: int, killed_at: float) -> float:
    """No finished step ran again; threads ran in order; the take-over time (s)."""
    lines = read_log(log)
    depth = app.Settings(storage="", log="").depth
    steps = [f"s{i}" for i in range(1, depth + 1)]
    starts: dict[tuple[str, str], list[LogLine]] = defaultdict(list)
    finishes: dict[tuple[str, str], list[LogLine]] = defaultdict(list)
    for line in lines:
        (starts if line.event == "started" else finishes)[(line.tag, line.step_id)].append(line)

    taken_over_at = []
    for runs in submitted.values():
        for _, tag in runs:
            for step in steps:
                tries = starts[(tag, step)]
                assert tries, f"{tag} {step} never ran"
                # Every start but the last was on the killed worker, cut short by the kill.
                for early in tries[:-1]:
                    assert early.pid == victim, f"{tag} {step} ran twice: {tries}"
                    assert early.at < killed_at
                # Attempt numbers only grow (an attempt stored as started may have been
                # killed before its tool logged anything).
                attempts = [t.attempt for t in tries]
                assert attempts == sorted(set(attempts)), (tag, step, tries)
                done = finishes[(tag, step)]
                assert done and done[-1].pid == tries[-1].pid, (tag, step, done)
            mine = [line for line in lines if line.tag == tag]
            if any(line.pid == victim for line in mine) and mine[-1].pid != victim:
                after = [line.at for line in mine if line.pid != victim]
                taken_over_at.append(min(after) - killed_at)

    # Per thread: the runs' lines come in submission order, never interleaved.
    order: dict[str, list[str]] = defaultdict(list)
    for line in lines:
        tags = order[thread_of(line.tag)]
        if not tags or tags[-1] != line.tag:
            assert line.tag not in tags, f"{line.tag} interleaved with another run of its thread"
            tags.append(line.tag)
    for thread_id, runs in submitted.items():
        assert order[thread_id] == [tag for _, tag in runs], thread_id

    assert taken_over_at, "the killed worker had no run in flight"
    return max(taken_over_at)


def assert_take_over_in_time(take_over_s: float) -> None:
    bound = QUEUE["stalled_after_s"] + QUEUE["heartbeat_s"] + QUEUE["poll_s"]
    assert take_over_s <= bound + TAKE_OVER_SLACK_S, f"took {take_over_s:.2f} s (bound {bound})"


async def kill_one_and_drain(
    queue: RunQueue, workers: list[WorkerProcess], submitted: Submitted, log: Path
) -> tuple[int, float]:
    """Kill a worker mid-way, check the stored runs once the queue drained, stop the
    others with SIGTERM; the killed worker's pid and when it was killed."""
    total = sum(len(runs) for runs in submitted.values())
    victim, killed_at = await drive(queue, workers, total, log)
    await check_storage(queue, submitted)
    for worker in workers:
        if worker is not victim:
            await asyncio.to_thread(worker.terminate)
    stats = await queue.stats()
    assert stats.workers == [] and stats.queued == 0 and stats.running == 0
    return victim.pid, killed_at


def run_scenario(workers: list[WorkerProcess], scenario: Any, log: Path, runs: int) -> None:
    """Run `scenario` (a coroutine returning the submitted runs, the killed worker's pid
    and when it was killed), then check the tools' log."""
    try:
        submitted, victim, killed_at = asyncio.run(scenario)
    finally:
        for worker in workers:
            worker.stop_if_alive()
    assert sum(len(each) for each in submitted.values()) == runs
    assert_take_over_in_time(check_log(log, submitted, victim, killed_at))


# -- PostgreSQL: procrastinate ----------------------------------------------------------


@pytest.mark.postgres
def test_postgres_three_workers_two_hundred_runs_one_killed(
    forkserver: Any, postgres_database: str, tmp_path: Path
) -> None:
    log = tmp_path / "tools.log"
    settings = app.Settings(storage=postgres_database, log=str(log), step_s=0.05, queue=QUEUE)
    threads, per_thread = 50, 4
    workers = [WorkerProcess.start(forkserver, app.work_queue, settings, f"w{n}") for n in range(3)]

    async def scenario() -> tuple[Submitted, int, float]:
        async with RunQueue(postgres_database, QUEUE) as queue:

            async def registered() -> bool:
                return len((await queue.stats()).workers) == 3

            await wait_for(registered, "3 workers", 120)
            submitted: Submitted = defaultdict(list)
            for run in range(per_thread):
                for number in range(threads):
                    thread_id, tag = f"t{number:02d}", f"t{number:02d}-r{run}"
                    handle = await queue.submit(tag, thread_id)
                    submitted[thread_id].append((handle.id, tag))
            return (submitted, *await kill_one_and_drain(queue, workers, submitted, log))

    run_scenario(workers, scenario(), log, runs=200)


# -- SQLite: the in-process path --------------------------------------------------------


def test_sqlite_in_process_three_processes_sixty_runs_one_killed(
    forkserver: Any, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'art.db'}"
    log = tmp_path / "tools.log"
    settings = app.Settings(storage=url, log=str(log), step_s=0.05, queue=QUEUE)
    threads, per_thread = 15, 4
    # Each process submits the runs of its own threads, in order, then serves the queue.
    plans: list[list[tuple[str, str]]] = [[] for _ in range(3)]
    for run in range(per_thread):
        for number in range(threads):
            plans[number % 3].append((f"t{number:02d}-r{run}", f"t{number:02d}"))
    workers = [WorkerProcess.start(forkserver, app.submit_and_serve, settings, p) for p in plans]

    async def scenario() -> tuple[Submitted, int, float]:
        submitted: Submitted = defaultdict(list)
        for worker, plan in zip(workers, plans, strict=True):
            message = await asyncio.to_thread(worker.pipe.recv)
            assert message[0] == "submitted"
            for run_id, (tag, thread_id) in zip(message[1], plan, strict=True):
                submitted[thread_id].append((run_id, tag))
        async with RunQueue(url, QUEUE) as queue:
            return (submitted, *await kill_one_and_drain(queue, workers, submitted, log))

    run_scenario(workers, scenario(), log, runs=60)


# -- SIGTERM: finish, or hand back -----------------------------------------------------


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def queue_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'art.db'}"
    return str(request.getfixturevalue("postgres_database"))


async def started_steps(log: Path, count: int) -> None:
    async def enough() -> bool:
        return sum(line.event == "started" for line in read_log(log)) >= count

    await wait_for(enough, f"{count} steps to start", 60)


def test_sigterm_lets_running_runs_finish(forkserver: Any, queue_url: str, tmp_path: Path) -> None:
    log = tmp_path / "tools.log"
    queue = {**QUEUE, "shutdown_timeout_s": 30.0}
    settings = app.Settings(storage=queue_url, log=str(log), depth=2, step_s=0.4, queue=queue)
    worker = WorkerProcess.start(forkserver, app.work_queue, settings, "w")

    async def scenario() -> list[Any]:
        async with RunQueue(queue_url, queue) as run_queue:
            handles = [await run_queue.submit(f"t{n}-r0", f"t{n}") for n in range(2)]
            await started_steps(log, 2)
            stopping = time.monotonic()
            await asyncio.to_thread(worker.terminate)
            assert time.monotonic() - stopping < 10
            records = [await handle for handle in handles]
            assert (await run_queue.stats()).workers == []
            return records

    try:
        records = asyncio.run(scenario())
    finally:
        worker.stop_if_alive()
    assert [r.status for r in records] == ["completed", "completed"]
    assert {line.pid for line in read_log(log)} == {worker.pid}
    assert len(read_log(log)) == 8  # 2 runs x 2 steps x (started, finished), once each


def test_sigterm_past_the_timeout_hands_runs_back(
    forkserver: Any, queue_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "tools.log"
    queue = {**QUEUE, "shutdown_timeout_s": 0.3}
    slow = app.Settings(storage=queue_url, log=str(log), depth=2, step_s=30, queue=queue)
    fast = app.Settings(storage=queue_url, log=str(log), depth=2, step_s=0.01, queue=queue)
    first = WorkerProcess.start(forkserver, app.work_queue, slow, "slow")
    workers = [first]

    async def scenario() -> Any:
        async with RunQueue(queue_url, queue) as run_queue:
            handle = await run_queue.submit("t0-r0", "t0")
            await started_steps(log, 1)
            await asyncio.to_thread(first.terminate)
            assert await handle.astatus() == "queued"  # back in the queue, not failed
            interrupted = await run_queue.storage.get_run(handle.id)
            assert interrupted is not None and interrupted.status == "running"
            assert interrupted.steps["s1"].status == "in_progress"
            workers.append(WorkerProcess.start(forkserver, app.work_queue, fast, "fast"))
            record = await asyncio.wait_for(handle.result(), 60)
            await asyncio.to_thread(workers[1].terminate)
            return record

    try:
        record = asyncio.run(scenario())
    finally:
        for worker in workers:
            worker.stop_if_alive()
    assert record.status == "completed"
    starts = [
        (line.step_id, line.attempt, line.pid) for line in read_log(log) if line.event == "started"
    ]
    # s1 was cut short on the first worker and ran again, attempt 2, on the second.
    assert starts == [("s1", 1, first.pid), ("s1", 2, workers[1].pid), ("s2", 1, workers[1].pid)]
