"""Data nested deeper than storage can read back (pydantic's JSON parser stops at 200
levels) is refused at every door with a clear error before anything is stored, and no
thread is ever left unreadable: decisions, tool outputs, plan arguments, a run's context
and thread ids, on every adapter."""

from __future__ import annotations

from typing import Any

import pytest

import art
from art.core.serialization import MAX_DATA_DEPTH
from art.errors import ConfigurationError, PlanError, SuspensionError
from art.responses import StepRecord
from art.storage.contract import StorageAdapter
from art.tooling.contract import ToolResult
from art.tools import AskHuman

from .test_contract import make_run


def nested(depth: int) -> Any:
    """A dict `depth` levels deep: {"k": {"k": ... {"k": 1}}}."""
    value: Any = 1
    for _ in range(depth):
        value = {"k": value}
    return value


async def test_a_decision_nested_too_deep_is_refused_and_the_suspension_stays_open(
    storage_target: str, scripted_model
) -> None:
    plan = {"steps": [{"id": "s1", "tool": "ask_human", "args": {"question": "ok?"}}]}
    model = scripted_model(planning=plan, synthesis="approved")
    inst = art.create_art_instance(model=model.model, tools=[AskHuman()], storage=storage_target)
    try:
        suspended = await inst.aprocess("q", "t-deep-decision")
        suspension_id = suspended.metadata.suspension_id
        deep = {"approved": True, "modified_args": {"x": nested(200)}}
        with pytest.raises(SuspensionError, match="nested more than 100 levels") as refused:
            await inst.aresume_execution("t-deep-decision", suspension_id, deep)
        assert refused.value.code == "INVALID_DECISION"
        state = await inst.aget_state("t-deep-decision")  # readable, still waiting
        assert [s.suspension_id for s in state.suspensions] == [suspension_id]
        fine = {"approved": True, "modified_args": {"x": nested(MAX_DATA_DEPTH - 3)}}
        response = await inst.aresume_execution("t-deep-decision", suspension_id, fine)
        assert response.status == "success", response.metadata.error
        assert response.steps[0].output["modified_args"] == fine["modified_args"]
        (run,) = (await inst.aget_state("t-deep-decision")).runs
        assert run.steps["s1"].output["modified_args"] == fine["modified_args"]
    finally:
        await inst.aclose()


async def test_a_tool_output_nested_too_deep_fails_its_step_and_the_thread_stays_readable(
    storage_target: str, scripted_model
) -> None:
    deep = art.tool(lambda: nested(250), name="deep", description="Returns a deep object.")
    echo = art.tool(lambda value: value, name="echo", description="Returns its value.")
    plan = {
        "steps": [
            {"id": "s1", "tool": "deep"},
            {"id": "s2", "tool": "echo", "args": {"value": "{{s1.output}}"}},
        ]
    }
    model = scripted_model(planning=plan, synthesis="done")
    inst = art.create_art_instance(model=model.model, tools=[deep, echo], storage=storage_target)
    try:
        response = await inst.aprocess("q", "t-deep-output")
        first = response.steps[0]
        assert first.status == "failed"
        assert first.result.metadata["error_code"] == "CONTRACT_VIOLATION"
        assert "nested more than 100 levels" in first.result.error
        assert response.steps[1].status == "skipped"
        (run,) = (await inst.aget_state("t-deep-output")).runs
        assert run.steps["s1"].status == "failed"
        assert (await inst.aprocess("again", "t-deep-output")).metadata.status != "suspended"
        assert len((await inst.aget_state("t-deep-output")).runs) == 2
    finally:
        await inst.aclose()


async def test_plan_arguments_nested_too_deep_are_a_plan_problem(
    storage_target: str, scripted_model
) -> None:
    echo = art.tool(lambda value: value, name="echo", description="Returns its value.")
    plan = {"steps": [{"id": "s1", "tool": "echo", "args": {"value": nested(150)}}]}
    model = scripted_model(planning=plan, synthesis="done")
    inst = art.create_art_instance(model=model.model, tools=[echo], storage=storage_target)
    try:
        with pytest.raises(PlanError, match="args is nested more than 100 levels"):
            await inst.aplan("q")
        response = await inst.aprocess("q", "t-deep-plan")
        assert response.metadata.error.code == "PLAN_INVALID"
        await inst.aget_state("t-deep-plan")
    finally:
        await inst.aclose()


@pytest.mark.parametrize("name", ["system_context", "metadata"])
async def test_run_context_nested_too_deep_is_refused_before_the_run(
    storage_target: str, scripted_model, name: str
) -> None:
    model = scripted_model(planning={"steps": []}, synthesis="done")
    inst = art.create_art_instance(model=model.model, storage=storage_target)
    try:
        with pytest.raises(ConfigurationError, match=f"{name} is nested more than 100"):
            await inst.aprocess("q", "t-deep-context", {name: {"x": nested(150)}})
        with pytest.raises(ConfigurationError, match=f"{name} holds NaN"):
            await inst.aprocess("q", "t-deep-context", {name: {"x": float("nan")}})
        assert (await inst.aget_state("t-deep-context")).runs == []
    finally:
        await inst.aclose()


@pytest.mark.parametrize("thread_id", ["t\x00", "t\udc80", "\ud800"])
async def test_thread_ids_with_nul_or_lone_surrogates_are_refused_not_aliased(
    storage_target: str, scripted_model, thread_id: str
) -> None:
    model = scripted_model(planning={"steps": []}, synthesis="done")
    inst = art.create_art_instance(model=model.model, storage=storage_target)
    try:
        escaped = thread_id.encode("utf-8", "backslashreplace").decode().replace("\x00", "\\x00")
        assert (await inst.aprocess("q", escaped)).status == "success"
        for call in (
            inst.aprocess("q", thread_id),
            inst.aget_state(thread_id),
            inst.adelete_thread(thread_id),
            inst.aplan("q", thread_id),
        ):
            with pytest.raises(ConfigurationError, match="must not hold NUL or a lone surrogate"):
                await call
        assert len((await inst.aget_state(escaped)).runs) == 1
    finally:
        await inst.aclose()


async def test_a_record_stored_deeper_than_the_parser_reads_is_still_read_back(
    storage: StorageAdapter,
) -> None:
    """What an older version let through (or an adapter user stores directly) reads back."""
    run = make_run("t-legacy")
    await storage.create_run(run)
    output = nested(230)
    result = ToolResult(call_id="c1", tool_name="x", status="success", output=output)
    await storage.save_step(run.run_id, StepRecord(step_id="s1", status="completed", result=result))
    loaded = await storage.get_run(run.run_id)
    assert loaded is not None and loaded.steps["s1"].output == output
    assert [r.run_id for r in await storage.list_runs("t-legacy")] == [run.run_id]
