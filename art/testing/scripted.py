"""ScriptedModel: a litellm provider that answers from a script, by `art_phase`, offline.

It is a real `litellm.CustomLLM` registered under a provider name of its own, so every
art code path (litellm call, events, usage, errors, streaming) runs exactly as with a
hosted model; only the text comes from the script.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from art.llm.provider import load_litellm

if TYPE_CHECKING:
    from litellm.llms.custom_llm import CustomLLM
    from litellm.types.llms.openai import ChatCompletionUsageBlock
    from litellm.types.utils import GenericStreamingChunk

__all__ = ["Reply", "ScriptError", "ScriptedCall", "ScriptedModel", "replies", "stream_pieces"]

PHASES = ("planning", "step", "synthesis", "replan")
_WORD = re.compile(r"\S+\s*|\s+")
_STEP_LINE = re.compile(r"\bs\d+\b")


class ScriptError(Exception):
    """The script has no reply for a call (raised in the provider; art sees a ModelError)."""


@dataclass
class ScriptedCall:
    """One call the scripted model answered (or refused)."""

    phase: str | None
    messages: list[dict[str, Any]]
    metadata: dict[str, Any]
    response_format: dict[str, Any] | None
    stream: bool
    params: dict[str, Any]
    reply: str | None = None
    # time.perf_counter() when the reply began: a paced stream's chunks follow on a
    # fixed schedule from here.
    sent_from: float | None = None


@dataclass(frozen=True)
class Reply:
    """A reply with a chosen `finish_reason` ("length" simulates a reply cut off)."""

    content: Any
    finish_reason: str = "stop"


class _Script:
    """The replies of one phase: a single reply, or a sequence whose last reply repeats."""

    def __init__(self, reply: Any) -> None:
        self._lock = threading.Lock()
        self._last: Any = None
        self._iterator: Iterator[Any] | None = None
        if isinstance(reply, tuple) or inspect.isgenerator(reply) or isinstance(reply, Iterator):
            items = iter(reply)
            self._iterator = items
        elif isinstance(reply, dict | list) or _is_model(reply):
            # A JSON reply is the same text on every call: render it once, not per call
            # (a 200-step plan costs milliseconds to dump, which a benchmark would count).
            self._last = _as_text(reply)
        else:
            self._last = reply

    def next(self) -> Any:
        with self._lock:
            if self._iterator is not None:
                try:
                    self._last = next(self._iterator)
                except StopIteration:
                    self._iterator = None
            return self._last


def _is_model(reply: Any) -> bool:
    return hasattr(reply, "model_dump") and callable(reply.model_dump)


def _as_text(reply: Any) -> str:
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


def _message_text(messages: list[dict[str, Any]]) -> str:
    parts = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):  # content parts
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        parts.append(str(content or ""))
    return "\n".join(parts)


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            return _message_text([message])
    return _message_text(messages[-1:])


def _from_prompt(messages: list[dict[str, Any]], lead: str) -> str:
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
    """An offline litellm model that answers each `art_phase` from a script.

    Each reply is a str; a dict, list or pydantic model (sent as JSON text); a `Reply`
    (content plus a `finish_reason`, e.g. "length" for a cut-off reply); a tuple or
    iterator of replies consumed in order (the last repeats); a callable
    `(messages, metadata) -> reply` (sync or async); or an exception instance to raise.
    `default` answers phases that are not scripted (and calls without `art_phase`).
    A streamed reply comes one word (with its trailing space) per chunk, each
    `chunk_delay_s` after the previous one; `tokens_per_s` sets that pace as a rate
    (chunks are sent on a fixed schedule, so the rate holds however long a consumer takes),
    and a reply not streamed then comes after as long as its stream would take.

    It is a `art.llm.model.Model`: pass it as the model, or pass its name (`model.model`).
    Use it as a context manager, or call `unregister()` when done::

        with ScriptedModel(planning={"steps": []}, synthesis="Hello!") as model:
            inst = art.create_art_instance(model=model, storage="memory://")
    """

    __test__ = False  # not a pytest test class, whatever its name

    def __init__(
        self,
        planning: Any = None,
        synthesis: Any = None,
        step: Any = None,
        replan: Any = None,
        *,
        default: Any = None,
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
        self._model_info = self._build_model_info(response_schema, context_window, cost_per_token)
        self._handler = self._build_handler()
        self._registered = False
        self.register()

    # -- registration -------------------------------------------------------------
    def _build_model_info(
        self,
        response_schema: bool,
        context_window: int | None,
        cost_per_token: tuple[float, float] | None,
    ) -> dict[str, Any] | None:
        if not response_schema and context_window is None and cost_per_token is None:
            return None
        info: dict[str, Any] = {"litellm_provider": self.provider, "mode": "chat"}
        if response_schema:
            info["supports_response_schema"] = True
        if context_window is not None:
            info["max_input_tokens"] = context_window
            info["max_tokens"] = context_window
        if cost_per_token is not None:
            info["input_cost_per_token"], info["output_cost_per_token"] = cost_per_token
            info["cache_creation_input_token_cost"] = 0.0
            info["cache_read_input_token_cost"] = 0.0
        return info

    def register(self) -> ScriptedModel:
        """Make `self.model` callable through litellm (done by the constructor)."""
        if self._registered:
            return self
        litellm = load_litellm()
        from litellm.utils import custom_llm_setup

        litellm.custom_provider_map.append(
            {"provider": self.provider, "custom_handler": self._handler}
        )
        custom_llm_setup()
        if self._model_info is not None:
            litellm.register_model({self.model: self._model_info}, persist_across_reloads=False)
        self._registered = True
        return self

    def unregister(self) -> None:
        """Remove the provider from litellm. Idempotent."""
        if not self._registered:
            return
        litellm = load_litellm()
        litellm.custom_provider_map[:] = [
            item for item in litellm.custom_provider_map if item.get("provider") != self.provider
        ]
        # litellm's own list of custom providers keeps the name: without the public
        # provider_list entry below, litellm refuses the model as an unknown provider.
        if self.provider in litellm.provider_list:
            litellm.provider_list.remove(self.provider)
        if self._model_info is not None:
            litellm.model_cost.pop(self.model, None)
        self._registered = False

    async def acompletion(self, **request: Any) -> Any:
        """The Model protocol (art.llm.model): the call goes through litellm's provider
        interface, as a call by name does, so every litellm code path runs."""
        return await load_litellm().acompletion(**{**request, "model": self.model})

    def __enter__(self) -> ScriptedModel:
        return self.register()

    def __exit__(self, *exc_info: object) -> None:
        self.unregister()

    def __repr__(self) -> str:
        phases = ", ".join(sorted(self._scripts)) or "none"
        return f"ScriptedModel(model={self.model!r}, scripted={phases}, calls={len(self.calls)})"

    # -- inspection ---------------------------------------------------------------
    def calls_for(self, phase: str) -> list[ScriptedCall]:
        """The calls made with `art_phase == phase`, in order."""
        return [call for call in self.calls if call.phase == phase]

    @property
    def call_count(self) -> int:
        return len(self.calls)

    # -- answering ----------------------------------------------------------------
    def _record(
        self, messages: list[dict[str, Any]], kwargs: Mapping[str, Any], stream: bool
    ) -> ScriptedCall:
        litellm_params = kwargs.get("litellm_params") or {}
        optional_params = kwargs.get("optional_params") or {}
        metadata = litellm_params.get("metadata") or optional_params.get("metadata") or {}
        call = ScriptedCall(
            phase=metadata.get("art_phase"),
            messages=[dict(m) for m in messages],
            metadata=dict(metadata),
            response_format=optional_params.get("response_format"),
            stream=stream,
            params={k: v for k, v in optional_params.items() if k != "metadata"},
        )
        self.calls.append(call)
        return call

    def _pick(self, call: ScriptedCall) -> Any:
        script = self._scripts.get(call.phase or "")
        if script is not None:
            return script.next()
        if self._default is not None:
            return self._default.next()
        return self._builtin_default(call)

    def _builtin_default(self, call: ScriptedCall) -> Any:
        if call.phase == "synthesis":
            return _from_prompt(call.messages, "Answer (scripted) from the step outputs:")
        if call.phase == "step":
            return _from_prompt(call.messages, "Reasoning (scripted):")
        return ScriptError(
            f"ScriptedModel {self.model} has no reply for phase {call.phase!r}: "
            f"pass ScriptedModel({call.phase or 'default'}=...) with the reply to send"
        )

    def _settle(self, reply: Any, call: ScriptedCall) -> tuple[str, str]:
        """Follow callables, raise scripted exceptions, and render the reply as text."""
        for _ in range(8):
            if callable(reply) and not isinstance(reply, type):
                reply = reply(call.messages, call.metadata)
                continue
            break
        finish_reason = "stop"
        if isinstance(reply, Reply):
            reply, finish_reason = reply.content, reply.finish_reason
        if isinstance(reply, BaseException):
            raise _provider_exception(reply, self)
        text = _as_text(reply)
        call.reply = text
        return text, finish_reason

    async def _asettle(self, reply: Any, call: ScriptedCall) -> tuple[str, str]:
        for _ in range(8):
            if callable(reply) and not isinstance(reply, type):
                reply = reply(call.messages, call.metadata)
                if inspect.isawaitable(reply):
                    reply = await reply
                continue
            break
        return self._settle(reply, call)

    def _usage(self, messages: list[dict[str, Any]], text: str) -> ChatCompletionUsageBlock:
        prompt = _word_count(_message_text(messages))
        completion = _word_count(text)
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }

    def _response(
        self, messages: list[dict[str, Any]], text: str, finish_reason: str = "stop"
    ) -> Any:
        litellm = load_litellm()
        return litellm.ModelResponse(
            model=self.model,
            choices=[
                {"message": {"role": "assistant", "content": text}, "finish_reason": finish_reason}
            ],
            usage=self._usage(messages, text),
        )

    def _chunks(
        self, messages: list[dict[str, Any]], text: str, finish_reason: str = "stop"
    ) -> list[GenericStreamingChunk]:
        pieces = stream_pieces(text)
        usage = self._usage(messages, text)
        last = len(pieces) - 1
        return [
            {
                "text": piece,
                "is_finished": index == last,
                "finish_reason": finish_reason if index == last else "",
                "usage": usage if index == last else None,
                "index": 0,
                "tool_use": None,
            }
            for index, piece in enumerate(pieces)
        ]

    def _writing_s(self, text: str) -> float:
        """How long a reply not streamed takes at `tokens_per_s` (0 without a rate)."""
        if not self.tokens_per_s:
            return 0.0
        return len(stream_pieces(text)) / self.tokens_per_s

    def _build_handler(self) -> CustomLLM:
        load_litellm()  # with art's settings
        from litellm.llms.custom_llm import CustomLLM

        owner = self

        class _Handler(CustomLLM):
            def completion(
                self, model: str, messages: list[dict[str, Any]], *args: Any, **kwargs: Any
            ) -> Any:
                call = owner._record(messages, kwargs, stream=False)
                if owner.latency_s:
                    time.sleep(owner.latency_s)
                settled = owner._settle(owner._pick(call), call)
                time.sleep(owner._writing_s(settled[0]))
                return owner._response(messages, *settled)

            async def acompletion(
                self, model: str, messages: list[dict[str, Any]], *args: Any, **kwargs: Any
            ) -> Any:
                call = owner._record(messages, kwargs, stream=False)
                if owner.latency_s:
                    await asyncio.sleep(owner.latency_s)
                settled = await owner._asettle(owner._pick(call), call)
                if writing_s := owner._writing_s(settled[0]):
                    await asyncio.sleep(writing_s)
                return owner._response(messages, *settled)

            def streaming(
                self, model: str, messages: list[dict[str, Any]], *args: Any, **kwargs: Any
            ) -> Iterator[GenericStreamingChunk]:
                call = owner._record(messages, kwargs, stream=True)
                if owner.latency_s:
                    time.sleep(owner.latency_s)
                settled = owner._settle(owner._pick(call), call)
                delay, start = owner.chunk_delay_s, time.perf_counter()
                call.sent_from = start
                for index, chunk in enumerate(owner._chunks(messages, *settled), start=1):
                    if delay and (wait := start + index * delay - time.perf_counter()) > 0:
                        time.sleep(wait)
                    yield chunk

            # litellm declares a coroutine returning the iterator, and iterates this generator
            async def astreaming(  # type: ignore[override]
                self, model: str, messages: list[dict[str, Any]], *args: Any, **kwargs: Any
            ) -> AsyncIterator[GenericStreamingChunk]:
                call = owner._record(messages, kwargs, stream=True)
                if owner.latency_s:
                    await asyncio.sleep(owner.latency_s)
                settled = await owner._asettle(owner._pick(call), call)
                delay, start = owner.chunk_delay_s, time.perf_counter()
                call.sent_from = start
                for index, chunk in enumerate(owner._chunks(messages, *settled), start=1):
                    if delay and (wait := start + index * delay - time.perf_counter()) > 0:
                        await asyncio.sleep(wait)
                    yield chunk

        return _Handler()


def _provider_exception(error: BaseException, model: ScriptedModel) -> BaseException:
    """Scripted exceptions are raised as given; litellm maps them like a provider's."""
    if isinstance(error, ScriptError):
        # A missing script is the test's mistake, never worth a retry.
        litellm = load_litellm()
        refused: BaseException = litellm.BadRequestError(
            str(error), model=model.model, llm_provider=model.provider
        )
        return refused
    return error


def replies(*items: Any) -> tuple[Any, ...]:
    """Replies consumed in order, the last repeating: `ScriptedModel(planning=replies(a, b))`."""
    return tuple(items)
