"""art.llm.model: every LLM call goes to a Model; an object given as the model answers the
calls made to its name, a name alone is litellm's."""

from typing import Any

import pytest

import art
from art.llm.client import LLMClient
from art.llm.model import LiteLLMModel, Model, model_name
from art.testing import ScriptedModel

PLAN = {
    "title": "Add",
    "steps": [{"id": "s1", "tool": None, "description": "think"}],
}


class Recording:
    """A Model that records each request and passes it on."""

    def __init__(self, inner: Model, name: str | None = None) -> None:
        self.inner = inner
        self.model = name or inner.model
        self.requests: list[dict[str, Any]] = []

    async def acompletion(self, **request: Any) -> Any:
        self.requests.append(request)
        return await self.inner.acompletion(**request)


def phases(requests: list[dict[str, Any]]) -> list[str]:
    return [request["metadata"]["art_phase"] for request in requests]


def test_a_scripted_model_given_as_an_object_answers_the_run():
    with (
        ScriptedModel(planning=PLAN, step="thought", synthesis="done") as model,
        art.create_art_instance(model=model, storage="memory://") as inst,
    ):
        resp = inst.process("q", "t")
        assert inst.model == model.model
    assert resp.status == "success" and resp.content == "done"
    assert [step.output for step in resp.steps] == ["thought"]
    assert [call.phase for call in model.calls] == ["planning", "step", "synthesis"]


def test_each_phase_calls_the_model_object_of_its_name():
    with (
        ScriptedModel(planning=PLAN, step="thought", synthesis="unused") as main,
        ScriptedModel(synthesis="from the synthesis model") as writer,
    ):
        planning, synthesis = Recording(main), Recording(writer, name="custom/writer")
        with art.create_art_instance(
            model=planning, synthesis_model=synthesis, storage="memory://"
        ) as inst:
            resp = inst.process("q", "t")
            assert inst.synthesis_model == "custom/writer"
    assert resp.content == "from the synthesis model"
    assert phases(planning.requests) == ["planning", "step"]
    assert phases(synthesis.requests) == ["synthesis"]
    # The request names the model as the object does; ScriptedModel answers under its own.
    assert {r["model"] for r in synthesis.requests} == {"custom/writer"}


def test_per_call_llm_params_still_reach_the_model_object():
    with ScriptedModel(planning={"title": "t", "steps": []}, synthesis="ok") as model:
        recording = Recording(model)
        with art.create_art_instance(model=recording, storage="memory://") as inst:
            inst.process("q", "t", options={"llm_params": {"temperature": 0.25}})
    assert [r.get("temperature") for r in recording.requests] == [0.25, 0.25]


def test_a_model_name_is_litellms_and_objects_give_their_name():
    scripted = ScriptedModel(synthesis="x")
    try:
        assert isinstance(scripted, Model) and isinstance(LiteLLMModel("openai/x"), Model)
        assert not isinstance("openai/x", Model)
        assert model_name(scripted) == scripted.model
        assert model_name("openai/x") == "openai/x" and model_name(None) is None
        llm = LLMClient(models={scripted.model: scripted})
        assert llm.model_for(scripted.model) is scripted
        other = llm.model_for("openai/gpt-4o-mini")
        assert isinstance(other, LiteLLMModel) and other.model == "openai/gpt-4o-mini"
    finally:
        scripted.unregister()


def test_an_object_that_is_not_a_model_is_refused():
    with pytest.raises(art.ConfigurationError, match="instance of Model"):
        art.create_art_instance(model=object(), storage="memory://")
