"""LiteLLMModel: the Model for any model litellm knows by name, and everything litellm-specific:
its call arguments, its response and stream objects, its price map, its exceptions.

litellm is imported on the first request (it takes seconds), never by importing this module.
"""

from __future__ import annotations

import asyncio
import email.utils
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import UTC, datetime
from types import ModuleType
from typing import Any

from pydantic import JsonValue

from art.core.usage import TokenUsage
from art.errors import ModelErrorCode
from art.llm.model import (
    ModelChunk,
    ModelRequest,
    ModelResponse,
    ModelStream,
    ProviderError,
    estimate_tokens,
)
from art.llm.provider import load_litellm

__all__ = ["LiteLLMModel", "is_litellm_error", "provider_error"]


class LiteLLMModel:
    """A model litellm calls by name (`openai/gpt-4o-mini`, `ollama/llama3.2`, ...)."""

    def __init__(self, model: str) -> None:
        self.model = model

    def __repr__(self) -> str:
        return f"LiteLLMModel({self.model!r})"

    async def request(self, request: ModelRequest) -> ModelResponse:
        litellm = load_litellm()
        try:
            response = await litellm.acompletion(**self._arguments(request))
        except Exception as exc:
            raise provider_error(exc) from exc
        choices = getattr(response, "choices", None) or []
        message = getattr(choices[0], "message", None) if choices else None
        usage = TokenUsage.from_provider(getattr(response, "usage", None))
        return ModelResponse(
            content=getattr(message, "content", None) or "",
            usage=usage,
            model=getattr(response, "model", None),
            finish_reason=getattr(choices[0], "finish_reason", None) if choices else None,
            thinking=_reasoning(message),
            cost=_response_cost(litellm, response, self.model, usage),
        )

    async def request_stream(self, request: ModelRequest) -> ModelStream:
        arguments = self._arguments(request)
        arguments.update(stream=True, stream_options={"include_usage": True})
        try:
            response = await load_litellm().acompletion(**arguments)
        except Exception as exc:
            raise provider_error(exc) from exc
        return _LiteLLMStream(response, self.model)

    def supports_response_schema(self) -> bool:
        """Whether litellm says the model accepts a JSON schema `response_format`
        (False on doubt)."""
        try:
            return bool(load_litellm().supports_response_schema(model=self.model))
        except Exception:
            return False

    def context_window(self) -> int | None:
        """The model's input token limit, or None when litellm does not know the model."""
        try:
            info = load_litellm().get_model_info(model=self.model)
        except Exception:
            return None
        for key in ("max_input_tokens", "max_tokens"):
            value = info.get(key) if isinstance(info, Mapping) else None
            if isinstance(value, int) and value > 0:
                return value
        return None

    def count_tokens(self, messages: Sequence[Mapping[str, JsonValue]]) -> int:
        """litellm's count for the model; an estimate when litellm cannot count."""
        try:
            return int(load_litellm().token_counter(model=self.model, messages=messages))
        except Exception:
            return estimate_tokens(messages)

    def _arguments(self, request: ModelRequest) -> dict[str, Any]:
        """`litellm.acompletion`'s keyword arguments for `request`."""
        arguments: dict[str, Any] = {
            **request.params,
            "model": self.model,
            "messages": request.messages,
            "metadata": request.metadata,
        }
        if request.timeout is not None or "timeout" not in arguments:
            arguments["timeout"] = request.timeout
        if request.response_format is not None:
            arguments["response_format"] = request.response_format
        if self.model.startswith("litellm_proxy/"):
            # A LiteLLM proxy reads `metadata` from the request body; litellm sends its
            # own `metadata` argument only to callbacks in this process.
            extra_body = dict(arguments.get("extra_body") or {})
            extra_body["metadata"] = {**(extra_body.get("metadata") or {}), **request.metadata}
            arguments["extra_body"] = extra_body
        return arguments


class _LiteLLMStream:
    """litellm's stream wrapper as ModelChunks; the usage, finish reason and cost come on a
    last chunk of their own, once the stream has ended."""

    def __init__(self, response: Any, model: str) -> None:
        self._response = response
        self._model = model

    def __aiter__(self) -> AsyncIterator[ModelChunk]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[ModelChunk]:
        usage_raw: Any = None
        finish_reason: str | None = None
        try:
            async for item in self._response:
                if getattr(item, "usage", None):
                    usage_raw = item.usage
                choices = getattr(item, "choices", None) or []
                delta = getattr(choices[0], "delta", None) if choices else None
                if choices:
                    finish_reason = getattr(choices[0], "finish_reason", None) or finish_reason
                text = getattr(delta, "content", None) if delta is not None else None
                yield ModelChunk(
                    text=text or "",
                    thinking=_reasoning(delta),
                    model=getattr(item, "model", None),
                )
        except Exception as exc:
            raise provider_error(exc) from exc
        if _provider_sent_no_finish_reason(self._response):
            # litellm's stream wrapper says "stop" for a stream that just ended
            finish_reason = None
        usage = TokenUsage.from_provider(usage_raw)
        yield ModelChunk(
            usage=usage,
            finish_reason=finish_reason,
            cost=_tokens_cost(load_litellm(), self._model, usage),
        )

    async def aclose(self) -> None:
        close = getattr(self._response, "aclose", None)
        if close is not None:
            await close()


def _reasoning(message: object) -> str | None:
    """The provider's reasoning text on a message or stream delta (litellm's
    `reasoning_content`), or None."""
    text = getattr(message, "reasoning_content", None) if message is not None else None
    return text if isinstance(text, str) and text else None


def _provider_sent_no_finish_reason(response: object) -> bool:
    """Whether litellm's stream wrapper saw no finish reason from the provider."""
    if not hasattr(response, "received_finish_reason"):
        return False
    received = getattr(response, "received_finish_reason", None)
    return received is None and getattr(response, "intermittent_finish_reason", None) is None


def _response_cost(
    litellm: ModuleType, response: object, model: str, usage: TokenUsage
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


# -- litellm's exceptions -------------------------------------------------------------------


def is_litellm_error(exc: BaseException) -> bool:
    """Whether `exc` is one of litellm's exceptions (without importing litellm)."""
    return type(exc).__module__.split(".")[0] == "litellm"


def provider_error(exc: BaseException) -> ProviderError:
    """The ProviderError for an exception litellm raised: its code, words and retry-after."""
    original = getattr(exc, "original_exception", None)  # litellm's MidStreamFallbackError
    if isinstance(original, BaseException):
        exc = original
    if isinstance(exc, ProviderError):
        return exc
    raw = str(exc) or type(exc).__name__
    return ProviderError(
        _without_traceback(raw), _code_for(exc, raw), retry_after_s=_retry_after_s(exc)
    )


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
    import litellm.exceptions as lx

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
