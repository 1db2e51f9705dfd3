"""Human in the loop: blocking tools suspend the run; decisions complete or fail the steps."""

from __future__ import annotations

import asyncio

import pytest

import art
from art.errors import SuspensionError
from art.storage.opening import open_storage
from art.testing import replies


class Approval(art.IToolExecutor):
    """A blocking tool: asks a human whether to pay `amount`."""

    schema = art.ToolSchema(
        name="approve_payment",
        description="Ask a human to approve a payment.",
        input_schema={
            "type": "object",
            "properties": {"amount": {"type": "number"}, "id": {"type": "string"}},
            "required": ["amount"],
        },
        execution_mode="blocking",
    )

    def __init__(self) -> None:
        self.calls = 0

    async def execute(self, input, context):
        self.calls += 1
        metadata = {"suspension_id": input["id"]} if "id" in input else {}
        return art.ToolResult(
            call_id=context.call_id,
            tool_name="approve_payment",
            status="suspended",
            output={"prompt": f"Pay {input['amount']} EUR?"},
            metadata=metadata,
        )


class Echo(art.IToolExecutor):
    schema = art.ToolSchema(name="echo", description="Return the value.")

    def __init__(self) -> None:
        self.seen: list = []

    async def execute(self, input, context):
        self.seen.append(input.get("value"))
        return art.ToolResult(
            call_id=context.call_id, tool_name="echo", status="success", output=input.get("value")
        )


PLAN = {
    "title": "Pay the invoice",
    "steps": [
        {"id": "s1", "tool": "approve_payment", "args": {"amount": 120}},
        {"id": "s2", "tool": "echo", "args": {"value": "{{s1.output}}"}, "dependsOn": ["s1"]},
        {"id": "s3", "tool": "echo", "args": {"value": "independent"}},
    ],
}


@pytest.fixture
def setup(scripted_model):
    made = []

    def factory(plan=PLAN, synthesis="Paid.", storage="memory://"):
        model = scripted_model(planning=plan, synthesis=synthesis)
        approval, echo = Approval(), Echo()
        inst = art.create_art_instance(model=model.model, tools=[approval, echo], storage=storage)
        events: list = []
        inst.events.subscribe(events.append)
        made.append(inst)
        return inst, model, approval, echo, events

    yield factory
    for inst in made:
        inst.close()


async def test_a_blocking_step_suspends_the_run_and_persists_it(setup):
    inst, model, _approval, _echo, events = setup()
    response = await inst.aprocess("pay the invoice", "t")

    assert response.status == "suspended"
    sid = response.metadata.suspension_id
    assert sid and response.metadata.suspension_ids == [sid]
    statuses = {s.step_id: s.status for s in response.steps}
    assert statuses == {"s1": "waiting", "s2": "pending", "s3": "completed"}
    assert "Pay 120 EUR?" in response.content
    assert [c.phase for c in model.calls] == ["planning"]

    info = await inst.acheck_for_suspended_state("t")
    assert info.suspension_id == sid and info.suspension_ids == [sid]
    assert info.suspensions[0].step_id == "s1"
    assert info.suspensions[0].prompt == {"prompt": "Pay 120 EUR?"}
    assert info.suspensions[0].args == {"amount": 120}
    suspended = [e for e in events if e.name == "suspended"]
    assert len(suspended) == 1 and suspended[0].data["suspension_ids"] == [sid]
    state = await inst.aget_state("t")
    assert state.active_run.status == "suspended"
    assert state.active_run.steps["s1"].status == "waiting"


