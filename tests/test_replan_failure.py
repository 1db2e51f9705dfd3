"""A replan that fails (a garbage reply, a provider error) ends the run `partial`, with
the steps that completed kept and used in the answer."""

from __future__ import annotations

from typing import Any

import pytest

import art


class Tool(art.IToolExecutor):
    schema = art.ToolSchema(
        name="act",
        description="Succeeds or fails as told.",
        input_schema={"type": "object", "properties": {"how": {"type": "string"}}},
    )

    def execute(self, input, context):
        if input["how"] == "fail":
            return art.ToolResult(
                call_id=context.call_id, tool_name="act", status="error", error="it broke"
            )
        return art.ToolResult(
            call_id=context.call_id, tool_name="act", status="success", output=input["how"]
        )


PLAN: dict[str, Any] = {
    "steps": [
        {"id": "s1", "tool": "act", "args": {"how": "fail"}},
        {"id": "s2", "tool": "act", "args": {"how": "kept-output"}},
        {"id": "s3", "tool": "act", "args": {"how": "after"}, "depends_on": ["s1"]},
    ]
}


@pytest.mark.parametrize("storage", ["memory://", "sqlite"])
async def test_a_garbage_replan_ends_the_run_partial_with_the_completed_work(
    scripted_model, tmp_path, storage
):
    model = scripted_model(
        planning=PLAN, replan="I am not a plan, sorry.", synthesis="answer from s2"
    )
    url = f"sqlite:///{tmp_path / 'art.db'}" if storage == "sqlite" else storage
    async with art.create_art_instance(
        model=model.model,
        tools=[Tool()],
        storage=url,
        execution_config={"on_step_failure": "replan", "step_max_retries": 0},
    ) as inst:
        resp = await inst.aprocess("go", "t")
        stored = await inst.storage.get_run(resp.metadata.run_id)
    assert model.calls_for("replan")  # it was asked
    assert resp.status == "partial" and resp.content == "answer from s2"
    assert resp.metadata.error.code == "PLAN_INVALID"
    assert "replanning failed" in resp.metadata.error.message
    by_id = {s.step_id: s for s in resp.steps}
    assert by_id["s1"].status == "failed"
    assert by_id["s2"].status == "completed" and by_id["s2"].output == "kept-output"
    assert by_id["s3"].status == "skipped"
    (synthesis,) = model.calls_for("synthesis")
    assert "kept-output" in "\n".join(str(m["content"]) for m in synthesis.messages)
    assert stored.status == "partial" and stored.answer == "answer from s2"
    assert stored.error.code == "PLAN_INVALID"
