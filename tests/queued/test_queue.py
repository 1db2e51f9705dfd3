"""Queued runs inside one process: submit, status, wait, cancel, order per thread, take-over.

Runs on memory, SQLite and PostgreSQL storage, with the worker in the test process; the
same behaviour across processes, with workers killed, is in test_workers.py.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

import art
from art.errors import ConfigurationError
from art.queue import QueueStats, RunQueue, run_worker
from art.queue.backend import open_backend
from art.storage.contract import StorageAdapter
from art.testing import ScriptedModel
from art.tools import Calculator

from . import app

FAST = {"heartbeat_s": 0.05, "stalled_after_s": 0.3, "poll_s": 0.05, "shutdown_timeout_s": 5}


class Gate:
    """A tool the test releases; it records which runs are inside it at once."""

    def __init__(self) -> None:
        self.entered: list[str] = []
        self.inside: set[str] = set()
        self.most_inside = 0
        self.release = asyncio.Event()
        self.changed = asyncio.Event()

        @art.tool
        async def gate(tag: str) -> str:
            """Wait for the test.

            Args:
                tag: The run's query.
            """
            self.entered.append(tag)
            self.inside.add(tag)
            self.most_inside = max(self.most_inside, len(self.inside))
            self.changed.set()
            try:
                await self.release.wait()
            finally:
                self.inside.discard(tag)
            return f"{tag} done"

        self.tool = gate

    async def wait_entered(self, count: int) -> None:
        while len(self.entered) < count:
            self.changed.clear()
            await asyncio.wait_for(self.changed.wait(), 10)


def gate_plan(messages: list[dict[str, Any]], metadata: Any) -> dict[str, Any]:
    tag = app.query_of(messages)
    return {"title": tag, "steps": [{"id": "s1", "tool": "gate", "args": {"tag": tag}}]}


def _empty_storage(kind: str, request: pytest.FixtureRequest) -> str:
    """The URL of an empty storage of `kind` (PostgreSQL's has the queue's tables)."""
    if kind == "postgres":
        return str(request.getfixturevalue("queue_database"))
    if kind == "sqlite":
        return f"sqlite:///{request.getfixturevalue('sqlite_directory') / 'art.db'}"
    return "memory://"


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def storage_url(request: pytest.FixtureRequest) -> str:
    return _empty_storage(request.param, request)


@pytest.fixture
def gate() -> Gate:
    return Gate()


@pytest.fixture
async def inst(storage_url: str, gate: Gate) -> AsyncIterator[art.ArtInstance]:
    model = ScriptedModel(planning=gate_plan, synthesis="done")
    # On PostgreSQL too the instance runs the queue itself here (procrastinate's worker).
    instance = art.create_art_instance(
        model=model.model, tools=[gate.tool], storage=storage_url, queue=FAST | {"in_process": True}
    )
    try:
        yield instance
    finally:
        gate.release.set()
        await instance.aclose()
        model.unregister()


async def test_submit_returns_at_once_and_the_run_ends_as_stored(
    inst: art.ArtInstance, gate: Gate
) -> None:
    handle = await inst.asubmit("first", "t1", {"user_id": "u7"})
    assert isinstance(handle, art.RunHandle)
    assert (handle.thread_id, handle.query) == ("t1", "first")
    await gate.wait_entered(1)
    assert await handle.astatus() == "running"
    gate.release.set()
    record = await asyncio.wait_for(handle.result(), 10)
    assert record.run_id == handle.id and record.status == "completed"
    assert record.answer == "done" and record.user_id == "u7"
    assert record.steps["s1"].output == "first done"
    assert await handle.astatus() == "completed"
    assert [r.run_id for r in (await inst.aget_state("t1")).runs] == [handle.id]
    assert (await (await inst.queue.get(handle.id)).result()).run_id == handle.id


async def test_a_threads_runs_run_one_at_a_time_in_order_others_alongside(
    inst: art.ArtInstance, gate: Gate
) -> None:
    ones = [await inst.asubmit(f"one-{n}", "one") for n in range(3)]
    others = [await inst.asubmit(f"other-{n}", f"other-{n}") for n in range(2)]
    await gate.wait_entered(3)  # one-0 and both others: different threads spread
    assert set(gate.inside) == {"one-0", "other-0", "other-1"}
    assert [await h.astatus() for h in ones] == ["running", "queued", "queued"]
    gate.release.set()
    records = [await asyncio.wait_for(h.result(), 10) for h in ones + others]
    assert all(r.status == "completed" for r in records)
    assert [tag for tag in gate.entered if tag.startswith("one")] == ["one-0", "one-1", "one-2"]
    stored = (await inst.aget_state("one")).runs
    assert [r.run_id for r in stored] == [h.id for h in ones]
    assert [m.content for m in (await inst.aget_state("one")).history if m.role == "user"] == [
        "one-0",
        "one-1",
        "one-2",
    ]


async def test_cancel_a_waiting_run_and_a_running_one(inst: art.ArtInstance, gate: Gate) -> None:
    running = await inst.asubmit("busy", "t1")
    waiting = await inst.asubmit("next", "t1")
    await gate.wait_entered(1)
    assert await waiting.acancel() is True
    cancelled = await waiting.result()
    assert cancelled.status == "failed" and cancelled.error is not None
    assert cancelled.error.code == "CANCELLED"
    assert await running.acancel() is True
    stopped = await asyncio.wait_for(running.result(), 10)
    assert stopped.status == "failed" and stopped.error and stopped.error.code == "CANCELLED"
    assert await running.acancel() is False  # it has ended
    assert gate.entered == ["busy"]  # the cancelled waiting run never ran
    statuses = [r.status for r in (await inst.aget_state("t1")).runs]
    assert statuses == ["failed", "failed"]


async def test_a_waiting_run_is_stored_when_cancelled(inst: art.ArtInstance, gate: Gate) -> None:
    first, second, third = [await inst.asubmit(tag, "t1") for tag in ("r0", "r1", "r2")]
    await gate.wait_entered(1)
    assert await third.acancel() is True
    gate.release.set()
    await asyncio.wait_for(second.result(), 10)
    stored = [r.run_id for r in (await inst.aget_state("t1")).runs]
    # r2 was stored when cancelled, before r1 started; the handles keep submission order.
    assert stored == [first.id, third.id, second.id]
    assert gate.entered == ["r0", "r1"]


async def test_submitting_a_run_id_again_is_idempotent(inst: art.ArtInstance, gate: Gate) -> None:
    gate.release.set()
    first = await inst.asubmit("same", "t1", {"run_id": "order-42"})
    again = await inst.asubmit("same", "t1", {"run_id": "order-42"})
    assert first.id == again.id == "order-42"
    assert (await first.result()).status == "completed"
    with pytest.raises(ValueError, match="already submitted"):
        await inst.asubmit("another query", "t1", {"run_id": "order-42"})
    stats = await inst.queue.stats()
    assert stats.jobs == {"succeeded": 1}


async def test_stats_show_depth_states_and_the_in_process_worker(
    inst: art.ArtInstance, gate: Gate
) -> None:
    for n in range(3):
        await inst.asubmit(f"q{n}", "t1")
    await gate.wait_entered(1)
    stats = await inst.queue.stats()
    assert isinstance(stats, QueueStats)
    assert (stats.queued, stats.running) == (2, 1)
    (worker,) = stats.workers
    assert worker.running == 1 and not worker.stalled and worker.heartbeat_age_s < 5


def test_sync_submit_wait_status_and_timeout(sqlite_directory: Path) -> None:
    release = threading.Event()

    @art.tool
    def hold(tag: str) -> str:
        """Wait for the test.

        Args:
            tag: The run's query.
        """
        release.wait(10)
        return tag

    plan = {"title": "Hold", "steps": [{"id": "s1", "tool": "hold", "args": {"tag": "x"}}]}
    with ScriptedModel(planning=plan, synthesis="held") as model:
        url = f"sqlite:///{sqlite_directory / 'a.db'}"
        inst = art.create_art_instance(model=model.model, tools=[hold], storage=url, queue=FAST)
        with inst:
            handle = inst.submit("hold it", "t1")
            with pytest.raises(TimeoutError, match=r"has not ended after 0\.05 s"):
                handle.wait(timeout=0.05)
            assert handle.status() in ("queued", "running")
            release.set()
            assert handle.wait(timeout=10).answer == "held"
            assert handle.status() == "completed"


def test_module_level_submit_uses_the_default_instance(
    sqlite_directory: Path, default_reset: None
) -> None:
    step = {"id": "s1", "tool": "calculator", "args": {"expression": "2+3"}}
    plan = {"title": "Sum", "steps": [step]}
    with ScriptedModel(planning=plan, synthesis="5") as model:
        art.configure(model=model.model, storage=f"sqlite:///{sqlite_directory / 'a.db'}")
        record = art.submit("two plus three", "sums").wait(timeout=10)
    assert record.status == "completed" and record.steps["s1"].output == 5


async def test_a_queue_without_a_worker_only_queues(sqlite_directory: Path) -> None:
    url = f"sqlite:///{sqlite_directory / 'a.db'}"
    async with RunQueue(url) as queue:  # no instance: a submitter only
        handle = await queue.submit("later", "t1")
        await asyncio.sleep(0.1)
        assert await handle.astatus() == "queued"
        assert (await queue.stats()).workers == []
        with pytest.raises(RuntimeError, match="no sync bridge"):
            handle.status()
        with pytest.raises(KeyError):
            await queue.get("no-such-run")


async def test_a_dead_workers_run_is_taken_over_from_its_stored_steps(
    sqlite_directory: Path,
) -> None:
    """A worker that claimed a run and stopped heartbeating mid-run (as if SIGKILLed): the
    next worker takes the run over once `stalled_after_s` has passed, and finished steps
    are not run again."""
    url = f"sqlite:///{sqlite_directory / 'a.db'}"
    calls: list[tuple[str, int]] = []
    second_started = asyncio.Event()

    @art.tool
    async def step(name: str, context: art.ExecutionContext) -> str:
        """One step.

        Args:
            name: The step.
        """
        calls.append((name, context.attempt))
        if name == "second" and len(calls) == 2:
            second_started.set()
            await asyncio.sleep(60)  # the first worker "dies" here
        return name

    plan = {
        "title": "Two",
        "steps": [
            {"id": "s1", "tool": "step", "args": {"name": "first"}},
            {"id": "s2", "tool": "step", "args": {"name": "second"}, "dependsOn": ["s1"]},
        ],
    }
    with ScriptedModel(planning=plan, synthesis="both") as model:
        inst = art.create_art_instance(
            model=model.model, tools=[step], storage=url, queue={**FAST, "in_process": False}
        )
        async with inst:
            backend = open_backend(inst.storage, inst.config.queue)
            handle = await inst.asubmit("two steps", "t1")
            # The doomed worker: claims the run and runs it, but never heartbeats.
            dead = await backend.register("doomed")
            (job,) = await backend.claim(dead, 1)
            doomed = asyncio.create_task(
                inst.aprocess(job.spec.query, job.spec.thread_id, {"run_id": job.spec.run_id})
            )
            await asyncio.wait_for(second_started.wait(), 10)
            doomed.cancel()  # what remains of it: s1 stored completed, s2 in progress
            with pytest.raises(asyncio.CancelledError):
                await doomed
            workers: list[Any] = []
            serving = asyncio.create_task(run_worker(inst, started=workers.append))
            record = await asyncio.wait_for(handle.result(), 10)
            workers[0].stop()
            await serving
            await backend.close()
    assert record.status == "completed"
    assert calls == [("first", 1), ("second", 1), ("second", 2)]  # s1 was not run again


async def test_finished_jobs_are_deleted_and_their_runs_stay_readable(
    storage_url: str, gate: Gate
) -> None:
    model = ScriptedModel(planning=gate_plan, synthesis="done")
    queue = FAST | {"in_process": True, "keep_finished_s": 0.05}
    inst = art.create_art_instance(
        model=model.model, tools=[gate.tool], storage=storage_url, queue=queue
    )
    try:
        gate.release.set()
        handle = await inst.asubmit("first", "t1")
        assert (await asyncio.wait_for(handle.result(), 10)).status == "completed"
        backend = inst.queue.backend
        for _ in range(1000):  # the worker deletes it within keep_finished_s + heartbeat_s
            if await backend.job(handle.id) is None:
                break
            await asyncio.sleep(0.01)
        assert await backend.job(handle.id) is None
        assert (await inst.queue.stats()).jobs == {}
        # The handle, and one got again by id, read the run from storage.
        assert await handle.astatus() == "completed"
        again = await inst.queue.get(handle.id)
        assert (again.thread_id, again.query) == ("t1", "first")
        assert (await again).answer == "done" and not await again.acancel()
        # Submitting its id again does not run it again.
        assert (await (await inst.asubmit("first", "t1", {"run_id": handle.id}))).answer == "done"
        assert gate.entered == ["first"]
        with pytest.raises(KeyError):
            await inst.queue.get("no-such-run")
    finally:
        await inst.aclose()
        model.unregister()


def test_queue_configuration_is_checked() -> None:
    with pytest.raises(ConfigurationError, match="at least twice heartbeat_s"):
        art.create_art_instance(model="m", storage="memory://", queue={"heartbeat_s": 6})
    with pytest.raises(ConfigurationError, match="queue"):
        art.create_art_instance(model="m", storage="memory://", queue={"concurrency": 0})
    with pytest.raises(ConfigurationError, match="keep_finished_s"):
        art.create_art_instance(model="m", storage="memory://", queue={"keep_finished_s": -1})


async def test_a_storage_adapter_of_our_own_cannot_hold_a_queue() -> None:
    methods = {name: lambda *args, **kwargs: None for name in StorageAdapter.__abstractmethods__}
    ours = type("OurStorage", (StorageAdapter,), methods)()
    with pytest.raises(ConfigurationError, match="need SQLite, PostgreSQL or memory"):
        RunQueue(storage=ours)
    with pytest.raises(ConfigurationError, match="non-empty"):
        await RunQueue("memory://").submit("", "t1")
    with pytest.raises(ConfigurationError, match="cannot be stored in the queue"):
        await RunQueue("memory://").submit("q", "t1", {"tools": [Calculator()]})
    with pytest.raises(ConfigurationError, match="must be JSON"):
        await RunQueue("memory://").submit("q", "t1", {"metadata": {"when": object()}})


@pytest.fixture(autouse=True)
def _no_stray_threads() -> Iterator[None]:
    before = {t.name for t in threading.enumerate()}
    yield
    left = {t.name for t in threading.enumerate()} - before
    assert not {name for name in left if name.startswith("art-queue")}, left


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def durable_url(request: pytest.FixtureRequest) -> str:
    return _empty_storage(request.param, request)


async def test_workers_report_opentelemetry_metrics(durable_url: str) -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from art.queue.metrics import QueueMetrics

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    plan = {
        "title": "Sum",
        "steps": [{"id": "s1", "tool": "calculator", "args": {"expression": "1+1"}}],
    }

    def points() -> dict[str, list[Any]]:
        data = reader.get_metrics_data()
        found: dict[str, list[Any]] = {}
        for resource in data.resource_metrics if data else []:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    found[metric.name] = list(metric.data.data_points)
        return found

    with ScriptedModel(planning=plan, synthesis="2") as model:
        inst = art.create_art_instance(
            model=model.model,
            tools=[Calculator()],
            storage=durable_url,
            queue={**FAST, "in_process": False},
        )
        async with inst:
            workers: list[Any] = []

            def instrument(worker: Any) -> None:
                worker.metrics = QueueMetrics(inst.config.queue.name, provider)
                workers.append(worker)

            serving = asyncio.create_task(run_worker(inst, started=instrument))
            handles = [await inst.asubmit(f"q{n}", f"t{n}") for n in range(3)]
            for handle in handles:
                assert (await asyncio.wait_for(handle.result(), 10)).status == "completed"
            found = points()  # a reader collected the gauges: the worker now reads the
            # queue's figures at each heartbeat (after these runs ended) for them
            for _ in range(1000):
                if "art.queue.depth" in found:
                    break
                await asyncio.sleep(0.01)
                found = points()
            workers[0].stop()
            await serving
    provider.shutdown()

    (started,) = found["art.queue.runs.started"]
    assert started.value == 3 and started.attributes == {"art.queue": "art"}
    (ended,) = found["art.queue.runs.ended"]
    assert ended.value == 3 and ended.attributes["art.outcome"] == "completed"
    assert found["art.queue.run.duration"][0].count == 3
    assert found["art.queue.run.wait"][0].count == 3
    (depth,) = found["art.queue.depth"]
    assert depth.value == 0
    jobs = {p.attributes["art.storage.contract"]: p.value for p in found["art.queue.jobs"]}
    assert jobs == {"succeeded": 3}
    workers_by_state = {p.attributes["art.stalled"]: p.value for p in found["art.queue.workers"]}
    assert workers_by_state == {False: 1, True: 0}


@pytest.mark.postgres
async def test_a_worker_presumed_dead_leaves_its_run_to_the_worker_that_took_it_over(
    queue_database: str, gate: Gate
) -> None:
    """A live worker the others took for dead (its heartbeats stopped reaching the database):
    the run it holds is taken over, the lease keeps the two from running it together, the
    run's job is ended once, by its new worker, and the worker starts again under a new id
    (it does not stop: after a long outage every worker may have been taken for dead)."""
    import psycopg

    model = ScriptedModel(planning=gate_plan, synthesis="done")
    queue = FAST | {"in_process": False}
    first, second = (
        art.create_art_instance(
            model=model.model, tools=[gate.tool], storage=queue_database, queue=queue
        )
        for _ in range(2)
    )
    workers: list[Any] = []
    try:
        async with first, second:
            serving = [asyncio.create_task(run_worker(first, name="a", started=workers.append))]
            handle = await first.asubmit("slow", "t1")
            await gate.wait_entered(1)
            async with await psycopg.AsyncConnection.connect(queue_database) as conn:
                cursor = await conn.execute(  # what the others do to a worker silent too long
                    "DELETE FROM procrastinate_workers WHERE id IN"
                    " (SELECT worker_id FROM art_queue_workers WHERE name = 'a') RETURNING id"
                )
                (first_id,) = await cursor.fetchone() or (None,)
                await conn.commit()
            serving.append(
                asyncio.create_task(run_worker(second, name="b", started=workers.append))
            )

            async def taken_over() -> bool:
                job = await second.queue.backend.job(handle.id)
                return job is not None and job.state == "doing" and job.worker_id is not None

            for _ in range(200):
                if await taken_over():
                    break
                await asyncio.sleep(0.05)
            assert await taken_over()
            gate.release.set()
            record = await asyncio.wait_for(handle.result(), 20)

            async def a_again() -> list[Any]:
                return [w for w in (await second.queue.stats()).workers if w.name == "a"]

            for _ in range(200):
                if await a_again():
                    break
                await asyncio.sleep(0.05)
            (again,) = await a_again()
            assert again.worker_id != first_id and not serving[0].done()
            for worker in workers:
                worker.stop()
            await asyncio.gather(*serving)
            stats = await second.queue.stats()
    finally:
        model.unregister()
    assert record.status == "completed"
    assert gate.entered == ["slow"]  # run once, by "a"; "b" found it ended
    assert stats.jobs == {"succeeded": 1}


async def test_sqlite_worker_ids_are_never_reused_even_in_a_database_made_before(
    tmp_path: Path,
) -> None:
    """A worker id names one worker for ever: after the newest worker's row is removed (it
    stopped, or was presumed dead), the next worker gets a new id, also in a database whose
    queue tables an earlier art made (INTEGER PRIMARY KEY reused the highest id)."""
    import sqlite3

    from art.config import QueueConfig
    from art.queue.sqlite import MIGRATIONS, SQLiteQueue

    path = tmp_path / "art.db"
    with sqlite3.connect(path) as conn:  # the tables as the first version made them
        conn.execute(
            "CREATE TABLE queue_schema_version (version INTEGER PRIMARY KEY, applied_at TEXT)"
        )
        conn.executescript(MIGRATIONS[0])
        conn.execute("INSERT INTO queue_schema_version VALUES (1, '2025-01-01')")
        for worker_id in (1, 2, 3):
            conn.execute(
                "INSERT INTO queue_workers VALUES (?, 'art', 'w', 'h', 1, '2025-01', '2025-01')",
                (worker_id,),
            )
        conn.execute(  # a job still names a worker removed long ago
            "INSERT INTO queue_jobs (queue, run_id, thread_id, spec, status, worker_id,"
            " created_at) VALUES ('art', 'r1', 't1', '{}', 'succeeded', 7, '2025-01-01')"
        )
        conn.execute("DELETE FROM queue_workers WHERE id = 3")
    queue = SQLiteQueue(str(path), QueueConfig())
    try:
        first = await queue.register("a")
        assert first == 8
        await queue.unregister(first)
        assert await queue.register("b") == 9
        assert await queue.heartbeat(first) is False  # the old id is nobody's
    finally:
        await queue.close()


async def test_a_dead_lettered_run_is_listed_retried_and_discarded(sqlite_directory: Path) -> None:
    """A run whose worker died running it alone `max_worker_deaths` times ends failed,
    WORKER_DIED; `runs(["dead"])` lists it with its attempts; `retry` runs it again (it
    completes); `discard` deletes another's job and leaves its run failed in storage."""
    url = f"sqlite:///{sqlite_directory / 'a.db'}"
    plan = {
        "title": "Sum",
        "steps": [{"id": "s1", "tool": "calculator", "args": {"expression": "1+1"}}],
    }
    queue_config = {**FAST, "in_process": False, "max_worker_deaths": 1}
    with ScriptedModel(planning=plan, synthesis="2") as model:
        inst = art.create_art_instance(
            model=model.model, tools=[Calculator()], storage=url, queue=queue_config
        )
        async with inst:
            backend = open_backend(inst.storage, inst.config.queue)
            handles = [await inst.asubmit(f"q{n}", f"t{n}") for n in range(2)]
            for _ in handles:  # each taken alone by a worker that dies at once
                doomed = await backend.register("doomed")
                assert len(await backend.claim(doomed, 1)) == 1
            workers: list[Any] = []
            serving = asyncio.create_task(run_worker(inst, name="live", started=workers.append))
            try:
                ended = [await asyncio.wait_for(h.result(), 10) for h in handles]
                assert [(r.status, r.error and r.error.code) for r in ended] == [
                    ("failed", "WORKER_DIED")
                ] * 2
                dead = await inst.queue.runs(["dead"])
                assert sorted(r.run_id for r in dead) == sorted(h.id for h in handles)
                assert [[a.outcome for a in r.attempts] for r in dead] == [["worker_died"]] * 2
                assert [a.worker for a in dead[0].attempts] == ["doomed"]
                assert await inst.queue.runs(["queued", "running", "stuck"]) == []

                retried, discarded = handles
                assert await inst.queue.retry(retried.id) is True
                record = await asyncio.wait_for(retried.result(), 10)
                assert record.status == "completed" and record.error is None
                (again,) = await inst.queue.runs(["ended"])
                assert [a.outcome for a in again.attempts] == [
                    "worker_died_before_retry",
                    "completed",
                ]
                assert again.attempts[-1].worker == "live"
                assert await inst.queue.retry(retried.id) is False  # not dead any more

                assert await inst.queue.discard(discarded.id) is True
                assert await inst.queue.runs(["dead"]) == []
                assert await discarded.astatus() == "failed"  # read from storage
                with pytest.raises(ConfigurationError, match="unknown run state"):
                    await inst.queue.runs(["lost"])
            finally:
                workers[0].stop()
                await serving
                await backend.close()