async def test_approval_completes_the_step_without_running_the_tool_again(setup):
    inst, model, approval, echo, events = setup()
    first = await inst.aprocess("pay", "t")
    sid = first.metadata.suspension_id

    decision = {"approved": True, "reason": "budget ok", "modified_args": {"amount": 100}}
    response = await inst.aresume_execution("t", sid, decision)

    assert response.status == "success"
    assert response.content == "Paid."
    assert approval.calls == 1
    s1 = next(s for s in response.steps if s.step_id == "s1")
    assert s1.status == "completed"
    assert s1.output == {"approved": True, "reason": "budget ok", "modified_args": {"amount": 100}}
    assert echo.seen == ["independent", s1.output]  # s2 got the decision through its reference
    assert [c.phase for c in model.calls] == ["planning", "synthesis"]
    assert response.metadata.llm_calls == 2  # counted across the suspension
    assert response.metadata.tool_calls == 2 + 1
    assert "approved by a human reviewer" in model.calls_for("synthesis")[0].messages[-1]["content"]
    assert [e.name for e in events].count("resumed") == 1
    assert await inst.acheck_for_suspended_state("t") is None


async def test_rejection_fails_the_step_skips_its_dependents_and_tells_the_synthesis(setup):
    inst, model, _approval, _echo, _events = setup()
    first = await inst.aprocess("pay", "t")
    response = await inst.aresume_execution(
        "t", first.metadata.suspension_id, {"approved": False, "reason": "too expensive"}
    )
    assert response.status == "partial"
    statuses = {s.step_id: (s.status, s.reason) for s in response.steps}
    assert statuses["s1"] == ("failed", "rejected by a human reviewer: too expensive")
    assert statuses["s2"][0] == "skipped" and "s1 failed" in statuses["s2"][1]
    prompt = model.calls_for("synthesis")[0].messages[-1]["content"]
    assert "REJECTED by a human reviewer" in prompt and "too expensive" in prompt


async def test_several_suspensions_each_have_an_id_and_the_run_waits_for_all(setup):
    plan = {
        "steps": [
            {"id": "s1", "tool": "approve_payment", "args": {"amount": 1, "id": "first"}},
            {"id": "s2", "tool": "approve_payment", "args": {"amount": 2}},
            {"id": "s3", "tool": "echo", "args": {"value": 3}, "dependsOn": ["s1", "s2"]},
        ]
    }
    inst, model, _approval, echo, _events = setup(plan=plan)
    first = await inst.aprocess("pay both", "t")
    ids = first.metadata.suspension_ids
    assert first.metadata.suspension_id == "first"
    assert len(ids) == 2 and len(set(ids)) == 2 and "first" in ids
    other = next(i for i in ids if i != "first")

    halfway = await inst.aresume_execution("t", "first", {"approved": True})
    assert halfway.status == "suspended"
    assert halfway.metadata.suspension_ids == [other]
    assert echo.seen == []
    assert (await inst.acheck_for_suspended_state("t")).suspension_ids == [other]

    done = await inst.aresume_execution("t", other, {"approved": True})
    assert done.status == "success"
    assert echo.seen == [3]
    assert [c.phase for c in model.calls] == ["planning", "synthesis"]


async def test_resuming_an_unknown_or_decided_suspension_raises(setup):
    inst, *_ = setup()
    first = await inst.aprocess("pay", "t")
    sid = first.metadata.suspension_id
    with pytest.raises(SuspensionError) as unknown:
        await inst.aresume_execution("t", "nope", {"approved": True})
    assert unknown.value.code == "SUSPENSION_NOT_FOUND"
    with pytest.raises(SuspensionError) as invalid:
        await inst.aresume_execution("t", sid, {"reason": "no approved field"})
    assert invalid.value.code == "INVALID_DECISION"
    await inst.aresume_execution("t", sid, {"approved": True})
    with pytest.raises(SuspensionError) as decided:
        await inst.aresume_execution("t", sid, {"approved": False})
    assert decided.value.code == "SUSPENSION_ALREADY_DECIDED"


async def test_two_concurrent_resumes_of_one_suspension_cannot_both_succeed(setup):
    inst, _model, _approval, _echo, _events = setup()
    first = await inst.aprocess("pay", "t")
    sid = first.metadata.suspension_id

    async def resume(approved: bool):
        try:
            return await inst.aresume_execution("t", sid, {"approved": approved})
        except SuspensionError as exc:
            return exc

    results = await asyncio.gather(resume(True), resume(False))
    succeeded = [
        r for r in results if isinstance(r, art.AgentFinalResponse) and r.status != "error"
    ]
    assert len(succeeded) == 1
    loser = next(r for r in results if r is not succeeded[0])
    code = loser.code if isinstance(loser, SuspensionError) else loser.metadata.error.code
    assert code in ("THREAD_BUSY", "SUSPENSION_ALREADY_DECIDED")
    suspensions = await inst.storage.list_suspensions("t", pending_only=False)
    assert len(suspensions) == 1 and suspensions[0].decision is not None


