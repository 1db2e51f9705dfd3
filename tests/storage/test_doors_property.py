"""One invariant over every door that stores data (a plan's arguments, a tool's output, a
decision, a thread id, a query) on every storage adapter, fed nested, huge, NaN,
surrogate- and NUL-bearing values: the value is refused at the door with a clear error,
or it is stored and read back equal (text no storage can carry, a lone surrogate, is
kept as its visible escape, as documented). And the thread stays readable either way."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import art
from art.core.serialization import escape_unencodable, escape_unencodable_data
from art.errors import ConfigurationError, SuspensionError
from art.tools import AskHuman

HUGE = "x" * 200_000
# Every code point below the private-use area: NUL, controls, lone surrogates included.
text = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0xDFFF), max_size=8)
scalars = (
    st.none() | st.booleans() | st.integers() | st.floats() | text | st.just(HUGE)
)  # floats: NaN and infinities too
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(text, children, max_size=3),
    max_leaves=8,
)


def _nested(value: Any, depth: int) -> Any:
    for _ in range(depth):
        value = [value]
    return value


values = json_values | st.builds(_nested, json_values, st.integers(90, 260))
DOORS = ["plan", "tool_output", "decision", "thread_id", "query"]
# What a refusal names: the reason, never a bare failure.
REASONS = ("nested", "NaN", "NUL", "surrogate", "could not be read", "recursion", "too deep")


def _stored_form(value: Any) -> Any:
    """`value` as every door documents it is stored: JSON data, lone surrogates escaped."""
    if isinstance(value, tuple):
        value = list(value)
    return escape_unencodable_data(value)


def _clear(message: str) -> bool:
    return any(reason in message for reason in REASONS)


class Doors:
    """One instance per adapter, whose model and tools serve the drawn value."""

    def __init__(self, storage: str, scripted_model: Any) -> None:
        self.value: Any = None
        self.script: dict[str, Any] = {"steps": []}
        self.counter = itertools.count()
        produce = art.tool(lambda: self.value, name="produce", description="The value.")
        echo = art.tool(_echo, name="echo", description="Returns its value.")
        self.model = scripted_model(planning=lambda messages, metadata: self.script, synthesis="ok")
        self.instance = art.create_art_instance(
            model=self.model.model, tools=[produce, echo, AskHuman()], storage=storage
        )

    def thread(self) -> str:
        return f"p-{next(self.counter)}"

    async def check(self, door: str, value: Any) -> None:
        await getattr(self, door)(value)

    async def plan(self, value: Any) -> None:
        thread = self.thread()
        self.script = {"steps": [{"id": "s1", "tool": "echo", "args": {"value": value}}]}
        response = await self.instance.aprocess("q", thread)
        state = await self.instance.aget_state(thread)  # readable, whatever happened
        if response.metadata.error is not None and response.metadata.error.code == "PLAN_INVALID":
            assert _clear(response.metadata.error.message), response.metadata.error.message
            return
        (run,) = state.runs
        expected = _stored_form(value)
        assert run.plan.steps[0].args == {"value": expected}
        if run.steps["s1"].status == "completed":
            assert run.steps["s1"].output == response.steps[0].output == expected

    async def tool_output(self, value: Any) -> None:
        thread = self.thread()
        self.value = value
        self.script = {"steps": [{"id": "s1", "tool": "produce"}]}
        response = await self.instance.aprocess("q", thread)
        (run,) = (await self.instance.aget_state(thread)).runs
        record = run.steps["s1"]
        if record.status == "failed":
            assert record.result.metadata["error_code"] == "CONTRACT_VIOLATION"
            assert _clear(record.result.error), record.result.error
            return
        assert record.status == "completed", record
        assert record.output == response.steps[0].output == _stored_form(value)

    async def decision(self, value: Any) -> None:
        thread = self.thread()
        self.script = {"steps": [{"id": "s1", "tool": "ask_human", "args": {"question": "ok?"}}]}
        suspended = await self.instance.aprocess("q", thread)
        suspension_id = suspended.metadata.suspension_id
        decision = {"approved": True, "modified_args": {"v": value}}
        try:
            response = await self.instance.aresume_execution(thread, suspension_id, decision)
        except SuspensionError as refused:
            assert refused.code == "INVALID_DECISION" and _clear(refused.message), refused
            state = await self.instance.aget_state(thread)
            assert [s.suspension_id for s in state.suspensions] == [suspension_id]
            return
        assert response.status == "success", response.metadata.error
        expected = {"v": _stored_form(value)}
        (run,) = (await self.instance.aget_state(thread)).runs
        assert run.steps["s1"].output["modified_args"] == expected
        assert response.steps[0].output["modified_args"] == expected

    async def thread_id(self, value: Any) -> None:
        thread = value if isinstance(value, str) and value else self.thread()
        self.script = {"steps": []}
        try:
            response = await self.instance.aprocess("q", thread)
        except ConfigurationError as refused:
            assert _clear(refused.message), refused
            return
        assert response.status == "success", response.metadata.error
        runs = (await self.instance.aget_state(thread)).runs
        assert runs and runs[-1].thread_id == thread
        assert thread in {t.thread_id for t in await self.instance.alist_threads(limit=500)}

    async def query(self, value: Any) -> None:
        thread = self.thread()
        query = value if isinstance(value, str) and value.strip() else f"q {value!r}"[:1000]
        self.script = {"steps": []}
        response = await self.instance.aprocess(query, thread)
        assert response.status == "success", response.metadata.error
        (run,) = (await self.instance.aget_state(thread)).runs
        assert run.query == escape_unencodable(query).replace("\x00", "\\x00")


def _echo(value: Any = None) -> Any:
    """Returns its value."""
    return value


@pytest.mark.slow
async def test_every_door_refuses_clearly_or_stores_what_reads_back_equal(
    storage_target: str, scripted_model: Any
) -> None:
    doors = Doors(storage_target, scripted_model)
    loop = asyncio.get_running_loop()

    @settings(
        max_examples=60,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(door=st.sampled_from(DOORS), value=values)
    @example(door="thread_id", value=HUGE)
    @example(door="thread_id", value="t\x00")
    @example(door="thread_id", value="t\udc80")
    @example(door="query", value=HUGE + "\x00\udc80")
    @example(door="tool_output", value=_nested({"k": "\udc80\x00"}, 250))
    @example(door="tool_output", value=[float("nan")])
    @example(door="decision", value=_nested(1, 250))
    @example(door="decision", value=float("inf"))
    @example(door="decision", value={"\udc80": HUGE})
    @example(door="plan", value=_nested(1, 250))
    @example(door="plan", value=_nested(1, 150))
    @example(door="plan", value=float("nan"))
    def check(door: str, value: Any) -> None:
        # Hypothesis drives from a worker thread; every run is on the test's own loop.
        asyncio.run_coroutine_threadsafe(doors.check(door, value), loop).result()

    try:
        await asyncio.to_thread(check)
    finally:
        await doors.instance.aclose()
