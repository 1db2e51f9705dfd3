"""Every LLM call art makes: litellm (imported lazily), events, retries, error codes, usage, cost.

`LLMClient.complete` is the one path. It emits `message:before` (a hook may edit the
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
import email.utils
import random
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

from art.core.log import get_logger
from art.core.redaction import environment_secrets, redact, secrets_from_params
from art.core.serialization import escape_unencodable
from art.core.usage import TokenUsage
from art.errors import ModelError, ModelErrorCode
from art.llm.model import LiteLLMModel, Model
from art.llm.provider import load_litellm
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

    def state(self) -> dict[str, Any]:
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


def supports_response_schema(model: str) -> bool:
    """Whether litellm says `model` accepts a JSON schema `response_format` (False on doubt)."""
    try:
        return bool(load_litellm().supports_response_schema(model=model))
    except Exception:
        return False


def count_tokens(model: str, messages: list[dict[str, Any]]) -> int:
    """Prompt tokens of `messages` for `model`; a characters/4 estimate when litellm cannot."""
    try:
        return int(load_litellm().token_counter(model=model, messages=messages))
    except Exception:
        chars = sum(len(str(m.get("content") or "")) + 8 for m in messages)
        return chars // 4 + 1


def context_window(model: str) -> int | None:
    """The model's input token limit, or None when litellm does not know the model."""
    try:
        info = load_litellm().get_model_info(model=model)
    except Exception:
        return None
    for key in ("max_input_tokens", "max_tokens"):
        value = info.get(key) if isinstance(info, Mapping) else None
        if isinstance(value, int) and value > 0:
            return value
    return None


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


def _retry_after_s(exc: BaseException) -> float | None:
    """The provider's `retry-after` (seconds or HTTP date, or `retry-after-ms`), if sent."""
    # litellm keeps the response's headers in `litellm_response_headers` (its `headers`
    # attribute stays None); an openai SDK error carries them on `response`.
    response = getattr(exc, "response", None)
    header_sources = [
        getattr(exc, "litellm_response_headers", None),
        getattr(exc, "headers", None),
        getattr(response, "headers", None),
    ]
    for headers in header_sources:
        if not headers:
            continue
        try:
            millis = headers.get("retry-after-ms")
            if millis is not None:
                return max(0.0, float(millis) / 1000.0)
            value = headers.get("retry-after")
        except Exception:
            continue
        if value is None:
            continue
        try:
            return max(0.0, float(value))
        except (TypeError, ValueError):
            pass
        try:
            when = email.utils.parsedate_to_datetime(str(value))
        except (TypeError, ValueError):
            continue
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return max(0.0, (when - datetime.now(UTC)).total_seconds())
    return None


# What litellm's message says when a response body could not be parsed: a JSON decoder
# error, or a body without the API's fields.
_UNPARSEABLE = re.compile(
    r"line \d+ column \d+ \(char \d+\)|provider returned '|invalid response object"
    r"|JSONDecodeError|Unterminated string",
    re.IGNORECASE,
)


_UNREACHABLE = re.compile(
    r"connection error|connection refused|connecterror|connection reset|name or service",
    re.IGNORECASE,
)
_STATUS_CODES = {
    401: ModelErrorCode.AUTHENTICATION_ERROR,
    403: ModelErrorCode.AUTHENTICATION_ERROR,
    404: ModelErrorCode.MODEL_NOT_FOUND,
    408: ModelErrorCode.TIMEOUT,
    429: ModelErrorCode.RATE_LIMITED,
}


def _code_for(exc: BaseException, message: str) -> ModelErrorCode:
    if isinstance(exc, asyncio.TimeoutError | TimeoutError):
        return ModelErrorCode.TIMEOUT
    try:
        import litellm.exceptions as lx
    except Exception:  # pragma: no cover - litellm is a dependency
        return ModelErrorCode.UNKNOWN
    if _is_missing_key(message):
        return ModelErrorCode.PROVIDER_NOT_CONFIGURED
    # Subclasses before their bases: Timeout is an APIConnectionError,
    # ContextWindowExceededError a BadRequestError.
    ordered: list[tuple[type[BaseException], ModelErrorCode]] = [
        (lx.ContextWindowExceededError, ModelErrorCode.CONTEXT_LENGTH_EXCEEDED),
        (lx.Timeout, ModelErrorCode.TIMEOUT),
        (lx.RateLimitError, ModelErrorCode.RATE_LIMITED),
        (lx.AuthenticationError, ModelErrorCode.AUTHENTICATION_ERROR),
        (lx.PermissionDeniedError, ModelErrorCode.AUTHENTICATION_ERROR),
        (lx.NotFoundError, ModelErrorCode.MODEL_NOT_FOUND),
        (lx.APIResponseValidationError, ModelErrorCode.INVALID_RESPONSE),
        (lx.ServiceUnavailableError, ModelErrorCode.PROVIDER_ERROR),
        (lx.InternalServerError, ModelErrorCode.PROVIDER_ERROR),
        (lx.BadGatewayError, ModelErrorCode.PROVIDER_ERROR),
        (lx.APIConnectionError, ModelErrorCode.NETWORK_ERROR),
    ]
    for kind, code in ordered:
        if isinstance(exc, kind):
            if code is ModelErrorCode.PROVIDER_ERROR:
                # litellm reports a body it could not read, and a server it could not
                # reach, as server errors.
                if _UNPARSEABLE.search(message):
                    return ModelErrorCode.INVALID_RESPONSE
                if _UNREACHABLE.search(message):
                    return ModelErrorCode.NETWORK_ERROR
            return code
    status = getattr(exc, "status_code", None)
    if isinstance(exc, lx.APIError) and isinstance(status, int):
        # litellm's generic APIError for a status it has no class for (e.g. 403, 504).
        if status >= 500:
            return ModelErrorCode.PROVIDER_ERROR
        if status in _STATUS_CODES:
            return _STATUS_CODES[status]
    if isinstance(exc, lx.BadRequestError):
        if "llm provider not provided" in message.lower() or isinstance(
            exc, lx.LiteLLMUnknownProvider
        ):
            return ModelErrorCode.PROVIDER_NOT_SUPPORTED
        return ModelErrorCode.UNKNOWN
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