async def test_a_run_suspended_by_one_instance_is_resumed_by_another(scripted_model):
    storage = open_storage("memory://")  # shared, as a database would be after a restart
    model = scripted_model(planning=PLAN, synthesis="Paid.")
    first = art.create_art_instance(model=model.model, tools=[Approval(), Echo()], storage=storage)
    suspended = await first.aprocess("pay", "t")
    await first.aclose()

    approval, echo = Approval(), Echo()
    second = art.create_art_instance(model=model.model, tools=[approval, echo], storage=storage)
    info = await second.acheck_for_suspended_state("t")
    assert info.suspension_id == suspended.metadata.suspension_id
    response = await second.aresume_execution("t", info.suspension_id, {"approved": True})
    assert response.status == "success"
    assert approval.calls == 0  # the blocking tool is not run again
    assert echo.seen == [{"approved": True, "reason": None, "modified_args": None}]
    await second.aclose()


async def test_the_same_query_on_a_suspended_thread_reports_the_suspension_again(setup):
    inst, model, approval, _echo, _events = setup()
    first = await inst.aprocess("pay", "t")
    again = await inst.aprocess("pay", "t")
    assert again.status == "suspended"
    assert again.metadata.suspension_ids == first.metadata.suspension_ids
    assert again.metadata.run_id == first.metadata.run_id
    assert [c.phase for c in model.calls] == ["planning"]
    assert approval.calls == 1


async def test_a_new_query_abandons_a_suspended_run(setup):
    inst, _model, _approval, _echo, _events = setup(plan=replies(PLAN, {"steps": []}))
    first = await inst.aprocess("pay", "t")
    await inst.aprocess("something else", "t")
    assert await inst.acheck_for_suspended_state("t") is None
    with pytest.raises(SuspensionError) as caught:
        await inst.aresume_execution("t", first.metadata.suspension_id, {"approved": True})
    assert caught.value.code == "SUSPENSION_NOT_FOUND"
    assert "abandoned" in caught.value.message


def test_the_sync_api_suspends_and_resumes(setup):
    inst, _model, _approval, _echo, _events = setup()
    first = inst.process("pay", "t")
    assert inst.check_for_suspended_state("t").suspension_id == first.metadata.suspension_id
    response = inst.resume_execution("t", first.metadata.suspension_id, {"approved": True})
    assert response.status == "success"


async def test_a_decision_always_has_modified_args_so_plans_can_refer_to_it(setup):
    plan = {
        "steps": [
            {"id": "s1", "tool": "approve_payment", "args": {"amount": 120}},
            {"id": "s2", "tool": "echo", "args": {"value": "{{s1.output.modified_args}}"}},
            {"id": "s3", "tool": "echo", "args": {"value": "{{s1.output.reason}}"}},
        ]
    }
    inst, _model, _approval, echo, _events = setup(plan=plan)
    suspended = await inst.aprocess("pay", "t")
    resp = await inst.aresume_execution("t", suspended.metadata.suspension_id, True)
    assert resp.status == "success"
    assert resp.steps[0].output == {"approved": True, "reason": None, "modified_args": None}
    assert echo.seen == [None, None]  # null, not "no such field"


async def test_a_rejection_keeps_the_whole_decision_as_the_output(setup):
    inst, _model, _approval, _echo, _events = setup()
    suspended = await inst.aprocess("pay", "t")
    decision = {"approved": False, "reason": "too much", "modified_args": {"amount": 90}}
    resp = await inst.aresume_execution("t", suspended.metadata.suspension_id, decision)
    assert resp.steps[0].result.output == decision
