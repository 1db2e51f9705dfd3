"""The module-level API over the lazily built default instance, and the sync bridge."""

from __future__ import annotations

import threading

import pytest

import art
import art.api
from art.errors import ConfigurationError

PLAN = {
    "title": "Multiply",
    "steps": [{"id": "s1", "tool": "calculator", "args": {"expression": "17*23"}}],
}


def test_configure_builds_the_default_instance_with_the_builtin_tools(
    scripted_model, default_reset
):
    model = scripted_model(planning=PLAN, synthesis="391")
    inst = art.configure(model=model.model, storage="memory://")
    assert art.api.default_instance() is inst
    assert {"calculator", "show", "ask_human"} <= set(inst.registry.names())
    response = art.process("what is 17*23?", "t")
    assert response.status == "success"
    assert response.steps[0].output == 391
    assert response.content == "391"
    plan = art.plan("what is 17*23?")
    assert plan.title == "Multiply"
    assert art.check_for_suspended_state("t") is None


def test_configure_closes_the_old_instance_and_keeps_it_on_a_mistake(scripted_model, default_reset):
    model = scripted_model(planning=PLAN, synthesis="ok")
    old = art.configure(model=model.model, storage="memory://")
    with pytest.raises(ConfigurationError):
        art.configure(model=model.model, storage="ftp://nowhere")
    assert art.api.default_instance() is old
    new = art.configure(model=model.model, storage="memory://", tools=[])
    assert art.api.default_instance() is new
    assert new.registry.names() == []
    with pytest.raises(ConfigurationError, match="closed"):
        old.process("q", "t")


def test_the_default_instance_is_built_once_from_the_environment(
    scripted_model, default_reset, monkeypatch
):
    model = scripted_model(planning=PLAN, synthesis="ok")
    monkeypatch.setenv("ART_MODEL", model.model)
    monkeypatch.setenv("ART_STORAGE", "memory://")
    built: list = []
    barrier = threading.Barrier(8)

    def get() -> None:
        barrier.wait()
        built.append(art.api.default_instance())

    threads = [threading.Thread(target=get) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({id(inst) for inst in built}) == 1
    assert built[0].model == model.model


async def test_the_sync_api_works_inside_a_running_event_loop(scripted_model, default_reset):
    model = scripted_model(planning=PLAN, synthesis="391")
    art.configure(model=model.model, storage="memory://")
    response = art.process("what is 17*23?", "t")  # called from a coroutine: a notebook cell
    assert response.status == "success"
    assert (await art.aprocess("again?", "t2")).content == "391"
    assert (await art.aplan("what is 17*23?")).title == "Multiply"


async def test_the_async_api_suspends_and_resumes(scripted_model, default_reset):
    plan = {"steps": [{"id": "s1", "tool": "ask_human", "args": {"question": "Proceed?"}}]}
    model = scripted_model(planning=plan, synthesis="Done.")
    art.configure(model=model.model, storage="memory://")
    suspended = await art.aprocess("ask me", "t")
    assert suspended.status == "suspended"
    info = art.check_for_suspended_state("t")
    assert info.suspension_id == suspended.metadata.suspension_id
    response = await art.aresume_execution("t", info.suspension_id, {"approved": True})
    assert response.status == "success"
    sync_again = art.process("ask me", "t3")
    answered = art.resume_execution("t3", sync_again.metadata.suspension_id, {"approved": False})
    assert answered.status == "partial"


def test_a_sync_call_from_inside_the_instance_loop_is_refused(scripted_model):
    model = scripted_model(planning={"steps": []}, synthesis="hi")
    with art.create_art_instance(model=model.model, storage="memory://") as inst:
        errors: list[BaseException] = []

        def nested(data, context):
            try:
                inst.process("nested", "other")
            except RuntimeError as exc:
                errors.append(exc)

        inst.on("session:start", nested)
        assert inst.process("outer", "t").status == "success"
    assert errors and "use the async method" in str(errors[0])


@art.tool
def order_status(order_id: str) -> str:
    """The shipping status of an order."""
    return {"A-1": "shipped"}.get(order_id, "unknown")


def test_the_default_instance_takes_tools_from_configure_and_per_call(
    scripted_model, default_reset
):
    plan = {"steps": [{"id": "s1", "tool": "order_status", "args": {"order_id": "A-1"}}]}
    model = scripted_model(planning=plan, synthesis="Shipped.")
    art.configure(model=model.model, storage="memory://", tools=[order_status])
    assert art.process("Where is A-1?", "t1").steps[0].output == "shipped"

    art.configure(model=model.model, storage="memory://")  # the built-in tools only
    refused = art.process("Where is A-1?", "t2")
    assert refused.status == "error" and "order_status" in refused.metadata.error.message
    added = art.process("Where is A-1?", "t3", {"tools": ["*", order_status]})
    assert added.status == "success" and added.steps[0].output == "shipped"
    assert "order_status" not in art.api.default_instance().registry  # for that run only
