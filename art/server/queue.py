"""The queue over HTTP: list queued runs with their attempts, cancel one, retry or discard a
dead-lettered one (what `art runs`, `art cancel`, `art retry` and `art discard` do).

The routes read and change the queue of the server's storage; they run no runs (that is
`art worker`'s job, or an in-process worker's), so listing never starts a worker here.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Query
from starlette.datastructures import State
from starlette.requests import Request

from art.core.models import ArtModel
from art.queue.jobs import QueuedRun, QueuedRunState
from art.queue.runs import RunQueue
from art.server.problems import Problem

__all__ = ["close_queue", "router"]

router = APIRouter(prefix="/queue", tags=["queue"])

RunId = Annotated[str, Path(min_length=1, max_length=200)]


class QueuedRunList(ArtModel):
    runs: list[QueuedRun]


class QueueAction(ArtModel):
    run_id: str
    action: Literal["cancel", "retry", "discard"]
    done: bool


def get_queue(request: Request) -> RunQueue:
    """The app's queue, made on first use (on the storage the engine uses, unjournaled)."""
    queue: RunQueue | None = getattr(request.app.state, "art_queue", None)
    if queue is None:
        instance = request.app.state.context.instance
        storage: Any = getattr(instance.storage, "inner", instance.storage)
        queue = RunQueue(storage, instance.config.queue)
        request.app.state.art_queue = queue
    return queue


async def close_queue(state: State) -> None:
    """Close the app's queue, if a route made one (at shutdown)."""
    queue: RunQueue | None = getattr(state, "art_queue", None)
    if queue is not None:
        state.art_queue = None
        await queue.aclose()


Queue = Annotated[RunQueue, Depends(get_queue)]


@router.get("/runs", response_model=QueuedRunList)
async def list_queued_runs(
    queue: Queue,
    state: Annotated[list[QueuedRunState] | None, Query()] = None,
    thread_id: Annotated[str | None, Query(max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> QueuedRunList:
    """Queued runs, newest first, with every attempt (worker, start, end, how it ended):
    all, or those in `state` (repeat it: queued, running, stuck, dead, ended)."""
    return QueuedRunList(runs=await queue.runs(state, thread_id=thread_id, limit=limit))


@router.post("/runs/{run_id}/cancel", response_model=QueueAction)
async def cancel_queued_run(run_id: RunId, queue: Queue) -> QueueAction:
    """Cancel a run: taken out of the queue if waiting, stopped at its next step if running
    (it ends failed, CANCELLED). `done` is false if it had already ended."""
    try:
        handle = await queue.get(run_id)
    except KeyError:
        raise Problem(404, f"no queued run {run_id!r}") from None
    return QueueAction(run_id=run_id, action="cancel", done=await handle.acancel())


@router.post("/runs/{run_id}/retry", response_model=QueueAction)
async def retry_queued_run(run_id: RunId, queue: Queue) -> QueueAction:
    """Put a dead-lettered run back in the queue (it runs alone, from its stored steps).
    409 if it is not dead-lettered."""
    if not await queue.retry(run_id):
        raise Problem(409, f"run {run_id!r} is not dead-lettered", code="NOT_DEAD_LETTERED")
    return QueueAction(run_id=run_id, action="retry", done=True)


@router.post("/runs/{run_id}/discard", response_model=QueueAction)
async def discard_queued_run(run_id: RunId, queue: Queue) -> QueueAction:
    """Delete a dead-lettered run's job (the run stays failed in storage). 409 if it is not
    dead-lettered."""
    if not await queue.discard(run_id):
        raise Problem(409, f"run {run_id!r} is not dead-lettered", code="NOT_DEAD_LETTERED")
    return QueueAction(run_id=run_id, action="discard", done=True)
