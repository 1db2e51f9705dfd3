"""The model seam: the object the engine asks for every LLM call.

`Model` is the protocol, shaped like pydantic-ai's `Model.request(messages, settings)` and
httpx's transports: a `ModelRequest` in, a `ModelResponse` out, or with `request_stream` a
`ModelStream` of `ModelChunk`s that can be closed early; plus what the engine asks of a
model before calling it (`supports_response_schema`, `context_window`, `count_tokens`).
A Model reports a failed request by raising `ProviderError` with a `ModelErrorCode`.
`LLMClient` (art.llm.client) does the rest: events, retries, time limits, usage, masking.

`LiteLLMModel` (art.llm.litellm_model: any model litellm knows by name) is the main
implementation, `art.testing.ScriptedModel` another; neither imports the other's library.

A model object goes wherever a model name does (`create_art_instance(model=obj)`); a name
finds the object given with it, else a live object registered under that name here
(`register_model`: what `ScriptedModel` does, so that `--model <scripted.model>` works),
else one made by the provider registered for the name's prefix (`register_provider`:
what art.adapters.local does for `local/...`), else litellm. A registered model stays
reachable by name until `unregister_model`, as a provider registered with litellm does:
code that makes a model and passes on only its name (`create_art_instance(model=m.model)`
in an application factory) keeps working.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from pydantic import JsonValue

from art.core.usage import TokenUsage
from art.errors import ModelErrorCode

__all__ = [
    "Message",
    "Model",
    "ModelChunk",
    "ModelRequest",
    "ModelResponse",
    "ModelStream",
    "ProviderError",
    "estimate_tokens",
    "model_name",
    "register_model",
    "register_provider",
    "registered_model",
    "unregister_model",
]

#: One chat message: `{"role": ..., "content": ...}` (OpenAI's format).
Message = Mapping[str, JsonValue]


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """One chat completion request."""

    messages: Sequence[Message]
    #: An OpenAI-style `response_format` (`json_schema` or `json_object`), or None.
    response_format: dict[str, JsonValue] | None = None
    #: Seconds the provider may take (art also stops waiting then); None: no limit set.
    timeout: float | None = None
    #: Provider parameters, passed through: `temperature`, `max_tokens`, `api_base`, ...
    params: Mapping[str, object] = field(default_factory=dict)
    #: Who asks: `art_phase` (planning, step, synthesis, replan, chat, sampling),
    #: `thread_id`, `trace_id`, `run_id`, and the application's own `metadata`.
    metadata: dict[str, JsonValue] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ModelResponse:
    """A whole reply."""

    content: str
    usage: TokenUsage = field(default_factory=TokenUsage)
    #: The model that answered, as the provider names it (None: the one asked).
    model: str | None = None
    finish_reason: str | None = None
    #: The provider's reasoning, kept apart from the answer.
    thinking: str | None = None
    #: USD, when the model knows its price.
    cost: float | None = None


@dataclass(frozen=True, slots=True)
class ModelChunk:
    """A piece of a streamed reply. Text and thinking add up; for `usage`, `finish_reason`,
    `model` and `cost` the last one given wins (they usually come on the last chunk)."""

    text: str = ""
    thinking: str | None = None
    usage: TokenUsage | None = None
    finish_reason: str | None = None
    model: str | None = None
    cost: float | None = None


class ModelStream(Protocol):
    """A streamed reply: iterate its chunks; `aclose()` ends it early and closes the
    provider's request (an async generator is one)."""

    def __aiter__(self) -> AsyncIterator[ModelChunk]: ...

    async def aclose(self) -> None: ...


class ProviderError(Exception):
    """A request the provider failed, raised by a Model: why (`code`), the provider's words
    (`message`), and how long it asked to wait (`retry_after_s`). LLMClient turns it into
    the `ModelError` a run reports, with the model's name and a hint, secrets masked.
    Any other exception is read as TIMEOUT (TimeoutError), NETWORK_ERROR
    (ConnectionError) or UNKNOWN."""

    def __init__(
        self, message: str, code: ModelErrorCode, *, retry_after_s: float | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.retry_after_s = retry_after_s


def estimate_tokens(messages: Sequence[Message]) -> int:
    """About four characters a token, eight for each message's framing."""
    chars = sum(len(str(m.get("content") or "")) + 8 for m in messages)
    return chars // 4 + 1


@runtime_checkable
class Model(Protocol):
    """An LLM the engine calls. `model` names it (in usage, events and per-call options).

    `request` is the one method to write; subclass `Model` to inherit the rest: a stream of
    one chunk, no JSON schema output, an unknown context window, an estimated token count.
    """

    #: The model's name.
    model: str

    async def request(self, request: ModelRequest) -> ModelResponse:
        """The reply to `request`; raises ProviderError when the provider fails."""
        ...

    async def request_stream(self, request: ModelRequest) -> ModelStream:
        """The reply to `request` as it is written."""
        return _whole(await self.request(request))

    def supports_response_schema(self) -> bool:
        """Whether a JSON schema `response_format` is honoured (the planner then sends one)."""
        return False

    def context_window(self) -> int | None:
        """Input tokens the model takes, None when unknown (prompts are then not cut)."""
        return None

    def count_tokens(self, messages: Sequence[Message]) -> int:
        """Prompt tokens of `messages` for this model."""
        return estimate_tokens(messages)


async def _whole(response: ModelResponse) -> AsyncGenerator[ModelChunk, None]:
    """A reply already complete, as a stream of one chunk."""
    yield ModelChunk(
        text=response.content,
        thinking=response.thinking,
        usage=response.usage,
        finish_reason=response.finish_reason,
        model=response.model,
        cost=response.cost,
    )


def model_name(model: str | Model | None) -> str | None:
    """The name of a model given by name or as a Model object."""
    return model.model if isinstance(model, Model) else model


# -- models by name -------------------------------------------------------------------------

_registered: dict[str, Model] = {}
_providers: dict[str, Callable[[str], Model]] = {}
_registered_lock = threading.Lock()


def register_model(model: Model) -> None:
    """Let calls by `model.model`'s name reach `model`, until `unregister_model`."""
    with _registered_lock:
        _registered[model.model] = model


def unregister_model(model: Model) -> None:
    """Undo `register_model` (names registered by another object stay). Idempotent."""
    with _registered_lock:
        if _registered.get(model.model) is model:
            del _registered[model.model]


def register_provider(prefix: str, factory: Callable[[str], Model]) -> None:
    """Let every name `prefix/...` reach the Model `factory(name)` makes."""
    with _registered_lock:
        _providers[prefix] = factory


def registered_model(name: str) -> Model | None:
    """The live Model registered under `name`, else one made by the provider registered
    for its prefix, else None."""
    with _registered_lock:
        model = _registered.get(name)
        prefix, slash, _ = name.partition("/")
        factory = _providers.get(prefix) if slash else None
    if model is None and factory is not None:
        model = factory(name)
    return model
