"""Scheduled runs: a cron expression, a thread and a query, submitted by `art worker`.

Each fire time becomes one queued run whose id is derived from the schedule and the
time, so any number of workers may carry the same schedule: the first to submit a fire
time queues it and the others' submits are the idempotent retries `RunQueue.submit`
already accepts. Fire times pass while no worker runs are not made up for.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Protocol

from pydantic import field_validator

from art.core.log import get_logger
from art.core.models import ArtModel
from art.errors import ConfigurationError

if TYPE_CHECKING:
    from art.queue.runs import RunQueue

__all__ = ["Schedule", "run_schedules"]

log = get_logger(__name__)


class Schedule(ArtModel):
    """Run `query` on `thread_id` at each time `cron` names (five fields, or six with
    seconds last; UTC)."""

    cron: str
    thread_id: str
    query: str

    @field_validator("cron")
    @classmethod
    def _valid_cron(cls, value: str) -> str:
        croniter = _croniter()
        if not croniter.is_valid(value):
            raise ValueError(f"not a cron expression: {value!r}")
        return value

    @classmethod
    def parse(cls, text: str) -> Schedule:
        """`CRON|THREAD|QUERY`, as `art worker --schedule` takes it."""
        parts = text.split("|", 2)
        if len(parts) != 3 or not all(part.strip() for part in parts):
            raise ConfigurationError(
                f"a schedule is CRON|THREAD|QUERY (e.g. '0 9 * * 1-5|daily|Summarize "
                f"yesterday'), not {text[:80]!r}"
            )
        try:
            return cls(cron=parts[0].strip(), thread_id=parts[1].strip(), query=parts[2].strip())
        except ValueError as exc:
            raise ConfigurationError(f"bad schedule {text[:80]!r}: {exc}") from None

    def after(self, moment: datetime) -> datetime:
        """The first fire time after `moment`."""
        fire: datetime = _croniter()(self.cron, moment).get_next(datetime)
        return fire

    def run_id(self, fire: datetime) -> str:
        """The id of the run this schedule queues at `fire` (the same in every worker)."""
        key = f"{self.cron}|{self.thread_id}|{self.query}|{fire.astimezone(UTC).isoformat()}"
        return "sched-" + hashlib.sha256(key.encode()).hexdigest()[:32]


async def run_schedules(queue: RunQueue, schedules: Sequence[Schedule]) -> None:
    """Submit each schedule's runs at their fire times until cancelled."""
    if not schedules:
        return
    now = datetime.now(UTC)
    upcoming = [(schedule.after(now), index) for index, schedule in enumerate(schedules)]
    while True:
        fire, index = min(upcoming)
        await asyncio.sleep(max(0.0, (fire - datetime.now(UTC)).total_seconds()))
        schedule = schedules[index]
        run_id = schedule.run_id(fire)
        try:
            await queue.submit(schedule.query, schedule.thread_id, {"run_id": run_id})
        except Exception as exc:  # a storage outage must not end the worker's schedules
            log.warning(
                "scheduled run not submitted",
                thread_id=schedule.thread_id,
                fire=fire.isoformat(),
                error=str(exc),
            )
        else:
            log.info("scheduled run submitted", thread_id=schedule.thread_id, run_id=run_id)
        upcoming[index] = (schedule.after(fire), index)


class _Cron(Protocol):
    def get_next(self, ret_type: type[datetime]) -> datetime: ...


class _Croniter(Protocol):
    """The part of croniter's class that schedules use."""

    def __call__(self, expr_format: str, start_time: datetime) -> _Cron: ...

    def is_valid(self, expression: str) -> bool: ...


def _croniter() -> _Croniter:
    try:
        # croniter ships no type information (and no stubs package is pinned)
        from croniter import croniter  # type: ignore[import-untyped]
    except ImportError:
        raise ConfigurationError(
            'scheduled runs need croniter (in the queue extra: pip install "art-pes[queue]")'
        ) from None
    described: _Croniter = croniter
    return described
