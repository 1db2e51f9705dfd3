"""The queue's routes of `art serve`: list queued runs, cancel, retry and discard."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from pathlib import Path
from typing import Any

from art.queue import RunQueue
from art.queue.execute import record_take_over

QUEUE = {"heartbeat_s": 0.1, "stalled_after_s": 0.3, "max_worker_deaths": 1}


def scheduled(url: str, run_id: str, at: str | None) -> None:
    """Set a queued run's `scheduled_at` in the queue's SQLite file."""
    with contextlib.closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn, conn:
        conn.execute("UPDATE queue_jobs SET scheduled_at = ? WHERE run_id = ?", (at, run_id))


async def _submit_and_dead_letter(url: str) -> tuple[str, str]:
    """Two queued runs; the second's worker dies running it alone (dead-lettered)."""
    async with RunQueue(url, QUEUE) as queue:
        waiting = await queue.submit("waits", "t1")
        doomed_run = await queue.submit("dies", "t2")
        backend: Any = queue.backend
        doomed = await backend.register("doomed")
        (job,) = await backend.claim(doomed, 1)
        assert job.spec.run_id == waiting.id  # the oldest first: give it back, take the other
        await backend.give_back(waiting.id, doomed)
        await backend.unregister(doomed)
        doomed = await backend.register("doomed")
        # Only the second is waiting now: park the first.
        scheduled(url, waiting.id, "9999")
        (job,) = await backend.claim(doomed, 1)
        assert job.spec.run_id == doomed_run.id
        scheduled(url, waiting.id, None)
        await asyncio.sleep(QUEUE["stalled_after_s"] + 0.1)
        live = await backend.register("live")
        await record_take_over(queue.storage, await backend.take_over(live), backend, live)
        await backend.unregister(live)
        return waiting.id, doomed_run.id


def test_queue_routes_list_cancel_retry_and_discard(make_server: Any, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'art.db'}"
    waiting, dead = asyncio.run(_submit_and_dead_letter(url))
    server = make_server(storage=url)
    client = server.client()

    listed = client.get("/queue/runs").json()["runs"]
    assert {(r["runId"], r["state"]) for r in listed} == {(waiting, "queued"), (dead, "dead")}
    (dead_run,) = client.get("/queue/runs", params={"state": "dead"}).json()["runs"]
    assert [a["outcome"] for a in dead_run["attempts"]] == ["worker_died"]
    assert dead_run["error"] == "WORKER_DIED"
    assert client.get("/queue/runs", params={"thread_id": "t1"}).json()["runs"][0]["runId"] == (
        waiting
    )
    assert client.get("/queue/runs", params={"state": "lost"}).status_code == 422

    cancelled = client.post(f"/queue/runs/{waiting}/cancel")
    assert cancelled.json() == {"runId": waiting, "action": "cancel", "done": True}
    assert client.post(f"/queue/runs/{waiting}/cancel").json()["done"] is False
    assert client.post("/queue/runs/no-such-run/cancel").status_code == 404
    refused = client.post(f"/queue/runs/{waiting}/retry")
    assert refused.status_code == 409 and refused.json()["code"] == "NOT_DEAD_LETTERED"

    assert client.post(f"/queue/runs/{dead}/retry").json()["done"] is True
    (again,) = client.get("/queue/runs", params={"state": "queued"}).json()["runs"]
    assert again["runId"] == dead
    assert client.post(f"/queue/runs/{dead}/discard").status_code == 409  # not dead any more
