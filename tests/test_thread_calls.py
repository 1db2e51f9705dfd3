"""ThreadCalls: def-tool calls on pool threads, results handed over in batches, the gate."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import threading
import time
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

import art
from art.engine.execute import PlanExecution
from art.engine.execution_state import ExecutionDeps
from art.planning.plans import Plan
from art.testing import make_run_context
from art.tooling.invocation import invoke_tool
from art.tooling.registry import ToolRegistry
from art.tooling.threads import ThreadCalls

GUARD_S = 5.0  # a lost hand-over shows up as a timeout, never as a hung test


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    executor = ThreadPoolExecutor(max_workers=4)
    yield executor
    executor.shutdown(wait=True, cancel_futures=True)


def blocked(pool: ThreadPoolExecutor, workers: int) -> threading.Event:
    """Occupy `workers` threads of `pool` until the returned event is set."""
    release = threading.Event()
    started = threading.Barrier(workers + 1)

    def hold() -> None:
        started.wait()
        release.wait(GUARD_S)

    for _ in range(workers):
        pool.submit(hold)
    started.wait(GUARD_S)
    return release


async def test_a_call_runs_on_a_pool_thread_and_returns_its_value(pool):
    calls = ThreadCalls(pool)
    async with asyncio.timeout(GUARD_S):
        ident = await calls.call(threading.get_ident)
    assert ident != threading.get_ident()


async def test_an_exception_raised_in_the_call_reaches_its_caller(pool):
    calls = ThreadCalls(pool)

    def fail() -> None:
        raise ValueError("no such row")

    with pytest.raises(ValueError, match="no such row"):
        async with asyncio.timeout(GUARD_S):
            await calls.call(fail)


async def test_results_handed_over_in_batches_each_reach_their_own_caller(pool):
    calls = ThreadCalls(pool, handoff_after_s=60.0)

    def square(n: int) -> int:
        time.sleep(0.001 * (n % 3))
        return n * n

    async with asyncio.timeout(GUARD_S):
        results = await asyncio.gather(
            *(calls.call(functools.partial(square, n)) for n in range(60))
        )
    assert results == [n * n for n in range(60)]


async def test_a_call_cancelled_before_a_thread_takes_it_never_runs():
    pool = ThreadPoolExecutor(max_workers=1)
    release = blocked(pool, 1)
    ran: list[str] = []
    calls = ThreadCalls(pool)
    task = asyncio.create_task(calls.call(lambda: ran.append("ran")))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    release.set()
    pool.shutdown(wait=True)
    assert ran == []


async def test_a_call_cancelled_while_it_runs_drops_its_result_and_later_calls_still_return(pool):
    errors: list[dict[str, Any]] = []
    asyncio.get_running_loop().set_exception_handler(lambda loop, context: errors.append(context))
    calls = ThreadCalls(pool)
    started, release = threading.Event(), threading.Event()

    def slow() -> str:
        started.set()
        release.wait(GUARD_S)
        return "late"

    task = asyncio.create_task(calls.call(slow))
    await asyncio.to_thread(started.wait, GUARD_S)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    release.set()
    async with asyncio.timeout(GUARD_S):
        assert await calls.call(lambda: "next") == "next"
    assert errors == []  # the late result was not set on the cancelled future


async def test_a_pool_shut_down_with_cancel_futures_cancels_the_calls_still_queued():
    pool = ThreadPoolExecutor(max_workers=1)
    release = blocked(pool, 1)
    calls = ThreadCalls(pool)
    task = asyncio.create_task(calls.call(lambda: "never"))
    await asyncio.sleep(0.01)
    pool.shutdown(wait=False, cancel_futures=True)
    release.set()
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(GUARD_S):
            await task


async def test_a_call_to_a_pool_already_shut_down_raises_and_leaves_the_gate_open():
    pool = ThreadPoolExecutor(max_workers=1)
    pool.shutdown()
    calls = ThreadCalls(pool, handoff_after_s=0.0, handoff_wait_s=60.0)
    with pytest.raises(RuntimeError, match="shutdown"):
        await calls.call(lambda: None)
    assert not calls.gate_closed


async def test_submit_goes_to_the_pool_as_on_any_executor(pool):
    calls = ThreadCalls(pool)
    assert calls.submit(pow, 2, 10).result(timeout=GUARD_S) == 1024
    loop = asyncio.get_running_loop()
    assert await loop.run_in_executor(calls, pow, 3, 2) == 9


async def test_the_call_sees_the_contextvars_of_its_caller_through_invoke_tool(pool):
    user = contextvars.ContextVar("user", default="nobody")

    class WhoAmI(art.IToolExecutor):
        schema = art.ToolSchema(name="whoami", description="who calls", input_schema={})

        def execute(self, input: dict, context: art.ExecutionContext) -> art.ToolResult:
            return art.ToolResult(
                call_id=context.call_id, tool_name="whoami", status="success", output=user.get()
            )

    user.set("ada")
    context = art.ExecutionContext(thread_id="t", trace_id="tr", call_id="c1")
    async with asyncio.timeout(GUARD_S):
        result = await invoke_tool(WhoAmI(), {}, context, thread_pool=ThreadCalls(pool))
    assert result.status == "success" and result.output == "ada"


# -- the gate --------------------------------------------------------------------------------


async def test_calls_handed_out_within_handoff_after_s_leave_the_gate_open(pool):
    calls = ThreadCalls(pool, handoff_after_s=60.0)
    tasks = [asyncio.create_task(calls.call(lambda: None)) for _ in range(20)]
    await asyncio.sleep(0)  # every call handed out in one stretch
    assert not calls.gate_closed and calls.handing_out
    async with asyncio.timeout(GUARD_S):
        await asyncio.gather(*tasks)


@contextlib.asynccontextmanager
async def closed_gate(
    *, wait_s: float = 60.0
) -> AsyncIterator[tuple[ThreadCalls, asyncio.Task[Any], threading.Event]]:
    """ThreadCalls whose gate its first call closed, and that call: no thread takes it
    until the event is set."""
    pool = ThreadPoolExecutor(max_workers=1)
    release = blocked(pool, 1)
    calls = ThreadCalls(pool, handoff_after_s=0.0, handoff_wait_s=wait_s)
    call = asyncio.create_task(calls.call(lambda: "taken"))
    await asyncio.sleep(0)
    assert calls.gate_closed
    try:
        yield calls, call, release
    finally:
        release.set()
        pool.shutdown(wait=True)


async def test_a_call_past_handoff_after_s_closes_the_gate_until_a_thread_takes_it():
    async with closed_gate() as (calls, call, release):
        waiter = asyncio.create_task(calls.wait_turn())
        await asyncio.sleep(0.05)
        assert not waiter.done()  # no thread is free to take the call
        release.set()
        async with asyncio.timeout(GUARD_S):
            await waiter
            assert await call == "taken"
        assert not calls.gate_closed


async def test_the_gate_opens_after_handoff_wait_s_when_no_thread_takes_the_call():
    async with closed_gate(wait_s=0.01) as (calls, call, release):
        async with asyncio.timeout(GUARD_S):
            await calls.wait_turn()
        assert not calls.gate_closed and not call.done()
        release.set()
        async with asyncio.timeout(GUARD_S):
            assert await call == "taken"


async def test_a_waiter_cancelled_at_the_gate_leaves_the_others_waiting_for_it_to_open():
    async with closed_gate() as (calls, call, release):
        leaving, staying = (asyncio.create_task(calls.wait_turn()) for _ in range(2))
        await asyncio.sleep(0)
        leaving.cancel()
        await asyncio.sleep(0)
        assert leaving.cancelled() and not staying.done()
        release.set()
        async with asyncio.timeout(GUARD_S):
            await staying
            await call


async def test_close_opens_the_gate_for_whoever_waits_at_it():
    async with closed_gate() as (calls, call, release):
        waiter = asyncio.create_task(calls.wait_turn())
        await asyncio.sleep(0)
        calls.close()
        async with asyncio.timeout(GUARD_S):
            await waiter
        release.set()
        await call


# -- in the engine ---------------------------------------------------------------------------


class Recorded(art.IToolExecutor):
    """A tool (plain `def`, or async) that notes each call's step id."""

    def __init__(self, name: str, seen: list[str], *, is_async: bool = False) -> None:
        self.schema = art.ToolSchema(name=name, description=name, input_schema={})
        self.seen = seen
        if is_async:
            self.execute = self._execute_async  # type: ignore[method-assign]

    def execute(self, input: dict, context: art.ExecutionContext) -> art.ToolResult:
        self.seen.append(context.step_id or "")
        return art.ToolResult(
            call_id=context.call_id, tool_name=self.schema.name, status="success", output="ok"
        )

    async def _execute_async(self, input: dict, context: art.ExecutionContext) -> art.ToolResult:
        return Recorded.execute(self, input, context)


