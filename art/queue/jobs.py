"""A queued run while it waits and runs: its job, the job's states, and the queue's figures.

Every backend keeps one job per submitted run. A job's arguments are a `JobSpec` (what a
worker needs to run it); its state is one of `JobState`, the vocabulary procrastinate uses
(`todo` waiting, `doing` taken by a worker, then one final state).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from art.core.json import JsonObject
from art.core.models import ArtModel

__all__ = [
    "FINAL_JOB_STATES",
    "QUEUED_RUN_STATES",
    "WORKER_DIED",
    "Attempt",
    "CancelOutcome",
    "JobSpec",
    "JobState",
    "JobView",
    "QueueStats",
    "QueuedRun",
    "QueuedRunState",
    "RunStatus",
    "TakeOver",
    "WorkerInfo",
    "job_states_of",
    "queued_run_state",
]

#: A dead-lettered job's error: its worker died running it `max_worker_deaths` times.
WORKER_DIED = "WORKER_DIED"

JobState = Literal["todo", "doing", "succeeded", "failed", "cancelled", "aborted"]
FINAL_JOB_STATES: frozenset[str] = frozenset({"succeeded", "failed", "cancelled", "aborted"})

#: What a run handle reports: waiting or running in the queue, then the run's own status.
RunStatus = Literal["queued", "running", "suspended", "completed", "partial", "failed", "abandoned"]

#: What cancelling a queued run did: taken out of the queue before it started, asked to
#: stop on its worker, nothing (it had ended already), or no such run.
CancelOutcome = Literal["cancelled", "aborting", "ended", "missing"]


@dataclass(frozen=True)
class JobSpec:
    """One queued run, as its job's JSON arguments: everything a worker needs to run it."""

    run_id: str
    thread_id: str
    query: str
    options: dict[str, Any]
    submitted_at: str  # ISO 8601, UTC

    def to_args(self) -> JsonObject:
        return {
            "run_id": self.run_id,
            "thread_id": self.thread_id,
            "query": self.query,
            "options": self.options,
            "submitted_at": self.submitted_at,
        }

    @classmethod
    def from_args(cls, args: dict[str, Any]) -> JobSpec:
        return cls(
            run_id=args["run_id"],
            thread_id=args["thread_id"],
            query=args["query"],
            options=dict(args.get("options") or {}),
            submitted_at=args.get("submitted_at") or "",
        )


@dataclass(frozen=True)
class JobView:
    """A job as a backend reports it."""

    spec: JobSpec
    state: JobState
    attempts: int  # how many times it went back to the queue (taken over, handed back)
    worker_id: int | None = None
    error: str | None = None
    # A cancel arrived while it was on a worker (honoured by whoever runs it next).
    abort_requested: bool = False
    # Taken off a worker that died running other runs too: it runs alone until it ends.
    isolated: bool = False


@dataclass(frozen=True)
class TakeOver:
    """What taking over the jobs of dead workers did, for the worker to record in storage:
    run ids put back in the queue; runs dead-lettered after `max_worker_deaths` (spec, how
    many times); runs whose cancel had arrived (their job ended `aborted`)."""

    requeued: list[str]
    dead: list[tuple[JobSpec, int]]
    cancelled: list[JobSpec]

    @property
    def run_ids(self) -> list[str]:
        return [
            *self.requeued,
            *(s.run_id for s, _ in self.dead),
            *(s.run_id for s in self.cancelled),
        ]


#: A queued run as `art runs` lists it: waiting, on a live worker, on a worker presumed
#: dead and not yet taken over (`stuck`), dead-lettered (its job failed: its worker died
#: running it `max_worker_deaths` times, or kept raising), or ended.
QueuedRunState = Literal["queued", "running", "stuck", "dead", "ended"]
QUEUED_RUN_STATES: tuple[str, ...] = ("queued", "running", "stuck", "dead", "ended")


class Attempt(ArtModel):
    """One time a worker took a queued run, and how it ended: the run's status
    (`completed`, `partial`, `failed`, `suspended`, `abandoned`), `handed_back` (its worker
    stopped), `raised` (its worker raised), `cancelled`, `worker_died` (alone on a worker
    that died: counts towards `max_worker_deaths`), `worker_died_with_others` (not
    counted), `worker_died_before_retry` (a death before the run was retried by hand); None
    while it runs."""

    attempt: int
    worker_id: int | None = None
    worker: str | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    outcome: str | None = None


class QueuedRun(ArtModel):
    """A run in the queue (its job), with every attempt at it."""

    run_id: str
    thread_id: str
    query: str
    state: QueuedRunState
    job_state: str
    worker_id: int | None = None
    submitted_at: str = ""
    error: str | None = None
    attempts: list[Attempt] = []


def queued_run_state(job_state: str, *, stale_worker: bool) -> QueuedRunState:
    """What `art runs` calls a job in `job_state` (`stale_worker`: its worker is silent
    longer than `stalled_after_s`, or gone)."""
    if job_state == "todo":
        return "queued"
    if job_state == "doing":
        return "stuck" if stale_worker else "running"
    if job_state == "failed":
        return "dead"
    return "ended"


def job_states_of(states: set[str] | None) -> list[str] | None:
    """The job states holding runs in `states` (None: all)."""
    if not states:
        return None
    by_state = {
        "queued": ["todo"],
        "running": ["doing"],
        "stuck": ["doing"],
        "dead": ["failed"],
        "ended": ["succeeded", "cancelled", "aborted"],
    }
    return sorted({job for state in states for job in by_state[state]})


class WorkerInfo(ArtModel):
    """One registered worker, as `art workers` shows it."""

    worker_id: int
    name: str | None = None
    host: str | None = None
    pid: int | None = None
    started_at: datetime | None = None
    last_heartbeat: datetime
    heartbeat_age_s: float
    running: int = 0
    #: Silent longer than `stalled_after_s`: presumed dead, its runs are being taken over.
    stalled: bool = False


class QueueStats(ArtModel):
    """A queue's depth, its jobs by state and its workers."""

    queue: str
    backend: str
    jobs: dict[str, int]
    workers: list[WorkerInfo]

    @property
    def queued(self) -> int:
        """Runs waiting for a worker (the queue's depth)."""
        return self.jobs.get("todo", 0)

    @property
    def running(self) -> int:
        return self.jobs.get("doing", 0)
