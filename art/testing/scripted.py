"""ScriptedModel: a model that answers from a script, by `art_phase`, offline.

It implements the Model protocol (art.llm.model) itself, as any model does, so every art
code path past the model (events, retries, error codes, usage, cost, streaming, time
limits) runs exactly as with a hosted model; only the text comes from the script. It
never imports litellm.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import threading
import time
import uuid
from collections.abc import AsyncGenerator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeGuard

from pydantic import JsonValue

from art.core.usage import TokenUsage
from art.errors import ModelError, ModelErrorCode
from art.llm.litellm_model import is_litellm_error, provider_error
from art.llm.model import (
    ModelChunk,
    ModelRequest,
    ModelResponse,
    ModelStream,
    ProviderError,
    estimate_tokens,
    register_model,
    unregister_model,
)

__all__ = ["Reply", "ScriptError", "ScriptedCall", "ScriptedModel", "replies", "stream_pieces"]

PHASES = ("planning", "step", "synthesis", "replan")
_WORD = re.compile(r"\S+\s*|\s+")
_STEP_LINE = re.compile(r"\bs\d+\b")


class ScriptError(Exception):
    """The script has no reply for a call (raised by the model; art sees a ModelError)."""


@dataclass
class ScriptedCall:
    """One call the scripted model answered (or refused)."""

    phase: str | None
    messages: list[dict[str, JsonValue]]
    metadata: dict[str, JsonValue]
    response_format: dict[str, JsonValue] | None
    stream: bool
    params: dict[str, object]
    reply: str | None = None
    # time.perf_counter() when the reply began: a paced stream's chunks follow on a
    # fixed schedule from here.
    sent_from: float | None = None


@dataclass(frozen=True)
class Reply:
    """A reply with a chosen `finish_reason` ("length" simulates a reply cut off)."""

    content: object
    finish_reason: str = "stop"


class _Dumpable(Protocol):
    """A pydantic model, or anything with its `model_dump`."""

    def model_dump(self, *, mode: str, by_alias: bool) -> object: ...


class _Script:
    """The replies of one phase: a single reply, or a sequence whose last reply repeats."""

    def __init__(self, reply: object) -> None:
        self._lock = threading.Lock()
        self._last: object = None
        self._iterator: Iterator[object] | None = None
        if isinstance(reply, tuple) or inspect.isgenerator(reply) or isinstance(reply, Iterator):
            items = iter(reply)
            self._iterator = items
        elif isinstance(reply, dict | list) or _is_model(reply):
            # A JSON reply is the same text on every call: render it once, not per call
            # (a 200-step plan costs milliseconds to dump, which a benchmark would count).
            self._last = _as_text(reply)
        else:
            self._last = reply

    def next(self) -> object:
        with self._lock:
            if self._iterator is not None:
                try:
                    self._last = next(self._iterator)
                except StopIteration:
                    self._iterator = None
            return self._last


def _is_model(reply: object) -> TypeGuard[_Dumpable]:
    return callable(getattr(reply, "model_dump", None))


def _as_text(reply: object) -> str:
    """A reply as the text the model sends: str as-is, models and JSON values as JSON."""
    if isinstance(reply, str):
        return reply
    if _is_model(reply):
        return json.dumps(reply.model_dump(mode="json", by_alias=True), ensure_ascii=False)
    if isinstance(reply, dict | list | int | float | bool) or reply is None:
        return json.dumps(reply, ensure_ascii=False, default=str)
    return str(reply)


def stream_pieces(text: str) -> list[str]:
    """The pieces a streamed reply is sent in: each word with its trailing whitespace."""
    return _WORD.findall(text) or [""]


def _word_count(text: str) -> int:
    return len(text.split())


def _message_text(messages: Sequence[Mapping[str, JsonValue]]) -> str:
    parts = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):  # content parts
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        parts.append(str(content or ""))
    return "\n".join(parts)


def _last_user_text(messages: Sequence[Mapping[str, JsonValue]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            return _message_text([message])
    return _message_text(messages[-1:])


def _from_prompt(messages: Sequence[Mapping[str, JsonValue]], lead: str) -> str:
    """A short reply built from the paragraphs of the prompt that mention step ids.

    For a paragraph like "[s1] ... completed. Output:\n391" only the output is kept.
    """
    text = _last_user_text(messages)
    picked = []
    for paragraph in re.split(r"\n\s*\n", text):
        if not _STEP_LINE.search(paragraph):
            continue
        _, marker, output = paragraph.partition("Output:")
        piece = " ".join((output if marker else paragraph).split())
        picked.append(piece[:200])
    if picked:
        return f"{lead} {'; '.join(picked[:8])}"
    return f"{lead} {' '.join(text.split())[:200]}"


class ScriptedModel:
    """An offline model that answers each `art_phase` from a script.

    Each reply is a str; a dict, list or pydantic model (sent as JSON text); a `Reply`
    (content plus a `finish_reason`, e.g. "length" for a cut-off reply); a tuple or
    iterator of replies consumed in order (the last repeats); a callable
    `(messages, metadata) -> reply` (sync or async); or an exception instance to raise.
    `default` answers phases that are not scripted (and calls without `art_phase`).
    A streamed reply comes one word (with its trailing space) per chunk, each
    `chunk_delay_s` after the previous one; `tokens_per_s` sets that pace as a rate
    (chunks are sent on a fixed schedule, so the rate holds however long a consumer takes),
    and a reply not streamed then comes after as long as its stream would take.

    `response_schema=True` says it takes a JSON schema `response_format` (the planner then
    sends one), `context_window=` gives its input token limit, and
    `cost_per_token=(input, output)` prices its usage (USD a token).

    It is an `art.llm.model.Model`: pass it as the model, or pass its name (`model.model`):
    until `unregister()`, art's register of models (art.llm.model) finds it by that name.
    Use it as a context manager, or call `unregister()` when done::

        with ScriptedModel(planning={"steps": []}, synthesis="Hello!") as model:
            inst = art.create_art_instance(model=model, storage="memory://")
    """

    __test__ = False  # not a pytest test class, whatever its name

    def __init__(
        self,
        planning: object = None,
        synthesis: object = None,
        step: object = None,
        replan: object = None,
        *,
        default: object = None,
        latency_s: float = 0.0,
        chunk_delay_s: float = 0.0,
        tokens_per_s: float | None = None,
        response_schema: bool = False,
        context_window: int | None = None,
        cost_per_token: tuple[float, float] | None = None,
        name: str = "scripted",
    ) -> None:
        self.provider = f"art-scripted-{uuid.uuid4().hex[:8]}"
        self.model = f"{self.provider}/{name}"
        self.latency_s = latency_s
        self.chunk_delay_s = 1.0 / tokens_per_s if tokens_per_s else chunk_delay_s
        self.tokens_per_s = tokens_per_s
        self.calls: list[ScriptedCall] = []
        self._scripts: dict[str, _Script] = {}
        for phase, reply in zip(PHASES, (planning, step, synthesis, replan), strict=True):
            if reply is not None:
                self._scripts[phase] = _Script(reply)
        self._default = _Script(default) if default is not None else None
        self._response_schema = response_schema
        self._context_window = context_window
        self._cost_per_token = cost_per_token
        self.register()

    # -- registration -------------------------------------------------------------
    def register(self) -> ScriptedModel:
        """Make calls by `self.model`'s name reach this model (done by the constructor)."""
        register_model(self)
        return self

    def unregister(self) -> None:
        """Calls by name no longer reach this model (the object still answers). Idempotent."""
        unregister_model(self)

    def __enter__(self) -> ScriptedModel:
        return self.register()

    def __exit__(self, *exc_info: object) -> None:
        self.unregister()

    def __repr__(self) -> str:
        phases = ", ".join(sorted(self._scripts)) or "none"
        return f"ScriptedModel(model={self.model!r}, scripted={phases}, calls={len(self.calls)})"

    # -- the Model protocol (art.llm.model) --------------------------------------------
    async def request(self, request: ModelRequest) -> ModelResponse:
        call = self._record(request, stream=False)
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        text, finish_reason = await self._asettle(self._pick(call), call)
        if writing_s := self._writing_s(text):
            await asyncio.sleep(writing_s)
        usage = self._usage(call.messages, text)
        return ModelResponse(
            content=text,
            usage=usage,
            model=self.model,
            finish_reason=finish_reason,
            cost=self._cost(usage),
        )

    async def request_stream(self, request: ModelRequest) -> ModelStream:
        return self._stream(self._record(request, stream=True))

    async def _stream(self, call: ScriptedCall) -> AsyncGenerator[ModelChunk, None]:
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        text, finish_reason = await self._asettle(self._pick(call), call)
        usage = self._usage(call.messages, text)
        pieces = stream_pieces(text)
        delay, start = self.chunk_delay_s, time.perf_counter()
        call.sent_from = start
        for index, piece in enumerate(pieces, start=1):
            if delay and (wait := start + index * delay - time.perf_counter()) > 0:
                await asyncio.sleep(wait)
            if index < len(pieces):
                yield ModelChunk(text=piece, model=self.model)
            else:
                yield ModelChunk(
                    text=piece,
                    usage=usage,
                    finish_reason=finish_reason,
                    model=self.model,
                    cost=self._cost(usage),
                )

    def supports_response_schema(self) -> bool:
        return self._response_schema

    def context_window(self) -> int | None:
        return self._context_window

    def count_tokens(self, messages: Sequence[Mapping[str, JsonValue]]) -> int:
        return estimate_tokens(messages)

    # -- inspection ---------------------------------------------------------------
    def calls_for(self, phase: str) -> list[ScriptedCall]:
        """The calls made with `art_phase == phase`, in order."""
        return [call for call in self.calls if call.phase == phase]

    @property
    def call_count(self) -> int:
        return len(self.calls)

    # -- answering ----------------------------------------------------------------
    def _record(self, request: ModelRequest, stream: bool) -> ScriptedCall:
        metadata = dict(request.metadata)
        phase = metadata.get("art_phase")
        call = ScriptedCall(
            phase=phase if isinstance(phase, str) else None,
            messages=[dict(m) for m in request.messages],
            metadata=metadata,
            response_format=request.response_format,
            stream=stream,
            params=dict(request.params),
        )
        self.calls.append(call)
        return call

    def _pick(self, call: ScriptedCall) -> object:
        script = self._scripts.get(call.phase or "")
        if script is not None:
            return script.next()
        if self._default is not None:
            return self._default.next()
        return self._builtin_default(call)

    def _builtin_default(self, call: ScriptedCall) -> object:
        if call.phase == "synthesis":
            return _from_prompt(call.messages, "Answer (scripted) from the step outputs:")
        if call.phase == "step":
            return _from_prompt(call.messages, "Reasoning (scripted):")
        return ScriptError(
            f"ScriptedModel {self.model} has no reply for phase {call.phase!r}: "
            f"pass ScriptedModel({call.phase or 'default'}=...) with the reply to send"
        )

    async def _asettle(self, reply: object, call: ScriptedCall) -> tuple[str, str]:
        """Follow callables (sync or async), raise scripted exceptions as a provider's
        failure, and render the reply as text."""
        try:
            for _ in range(8):
                if callable(reply) and not isinstance(reply, type):
                    reply = reply(call.messages, call.metadata)
                    if inspect.isawaitable(reply):
                        reply = await reply
                    continue
                break
            finish_reason = "stop"
            if isinstance(reply, Reply):
                finish_reason = reply.finish_reason
                reply = reply.content
            if isinstance(reply, BaseException):
                raise reply
        except Exception as exc:
            raise _provider_failure(exc) from exc
        text = _as_text(reply)
        call.reply = text
        return text, finish_reason

    def _usage(self, messages: Sequence[Mapping[str, JsonValue]], text: str) -> TokenUsage:
        prompt = _word_count(_message_text(messages))
        completion = _word_count(text)
        return TokenUsage(
            prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion
        )

    def _cost(self, usage: TokenUsage) -> float | None:
        if self._cost_per_token is None:
            return None
        prompt_cost, completion_cost = self._cost_per_token
        return usage.prompt_tokens * prompt_cost + usage.completion_tokens * completion_cost

    def _writing_s(self, text: str) -> float:
        """How long a reply not streamed takes at `tokens_per_s` (0 without a rate)."""
        if not self.tokens_per_s:
            return 0.0
        return len(stream_pieces(text)) / self.tokens_per_s


def _provider_failure(error: Exception) -> ProviderError:
    """A scripted exception (or one a callable reply raised) as the provider failure art
    sees: a ScriptError is UNKNOWN (the test's mistake, never worth a retry), a ModelError
    or ProviderError keeps its code, litellm's exceptions read as from a litellm model, any
    other is a NETWORK_ERROR (a provider that failed to answer)."""
    if isinstance(error, ProviderError):
        return error
    if isinstance(error, ScriptError):
        return ProviderError(str(error), ModelErrorCode.UNKNOWN)
    if isinstance(error, ModelError):
        return ProviderError(
            error.message, ModelErrorCode(error.code), retry_after_s=error.retry_after_s
        )
    if is_litellm_error(error):
        return provider_error(error)
    return ProviderError(f"{type(error).__name__}: {error}", ModelErrorCode.NETWORK_ERROR)


def replies(*items: object) -> tuple[object, ...]:
    """Replies consumed in order, the last repeating: `ScriptedModel(planning=replies(a, b))`."""
    return tuple(items)
