"""Text no UTF-8 document can carry (lone surrogates, NUL in PostgreSQL text) in queries,
LLM replies and file names: every run ends, on every adapter, and what is stored,
returned and shown carries a visible escape (`\\udcff`, `\\xff`, `\\x00`) instead."""

from __future__ import annotations

import json
import os
from pathlib import Path

import art
from art.responses import StepRecord
from art.storage.contract import StorageAdapter
from art.tooling.contract import ToolResult
from art.tools import ListFiles

from .test_contract import make_run


def _dumped(value: object) -> str:
    """`value` as JSON that is valid UTF-8 (raises on a lone surrogate)."""
    text = value.model_dump_json() if hasattr(value, "model_dump_json") else json.dumps(value)
    text.encode("utf-8")
    return text


async def test_a_record_holding_lone_surrogates_is_stored_escaped(storage: StorageAdapter) -> None:
    run = make_run("t-surrogates")
    await storage.create_run(run)
    result = ToolResult(
        call_id="c1", tool_name="x", status="success", output={"name\udc80": ["bad\udcff"]}
    )
    await storage.save_step(run.run_id, StepRecord(step_id="s1", status="completed", result=result))
    loaded = await storage.get_run(run.run_id)
    assert loaded is not None
    assert loaded.steps["s1"].output == {"name\\udc80": ["bad\\udcff"]}


async def test_queries_with_unencodable_text_run_and_are_stored_escaped(
    storage_target: str, scripted_model
) -> None:
    # Thread ids holding such text are refused instead (tests/storage/test_deep_data.py).
    model = scripted_model(planning={"steps": []}, synthesis="nothing to do")
    thread_id, query = "t-unencodable", "why \ud800 \x00?"
    inst = art.create_art_instance(model=model.model, storage=storage_target)
    try:
        response = await inst.aprocess(query, thread_id)
        assert response.status == "success", response.metadata.error
        _dumped(response)
        state = await inst.aget_state(thread_id)
        assert [run.query for run in state.runs] == ["why \\ud800 \\x00?"]
        again = await inst.aprocess("and now?", thread_id)
        assert again.status == "success"
        assert len((await inst.aget_state(thread_id)).runs) == 2
    finally:
        await inst.aclose()


async def test_lone_surrogates_in_llm_replies_are_escaped_not_fatal(
    storage_target: str, scripted_model
) -> None:
    echo = art.tool(lambda text: text, name="echo", description="Returns the text.")
    # A plan whose JSON holds a raw lone surrogate and one written as a JSON escape.
    plan = '{"steps": [{"id": "s1", "tool": "echo", "args": {"text": "a\udc80 b\\udc81"}}]}'
    model = scripted_model(planning=plan, synthesis="the answer \ud800 is here")
    inst = art.create_art_instance(model=model.model, tools=[echo], storage=storage_target)
    try:
        response = await inst.aprocess("q", "t-llm")
        assert response.status == "success", response.metadata.error
        assert response.content == "the answer \\ud800 is here"
        assert response.steps[0].output == "a\\udc80 b\\udc81"
        _dumped(response)
        (run,) = (await inst.aget_state("t-llm")).runs
        assert run.answer == response.content
        assert run.steps["s1"].output == response.steps[0].output
        assert run.plan.steps[0].args == {"text": "a\\udc80 b\\udc81"}
    finally:
        await inst.aclose()


async def test_list_files_on_a_name_that_is_not_utf8_completes_the_run(
    storage_target: str, scripted_model, tmp_path: Path
) -> None:
    root = tmp_path / "area"
    root.mkdir()
    (root / os.fsdecode(b"bad\xff name.txt")).write_text("x")  # a name that is not UTF-8
    plan = {"steps": [{"id": "s1", "tool": "list_files"}, {"id": "s2", "tool": "list_files"}]}
    model = scripted_model(planning=plan, synthesis="one file")
    inst = art.create_art_instance(
        model=model.model, tools=[ListFiles(root)], storage=storage_target
    )
    try:
        response = await inst.aprocess("what is there?", "t-files")
        assert response.status == "success", response.metadata.error
        assert [r.status for r in response.steps] == ["completed", "completed"]
        assert response.steps[0].output["entries"][0]["path"] == "bad\\xff name.txt"
        _dumped(response)
        (run,) = (await inst.aget_state("t-files")).runs
        assert run.status == "completed"
        assert {k: r.output for k, r in run.steps.items()} == {
            r.step_id: r.output for r in response.steps
        }
    finally:
        await inst.aclose()


async def test_a_decision_holding_lone_surrogates_resumes_the_run(
    storage_target: str, scripted_model
) -> None:
    from art.tools import AskHuman

    plan = {"steps": [{"id": "s1", "tool": "ask_human", "args": {"question": "ok?"}}]}
    model = scripted_model(planning=plan, synthesis="approved")
    inst = art.create_art_instance(model=model.model, tools=[AskHuman()], storage=storage_target)
    try:
        suspended = await inst.aprocess("q", "t-decide")
        assert suspended.status == "suspended"
        decision = {"approved": True, "reason": "fine \udcff", "modified_args": {"k\ud800": 1}}
        suspension_id = suspended.metadata.suspension_id
        response = await inst.aresume_execution("t-decide", suspension_id, decision)
        assert response.status == "success", response.metadata.error
        assert response.steps[0].output["reason"] == "fine \\udcff"
        _dumped(response)
    finally:
        await inst.aclose()
