"""Scheduled runs: `run_worker(schedules=...)` (`art worker --schedule`) queues a run at each
fire time; two workers with the same schedule queue each fire time once."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

import art
from art.errors import ConfigurationError
from art.queue import run_worker
from art.queue.schedule import Schedule
from art.testing import ScriptedModel
from art.tools import Calculator

from .test_queue import FAST, _empty_storage

PLAN = {
    "title": "One sum",
    "steps": [{"id": "s1", "tool": "calculator", "args": {"expression": "1 + 1"}}],
}
EVERY_SECOND = "* * * * * *"  # six fields: seconds last


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def storage_url(request: pytest.FixtureRequest) -> str:
    return _empty_storage(request.param, request)


@pytest.mark.slow
async def test_two_workers_with_one_schedule_queue_each_fire_time_once(storage_url: str) -> None:
    schedule = Schedule(cron=EVERY_SECOND, thread_id="t-cron", query="what is 1 + 1?")
    with ScriptedModel(planning=PLAN, synthesis="2") as model:
        instances = [
            art.create_art_instance(
                model=model.model, tools=[Calculator()], storage=storage_url, queue=FAST
            )
            for _ in range(2)
        ]
        workers: list[Any] = []
        serving = [
            asyncio.create_task(
                run_worker(inst, name=f"w{n}", started=workers.append, schedules=[schedule])
            )
            for n, inst in enumerate(instances)
        ]
        try:
            await asyncio.sleep(3.5)
        finally:
            for worker in workers:
                worker.stop()
            await asyncio.gather(*serving)
        # What the schedules queued, whether or not a worker has run it yet (the first
        # run of a process can take seconds: it imports the LLM client).
        reader = instances[0]
        async with reader:
            runs = await reader.queue.runs(thread_id="t-cron")
        for inst in instances[1:]:
            await inst.aclose()

    ids = [run.run_id for run in runs]
    assert 2 <= len(ids) <= 4, ids  # one a second, each queued once although two workers ran
    assert len(set(ids)) == len(ids)
    assert all(run_id.startswith("sched-") for run_id in ids)
    assert {run.query for run in runs} == {"what is 1 + 1?"}


def test_a_fire_time_names_the_same_run_in_every_worker() -> None:
    schedule = Schedule(cron="0 9 * * 1-5", thread_id="daily", query="Summarize yesterday")
    monday = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)

    fire = schedule.after(monday)

    assert fire == datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
    assert schedule.after(fire) == datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
    again = Schedule.parse("0 9 * * 1-5|daily|Summarize yesterday")
    assert again == schedule and again.run_id(fire) == schedule.run_id(fire)
    assert schedule.run_id(fire) != schedule.run_id(schedule.after(fire))


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("0 9 * * *|daily", "CRON|THREAD|QUERY"),
        ("every day|daily|hi", "not a cron expression"),
        ("0 9 * * *| |hi", "CRON|THREAD|QUERY"),
    ],
)
def test_a_bad_schedule_is_a_configuration_error(text: str, problem: str) -> None:
    with pytest.raises(ConfigurationError, match=problem):
        Schedule.parse(text)
