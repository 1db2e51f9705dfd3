"""Queued runs: submit now, let workers run them, follow them by id.

    python examples/queued_runs.py                       # SQLite, run in this process
    python examples/queued_runs.py --workers 2           # SQLite, 2 worker processes
    python examples/queued_runs.py --workers 3 postgresql://user:pass@host:5432/db

`submit` returns a handle at once. Each thread runs its queued runs one at a time, in the
order they were submitted, while different threads run side by side on every worker. With
`--workers N` this process only submits, and N worker processes (what `art worker` runs)
take the runs; on PostgreSQL the queue is procrastinate's. The scripted test model plays the
LLM, so no API key is needed.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import signal
import sys
import tempfile
import time
import uuid
from collections import Counter
from typing import Any

THREADS = ("alice", "bob", "carol")
QUESTIONS = ("17 * 23", "19 * 29", "2 ** 10")


def make_instance(storage: str) -> Any:
    import art
    from art.testing import ScriptedModel
    from art.tools import Calculator

    def plan(messages: list[dict[str, Any]], metadata: Any) -> dict[str, Any]:
        expression = str(messages[-1]["content"]).rpartition("Request: ")[2]
        step = {"id": "s1", "tool": "calculator", "args": {"expression": expression}}
        return {"title": "Compute", "steps": [step]}

    model = ScriptedModel(planning=plan, synthesis="computed", latency_s=0.02)
    return art.create_art_instance(
        model=model.model, tools=[Calculator()], storage=storage, queue={"heartbeat_s": 0.5}
    )


def worker_process(storage: str, name: str) -> None:
    """What `art worker` does: run queued runs until SIGTERM."""
    import art.logging
    from art.queue import run_worker

    art.logging.configure_logging(level="WARNING")

    async def main() -> None:
        async with make_instance(storage) as inst:
            await run_worker(inst, name=name)

    asyncio.run(main())


async def submit_and_follow(storage: str, workers: int) -> int:
    inst = make_instance(storage)
    inst.config.queue.in_process = workers == 0
    suffix = uuid.uuid4().hex[:4]  # fresh thread ids: a database kept between runs is fine
    threads = [f"{name}-{suffix}" for name in THREADS]
    async with inst:
        started = time.perf_counter()
        for _ in range(600):  # the worker processes are starting (up to 2 minutes)
            if len((await inst.queue.stats()).workers) >= workers:
                break
            await asyncio.sleep(0.2)
        if workers:
            print(f"{workers} workers ready after {time.perf_counter() - started:.1f} s")
        started = time.perf_counter()
        handles = [
            await inst.asubmit(question, thread_id)
            for question in QUESTIONS
            for thread_id in threads
        ]
        print(f"submitted {len(handles)} runs in {time.perf_counter() - started:.3f} s")
        print(f"  first: {handles[0].id} on {handles[0].thread_id}: {await handles[0].astatus()}")

        # A run waiting behind others on its thread can be taken out before it runs.
        late = await inst.asubmit("1 / 0", threads[0])
        print(f"cancelled a waiting run: {await late.acancel()}")

        records = [await asyncio.wait_for(handle.result(), 120) for handle in handles]
        print(f"all ended in {time.perf_counter() - started:.2f} s:")
        everything = [*handles, late]
        outcomes = [*records, await late.result()]
        ended = {h.id: r for h, r in zip(everything, outcomes, strict=True)}
        for thread_id in threads:
            submitted = [h for h in everything if h.thread_id == thread_id]
            shown = [_outcome(ended[h.id]) for h in submitted]
            ran = [r.run_id for r in (await inst.aget_state(thread_id)).runs if r.steps]
            in_order = ran == [h.id for h in submitted if ended[h.id].steps]
            print(f"  {thread_id}: {', '.join(shown)} (ran in submission order: {in_order})")
        print(f"statuses: {dict(Counter(r.status for r in records))}")
        stats = await inst.queue.stats()
        print(f"queue {stats.queue}: {stats.queued} waiting, {stats.running} running")
    return 0 if all(r.status == "completed" for r in records) else 1


def _outcome(record: Any) -> str:
    if record.status == "completed":
        return f"{record.query} = {record.steps['s1'].output}"
    return f"{record.query}: {record.status} ({record.error.code if record.error else '-'})"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("storage", nargs="?", help="storage URL (default: a temporary SQLite)")
    parser.add_argument("--workers", type=int, default=0, help="worker processes (default 0)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        storage = args.storage or f"sqlite:///{os.path.join(scratch, 'queue-demo.db')}"
        context = mp.get_context("spawn")  # fresh interpreters, as separate hosts would be
        workers = [
            context.Process(target=worker_process, args=(storage, f"worker-{n}"))
            for n in range(args.workers)
        ]
        for process in workers:
            process.start()
        where = f"{args.workers} worker process(es)" if workers else "this process"
        print(f"runs go through the queue of {storage.split('?')[0]}, run by {where}")
        try:
            return asyncio.run(submit_and_follow(storage, len(workers)))
        finally:
            for process in workers:  # SIGTERM: a worker finishes its runs, then exits
                os.kill(process.pid or 0, signal.SIGTERM)
            for process in workers:
                process.join(60)
            if workers:
                print(f"workers stopped: exit codes {[p.exitcode for p in workers]}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
