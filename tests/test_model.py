"""art.llm.model: every LLM call goes to a Model; an object given as the model answers the
calls made to its name, a registered name finds its live object, any other name is litellm's.
A scripted run never imports litellm."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

import art
from art.errors import ModelError, ModelErrorCode
from art.llm.client import LLMClient
from art.llm.litellm_model import LiteLLMModel
from art.llm.model import (
    Model,
    ModelChunk,
    ModelRequest,
    ModelResponse,
    ModelStream,
    ProviderError,
    model_name,
)
from art.testing import ScriptedModel, make_run_context

PLAN = {
    "title": "Add",
    "steps": [{"id": "s1", "tool": None, "description": "think"}],
}
USER = [{"role": "user", "content": "hi"}]


class Recording(Model):
    """A Model that records each request and passes it on."""

    def __init__(self, inner: Model, name: str | None = None) -> None:
        self.inner = inner
        self.model = name or inner.model
        self.requests: list[ModelRequest] = []

    async def request(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        return await self.inner.request(request)

    async def request_stream(self, request: ModelRequest) -> ModelStream:
        self.requests.append(request)
        return await self.inner.request_stream(request)


def phases(requests: list[ModelRequest]) -> list[str]:
    return [request.metadata["art_phase"] for request in requests]


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


def test_per_call_llm_params_still_reach_the_model_object():
    with ScriptedModel(planning={"title": "t", "steps": []}, synthesis="ok") as model:
        recording = Recording(model)
        with art.create_art_instance(model=recording, storage="memory://") as inst:
            inst.process("q", "t", options={"llm_params": {"temperature": 0.25}})
    assert [r.params.get("temperature") for r in recording.requests] == [0.25, 0.25]


def test_a_model_name_is_litellms_unless_registered_and_objects_give_their_name():
    scripted = ScriptedModel(synthesis="x")
    try:
        assert isinstance(scripted, Model) and isinstance(LiteLLMModel("openai/x"), Model)
        assert not isinstance("openai/x", Model)
        assert model_name(scripted) == scripted.model
        assert model_name("openai/x") == "openai/x" and model_name(None) is None
        assert LLMClient().model_for(scripted.model) is scripted  # registered by name
        recording = Recording(scripted, name=scripted.model)
        assert LLMClient(models={scripted.model: recording}).model_for(scripted.model) is recording
        other = LLMClient().model_for("openai/gpt-4o-mini")
        assert isinstance(other, LiteLLMModel) and other.model == "openai/gpt-4o-mini"
    finally:
        scripted.unregister()
    assert isinstance(LLMClient().model_for(scripted.model), LiteLLMModel)


def test_an_object_that_is_not_a_model_is_refused():
    with pytest.raises(art.ConfigurationError, match="instance of Model"):
        art.create_art_instance(model=object(), storage="memory://")


# -- a Model written by hand ----------------------------------------------------------------


class Echo(Model):
    """Only `request` written: the rest comes from the protocol."""

    model = "custom/echo"

    def __init__(self, failure: Exception | None = None) -> None:
        self.failure = failure

    async def request(self, request: ModelRequest) -> ModelResponse:
        if self.failure is not None:
            raise self.failure
        text = str(request.messages[-1]["content"]).upper()
        return ModelResponse(content=text, finish_reason="stop", cost=0.25)


@pytest.mark.parametrize("stream", [False, True])
async def test_a_model_that_only_answers_requests_also_streams(stream):
    run = make_run_context()
    run.events.subscribe(lambda event: None)  # a listener: a call asked to stream streams
    llm = LLMClient(models={Echo.model: Echo()})
    result = await llm.complete(
        run, phase="step", model=Echo.model, messages=USER, span=run.span, stream=stream
    )
    assert (result.content, result.finish_reason, result.cost) == ("HI", "stop", 0.25)
    assert result.model == Echo.model
    assert not llm.supports_response_schema(Echo.model)
    assert llm.context_window(Echo.model) is None
    assert llm.count_tokens(Echo.model, USER) >= 1


@pytest.mark.parametrize(
    ("failure", "code"),
    [
        (ProviderError("slow down", ModelErrorCode.RATE_LIMITED, retry_after_s=2), "RATE_LIMITED"),
        (ProviderError("no such model", ModelErrorCode.MODEL_NOT_FOUND), "MODEL_NOT_FOUND"),
        (TimeoutError("late"), "TIMEOUT"),
        (ConnectionError("refused"), "NETWORK_ERROR"),
        (ValueError("odd"), "UNKNOWN"),
        (ProviderError("Missing API key", ModelErrorCode.UNKNOWN), "PROVIDER_NOT_CONFIGURED"),
    ],
)
async def test_a_models_failure_becomes_a_model_error_with_its_code(failure, code):
    run = make_run_context(llm_max_retries=0)
    llm = LLMClient(models={Echo.model: Echo(failure)})
    with pytest.raises(ModelError) as info:
        await llm.complete(run, phase="step", model=Echo.model, messages=USER, span=run.span)
    assert info.value.code == code
    assert info.value.message.startswith(f"{Echo.model}: ")
    if isinstance(failure, ProviderError):
        assert info.value.retry_after_s == failure.retry_after_s


async def test_a_model_chunk_adds_up_text_and_keeps_the_last_usage():
    chunks = [ModelChunk(text="a"), ModelChunk(text="b", finish_reason="length", cost=1.0)]

    class Chunks(Echo):
        async def request_stream(self, request: ModelRequest) -> ModelStream:
            async def gen():
                for chunk in chunks:
                    yield chunk

            return gen()

    run = make_run_context()
    run.events.subscribe(lambda event: None)
    llm = LLMClient(models={Echo.model: Chunks()})
    result = await llm.complete(
        run, phase="step", model=Echo.model, messages=USER, span=run.span, stream=True
    )
    assert (result.content, result.finish_reason, result.cost) == ("ab", "length", 1.0)


def test_the_command_line_names_a_hand_written_model_by_module_attribute(tmp_path, monkeypatch):
    from art.cli.app import load_model

    (tmp_path / "rules_model.py").write_text(
        "from art.llm.model import Model, ModelResponse\n"
        "class Rules(Model):\n"
        "    model = 'rules/echo'\n"
        "    async def request(self, request):\n"
        "        return ModelResponse(content='by rule')\n"
        "MODEL = Rules()\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    monkeypatch.delitem(sys.modules, "rules_model", raising=False)
    assert load_model("rules_model:MODEL") == "rules/echo"
    model = sys.modules["rules_model"].MODEL
    assert LLMClient().model_for("rules/echo") is model


# -- litellm stays out of scripted runs -----------------------------------------------------

_SCRIPTED_RUN = """
import sys
import art
from art.testing import ScriptedModel
from art.tools import Calculator

