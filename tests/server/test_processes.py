"""Several `art serve` processes on one PostgreSQL, and SIGTERM.

- two servers serve the same threads: a run executing on one is a 409 on the other (the
  lease holds across processes), its events stream live from the other (read from
  storage), and a suspension raised on one is decided on the other;
- SIGTERM: a run that can finish within the grace period finishes; one that cannot is
  interrupted and left as a crash leaves it, and the same query on the other server
  continues it: finished steps are not run again.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from .conftest import SseReader

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

LAUNCHER = Path(__file__).with_name("scripted_serve.py")
ROOT = Path(__file__).resolve().parents[2]


@dataclass
class ServeProcess:
    process: subprocess.Popen[str]
    url: str
    client: httpx.Client
    output: Path  # what it printed

    def stop(self) -> None:
        self.client.close()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_server(storage: str, log: Path, *args: str) -> ServeProcess:
    env = {**os.environ, "ART_TEST_WORK_LOG": str(log), "PYTHONPATH": str(ROOT)}
    output = log.with_name(f"serve-{time.monotonic_ns()}.log")
    with output.open("w") as sink:
        process = subprocess.Popen(
            [sys.executable, str(LAUNCHER), "--storage", storage, "--port", "0", *args],
            stdout=sink,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=ROOT,
        )
    deadline = time.monotonic() + 90
    while not (found := re.search(r"art serve: (http://127\.0\.0\.1:\d+)", output.read_text())):
        assert process.poll() is None, "the server did not start:\n" + output.read_text()
        assert time.monotonic() < deadline, "the server did not start in time"
        time.sleep(0.1)
    client = httpx.Client(base_url=found.group(1), timeout=60)
    while True:  # listening once uvicorn has started the app
        try:
            if client.get("/healthz").status_code == 200:
                break
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline and process.poll() is None, output.read_text()
        time.sleep(0.1)
    return ServeProcess(process, found.group(1), client, output)


def work_log(log: Path) -> list[tuple[str, str, str]]:
    """(event, thread, step) of every `work` call, in order."""
    if not log.exists():
        return []
    return [tuple(line.split()[:3]) for line in log.read_text().splitlines()]  # type: ignore[misc]


def wait_for(predicate: object, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def database(postgres_server: str) -> Iterator[str]:
    """A fresh database for the module's servers."""
    from postgres_databases import fresh_database

    with fresh_database(postgres_server) as url:
        yield url


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The `work` tool's log, shared by every server of the module."""
    return tmp_path_factory.mktemp("serve") / "work.log"


@pytest.fixture(scope="module")
def other(database: str, log: Path) -> Iterator[ServeProcess]:
    """The second server of the module (B), alive through both tests."""
    server = start_server(database, log)
    yield server
    server.stop()


def test_two_servers_on_one_postgresql_serve_the_same_threads(
    database: str, other: ServeProcess, log: Path
) -> None:
    first = start_server(database, log)
    try:
        run = first.client.post("/threads/t-shared/runs", json={"query": "work 0.6 0.6"}).json()

        busy = other.client.post("/threads/t-shared/runs", json={"query": "another"})
        assert busy.status_code == 409 and busy.json()["code"] == "THREAD_BUSY"

        path = f"/threads/t-shared/runs/{run['runId']}/events"
        with other.client.stream("GET", path) as stream:  # executing on the first server
            events = SseReader(stream).read()
        assert events[0].event == "session:start" and events[-1].event == "session:end"
        assert events[-1].data["data"]["status"] == "success"
        ids = [int(e.id) for e in events]
        assert ids == sorted(ids) and len(set(ids)) == len(ids)
        done = other.client.get(f"/threads/t-shared/runs/{run['runId']}").json()
        assert done["status"] == "completed" and not done["executingHere"]
        assert [(e, s) for e, t, s in work_log(log) if t == "t-shared"] == [
            ("started", "s1"),
            ("finished", "s1"),
            ("started", "s2"),
            ("finished", "s2"),
        ]

        suspended = first.client.post(
            "/threads/t-hitl/runs?wait=true", json={"query": "approve please"}
        ).json()
        sid = suspended["metadata"]["suspensionId"]
        decided = other.client.post(
            f"/threads/t-hitl/suspensions/{sid}/decision?wait=true", json={"approved": True}
        ).json()
        assert decided["metadata"]["status"] == "success"
        assert decided["metadata"]["runId"] == suspended["metadata"]["runId"]
        threads = {t["threadId"] for t in first.client.get("/threads").json()["threads"]}
        assert threads >= {"t-shared", "t-hitl"}
    finally:
        first.stop()


def test_a_suspension_decided_on_two_servers_is_already_decided_on_the_second(
    database: str, other: ServeProcess, log: Path
) -> None:
    first = start_server(database, log)
    try:
        suspended = first.client.post(
            "/threads/t-twice/runs?wait=true", json={"query": "approve slowly"}
        ).json()
        path = f"/threads/t-twice/suspensions/{suspended['metadata']['suspensionId']}/decision"

        won = first.client.post(path, json={"approved": True})
        wait_for(lambda: ("started", "t-twice", "s2") in work_log(log))  # it holds the thread
        lost = other.client.post(path, json={"approved": False})
    finally:
        first.stop()

    assert won.status_code == 202
    assert lost.status_code == 409, lost.json()
    assert lost.json()["code"] == "SUSPENSION_ALREADY_DECIDED"


def test_sigterm_finishes_short_runs_and_interrupts_long_ones_for_a_retry(
    database: str, other: ServeProcess, log: Path
) -> None:
    first = start_server(database, log, "--grace", "2.5")
    long = first.client.post("/threads/t-long/runs", json={"query": "work 0.2 4 0.2"}).json()
    wait_for(lambda: ("started", "t-long", "s2") in work_log(log))
    short = first.client.post("/threads/t-short/runs", json={"query": "work 1"}).json()
    wait_for(lambda: ("started", "t-short", "s1") in work_log(log))

    first.process.send_signal(signal.SIGTERM)  # s2 of the long run needs 4 s, the grace is 2.5
    first.process.wait(60)
    first.client.close()

    finished = other.client.get(f"/threads/t-short/runs/{short['runId']}").json()
    assert finished["status"] == "completed"  # it had time to finish
    interrupted = other.client.get(f"/threads/t-long/runs/{long['runId']}").json()
    assert interrupted["status"] == "running"  # left as a crash leaves it
    assert interrupted["steps"]["s1"]["status"] == "completed"
    assert interrupted["steps"]["s2"]["status"] != "completed"

    retried = other.client.post("/threads/t-long/runs?wait=true", json={"query": "work 0.2 4 0.2"})

    body = retried.json()
    assert body["metadata"]["status"] == "success"
    assert body["metadata"]["runId"] == long["runId"]  # the same run, continued
    calls = [(e, s) for e, t, s in work_log(log) if t == "t-long"]
    assert calls.count(("finished", "s1")) == 1  # not run again
    assert calls.count(("started", "s2")) == 2  # interrupted, then run again
    assert calls.count(("finished", "s3")) == 1
