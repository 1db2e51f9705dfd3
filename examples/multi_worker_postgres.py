"""Several worker processes sharing one PostgreSQL database.

    python examples/multi_worker_postgres.py postgresql://user:pass@host:5432/db
    ART_TEST_POSTGRES_URL=postgresql://... python examples/multi_worker_postgres.py

No server at hand? `eval "$(.ci/postgres.sh start)"` starts a throwaway one and sets
ART_TEST_POSTGRES_URL (`.ci/postgres.sh stop` removes it).

Each worker is its own process with its own ArtInstance on the same URL. They take
threads from a shared queue; then all of them try to run the *same* thread at the same
moment: exactly one runs it, the others get THREAD_BUSY at once (a PostgreSQL advisory
lock per thread, released the moment its holder's connection dies). At the end the
database shows one completed run per thread. The scripted test model plays the LLM.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import re
import sys
import time
import uuid
from typing import Any

WORKERS = 3
THREADS = 9

# Set in each worker: released by the parent once every other worker was turned away.
_release_race: Any = None


def _plan_for(messages: list[dict[str, Any]], metadata: dict[str, Any]) -> dict[str, Any]:
    """The scripted planner: 'square N' becomes a calculator step; 'race' a held step."""
    request = str(messages[-1]["content"])
    if "race" in request:
        return {"title": "Hold the thread", "steps": [{"id": "s1", "tool": "hold", "args": {}}]}
    number = re.search(r"square (\d+)", request)
    expression = f"{number.group(1) if number else 0} ** 2"
    return {
        "title": "Square",
        "steps": [{"id": "s1", "tool": "calculator", "args": {"expression": expression}}],
    }


def _instance(url: str) -> Any:
    import art
    import art.logging
    from art.testing import ScriptedModel
    from art.tools import Calculator

    art.logging.configure_logging(level="WARNING")

    @art.tool
    def hold() -> str:
        """Keep the thread busy until the parent process says every rival was refused."""
        _release_race.wait(60)
        return "held"

    model = ScriptedModel(planning=_plan_for, synthesis="done", latency_s=0.01)
    return art.create_art_instance(model=model.model, tools=[Calculator(), hold], storage=url)


def worker(
    name: str, url: str, race_thread: str, jobs: Any, results: Any, barrier: Any, release: Any
) -> None:
    """One worker process: run queued threads, then join the race for one shared thread."""
    global _release_race
    _release_race = release
    with _instance(url) as inst:
        while (job := jobs.get()) is not None:
            thread_id, number = job
            resp = inst.process(f"square {number}", thread_id)
            output = resp.steps[0].output if resp.steps else None
            results.put((name, thread_id, resp.status, output))
        barrier.wait(60)  # everyone starts the race together
        resp = inst.process("race", race_thread)
        code = resp.metadata.error.code if resp.metadata.error else None
        results.put((name, "race", resp.status, code))


def main(argv: list[str]) -> int:
    url = argv[0] if argv else os.environ.get("ART_TEST_POSTGRES_URL")
    if not url or not url.startswith(("postgresql://", "postgres://")):
        print(
            "usage: python examples/multi_worker_postgres.py postgresql://...  "
            '(or set ART_TEST_POSTGRES_URL; `eval "$(.ci/postgres.sh start)"` starts one)'
        )
        return 2

    prefix = f"mw-{uuid.uuid4().hex[:6]}"  # fresh thread ids, so reruns do not collide
    ctx = mp.get_context("spawn")  # each worker a fresh interpreter, as in production
    jobs, results = ctx.Queue(), ctx.Queue()
    barrier, release = ctx.Barrier(WORKERS), ctx.Event()
    for number in range(THREADS):
        jobs.put((f"{prefix}-{number}", number))
    for _ in range(WORKERS):
        jobs.put(None)

    started = time.perf_counter()
    processes = [
        ctx.Process(
            target=worker,
            args=(f"worker-{i}", url, f"{prefix}-race", jobs, results, barrier, release),
        )
        for i in range(WORKERS)
    ]
    for process in processes:
        process.start()

    done, race = [], []
    while len(done) < THREADS or len(race) < WORKERS:
        item = results.get(timeout=300)
        (race if item[1] == "race" else done).append(item)
        if sum(1 for r in race if r[2] == "error") == WORKERS - 1:
            release.set()  # every rival was refused: let the winner finish
    for process in processes:
        process.join(60)

    print(f"{WORKERS} workers, {THREADS} threads, {time.perf_counter() - started:.1f} s")
    for name, thread_id, status, output in sorted(done, key=lambda r: r[1]):
        print(f"  {thread_id}: {status} by {name} -> {output}")
    print("race for one thread:")
    for name, _, status, code in sorted(race):
        print(f"  {name}: {status}{f' ({code})' if code else ''}")

    import asyncio

    from art.storage.opening import open_storage

    async def runs_per_thread() -> dict[str, list[str]]:
        storage = open_storage(url)
        await storage.open()
        try:
            ids = [f"{prefix}-{n}" for n in range(THREADS)] + [f"{prefix}-race"]
            return {t: [r.status for r in await storage.list_runs(t)] for t in ids}
        finally:
            await storage.close()

    stored = asyncio.run(runs_per_thread())
    exactly_once = all(statuses == ["completed"] for statuses in stored.values())
    winners = [r for r in race if r[2] == "success"]
    busy = [r for r in race if r[3] == "THREAD_BUSY"]
    print(f"every thread ran exactly once: {exactly_once}")
    print(f"race: {len(winners)} winner, {len(busy)} turned away with THREAD_BUSY")
    ok = exactly_once and len(winners) == 1 and len(busy) == WORKERS - 1
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
