"""`art submit`, `art worker` and `art workers`.

Most run in-process through typer's CliRunner, with a worker (when one is needed) in a
thread of its own; one test runs the real `art worker` command in a subprocess and stops it
with SIGTERM.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from art.cli.app import EXIT_OK, EXIT_USAGE, app
from art.queue import run_worker

from . import app as queue_app

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.usefixtures("restore_logging")


@pytest.fixture
def invoke() -> Any:
    runner = CliRunner()

    def call(*args: str) -> Any:
        env = {"COLUMNS": "160", "NO_COLOR": "1", "ART_DEBUG": ""}
        return runner.invoke(app, list(args), env=env)

    return call


@pytest.fixture
def db(sqlite_directory: Path) -> str:
    return f"sqlite:///{sqlite_directory / 'art.db'}"


@pytest.fixture
def worker_thread(db: str, tmp_path: Path) -> Iterator[None]:
    """A worker on `db`, in a thread with its own event loop (as another process would)."""
    settings = queue_app.Settings(
        storage=db, log=str(tmp_path / "tools.log"), depth=2, step_s=0, queue={"poll_s": 0.05}
    )
    inst, model = queue_app.make_instance(settings)
    workers: list[Any] = []
    ready = threading.Event()

    def started(worker: Any) -> None:
        workers.append(worker)
        ready.set()

    def serve() -> None:
        async def main() -> None:
            async with inst:
                await run_worker(inst, name="thread-worker", started=started)

        asyncio.run(main())

    thread = threading.Thread(target=serve, name="test-worker")
    thread.start()
    assert ready.wait(30)
    try:
        yield
    finally:
        workers[0].stop()
        thread.join(30)
        model.unregister()


def test_submit_queues_and_workers_shows_the_depth(invoke: Any, db: str) -> None:
    submitted = invoke("submit", "what is 2+2?", "-T", "sums", "--storage", db)
    assert submitted.exit_code == EXIT_OK, submitted.output
    run_id = re.search(r"queued run (\w+) on thread sums", submitted.stdout)
    assert run_id, submitted.stdout
    assert "1 waiting in queue art, 0 worker(s) alive; start one with: art worker" in (
        submitted.stdout
    )

    as_json = invoke("submit", "and 3+3?", "-T", "sums", "--storage", db, "--json")
    document = json.loads(as_json.stdout)
    assert document["thread_id"] == "sums" and document["status"] == "queued"
    assert document["queue"] == "art" and len(document["run_id"]) == 32

    shown = invoke("workers", "--storage", db)
    assert shown.exit_code == EXIT_OK
    assert "queue art on SQLiteStorage" in shown.stdout
    assert "2 waiting, 0 running (2 todo)" in shown.stdout
    assert "No workers. Start one with art worker." in shown.stdout
    stats = json.loads(invoke("workers", "--storage", db, "--json").stdout)
    assert stats["queued"] == 2 and stats["jobs"] == {"todo": 2} and stats["workers"] == []

    other = json.loads(invoke("workers", "--storage", db, "--queue", "other", "--json").stdout)
    assert other["queued"] == 0 and other["queue"] == "other"


def test_submit_wait_prints_the_end_and_workers_lists_the_worker(
    invoke: Any, db: str, worker_thread: None
) -> None:
    done = invoke("submit", "t1-r0", "-T", "t1", "--storage", db, "--wait")
    assert done.exit_code == EXIT_OK, done.output
    assert "done" in done.stdout
    assert re.search(r"completed  run \w+ · thread t1", done.stdout)

    as_json = invoke("submit", "t1-r1", "-T", "t1", "--storage", db, "--wait", "--json")
    record = json.loads(as_json.stdout)
    assert record["status"] == "completed" and record["answer"] == "done"
    assert [s["result"]["output"] for s in record["steps"].values()] == [1, 2]

    shown = invoke("workers", "--storage", db)
    assert "0 waiting, 0 running (2 succeeded)" in shown.stdout
    assert re.search(r"\d+ +thread-worker +\S+ +\d+ +0 +[\d.]+ m?s ago +alive", shown.stdout)


def test_bad_queue_options_are_usage_errors(invoke: Any, db: str) -> None:
    bad = invoke("worker", "--storage", db, "--heartbeat", "5", "--stalled-after", "6")
    assert bad.exit_code == EXIT_USAGE
    assert "error CONFIG_ERROR: bad queue option" in bad.output
    assert "at least twice heartbeat_s" in bad.output
    mixed = invoke("worker", "--instance", "x:y", "--storage", db)
    assert mixed.exit_code == EXIT_USAGE and "leave out --model, --tools and --storage" in (
        mixed.output
    )
    missing = invoke("worker", "--instance", "no_such_module_here:make")
    assert missing.exit_code == EXIT_USAGE and "cannot import" in missing.output
    timeout = invoke("submit", "q", "--storage", db, "--wait", "--timeout", "0.05")
    assert timeout.exit_code == 1 and "error TIMEOUT" in timeout.output


@pytest.mark.slow
def test_the_art_worker_command_runs_runs_and_stops_on_sigterm(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'art.db'}"
    settings = queue_app.Settings(storage=db, log=str(tmp_path / "tools.log"), depth=2, step_s=0)
    env = {**os.environ, **settings.env(), "LITELLM_LOCAL_MODEL_COST_MAP": "True", "COLUMNS": "300"}
    entry = Path(sys.executable).with_name("art")
    art = [str(entry) if entry.exists() else str(shutil.which("art"))]
    worker = subprocess.Popen(
        [*art, "worker", "--instance", "tests/queued/app.py:from_env", "--name", "cli-worker"],
        cwd=ROOT,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        done = subprocess.run(
            [*art, "submit", "t1-r0", "-T", "t1", "--storage", db, "--wait", "--json"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["status"] == "completed"
        shown = subprocess.run(
            [*art, "workers", "--storage", db, "--json"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        (listed,) = json.loads(shown.stdout)["workers"]
        assert listed["name"] == "cli-worker" and listed["pid"] == worker.pid
        started = time.monotonic()
        worker.send_signal(signal.SIGTERM)
        _, stderr = worker.communicate(timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert worker.returncode == 0, stderr
    assert time.monotonic() - started < 10
    assert "art worker on SQLiteStorage" in stderr and "queue art: 8 runs at a time" in stderr
    assert "worker stopped" in stderr


def test_runs_lists_queued_runs_and_cancel_cancels_one(invoke: Any, db: str) -> None:
    first = json.loads(invoke("submit", "q1", "-T", "a", "--storage", db, "--json").stdout)
    invoke("submit", "q2", "-T", "b", "--storage", db)

    listed = invoke("runs", "--storage", db)
    assert listed.exit_code == EXIT_OK, listed.output
    assert first["run_id"] in listed.stdout and "queued" in listed.stdout
    only_a = json.loads(invoke("runs", "--storage", db, "-t", "a", "--json").stdout)["runs"]
    assert [(r["run_id"], r["state"], r["query"]) for r in only_a] == [
        (first["run_id"], "queued", "q1")
    ]

    cancelled = invoke("cancel", first["run_id"], "--storage", db)
    assert cancelled.exit_code == EXIT_OK, cancelled.output
    assert f"run {first['run_id']}: cancelled" in cancelled.stdout
    again = invoke("cancel", first["run_id"], "--storage", db)
    assert again.exit_code == 1 and "it had already ended" in again.output
    missing = invoke("cancel", "no-such-run", "--storage", db)
    assert missing.exit_code == 1 and "no queued run 'no-such-run'" in missing.output

    ended = json.loads(invoke("runs", "--storage", db, "-s", "ended", "--json").stdout)["runs"]
    assert [(r["run_id"], r["job_state"]) for r in ended] == [(first["run_id"], "cancelled")]
    queued = json.loads(invoke("runs", "--storage", db, "-s", "queued", "--json").stdout)
    assert [r["query"] for r in queued["runs"]] == ["q2"]
    assert invoke("retry", first["run_id"], "--storage", db).exit_code == 1  # not dead
    bad = invoke("runs", "--storage", db, "-s", "lost")
    assert bad.exit_code == EXIT_USAGE and "unknown run state" in bad.output
