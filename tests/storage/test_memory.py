"""MemoryStorage specifics: what a read parses, on a thread whose history keeps growing."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

import art.adapters.memory as memory
from art.adapters.memory import MemoryStorage
from art.responses import StepRecord
from art.storage.contract import RunRecord, Suspension

from .test_contract import completed_step, make_run, make_suspension


@pytest.fixture
def parsed(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How many records of each type the adapter parses from JSON."""
    counts: Counter[str] = Counter()
    load_json = memory.load_json

    def counting(model: type[Any], text: str | bytes) -> Any:
        counts[model.__name__] += 1
        return load_json(model, text)

    monkeypatch.setattr(memory, "load_json", counting)
    return counts


async def _thread_with_history(storage: MemoryStorage, thread_id: str, runs: int) -> RunRecord:
    """A suspended run followed by `runs` finished runs of 20 steps each; returns the
    suspended one (the thread's active run, behind all the others)."""
    active = make_run(thread_id, "waiting for a decision", status="suspended")
    await storage.create_run(active)
    for index in range(runs):
        finished = make_run(thread_id, f"question {index}", status="completed")
        finished.steps = {f"s{n}": completed_step(f"s{n}", n) for n in range(20)}
        await storage.create_run(finished)
    return active


async def test_the_active_run_is_found_without_parsing_the_finished_ones(
    parsed: Counter[str],
) -> None:
    storage = MemoryStorage()
    active = await _thread_with_history(storage, "t-chat", runs=30)
    active.steps = {"s1": completed_step("s1", 391)}
    await storage.save_step(active.run_id, active.steps["s1"])

    found = await storage.get_active_run("t-chat")

    assert found is not None and found.run_id == active.run_id
    assert found.steps["s1"].result is not None and found.steps["s1"].result.output == 391
    assert parsed == {RunRecord.__name__: 1, StepRecord.__name__: 1}


async def test_a_status_written_by_update_or_finish_is_what_the_search_sees() -> None:
    storage = MemoryStorage()
    active = await _thread_with_history(storage, "t-status", runs=2)

    active.status = "abandoned"
    await storage.update_run(active)
    assert await storage.get_active_run("t-status") is None

    active.status = "running"
    await storage.update_run(active)
    found = await storage.get_active_run("t-status")
    assert found is not None and found.run_id == active.run_id

    active.status = "completed"
    await storage.finish_run(active, [])
    assert await storage.get_active_run("t-status") is None


async def test_listing_threads_parses_no_step_records(parsed: Counter[str]) -> None:
    storage = MemoryStorage()
    await _thread_with_history(storage, "t-list", runs=3)

    (summary,) = await storage.list_threads()

    assert (summary.runs, summary.last_query, summary.last_status) == (
        4,
        "question 2",
        "completed",
    )
    assert parsed == {RunRecord.__name__: 1}


async def test_listing_pending_suspensions_parses_only_those(parsed: Counter[str]) -> None:
    storage = MemoryStorage()
    run = make_run("t-hitl", status="suspended")
    await storage.create_run(run)
    added = [make_suspension("t-hitl", run.run_id, f"s{n}") for n in range(12)]
    for suspension in added:
        await storage.add_suspension(suspension)
    for suspension in added[:10]:  # decided by a person, one run after another
        await storage.decide_suspension("t-hitl", suspension.suspension_id, {"approved": True})
    parsed.clear()

    pending = await storage.list_suspensions("t-hitl")

    assert [s.suspension_id for s in pending] == [s.suspension_id for s in added[10:]]
    assert parsed == {Suspension.__name__: 2}
    everything = await storage.list_suspensions("t-hitl", pending_only=False)
    assert [s.pending for s in everything] == [False] * 10 + [True] * 2
