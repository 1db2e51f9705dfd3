"""What a UI and the engine read from a step (seeds 000, 001, 003): step outputs on
`step:status`, reasoning steps as blocks, LLM_ASSIST_REQUIRED in either field, and the
tool schema's `blocking_config` / `display_config`, with the opt-in run on approval."""

from __future__ import annotations

from typing import Any

import pytest

import art
from art.errors import ToolRegistrationError


class Echo(art.IToolExecutor):
    schema = art.ToolSchema(
        name="echo",
        description="Return the value.",
        input_schema={"type": "object", "properties": {"value": {}}},
    )

    async def execute(self, input, context):
        return art.ToolResult(
            call_id=context.call_id, tool_name="echo", status="success", output=input.get("value")
        )


class HelpMe(art.IToolExecutor):
    """Asks for the model's help the way art's own codes say it (metadata.error_code)."""

    schema = art.ToolSchema(name="help_me", description="Needs help.")

    def __init__(self, status: str = "error") -> None:
        self.status = status

    async def execute(self, input, context):
        return art.ToolResult(
            call_id=context.call_id,
            tool_name="help_me",
            status=self.status,
            error="the text is too long for me",
            output={"prompt": "Summarize: a long text"},
            metadata={"error_code": "LLM_ASSIST_REQUIRED"},
        )


class Pay(art.IToolExecutor):
    """Pays only once a human approved; asks first."""

    def __init__(self, *, run_on_approval: bool) -> None:
        self.schema = art.ToolSchema(
            name="pay",
            description="Pay an amount.",
            input_schema={"type": "object", "properties": {"amount": {"type": "number"}}},
            output_schema={"type": "object", "properties": {"paid": {"type": "number"}}},
            execution_mode="blocking",
            blocking_config={
                "run_on_approval": run_on_approval,
                "prompt": "Pay this invoice?",
                "approvers": ["finance"],
            },
        )
        self.contexts: list[art.ExecutionContext] = []
        self.paid: list[float] = []

    async def execute(self, input, context):
        self.contexts.append(context)
        if context.decision is None:
            return art.ToolResult(
                call_id=context.call_id, tool_name="pay", status="suspended", output=None
            )
        self.paid.append(input["amount"])
        return art.ToolResult(
            call_id=context.call_id,
            tool_name="pay",
            status="success",
            output={"paid": input["amount"]},
        )


class Chart(art.IToolExecutor):
    schema = art.ToolSchema(
        name="chart",
        description="Show a chart.",
        execution_mode="display",
        display_config={"renderer": "vega-lite", "height": 300},
    )

    async def execute(self, input, context):
        return art.ToolResult(
            call_id=context.call_id, tool_name="chart", status="success", output={"mark": "bar"}
        )


@pytest.fixture
def make(scripted_model):
    made: list[art.ArtInstance] = []

    def factory(planning: Any, tools: list[Any], **fields: Any):
        model = scripted_model(planning=planning, step="reasoned", synthesis="done")
        inst = art.create_art_instance(
            model=model.model, tools=tools, storage=fields.pop("storage", "memory://"), **fields
        )
        events: list = []
        inst.events.subscribe(events.append)
        made.append(inst)
        return inst, model, events

    yield factory
    for inst in made:
        inst.close()


async def test_step_status_carries_the_output_of_a_completed_step(make):
    plan = {
        "steps": [
            {"id": "s1", "tool": "echo", "args": {"value": {"n": 42}}},
            {"id": "s2", "tool": None, "description": "think", "dependsOn": ["s1"]},
        ]
    }
    inst, _model, events = make(plan, [Echo()])
    await inst.aprocess("go", "t")
    done = {e.data["step_id"]: e.data for e in events
            if e.name == "step:status" and e.data["status"] == "completed"}  # fmt: skip
    assert done["s1"]["output"] == {"n": 42} and done["s2"]["output"] == "reasoned"
    started = [
        e.data for e in events if e.name == "step:status" and e.data["status"] == "in_progress"
    ]
    assert all("output" not in data for data in started)
    stored = await inst.storage.query_events("t", names=["step:status"])
    assert stored[0].data["output"] == '{"n": 42}'  # the log keeps it as (cut) text


async def test_a_reasoning_step_is_a_block_with_one_start_and_one_end(make):
    plan = {
        "steps": [
            {"id": "s1", "tool": "echo", "args": {"value": 1}},
            {"id": "s2", "tool": None, "description": "compare", "dependsOn": ["s1"]},
        ]
    }
    inst, model, events = make(plan, [Echo()], callbacks=_ToolStarts())
    await inst.aprocess("go", "t", {"system_context": {"unit": "metres"}})
    updates = [e for e in events if e.name == "tool:update" and e.data["step_id"] == "s2"]
    assert [u.data["stage"] for u in updates] == ["start", "end"]
    start, end = updates[0].data, updates[1].data
    assert start["tool"] == "reasoning" and start["reasoning"] is True
    assert start["args"] == {"task": "compare", "inputs": ["s1"]}
    assert end["status"] == "success" and end["result"] == "reasoned"
    assert not [e for e in events if e.name == "tool:after" and e.data["step_id"] == "s2"]
    # The block's span is the parent of its LLM call's events.
    call = next(e for e in events if e.name == "message:before" and e.data["phase"] == "step")
    assert call.span == updates[0].span
    assert inst.config.callbacks.started == ["echo"]  # on_tool_start is for tools only
    assert "- unit: metres" in model.calls_for("step")[0].messages[0]["content"]


