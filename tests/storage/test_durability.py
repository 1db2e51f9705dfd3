"""Durable threads, end to end, with real processes killed by SIGKILL.

- a run on SQLite killed at many points (planning, a step's start, a step's end, synthesis)
  and retried each time in a new process: no finished step runs twice, no output is lost,
  steps in flight rerun with the next attempt number, and the answer comes out;
- human in the loop across processes: one suspends and exits, another resumes and finishes;
- THREAD_BUSY: a second process on a busy thread starts nothing; a retry right after the
  holder is killed succeeds at once;
- PostgreSQL: 4 worker processes and 100 threads; every run is executed once, by one worker.

Children come from a forkserver that imported the application once (see durability_app).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pytest
from warm_processes import warm_forkserver

from art.storage.contract import RunRecord
from art.storage.opening import open_storage

from . import durability_app as app

# Every test here starts processes and kills some of them.
pytestmark = pytest.mark.slow

THREAD = "durable-thread"


@pytest.fixture(scope="module")
def forkserver() -> Any:
    """A multiprocessing context whose forkserver has the application imported and warm."""
    return warm_forkserver()


@dataclass
class Child:
    process: Any
    pipe: Connection
    pid: int = 0
    messages: list[tuple[Any, ...]] = field(default_factory=list)

    @classmethod
    def start(cls, context: Any, target: Any, *args: Any) -> Child:
        parent_end, child_end = context.Pipe()
        process = context.Process(target=target, args=(*args, child_end), daemon=True)
        process.start()
        child_end.close()
        return cls(process, parent_end, process.pid)

    def receive(self, timeout: float = 60) -> tuple[Any, ...] | None:
        """The next message, or None once the child has exited."""
        if not self.pipe.poll(timeout):
            raise AssertionError(f"child {self.pid} sent nothing for {timeout} s")
        try:
            message = self.pipe.recv()
        except EOFError:
            return None
        self.messages.append(message)
        return message

    def result(self, timeout: float = 60) -> dict[str, Any]:
        while (message := self.receive(timeout)) is not None:
            if message[0] == "done":
                self.process.join(10)
                return message[1]
        self.process.join(10)
        raise AssertionError(f"child {self.pid} exited ({self.process.exitcode}) without a result")

    def kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)
        self.process.join(10)
        assert self.process.exitcode == -signal.SIGKILL


@dataclass
class LogLine:
    event: str
    thread_id: str
    step_id: str
    attempt: int
    pid: int
    value: str


def read_log(path: Path) -> list[LogLine]:
    if not path.exists():
        return []
    lines = []
    for raw in path.read_text().splitlines():
        event, thread_id, step_id, attempt, pid, value = raw.split(" ")
        lines.append(LogLine(event, thread_id, step_id, int(attempt), int(pid), value))
    return lines


def load_runs(url: str, thread_id: str) -> list[RunRecord]:
    async def read() -> list[RunRecord]:
        storage = open_storage(url)
        await storage.open()
        try:
            return await storage.list_runs(thread_id)
        finally:
            await storage.close()

    return asyncio.run(read())


def expected_outputs(chains: int = app.CHAINS, depth: int = app.DEPTH) -> dict[str, int]:
    return {
        f"s{chain * depth + index + 1}": chain * 100 + index + 1
        for chain in range(chains)
        for index in range(depth)
    }


# -- (a) killed at many points, retried in a new process each time -----------------------


def test_a_run_killed_anywhere_continues_without_rerunning_finished_steps(
    forkserver: Any, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'art.db'}"
    log = tmp_path / "tools.log"
    settings = app.Settings(storage=url, log=str(log), plan=app.chain_plan())
    # Kill points by progress within each child: after its n-th step start or step end.
    kill_points = itertools.cycle(
        [("started", 1), ("finished", 1), ("started", 3), ("finished", 2), ("started", 2),
         ("finished", 4), ("started", 5), ("finished", 3)]
    )  # fmt: skip
    children: list[tuple[int, RunRecord | None, tuple[str, int] | None]] = []
    killed_in_synthesis = False
    final: dict[str, Any] | None = None

    for attempt in range(40):
        runs = load_runs(url, THREAD)
        before = runs[-1] if runs else None
        point = ("planning", 1) if attempt == 0 else next(kill_points)
        child = Child.start(forkserver, app.process_once, settings, app.QUERY, THREAD)
        seen: Counter[str] = Counter()
        killed_at = None
        while (message := child.receive()) is not None:
            kind = message[0]
            if kind == "done":
                final = message[1]
                break
            seen[kind] += 1
            if kind == "synthesis" and not killed_in_synthesis:
                killed_in_synthesis, killed_at = True, ("synthesis", 1)
            elif kind == point[0] and seen[kind] == point[1] and not killed_in_synthesis:
                killed_at = point
            if killed_at is not None:
                child.kill()
                break
        child.process.join(10)
        children.append((child.pid, before, killed_at))
        if final is not None:
            break

    assert final is not None, "the run never finished"
    kills = [killed for _, _, killed in children if killed is not None]
    assert len(kills) >= 10 and ("planning", 1) in kills and ("synthesis", 1) in kills, kills

    lines = read_log(log)
    rerun_in_flight = 0
    for index, (pid, before, _killed) in enumerate(children):
        completed = {
            sid: r.output for sid, r in (before.steps if before else {}).items()
            if r.status == "completed"
        }  # fmt: skip
        in_flight = {
            sid: r.attempts for sid, r in (before.steps if before else {}).items()
            if r.status == "in_progress"
        }  # fmt: skip
        mine = [line for line in lines if line.pid == pid]
        started = [line for line in mine if line.event == "started"]
        for line in started:
            assert line.step_id not in completed, (
                f"child {index} ran {line.step_id}, finished before it started"
            )
        first_attempt = {}
        for line in started:
            first_attempt.setdefault(line.step_id, line.attempt)
        for step_id, attempts in in_flight.items():
            if step_id in first_attempt:
                assert first_attempt[step_id] == attempts + 1 > 1
                rerun_in_flight += 1
        # A step's start is committed before its tool runs, and a finished output is kept.
        after_runs = load_runs(url, THREAD) if index == len(children) - 1 else None
        after = children[index + 1][1] if index + 1 < len(children) else after_runs[-1]
        assert after is not None
        for line in started:
            assert after.steps[line.step_id].attempts >= line.attempt
        for step_id, output in completed.items():
            assert after.steps[step_id].status == "completed"
            assert after.steps[step_id].output == output
    assert rerun_in_flight > 0, "no kill caught a step in flight"

    # Attempt numbers only ever grow, across every process.
    by_step: dict[str, list[int]] = defaultdict(list)
    for line in lines:
        if line.event == "started":
            by_step[line.step_id].append(line.attempt)
    assert all(attempts == sorted(set(attempts)) for attempts in by_step.values()), by_step
    for line in lines:
        if line.event == "finished":
            assert int(line.value) == expected_outputs()[line.step_id]

    # The answer, every output, one run (retries continue it), and the history.
    assert final["status"] == "success" and final["content"] == "all chains done"
    assert {sid: (status, output) for sid, (status, output, _) in final["steps"].items()} == {
        sid: ("completed", value) for sid, value in expected_outputs().items()
    }
    (run,) = load_runs(url, THREAD)
    assert run.status == "completed" and run.answer == "all chains done"
    assert run.run_id == final["run_id"]


# -- (b) human in the loop across processes ---------------------------------------------


def test_a_suspension_is_resumed_by_another_process(forkserver: Any, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'art.db'}"
    log = tmp_path / "tools.log"
    settings = app.Settings(storage=url, log=str(log), plan=app.hitl_plan(), step_s=0)

    first = Child.start(forkserver, app.process_once, settings, "ship it?", "hitl")
    suspended = first.result()
    assert first.process.exitcode == 0
    assert suspended["status"] == "suspended" and len(suspended["suspension_ids"]) == 1
    assert suspended["steps"]["s2"][0] == "waiting"

    second = Child.start(forkserver, app.resume_suspended, settings, "hitl")
    finished = second.result()

    assert finished["found"] == suspended["suspension_ids"]
    assert finished["status"] == "success", finished
    assert finished["run_id"] == suspended["run_id"]
    assert finished["steps"]["s2"][:2] == (
        "completed",
        {"approved": True, "reason": None, "modified_args": None},
    )
    assert finished["steps"]["s3"][:2] == ("completed", 2)
    started = [(line.step_id, line.pid) for line in read_log(log) if line.event == "started"]
    assert started == [("s1", first.pid), ("s3", second.pid)]  # s1 was not run again
    (run,) = load_runs(url, "hitl")
    assert run.status == "completed"


# -- (c) one worker per thread ----------------------------------------------------------


def test_a_busy_thread_starts_nothing_and_frees_the_moment_its_holder_dies(
    forkserver: Any, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'art.db'}"
    log = tmp_path / "tools.log"
    plan = app.chain_plan(chains=1, depth=2)
    slow = app.Settings(storage=url, log=str(log), plan=plan, step_s=60)
    fast = app.Settings(storage=url, log=str(log), plan=plan, step_s=0)

    holder = Child.start(forkserver, app.process_once, slow, app.QUERY, THREAD)
    try:
        while (message := holder.receive()) is not None and message[0] != "started":
            pass
        assert message == ("started", "s1", 1)

        contender = Child.start(forkserver, app.process_once, fast, app.QUERY, THREAD)
        busy = contender.result()
        assert busy["status"] == "error" and busy["code"] == "THREAD_BUSY"
        assert busy["run_id"] is None
        assert [line.pid for line in read_log(log)] == [holder.pid]  # nothing started
        assert len(load_runs(url, THREAD)) == 1  # no second run

        holder.kill()
        killed_at = time.monotonic()
        retry = Child.start(forkserver, app.process_once, fast, app.QUERY, THREAD)
        done = retry.result()
        elapsed = time.monotonic() - killed_at
    finally:
        if holder.process.is_alive():
            holder.kill()

    assert done["status"] == "success", done
    assert done["steps"]["s1"] == ("completed", 1, 2)  # the in-flight step, second attempt
    assert elapsed < 10, f"the retry took {elapsed:.1f} s"
    (run,) = load_runs(url, THREAD)
    assert run.run_id == done["run_id"] and run.status == "completed"


# -- (d) PostgreSQL: many workers, many threads -----------------------------------------


@pytest.mark.postgres
def test_four_workers_and_a_hundred_threads_run_each_run_once(
    forkserver: Any, tmp_path: Path, postgres_database: str
) -> None:
    log = tmp_path / "tools.log"
    settings = app.Settings(
        storage=postgres_database, log=str(log), plan=app.chain_plan(chains=1, depth=3), step_s=0
    )
    queries = {f"t{i:03d}": f"question {i}" for i in range(100)}
    orders = [dict(sorted(queries.items(), key=lambda kv, w=w: hash((w, kv[0])))) for w in range(4)]
    workers = [Child.start(forkserver, app.worker, settings, order) for order in orders]
    try:
        for worker in workers:  # every worker has attempted every thread, holders are gated
            assert worker.receive(120) == ("attempted",)
        for worker in workers:
            worker.pipe.send("go")
        results = [worker.result(120) for worker in workers]
    finally:
        for worker in workers:
            if worker.process.is_alive():
                worker.kill()

    winners: dict[str, int] = {}
    for worker, summaries in zip(workers, results, strict=True):
        for summary in summaries:
            if summary["status"] == "success":
                assert summary["thread_id"] not in winners, "a thread ran twice"
                winners[summary["thread_id"]] = worker.pid
            else:
                assert summary["code"] == "THREAD_BUSY", summary
    assert sorted(winners) == sorted(queries)
    assert sum(len(s) for s in results) == 400

    executions: dict[str, list[LogLine]] = defaultdict(list)
    for line in read_log(log):
        if line.event == "started":
            executions[line.thread_id].append(line)
    for thread_id, lines in executions.items():
        assert sorted((line.step_id, line.attempt) for line in lines) == [
            ("s1", 1), ("s2", 1), ("s3", 1)
        ], thread_id  # fmt: skip
        assert {line.pid for line in lines} == {winners[thread_id]}
    assert sorted(executions) == sorted(queries)

    async def every_run() -> dict[str, list[RunRecord]]:
        storage = open_storage(postgres_database)
        await storage.open()
        try:
            return {t: await storage.list_runs(t) for t in queries}
        finally:
            await storage.close()

    for thread_id, runs in asyncio.run(every_run()).items():
        assert [r.status for r in runs] == ["completed"], thread_id
        assert runs[0].query == queries[thread_id]
