"""Chaos: queued runs on PostgreSQL through everything at once, bounded, on 127.0.0.1.

Three supervised worker processes (a dead one is replaced at once) on a PostgreSQL server
of the test's own run 122 runs over 31 threads while, in turn: a poison run kills every
worker it lands on (`os._exit` 1 s into its step), workers are SIGKILLed, a reaper
terminates every connection to the database (`pg_terminate_backend`), and the server is
stopped for 30 s and started again. Afterwards every run has ended, every run but the
poison completed exactly once (one completed record, one exchange in its thread's
history), the poison was dead-lettered and its thread went on, and each thread's runs ran
one at a time in submission order. The figures it prints are in docs/deployment.md.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from art.queue import RunQueue

from . import app
from .test_faults import Supervisor, started_steps
from .test_workers import read_log, thread_of

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

QUEUE = {
    "concurrency": 4,
    "heartbeat_s": 0.5,
    "stalled_after_s": 2.0,
    "poll_s": 0.2,
    "shutdown_timeout_s": 5.0,
    "max_worker_deaths": 2,
}
THREADS, PER_THREAD = 30, 4
OUTAGE_S = 30.0
POISON = "tp-r0"


async def reap(url: str) -> int:
    """Terminate every other connection to the database; how many."""
    import psycopg

    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cursor = await conn.execute(
            "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        row = await cursor.fetchone()
        return int(row[0]) if row else 0


def test_chaos_poison_kills_reaper_and_a_30_s_outage(
    forkserver: Any, own_postgres: Any, tmp_path: Path
) -> None:
    url, log = own_postgres.url, tmp_path / "tools.log"
    settings = app.Settings(
        storage=url,
        log=str(log),
        depth=2,
        step_s=0.2,
        queue=QUEUE,
        poison={POISON: "tool"},
        poison_after_s=1.0,
    )
    supervisor = Supervisor(forkserver, settings, size=3)
    chaos = random.Random(43)
    figures: dict[str, Any] = {}

    async def scenario() -> dict[str, list[tuple[str, str]]]:
        began = time.monotonic()
        async with RunQueue(url, QUEUE) as queue, supervisor.running():
            submitted: dict[str, list[tuple[str, str]]] = defaultdict(list)
            for tag, thread_id in [(POISON, "tp"), ("tp-r1", "tp")] + [
                (f"t{n:02d}-r{r}", f"t{n:02d}") for r in range(PER_THREAD) for n in range(THREADS)
            ]:
                handle = await queue.submit(tag, thread_id)
                submitted[thread_id].append((handle.id, tag))
            kills = reaped = 0

            async def kill_one() -> None:
                nonlocal kills
                alive = [w for w in supervisor.workers if w.process.is_alive()]
                await asyncio.to_thread(chaos.choice(alive).kill)
                kills += 1

            await started_steps(log, 20)
            await kill_one()
            await started_steps(log, 60)
            reaped += await reap(url)
            await started_steps(log, 90)
            await asyncio.to_thread(own_postgres.stop)
            await asyncio.sleep(OUTAGE_S)
            await asyncio.to_thread(own_postgres.start)
            back = time.time()
            await started_steps(log, 130)
            resumed = min(
                (line.at for line in read_log(log) if line.event == "finished" and line.at > back),
                default=None,
            )
            await kill_one()
            reaped += await reap(url)

            async def all_ended() -> bool:
                stats = await queue.stats()
                return stats.queued == 0 and stats.running == 0

            deadline = time.monotonic() + 240
            while not await all_ended():
                assert time.monotonic() < deadline, await queue.stats()
                await asyncio.sleep(0.5)
            figures.update(
                runs=sum(len(runs) for runs in submitted.values()),
                threads=len(submitted),
                wall_s=round(time.monotonic() - began, 1),
                workers_died=supervisor.deaths,
                sigkills=kills,
                connections_terminated=reaped,
                outage_s=OUTAGE_S,
                first_step_after_outage_s=None if resumed is None else round(resumed - back, 1),
            )
            # Workers that died: the SIGKILLed ones and the poison's victims (once shared,
            # then alone until dead-lettered); none started during the outage died of it.
            assert supervisor.deaths <= kills + QUEUE["max_worker_deaths"] + 1, figures
            await check_storage(queue, submitted)
            return submitted

    submitted = asyncio.run(scenario())
    check_order(log, submitted)
    print("chaos figures:", figures)


async def check_storage(queue: RunQueue, submitted: dict[str, list[tuple[str, str]]]) -> None:
    storage = queue.storage
    for thread_id, runs in submitted.items():
        records = {r.run_id: r for r in await storage.list_runs(thread_id)}
        assert set(records) == {run_id for run_id, _ in runs}, thread_id
        expected = [q for _, q in runs if q != POISON]
        for run_id, tag in runs:
            record = records[run_id]
            if tag == POISON:
                assert record.status == "failed" and record.error is not None
                assert record.error.code == "WORKER_DIED", record.error
            else:
                assert record.status == "completed", (tag, record.status, record.error)
        history = await storage.get_history(thread_id, limit=1000)
        # Exactly once: one exchange per completed run, in submission order.
        assert [m.content for m in history if m.role == "user"] == expected, thread_id
    (dead,) = await queue.runs(["dead"])
    assert dead.query == POISON


def check_order(log: Path, submitted: dict[str, list[tuple[str, str]]]) -> None:
    """Each thread's runs ran one at a time, in submission order (their tool lines are
    never interleaved), and every step of every run but the poison finished."""
    lines = read_log(log)
    order: dict[str, list[str]] = defaultdict(list)
    for line in lines:
        tags = order[thread_of(line.tag)]
        if not tags or tags[-1] != line.tag:
            assert line.tag not in tags, f"{line.tag} interleaved with another run of its thread"
            tags.append(line.tag)
    for thread_id, runs in submitted.items():
        assert order[thread_id] == [tag for _, tag in runs], thread_id
    finished = Counter((line.tag, line.step_id) for line in lines if line.event == "finished")
    for runs in submitted.values():
        for _, tag in runs:
            if tag != POISON:
                assert finished[(tag, "s1")] >= 1 and finished[(tag, "s2")] >= 1, tag