plan = {"steps": [{"id": "s1", "tool": "calculator", "args": {"expression": "17*23"}},
                  {"id": "s2", "tool": None, "description": "say it", "dependsOn": ["s1"]}]}
model = ScriptedModel(planning=plan, step="391 it is", synthesis="17 x 23 = 391",
                      cost_per_token=(1e-6, 2e-6))
with art.create_art_instance(model=model, tools=[Calculator()], storage="memory://") as inst:
    resp = inst.process("17*23?", "t")
    streamed = []
    inst.on("chunk:after", lambda data, ctx: streamed.append(data["chunk"]))
    again = inst.process("17*23 again?", "t")
print(json.dumps({"status": resp.status, "content": resp.content, "cost": resp.metadata.llm_cost,
                  "streamed": "".join(streamed), "litellm": "litellm" in sys.modules}))
"""


@pytest.mark.slow  # a fresh interpreter
def test_a_scripted_run_in_process_does_not_import_litellm():
    code = "import json\n" + textwrap.dedent(_SCRIPTED_RUN)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["status"] == "success" and result["content"] == "17 x 23 = 391"
    assert result["streamed"] == "17 x 23 = 391" and result["cost"] > 0
    assert result["litellm"] is False


@pytest.mark.slow  # a fresh interpreter running the CLI
def test_art_run_with_a_scripted_model_does_not_import_litellm(tmp_path):
    (tmp_path / "scripted_app.py").write_text(
        "from art.testing import ScriptedModel\n"
        "MODEL = ScriptedModel(planning={'steps': [{'id': 's1', 'tool': 'calculator',"
        " 'args': {'expression': '2+2'}}]}, synthesis='four')\n"
    )
    code = (
        "import sys\n"
        "from art.cli.app import main\n"
        "sys.argv = ['art', 'run', 'two plus two?', '--model', 'scripted_app:MODEL',"
        " '--storage', 'memory://', '--json']\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as exit:\n"
        "    assert not exit.code, exit.code\n"
        "print('litellm' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])},
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[-1] == "False"
    assert '"four"' in out.stdout
