"""The `queue` group: runs per second through the queue with 1, 2 and 4 `art worker`
processes, and how long a killed worker's runs take to be taken over.

Workers are real `art worker --instance benchmarks/queued_app.py:make_instance` processes
(instant tools, the scripted LLM with a fixed latency); this process submits every run
through a `RunQueue` and counts them as they end. On PostgreSQL (procrastinate) the server
comes from `ART_BENCH_POSTGRES_URL` or `ART_TEST_POSTGRES_URL`, else `.ci/postgres.sh`
starts a throwaway one; on SQLite the workers share one file.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.harness import Figure, Settings
from benchmarks.queued_app import SETTINGS_ENV

if TYPE_CHECKING:
    from art.queue import RunQueue
    from benchmarks.figures import Context

REPO = Path(__file__).resolve().parent.parent
POSTGRES_ENVS = ("ART_BENCH_POSTGRES_URL", "ART_TEST_POSTGRES_URL")


async def queue(ctx: Context) -> list[Figure]:
    figures: list[Figure] = []
    for backend in ctx.settings.queue_backends:
        with _storage(backend, ctx.scratch) as (url, note):
            if url is None:
                figures.append(
                    Figure(group="queue", name="runs per second", workload=backend, unit="runs/s",
                           note=note)
                )  # fmt: skip
                continue
            figures.extend(await _measure(ctx.settings, backend, url, ctx.scratch))
    return figures


@contextmanager
def _storage(backend: str, scratch: Path) -> Iterator[tuple[str | None, str | None]]:
    if backend == "sqlite":
        yield f"sqlite:///{scratch / f'queue-{uuid.uuid4().hex[:6]}.db'}", None
        return
    for name in POSTGRES_ENVS:
        if os.environ.get(name):
            yield os.environ[name], None
            return
    script = REPO / ".ci" / "postgres.sh"
    started = subprocess.run(
        ["bash", str(script), "start"], capture_output=True, text=True, timeout=300, check=False
    )
    if started.returncode != 0:
        yield None, f"no PostgreSQL: set ART_BENCH_POSTGRES_URL ({started.stderr.strip()[-200:]})"
        return
    exported = dict(
        line.removeprefix("export ").split("=", 1)
        for line in started.stdout.splitlines()
        if line.startswith("export ")
    )
    try:
        yield exported["ART_TEST_POSTGRES_URL"], None
    finally:
        subprocess.run(
            ["bash", str(script), "stop", exported["ART_TEST_POSTGRES_DIR"]],
            capture_output=True,
            timeout=300,
            check=False,
        )


class _Workers:
    """`art worker` processes on one queue; stopped with SIGTERM at the end."""

    def __init__(self, env: dict[str, str], scratch: Path) -> None:
        self.env = env
        self.scratch = scratch
        self.processes: list[subprocess.Popen[bytes]] = []
        entry = Path(sys.executable).with_name("art")
        self.art = str(entry) if entry.exists() else str(shutil.which("art"))

    def start(self) -> None:
        name = f"bench-{len(self.processes)}"
        argv = [self.art, "worker", "--instance", "benchmarks/queued_app.py:make_instance"]
        with (self.scratch / f"{name}.log").open("ab") as log:
            process = subprocess.Popen(
                [*argv, "--name", name],
                cwd=REPO,
                env=self.env,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        self.processes.append(process)

    def cpu_s(self) -> float:
        """CPU seconds the live workers have used (Linux /proc; 0 elsewhere)."""
        total = 0.0
        for process in self.processes:
            try:
                fields = Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        return total

    def by_pid(self, pid: int | None) -> subprocess.Popen[bytes] | None:
        return next((p for p in self.processes if p.pid == pid), None)

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


async def _measure(settings: Settings, backend: str, url: str, scratch: Path) -> list[Figure]:
    from art.queue import RunQueue

    config = {
        "name": f"bench-{uuid.uuid4().hex[:8]}",  # this run's jobs only
        "concurrency": settings.queue_concurrency,
        "heartbeat_s": settings.queue_heartbeat_s,
        "stalled_after_s": settings.queue_stalled_after_s,
    }
    app = {"storage": url, "llm_latency_s": settings.queue_llm_latency_s, "queue": config}
    env = {**os.environ, SETTINGS_ENV: json.dumps(app), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    workers = _Workers(env, scratch)
    figures = []
    workload = f"{{}} worker process(es), {backend}, 3 instant steps, LLM {{}} ms"
    latency_ms = settings.queue_llm_latency_s * 1000
    try:
        async with RunQueue(url, config) as run_queue:
            for count in settings.queue_workers:
                while len(workers.processes) < count:
                    workers.start()
                await _alive(run_queue, count)
                # Warm-up: each worker's first runs import the LLM layer.
                await _through(run_queue, count * settings.queue_concurrency)
                cpu_before = workers.cpu_s()
                rate, details = await _through(run_queue, settings.queue_runs)
                cpu_ms = (workers.cpu_s() - cpu_before) / settings.queue_runs * 1000
                details.update(concurrency=settings.queue_concurrency, worker_cpu_ms=cpu_ms)
                common = {
                    "group": "queue",
                    "workload": workload.format(count, f"{latency_ms:.0f}"),
                    "details": details,
                }
                figures.append(
                    Figure(
                        name="runs per second", unit="runs/s", art=rate, samples=[rate], **common
                    )
                )
                figures.append(
                    Figure(
                        name="worker CPU per run", unit="ms", art=cpu_ms, samples=[cpu_ms], **common
                    )
                )
            taken_s, details = await _take_over(run_queue, workers, settings)
            bound = settings.queue_stalled_after_s + settings.queue_heartbeat_s
            figures.append(
                Figure(
                    group="queue",
                    name="take-over after SIGKILL",
                    workload=f"{backend}: heartbeat {settings.queue_heartbeat_s:g} s, "
                    f"stalled after {settings.queue_stalled_after_s:g} s",
                    unit="s",
                    art=taken_s,
                    target=bound + 1.0,  # the documented bound, plus a poll and a fetch
                    samples=[taken_s],
                    details=details,
                )
            )
    finally:
        workers.stop()
    return figures


async def _alive(run_queue: RunQueue, count: int) -> None:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        stats = await run_queue.stats()
        if sum(1 for w in stats.workers if not w.stalled) >= count:
            return
        await asyncio.sleep(0.2)
    raise RuntimeError(f"{count} workers did not register within 300 s")


async def _through(run_queue: RunQueue, runs: int) -> tuple[float, dict[str, Any]]:
    """Submit `runs` runs (each on its own thread) and wait for every one to end."""
    before = (await run_queue.stats()).jobs.get("succeeded", 0)
    tag = uuid.uuid4().hex[:6]
    started = time.perf_counter()
    for index in range(runs):
        await run_queue.submit(f"run {index}", f"{tag}-{index}")
    submitted = time.perf_counter() - started
    deadline = time.monotonic() + 600
    while True:
        stats = await run_queue.stats()
        if stats.jobs.get("succeeded", 0) - before >= runs:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"runs did not end within 600 s: {stats.jobs}")
        await asyncio.sleep(0.1)  # counting often would load the database being measured
    wall = time.perf_counter() - started
    failed = stats.jobs.get("failed", 0)
    return runs / wall, {"runs": runs, "wall_s": wall, "submit_s": submitted, "failed": failed}


async def _take_over(
    run_queue: RunQueue, workers: _Workers, settings: Settings
) -> tuple[float, dict[str, Any]]:
    """Kill the worker running the most `hold` runs; seconds until the last of them runs
    on another worker."""
    tag = uuid.uuid4().hex[:6]
    handles = [
        await run_queue.submit(f"hold {settings.queue_hold_s}", f"{tag}-hold-{index}")
        for index in range(2 * len(workers.processes))
    ]
    deadline = time.monotonic() + 120
    while (stats := await run_queue.stats()).running < len(handles):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the hold runs did not all start: {stats.jobs}")
        await asyncio.sleep(0.05)
    victim = max(stats.workers, key=lambda w: w.running)
    process = workers.by_pid(victim.pid)
    assert process is not None, victim
    jobs = {h.id: await run_queue.backend.job(h.id) for h in handles}
    mine = [run_id for run_id, job in jobs.items() if job and job.worker_id == victim.worker_id]
    process.send_signal(signal.SIGKILL)
    killed = time.perf_counter()
    taken: dict[str, float] = {}
    while len(taken) < len(mine):
        for run_id in mine:
            job = await run_queue.backend.job(run_id)
            moved = job is not None and job.state == "doing" and job.worker_id != victim.worker_id
            if run_id not in taken and moved:
                taken[run_id] = time.perf_counter() - killed
        if time.perf_counter() - killed > 120:
            raise RuntimeError("the killed worker's runs were not taken over within 120 s")
        await asyncio.sleep(0.02)
    for handle in handles:
        record = await asyncio.wait_for(handle.result(), 120)
        assert record.status == "completed", record
    return max(taken.values()), {"runs_taken_over": len(mine), "each_s": sorted(taken.values())}