async def test_def_steps_wait_at_the_closed_gate_while_async_steps_go_on(monkeypatch):
    monkeypatch.setattr(
        "art.engine.steps.ThreadCalls",
        functools.partial(ThreadCalls, handoff_after_s=0.0, handoff_wait_s=60.0),
    )
    pool = ThreadPoolExecutor(max_workers=1)
    release = blocked(pool, 1)  # nobody takes the first def call until released
    seen: list[str] = []
    plan = Plan.model_validate(
        {
            "title": "gate",
            "steps": [
                {"id": "d1", "description": "d1", "tool": "blocking"},
                {"id": "d2", "description": "d2", "tool": "blocking"},
                {"id": "a1", "description": "a1", "tool": "instant"},
            ],
        }
    )
    before: list[str] = []
    run = make_run_context()
    run.events.on("tool:before", lambda data, context: before.append(data["step_id"]))
    tools = [Recorded("blocking", seen), Recorded("instant", seen, is_async=True)]
    ex = PlanExecution(ExecutionDeps(run=run, registry=ToolRegistry(tools), thread_pool=pool), plan)
    running = asyncio.create_task(ex.run())
    await asyncio.sleep(0.05)
    assert before == ["d1", "a1"]  # d2 waits until a thread takes d1's call
    assert seen == ["a1"]
    release.set()
    async with asyncio.timeout(GUARD_S):
        outcome = await running
    assert outcome.status == "completed"
    assert sorted(seen) == ["a1", "d1", "d2"]
    pool.shutdown(wait=True)


async def test_cancelling_a_run_cancels_the_def_steps_waiting_at_the_gate(monkeypatch):
    monkeypatch.setattr(
        "art.engine.steps.ThreadCalls",
        functools.partial(ThreadCalls, handoff_after_s=0.0, handoff_wait_s=60.0),
    )
    pool = ThreadPoolExecutor(max_workers=1)
    release = blocked(pool, 1)
    seen: list[str] = []
    plan = Plan.model_validate(
        {
            "title": "gate",
            "steps": [{"id": f"d{i}", "description": "d", "tool": "blocking"} for i in (1, 2, 3)],
        }
    )
    deps = ExecutionDeps(
        run=make_run_context(),
        registry=ToolRegistry([Recorded("blocking", seen)]),
        thread_pool=pool,
    )
    ex = PlanExecution(deps, plan)
    running = asyncio.create_task(ex.run())
    await asyncio.sleep(0.05)
    ex.cancel("user pressed stop")
    async with asyncio.timeout(GUARD_S):
        outcome = await running
    release.set()
    pool.shutdown(wait=True)
    assert outcome.status == "cancelled"
    assert {r.status for r in outcome.records.values()} == {"cancelled"}
    assert seen == []  # d1's call was still queued: it never ran