_TRACEBACK = "Traceback (most recent call last):"
_SOURCE_LINE = re.compile(r'File "[^"]*", line \d+(, in \S+)?')


def _without_traceback(text: str) -> str:
    """`text` without a Python traceback (litellm appends one, with the server's file
    paths, to errors it does not map): what precedes it and the exception it ends with."""
    head, found, tail = text.partition(_TRACEBACK)
    if found:
        # The traceback's first unindented line names the exception; what follows it
        # (litellm's received_args, a bug-report link) is dropped with the frames.
        cause = next((line for line in tail.splitlines() if line[:1].strip()), "")
        text = " ".join(part for part in (head.strip(), cause.strip()) if part)
    return _SOURCE_LINE.sub("", text).strip()


def map_provider_error(
    exc: BaseException, *, model: str, secrets: frozenset[str] = frozenset()
) -> ModelError:
    """The ModelError for a provider exception, its message redacted and with a hint."""
    if isinstance(exc, ModelError):
        return exc
    original = getattr(exc, "original_exception", None)  # litellm's MidStreamFallbackError
    if isinstance(original, BaseException):
        exc = original
    raw = str(exc) or type(exc).__name__
    code = _code_for(exc, raw)
    message = f"{model}: {_without_traceback(raw)}"
    hint = _HINTS.get(code)
    if hint:
        message = f"{message} ({hint})"
    return ModelError(redact(message, secrets), code, retry_after_s=_retry_after_s(exc))


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


