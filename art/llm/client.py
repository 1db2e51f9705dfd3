"""Every LLM call art makes: events, retries, error codes, usage, cost, through a Model.

`LLMClient.complete` is the one path; it asks the `Model` (art.llm.model) a model name
names. It emits `message:before` (a hook may edit the
messages that are sent) and `message:after`; when streaming, `chunk:before`/`chunk:after`
per token chunk and `buffer:flush` per group of chunks (`StreamBuffer`, seed 004). A call
asked to stream is made without streaming when none of those three events has a hook,
subscriber or stream to reach (the answer, usage and cost are the same). Provider
exceptions become `ModelError` with a `ModelErrorCode`; retryable codes are retried with
exponential backoff that honours `retry-after`, within a time budget. Every attempt has a
time limit, and a stream one between chunks. API keys never leave this module: every
error message is passed through `art.core.redaction.redact`.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

from pydantic import JsonValue

from art.core.log import get_logger
from art.core.redaction import environment_secrets, redact, secrets_from_params
from art.core.serialization import escape_unencodable
from art.core.usage import TokenUsage
from art.errors import ModelError, ModelErrorCode
from art.llm.litellm_model import LiteLLMModel
from art.llm.model import (
    Message,
    Model,
    ModelChunk,
    ModelRequest,
    ModelStream,
    ProviderError,
    registered_model,
)
from art.observe.errors import error_data
from art.observe.events import HookVeto

if TYPE_CHECKING:
    from art.config import BufferConfig, ExecutionConfig
    from art.core.spans import SpanContext
    from art.engine.context import RunStats
    from art.observe.events import EventBus, RunEvents

__all__ = [
    "CallScope",
    "Flush",
    "LLMClient",
    "LLMPhase",
    "LLMResult",
    "StreamBuffer",
    "context_window",
    "count_tokens",
    "map_provider_error",
    "named_model",
    "retry_delay_s",
    "supports_response_schema",
]

log = get_logger(__name__)

LLMPhase = Literal["planning", "step", "synthesis", "replan", "chat"]
FlushReason = Literal["size", "time", "manual", "completion"]

# llm_params keys art sets itself; a caller's value would break the call's bookkeeping.
_RESERVED_PARAMS = frozenset({"model", "messages", "stream", "stream_options"})
# A streamed call is made only when one of these has a listener.
_STREAM_EVENTS = ("chunk:before", "chunk:after", "buffer:flush")
# How long closing an abandoned stream may take.
_STREAM_CLOSE_S = 1.0


@dataclass
class LLMResult:
    """What one completed LLM call produced."""

    content: str
    usage: TokenUsage
    cost: float | None
    model: str
    finish_reason: str | None
    # The provider's reasoning (`reasoning_content`), kept apart from the answer.
    thinking: str | None = None


class CallScope(Protocol):
    """What an LLM call needs of the run it belongs to (a `RunContext`, or a chat call's)."""

    @property
    def thread_id(self) -> str | None: ...
    @property
    def run_id(self) -> str | None: ...
    @property
    def trace_id(self) -> str: ...
    @property
    def config(self) -> ExecutionConfig: ...
    @property
    def events(self) -> EventBus | RunEvents: ...
    @property
    def stats(self) -> RunStats: ...


# -- streaming buffer (seed 004) ----------------------------------------------------------


@dataclass
class Flush:
    """A group of streamed chunks released together (`buffer:flush`)."""

    chunks: list[str]
    reason: FlushReason
    duration_ms: float


@dataclass
class StreamBuffer:
    """Groups streamed chunks by count (`size`), age (`time`) or both (`hybrid`).

    Pure bookkeeping: the caller adds chunks, asks how long until a time flush is due,
    and finishes the stream. `clock` returns seconds (monotonic).
    """

    config: BufferConfig
    clock: Callable[[], float] = time.monotonic
    _chunks: list[str] = field(default_factory=list)
    _started: float | None = None
    _created_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    _last_flush: datetime | None = None

    def __len__(self) -> int:
        return len(self._chunks)

    def state(self) -> dict[str, JsonValue]:
        """What the buffer holds now (seed 004's BufferState), for chunk hooks."""
        return {
            "size": len(self._chunks),
            "chunks": list(self._chunks),
            "created_at": self._created_at.isoformat(),
            "last_flush": self._last_flush.isoformat() if self._last_flush else None,
            "strategy": self.config.strategy,
        }

    def flush(self) -> Flush | None:
        """Release what is buffered now (a `manual` flush); None when it is empty."""
        return self._flush("manual") if self._chunks else None

    @property
    def _uses_size(self) -> bool:
        return self.config.strategy in ("size", "hybrid")

    @property
    def _uses_time(self) -> bool:
        return self.config.strategy in ("time", "hybrid")

    def add(self, chunk: str) -> Flush | None:
        """Buffer `chunk`; return the flush it triggers, if any."""
        if not self._chunks:
            self._started = self.clock()
        self._chunks.append(chunk)
        if self._uses_size and len(self._chunks) >= self.config.max_size:
            return self._flush("size")
        return self.flush_if_due()

    def due_in(self) -> float | None:
        """Seconds until a time flush is due (0 when overdue); None when none can be due."""
        if not self._chunks or not self._uses_time or self._started is None:
            return None
        elapsed = self.clock() - self._started
        return max(0.0, self.config.max_time_ms / 1000.0 - elapsed)

    def flush_if_due(self) -> Flush | None:
        due = self.due_in()
        if due is not None and due <= 0.0:
            return self._flush("time")
        return None

    def finish(self) -> Flush | None:
        """The stream ended: release what is left when `auto_flush` is on."""
        if self._chunks and self.config.auto_flush:
            return self._flush("completion")
        self._chunks = []
        self._started = None
        return None

    def _flush(self, reason: FlushReason) -> Flush:
        started = self._started if self._started is not None else self.clock()
        flush = Flush(list(self._chunks), reason, (self.clock() - started) * 1000.0)
        self._chunks = []
        self._started = None
        self._last_flush = datetime.now(UTC)
        return flush


# -- model capabilities -------------------------------------------------------------------


def named_model(model: str) -> Model:
    """The Model a name names: one registered in art.llm.model, else litellm's."""
    return registered_model(model) or LiteLLMModel(model)


def supports_response_schema(model: str) -> bool:
    """Whether `model` accepts a JSON schema `response_format` (False on doubt)."""
    return named_model(model).supports_response_schema()


def count_tokens(model: str, messages: Sequence[Mapping[str, JsonValue]]) -> int:
    """Prompt tokens of `messages` for `model`; an estimate when it cannot count."""
    return named_model(model).count_tokens(messages)


def context_window(model: str) -> int | None:
    """The model's input token limit, or None when it is not known."""
    return named_model(model).context_window()


# -- provider errors ----------------------------------------------------------------------

_MISSING_KEY_HINTS = (
    "missing credentials",
    "api key not set",
    "api_key client option must be set",
    "no api key",
    "api key is missing",
    "missing api key",
    "api_key is not set",
    "please set an api key",
    "please pass an `api_key`",
)


def _is_missing_key(message: str) -> bool:
    lowered = message.lower()
    if any(hint in lowered for hint in _MISSING_KEY_HINTS):
        return True
    return "missing" in lowered and "api key" in lowered


def _code_for(exc: BaseException, message: str) -> ModelErrorCode:
    """The code of a failed model request: the Model's own (ProviderError), else read from
    the exception's type; a message about a missing API key says PROVIDER_NOT_CONFIGURED."""
    if isinstance(exc, asyncio.TimeoutError | TimeoutError):
        return ModelErrorCode.TIMEOUT
    if _is_missing_key(message):
        return ModelErrorCode.PROVIDER_NOT_CONFIGURED
    if isinstance(exc, ProviderError):
        return exc.code
    if isinstance(exc, ConnectionError):
        return ModelErrorCode.NETWORK_ERROR
    return ModelErrorCode.UNKNOWN


# Codes of failures found before a request was sent (they do not count as LLM calls).
_NOT_SENT = frozenset(
    {ModelErrorCode.PROVIDER_NOT_CONFIGURED, ModelErrorCode.PROVIDER_NOT_SUPPORTED}
)
_RESPONSE_FORMAT_WORDS = ("response_format", "json_schema", "structured output", "response format")


def _rejects_response_format(error: ModelError) -> bool:
    """Whether `error` is a server refusing the `response_format` parameter."""
    if error.code is not ModelErrorCode.UNKNOWN:
        return False
    lowered = error.message.lower()
    return any(word in lowered for word in _RESPONSE_FORMAT_WORDS)


_HINTS: dict[ModelErrorCode, str] = {
    ModelErrorCode.PROVIDER_NOT_CONFIGURED: (
        "set the provider's API key in the environment or pass llm_params={'api_key': ...}"
    ),
    ModelErrorCode.PROVIDER_NOT_SUPPORTED: (
        "name the provider in the model string, e.g. 'openai/gpt-4o-mini' or 'ollama/llama3'"
    ),
    ModelErrorCode.AUTHENTICATION_ERROR: "check the API key and its permissions",
    ModelErrorCode.MODEL_NOT_FOUND: "check the model name and that your account can use it",
    ModelErrorCode.CONTEXT_LENGTH_EXCEEDED: (
        "lower tool_result_max_length or use a model with a larger context window"
    ),
}


def map_provider_error(
    exc: BaseException, *, model: str, secrets: frozenset[str] = frozenset()
) -> ModelError:
    """The ModelError for a failed model request, its message redacted and with a hint."""
    if isinstance(exc, ModelError):
        return exc
    raw = exc.message if isinstance(exc, ProviderError) else str(exc) or type(exc).__name__
    code = _code_for(exc, raw)
    message = f"{model}: {raw}"
    hint = _HINTS.get(code)
    if hint:
        message = f"{message} ({hint})"
    retry_after_s = exc.retry_after_s if isinstance(exc, ProviderError) else None
    return ModelError(redact(message, secrets), code, retry_after_s=retry_after_s)


def retry_delay_s(
    attempt: int, base_s: float, retry_after_s: float | None, max_delay_s: float
) -> float:
    """How long to wait before retry `attempt` (1-based): exponential, at least
    retry-after, at most `max_delay_s`."""
    backoff = base_s * (2 ** (attempt - 1)) if base_s > 0 else 0.0
    backoff *= 1.0 + random.random() * 0.1  # a little jitter so callers do not retry in step
    delay = max(backoff, retry_after_s or 0.0)
    return min(delay, max_delay_s)


# -- the client ---------------------------------------------------------------------------


class _Stop:
    """Marks the end of a stream in `_next_chunk` (StopAsyncIteration cannot cross a task)."""


_STOP = _Stop()


async def _next_chunk(iterator: AsyncIterator[ModelChunk]) -> ModelChunk | _Stop:
    try:
        return await anext(iterator)
    except StopAsyncIteration:
        return _STOP


class _StreamAborted(Exception):
    """A stream failed after chunks were delivered: retrying would repeat them."""

    def __init__(self, error: ModelError) -> None:
        super().__init__(error.message)
        self.error = error


class LLMClient:
    """Makes the LLM calls of every phase, each through the Model its model name names."""

    def __init__(
        self,
        llm_params: dict[str, Any] | None = None,
        *,
        models: Mapping[str, Model] | None = None,
    ) -> None:
        self.llm_params: dict[str, Any] = {
            key: value for key, value in (llm_params or {}).items() if key not in _RESERVED_PARAMS
        }
        # Model objects by name; any other name is one registered in art.llm.model, else
        # litellm's (LiteLLMModel).
        self.models: dict[str, Model] = dict(models or {})
        self._secrets = secrets_from_params(self.llm_params) | environment_secrets()
        # Models whose server refused a `response_format`: not sent to them again.
        self._plain_models: set[str] = set()

    def __repr__(self) -> str:
        return f"LLMClient(llm_params={redact(self.llm_params, self._secrets)!r})"

    def model_for(self, name: str) -> Model:
        """The Model that answers calls to `name`."""
        return self.models.get(name) or named_model(name)

    def supports_response_schema(self, model: str) -> bool:
        """Whether `model` accepts a JSON schema `response_format`."""
        return self.model_for(model).supports_response_schema()

    def context_window(self, model: str) -> int | None:
        """`model`'s input token limit, None when unknown."""
        return self.model_for(model).context_window()

    def count_tokens(self, model: str, messages: Sequence[Mapping[str, JsonValue]]) -> int:
        """Prompt tokens of `messages` for `model`."""
        return self.model_for(model).count_tokens(messages)

    @property
    def secrets(self) -> frozenset[str]:
        """The keys this client knows: its llm_params' and the environment's."""
        return self._secrets

    def redact(self, value: Any) -> Any:
        """`value` with this client's keys and every known secret shape masked."""
        return redact(value, self._secrets)

    async def complete(
        self,
        run: CallScope,
        *,
        phase: LLMPhase,
        model: str,
        messages: Sequence[Message],
        span: SpanContext,
        response_format: dict[str, JsonValue] | None = None,
        stream: bool = False,
        on_text: Callable[[str], None] | None = None,
    ) -> LLMResult:
        """One LLM call, retried on retryable provider errors; raises ModelError or HookVeto.

        `on_text` is called with each piece of the reply as it streams (the call then
        streams whoever listens), after `chunk:before` hooks edited it.
        """
        data = await run.events.emit(
            "message:before",
            {"phase": phase, "model": model, "messages": messages},
            thread_id=run.thread_id,
            run_id=run.run_id,
            span=span,
        )
        sent_messages = data.get("messages", messages) if isinstance(data, dict) else messages
        if on_text is not None:
            stream = True
        elif stream and not any(run.events.wants(name) for name in _STREAM_EVENTS):
            # Nobody would see a chunk: one plain call gives the same answer, usage and
            # cost without a stream to read.
            stream = False
        request = self._request(run, phase, model, sent_messages, response_format)

        attempt = 0
        started = time.perf_counter()
        while True:
            attempt += 1
            try:
                if stream:
                    result = await self._stream(run, phase, model, request, span, on_text)
                else:
                    result = await self._once(model, request)
                break
            except _StreamAborted as aborted:
                run.stats.add_llm_call(TokenUsage(), None)
                raise aborted.error from aborted.__cause__
            except (HookVeto, asyncio.CancelledError):
                raise
            except Exception as exc:
                error = map_provider_error(exc, model=model, secrets=self._secrets)
                if error.code not in _NOT_SENT:
                    run.stats.add_llm_call(TokenUsage(), None)  # the request was made
                if request.response_format is not None and _rejects_response_format(error):
                    # The server does not take structured output: ask for JSON in the
                    # text instead (the planner reads and repairs it either way).
                    log.info("response_format rejected", phase=phase, model=model)
                    self._plain_models.add(model)
                    request = replace(request, response_format=None)
                    attempt -= 1
                    continue
                # INFO, not WARNING: the run reports the failure itself; logs show it on -v.
                failure_log = log.bind(phase=phase, model=model, code=str(error.code))
                config = run.config
                delay = retry_delay_s(
                    attempt,
                    config.retry_backoff_s,
                    error.retry_after_s,
                    config.llm_max_retry_delay_s,
                )
                if (
                    not error.retryable
                    or attempt > config.llm_max_retries
                    # No retry starts later than the budget after the first attempt.
                    or time.perf_counter() - started + delay > config.llm_retry_budget_s
                ):
                    failure_log.info("llm call failed", attempts=attempt)
                    raise error from None
                failure_log.info("llm call retried", attempt=attempt, delay_s=round(delay, 3))
                await run.events.emit(
                    "error",
                    error_data(
                        "llm",
                        str(error.code),
                        error.message,
                        recoverable=True,
                        phase=phase,
                        suggestion=f"retried in {delay:.3g} s",
                        model=model,
                        attempt=attempt,
                        retry_in_s=delay,
                    ),
                    thread_id=run.thread_id,
                    run_id=run.run_id,
                    span=span,
                )
                await asyncio.sleep(delay)

        run.stats.add_llm_call(result.usage, result.cost)
        await run.events.emit(
            "message:after",
            {
                "phase": phase,
                "model": model,
                "content": result.content,
                "usage": result.usage.model_dump(),
                "cost": result.cost,
                "duration_ms": (time.perf_counter() - started) * 1000.0,
                "finish_reason": result.finish_reason,
                "thinking": result.thinking,
            },
            thread_id=run.thread_id,
            run_id=run.run_id,
            span=span,
        )
        return result

    def _request(
        self,
        run: CallScope,
        phase: LLMPhase,
        model: str,
        messages: Sequence[Message],
        response_format: dict[str, JsonValue] | None,
    ) -> ModelRequest:
        params: dict[str, Any] = dict(self.llm_params)
        metadata = dict(params.pop("metadata", None) or {})
        metadata.update(
            {
                "art_phase": phase,
                "thread_id": run.thread_id,
                "trace_id": run.trace_id,
                "run_id": run.run_id,
            }
        )
        params.setdefault("max_retries", 0)  # art retries; the provider SDK must not as well
        limit = params.pop("timeout", run.config.llm_time_limits(model)[0])
        timeout: float | None = None
        if isinstance(limit, int | float) and not isinstance(limit, bool):
            timeout = float(limit)
        elif limit is not None:
            params["timeout"] = limit  # e.g. an httpx.Timeout the provider SDK applies
        if response_format is not None and model in self._plain_models:
            response_format = None
        return ModelRequest(
            messages=messages,
            response_format=response_format,
            timeout=timeout,
            params=params,
            metadata=metadata,
        )

    async def _once(self, model: str, request: ModelRequest) -> LLMResult:
        response = await _bounded(self.model_for(model).request(request), model, request.timeout)
        return LLMResult(
            content=escape_unencodable(response.content or ""),
            usage=response.usage,
            cost=response.cost,
            model=response.model or model,
            finish_reason=response.finish_reason,
            thinking=escape_unencodable(response.thinking) if response.thinking else None,
        )

    async def _stream(
        self,
        run: CallScope,
        phase: LLMPhase,
        model: str,
        request: ModelRequest,
        span: SpanContext,
        on_text: Callable[[str], None] | None = None,
    ) -> LLMResult:
        response = await _bounded(
            self.model_for(model).request_stream(request), model, request.timeout
        )
        iterator = response.__aiter__()
        idle_s = run.config.llm_time_limits(model)[1]
        last_chunk_at = time.monotonic()
        chunk_events = any(run.events.wants(name) for name in _STREAM_EVENTS)
        buffer = StreamBuffer(run.config.buffer)
        parts: list[str] = []
        thinking: list[str] = []
        usage = TokenUsage()
        cost: float | None = None
        finish_reason: str | None = None
        response_model: str | None = None
        sequence = 0
        delivered = False
        pending: asyncio.Future[ModelChunk | _Stop] | None = None
        streamed = False  # the stream ran to its end

        async def emit(name: str, data: dict[str, Any]) -> dict[str, Any]:
            return await run.events.emit(
                name, data, thread_id=run.thread_id, run_id=run.run_id, span=span
            )

        async def release(flush: Flush | None) -> None:
            if flush is not None:
                await emit(
                    "buffer:flush",
                    {
                        "phase": phase,
                        "chunks": flush.chunks,
                        "flush_reason": flush.reason,
                        "duration_ms": flush.duration_ms,
                    },
                )

        try:
            while True:
                if pending is None:
                    pending = asyncio.ensure_future(_next_chunk(iterator))
                # Wake for a time flush even while the provider is silent, and when the
                # stream has been silent too long.
                idle_left = None if idle_s is None else last_chunk_at + idle_s - time.monotonic()
                wakes = [s for s in (buffer.due_in(), idle_left) if s is not None]
                done, _ = await asyncio.wait(
                    {pending}, timeout=max(0.0, min(wakes)) if wakes else None
                )
                if not done:
                    if idle_s is not None and time.monotonic() - last_chunk_at >= idle_s:
                        raise ModelError(
                            f"{model}: no streamed chunk for {idle_s:g} s "
                            "(llm_stream_idle_timeout_s)",
                            ModelErrorCode.TIMEOUT,
                        )
                    await release(buffer.flush_if_due())
                    continue
                item, pending = pending.result(), None
                last_chunk_at = time.monotonic()
                if isinstance(item, _Stop):
                    streamed = True
                    break
                response_model = item.model or response_model
                usage = item.usage if item.usage is not None else usage
                cost = item.cost if item.cost is not None else cost
                finish_reason = item.finish_reason or finish_reason
                reasoning = escape_unencodable(item.thinking) if item.thinking else None
                if reasoning:
                    # Thinking is shown, never edited, and never part of the answer.
                    thinking.append(reasoning)
                    delivered = True
                    await emit(
                        "chunk:after",
                        {
                            "phase": phase,
                            "chunk": "",
                            "thinking": reasoning,
                            "sequence": sequence,
                            "done": False,
                        },
                    )
                    sequence += 1
                if not item.text:
                    continue
                text = escape_unencodable(item.text)
                if not chunk_events:  # nobody listens: the text only
                    parts.append(text)
                    delivered = True
                    if on_text is not None:
                        on_text(text)
                    continue
                try:
                    edited = await emit(
                        "chunk:before",
                        {
                            "phase": phase,
                            "chunk": text,
                            "sequence": sequence,
                            "buffer": buffer.state(),
                        },
                    )
                except HookVeto:
                    sequence += 1  # a vetoed chunk is dropped from the answer
                    continue
                flush_now = False
                if isinstance(edited, dict):
                    text = str(edited.get("chunk", text))
                    flush_now = edited.get("flush") is True  # a hook's manual flush
                parts.append(text)
                delivered = True
                if on_text is not None:
                    on_text(text)
                await release(buffer.add(text))
                if flush_now:
                    await release(buffer.flush())
                await emit(
                    "chunk:after",
                    {
                        "phase": phase,
                        "chunk": text,
                        "sequence": sequence,
                        "done": False,
                        "buffer": buffer.state(),
                    },
                )
                sequence += 1
        except (HookVeto, asyncio.CancelledError):
            raise
        except Exception as exc:
            if delivered:
                error = map_provider_error(exc, model=model, secrets=self._secrets)
                raise _StreamAborted(error) from None
            raise
        finally:
            if pending is not None and not pending.done():
                pending.cancel()
            if not streamed:
                # Cancelled or failed mid-stream: close the provider's response now, not
                # when it is garbage collected (the server sees the request dropped).
                await _close_stream(response)
        await release(buffer.finish())

        # The last chunk event carries what only the stream's end knows (seed 002).
        await emit(
            "chunk:after",
            {
                "phase": phase,
                "chunk": "",
                "sequence": sequence,
                "done": True,
                "finish_reason": finish_reason,
                "usage": usage.model_dump(),
                "model": response_model or model,
            },
        )
        return LLMResult(
            content="".join(parts),
            usage=usage,
            cost=cost,
            model=response_model or model,
            finish_reason=finish_reason,
            thinking="".join(thinking) or None,
        )


async def _close_stream(response: ModelStream) -> None:
    """Close a streamed response, briefly and quietly."""
    with contextlib.suppress(Exception):
        async with asyncio.timeout(_STREAM_CLOSE_S):
            await response.aclose()


_T = TypeVar("_T")


async def _bounded(call: Awaitable[_T], model: str, limit_s: object) -> _T:
    """`call`, failed with TIMEOUT after `limit_s` seconds (not a number: no bound here)."""
    if not isinstance(limit_s, int | float) or isinstance(limit_s, bool):
        return await call  # no limit, or an httpx.Timeout the provider SDK applies
    try:
        async with asyncio.timeout(float(limit_s)):
            return await call
    except TimeoutError:
        raise ModelError(
            f"{model}: no answer within {limit_s:g} s (raise llm_timeout_s, or timeout in "
            "llm_params, for slower models)",
            ModelErrorCode.TIMEOUT,
        ) from None