class _ToolStarts(art.AgentCallbacks):
    def __init__(self) -> None:
        self.started: list[str] = []

    def on_tool_start(self, ctx, tool_name, args):
        self.started.append(tool_name)


@pytest.mark.parametrize("status", ["error", "success"])
async def test_llm_assist_required_in_error_code_is_honoured(make, status):
    inst, model, _events = make({"steps": [{"id": "s1", "tool": "help_me"}]}, [HelpMe(status)])
    resp = await inst.aprocess("go", "t")
    record = resp.steps[0]
    assert record.status == "completed" and record.output == "reasoned"
    assert model.calls_for("step")[0].messages[-1]["content"] == "Summarize: a long text"
    metadata = record.result.metadata
    assert metadata["llm_assisted"] is True and "error_code" not in metadata


async def test_display_config_goes_with_the_display_output_and_its_end_event(make):
    inst, _model, events = make({"steps": [{"id": "s1", "tool": "chart"}]}, [Chart()])
    resp = await inst.aprocess("go", "t")
    assert resp.display[0].config == {"renderer": "vega-lite", "height": 300}
    end = next(e.data for e in events if e.name == "tool:update" and e.data["stage"] == "end")
    assert end["display"] is True and end["display_config"] == {
        "renderer": "vega-lite",
        "height": 300,
    }


async def test_blocking_config_gives_the_prompt_and_travels_with_the_suspension(make):
    pay = Pay(run_on_approval=False)
    inst, _model, events = make(
        {"steps": [{"id": "s1", "tool": "pay", "args": {"amount": 90}}]}, [pay]
    )
    resp = await inst.aprocess("pay", "t")
    assert resp.status == "suspended"
    (waiting,) = (await inst.acheck_for_suspended_state("t")).suspensions
    assert waiting.prompt == "Pay this invoice?"  # the tool gave no output of its own
    suspended = next(e.data for e in events if e.name == "suspended")
    assert suspended["steps"][0]["config"]["approvers"] == ["finance"]
    # Default: the decision is the output and the tool does not run again.
    done = await inst.aresume_execution("t", waiting.suspension_id, {"approved": True})
    assert done.steps[0].output == {"approved": True, "reason": None, "modified_args": None}
    assert pay.paid == [] and len(pay.contexts) == 1


async def test_a_tool_that_runs_on_approval_runs_with_the_approved_arguments(make, tmp_path):
    plan = {
        "steps": [
            {"id": "s1", "tool": "pay", "args": {"amount": 120}},
            {"id": "s2", "tool": "echo", "args": {"value": "{{s1.output.paid}}"}},
        ]
    }
    pay = Pay(run_on_approval=True)
    inst, model, events = make(plan, [pay, Echo()], storage=f"sqlite:///{tmp_path / 'a.db'}")
    resp = await inst.aprocess("pay", "t")
    assert resp.status == "suspended"
    # The planner was told the tool runs on approval, and its output is the tool's.
    tools = model.calls_for("planning")[0].messages[0]["content"]
    assert "- pay: Pay an amount. [asks a human to approve, then runs with the approved" in tools
    assert 'returns: {"paid":"number"}' in tools
    decision = {"approved": True, "reason": "agreed", "modified_args": {"amount": 100}}
    done = await inst.aresume_execution("t", resp.metadata.suspension_id, decision)
    assert done.status == "success"
    assert pay.paid == [100]  # the modified amount, once
    assert pay.contexts[1].decision["modified_args"] == {"amount": 100}
    assert done.steps[0].output == {"paid": 100} and done.steps[1].output == 100
    assert done.steps[0].args == {"amount": 100}
    assert done.steps[0].result.metadata["decision"] == "approved"
    assert done.steps[0].decision["reason"] == "agreed"
    starts = [e.data for e in events if e.name == "tool:update" and e.data["stage"] == "start"
              and e.data["step_id"] == "s1"]  # fmt: skip
    assert [s["args"] for s in starts] == [{"amount": 120}, {"amount": 100}]
    assert len({s["call_id"] for s in starts}) == 2  # two executions, two call ids


async def test_a_rejection_never_runs_a_tool_that_runs_on_approval(make):
    pay = Pay(run_on_approval=True)
    inst, _model, _events = make(
        {"steps": [{"id": "s1", "tool": "pay", "args": {"amount": 5}}]}, [pay]
    )
    resp = await inst.aprocess("pay", "t")
    done = await inst.aresume_execution("t", resp.metadata.suspension_id, False)
    assert done.steps[0].status == "failed" and pay.paid == []


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"blocking_config": {"prompt": "ok?"}}, "applies to blocking tools only"),
        ({"display_config": {"kind": "chart"}}, "applies to display tools only"),
        (
            {"execution_mode": "blocking", "blocking_config": {"run_on_approval": "yes"}},
            "must be true or false",
        ),
        ({"execution_mode": "blocking", "blocking_config": {"prompt": 3}}, "must be text"),
    ],
)
def test_configs_the_engine_would_ignore_are_refused_at_registration(fields, message):
    class Wrong(art.IToolExecutor):
        schema = art.ToolSchema(name="wrong", description="Wrong.", **fields)

        async def execute(self, input, context):
            raise AssertionError

    with pytest.raises(ToolRegistrationError, match=message):
        art.ToolRegistry([Wrong()])