async def _next_chunk(iterator: AsyncIterator[Any]) -> Any:
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
    """Makes the LLM calls of every phase through `litellm.acompletion`."""

    def __init__(
        self,
        llm_params: dict[str, Any] | None = None,
        *,
        models: Mapping[str, Model] | None = None,
    ) -> None:
        self.llm_params: dict[str, Any] = {
            key: value for key, value in (llm_params or {}).items() if key not in _RESERVED_PARAMS
        }
        # Model objects by name; any other name is litellm's (LiteLLMModel).
        self.models: dict[str, Model] = dict(models or {})
        self._secrets = secrets_from_params(self.llm_params) | environment_secrets()
        # Models whose server refused a `response_format`: not sent to them again.
        self._plain_models: set[str] = set()

    def __repr__(self) -> str:
        return f"LLMClient(llm_params={redact(self.llm_params, self._secrets)!r})"

    def model_for(self, name: str) -> Model:
        """The Model that answers calls to `name`."""
        return self.models.get(name) or LiteLLMModel(name)

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
        messages: list[dict[str, Any]],
        span: SpanContext,
        response_format: dict[str, Any] | None = None,
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
            # cost without litellm's streaming wrapper.
            stream = False
        kwargs = self._call_kwargs(run, phase, model, sent_messages, response_format, stream)

        attempt = 0
        started = time.perf_counter()
        while True:
            attempt += 1
            try:
                if stream:
                    result = await self._stream(run, phase, model, kwargs, span, on_text)
                else:
                    result = await self._once(model, kwargs)
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
                if "response_format" in kwargs and _rejects_response_format(error):
                    # The server does not take structured output: ask for JSON in the
                    # text instead (the planner reads and repairs it either way).
                    log.info("response_format rejected", phase=phase, model=model)
                    self._plain_models.add(model)
                    kwargs.pop("response_format")
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

    def _call_kwargs(
        self,
        run: CallScope,
        phase: LLMPhase,
        model: str,
        messages: list[dict[str, Any]],
        response_format: dict[str, Any] | None,
        stream: bool,
    ) -> dict[str, Any]:
        kwargs: dict[str, Any] = dict(self.llm_params)
        metadata = dict(kwargs.pop("metadata", None) or {})
        metadata.update(
            {
                "art_phase": phase,
                "thread_id": run.thread_id,
                "trace_id": run.trace_id,
                "run_id": run.run_id,
            }
        )
        kwargs.update(model=model, messages=messages, metadata=metadata)
        if model.startswith("litellm_proxy/"):
            # A LiteLLM proxy reads `metadata` from the request body; litellm sends its
            # own `metadata` argument only to callbacks in this process.
            extra_body = dict(kwargs.get("extra_body") or {})
            extra_body["metadata"] = {**(extra_body.get("metadata") or {}), **metadata}
            kwargs["extra_body"] = extra_body
        kwargs.setdefault("max_retries", 0)  # art retries; the provider SDK must not as well
        kwargs.setdefault("timeout", run.config.llm_time_limits(model)[0])
        if response_format is not None and model not in self._plain_models:
            kwargs["response_format"] = response_format
        if stream:
            kwargs["stream"] = True
            kwargs["stream_options"] = {"include_usage": True}
        return kwargs

    async def _once(self, model: str, kwargs: dict[str, Any]) -> LLMResult:
        litellm = load_litellm()
        response = await _bounded(
            self.model_for(model).acompletion(**kwargs), model, kwargs["timeout"]
        )
        choices = getattr(response, "choices", None) or []
        message = getattr(choices[0], "message", None) if choices else None
        content = escape_unencodable(getattr(message, "content", None) or "")
        finish_reason = getattr(choices[0], "finish_reason", None) if choices else None
        usage = TokenUsage.from_provider(getattr(response, "usage", None))
        return LLMResult(
            content=content,
            usage=usage,
            cost=_response_cost(litellm, response, model, usage),
            model=getattr(response, "model", None) or model,
            finish_reason=finish_reason,
            thinking=_reasoning(message),
        )

    async def _stream(
        self,
        run: CallScope,
        phase: LLMPhase,
        model: str,
        kwargs: dict[str, Any],
        span: SpanContext,
        on_text: Callable[[str], None] | None = None,
    ) -> LLMResult:
        litellm = load_litellm()
        response = await _bounded(
            self.model_for(model).acompletion(**kwargs), model, kwargs["timeout"]
        )
        iterator = response.__aiter__()
        idle_s = run.config.llm_time_limits(model)[1]
        last_chunk_at = time.monotonic()
        chunk_events = any(run.events.wants(name) for name in _STREAM_EVENTS)
        buffer = StreamBuffer(run.config.buffer)
        parts: list[str] = []
        thinking: list[str] = []
        usage_raw: Any = None
        finish_reason: str | None = None
        response_model: str | None = None
        sequence = 0
        delivered = False
        pending: asyncio.Future[Any] | None = None
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
                if item is _STOP:
                    streamed = True
                    break
                response_model = getattr(item, "model", None) or response_model
                if getattr(item, "usage", None):
                    usage_raw = item.usage
                choices = getattr(item, "choices", None) or []
                if not choices:
                    continue
                finish_reason = getattr(choices[0], "finish_reason", None) or finish_reason
                delta = getattr(choices[0], "delta", None)
                reasoning = _reasoning(delta)
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
                text = getattr(delta, "content", None) if delta is not None else None
                if not text:
                    continue
                text = escape_unencodable(text)
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
        if _provider_sent_no_finish_reason(response):
            finish_reason = (
                None  # litellm's stream wrapper says "stop" for a stream that just ended
            )

        usage = TokenUsage.from_provider(usage_raw)
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
            cost=_tokens_cost(litellm, model, usage),
            model=response_model or model,
            finish_reason=finish_reason,
            thinking="".join(thinking) or None,
        )


async def _close_stream(response: Any) -> None:
    """Close a streamed response (litellm's stream wrapper), briefly and quietly."""
    close = getattr(response, "aclose", None)
    if close is None:
        return
    with contextlib.suppress(Exception):
        async with asyncio.timeout(_STREAM_CLOSE_S):
            await close()


def _reasoning(message: Any) -> str | None:
    """The provider's reasoning text on a message or stream delta (litellm's
    `reasoning_content`), or None."""
    text = getattr(message, "reasoning_content", None) if message is not None else None
    return escape_unencodable(text) if isinstance(text, str) and text else None


def _provider_sent_no_finish_reason(response: Any) -> bool:
    """Whether litellm's stream wrapper saw no finish reason from the provider."""
    if not hasattr(response, "received_finish_reason"):
        return False
    received = response.received_finish_reason
    return received is None and getattr(response, "intermittent_finish_reason", None) is None


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


def _response_cost(
    litellm: ModuleType, response: Any, model: str, usage: TokenUsage
) -> float | None:
    hidden = getattr(response, "_hidden_params", None)
    known = hidden.get("response_cost") if isinstance(hidden, dict) else None
    if isinstance(known, int | float) and not isinstance(known, bool):
        return float(known)  # litellm priced this response already
    try:
        cost = litellm.completion_cost(completion_response=response, model=model)
    except Exception:
        return _tokens_cost(litellm, model, usage)
    return float(cost) if cost is not None else None


def _tokens_cost(litellm: ModuleType, model: str, usage: TokenUsage) -> float | None:
    if not usage.total_tokens:
        return None
    try:
        prompt_cost, completion_cost = litellm.cost_per_token(
            model=model,
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
        )
    except Exception:
        return None
    return float(prompt_cost) + float(completion_cost)
