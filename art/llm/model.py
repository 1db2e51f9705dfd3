"""The model seam: the object the engine asks for every LLM call.

`Model` is the protocol: a name and litellm's `acompletion` contract. `LiteLLMModel`, any
model litellm knows by name, is the main implementation, and `art.testing.ScriptedModel`
is another; a Model object goes wherever a model name does
(`create_art_instance(model=ScriptedModel(...))`), and the name then finds it.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from art.llm.provider import load_litellm

__all__ = ["LiteLLMModel", "Model", "model_name"]


@runtime_checkable
class Model(Protocol):
    """An LLM the engine calls: `model` names it (in usage, events and per-call options);
    `acompletion` takes `litellm.acompletion`'s keyword arguments and returns what that
    returns (a ModelResponse, or with `stream=True` an async iterable of its chunks)."""

    @property
    def model(self) -> str: ...

    async def acompletion(self, **request: Any) -> Any: ...


class LiteLLMModel:
    """A model litellm calls by name (`openai/gpt-4o-mini`, `ollama/llama3.2`, ...)."""

    def __init__(self, model: str) -> None:
        self.model = model

    def __repr__(self) -> str:
        return f"LiteLLMModel({self.model!r})"

    async def acompletion(self, **request: Any) -> Any:
        return await load_litellm().acompletion(**request)


def model_name(model: str | Model | None) -> str | None:
    """The name of a model given by name or as a Model object."""
    return model.model if isinstance(model, Model) else model
