"""One LLM call outside a run (seed 002's `chat` / `chatStream`): `ChatResponse`, `ChatStreamChunk`.

A chat call goes through the same `LLMClient.complete` as every call of a run, so it has
the engine's provider routing, retries, time limits, error codes, key redaction, usage
and cost. It is not a run: it has no thread, stores nothing, and its events stay with the
call (the instance's hooks and subscribers do not see them).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import JsonValue

from art.core.models import ArtModel
from art.core.redaction import secrets_in_use
from art.core.spans import SpanContext
from art.core.usage import TokenUsage
from art.engine.context import RunStats
from art.errors import ConfigurationError
from art.llm.model import Message
from art.observe.events import Event, EventBus

if TYPE_CHECKING:
    from art.config import ExecutionConfig
    from art.llm.client import LLMClient, LLMResult

__all__ = ["ChatMessages", "ChatResponse", "ChatStreamChunk", "chat_messages"]

ChatMessages = str | Sequence[Mapping[str, Any]]
_ROLES = frozenset({"system", "user", "assistant", "tool"})


class ChatResponse(ArtModel):
    """The reply of one chat call (seed 002's `ChatResponse`, plus the model's cost)."""

    content: str
    model: str
    finish_reason: str | None
    usage: TokenUsage
    thinking: str | None = None
    cost: float | None = None


class ChatStreamChunk(ArtModel):
    """A piece of a streamed reply. The last one has `done=True`, the finish reason,
    usage and model, and no text."""

    content: str = ""
    thinking: str | None = None
    done: bool = False
    finish_reason: str | None = None
    usage: TokenUsage | None = None
    model: str | None = None


def chat_messages(messages: ChatMessages, system_prompt: str | None) -> list[dict[str, JsonValue]]:
    """The OpenAI-style message list for `messages` (a string is one user message), with
    `system_prompt` first. Raises ConfigurationError on a message without role or content."""
    listed: list[dict[str, JsonValue]] = (
        [{"role": "user", "content": messages}]
        if isinstance(messages, str)
        else [dict(message) for message in messages]
    )
    for number, message in enumerate(listed):
        if message.get("role") not in _ROLES or "content" not in message:
            raise ConfigurationError(
                f"chat message {number} needs a role ({', '.join(sorted(_ROLES))}) and "
                f"content: {message!r}"
            )
    if not listed:
        raise ConfigurationError("chat needs at least one message")
    if system_prompt:
        listed.insert(0, {"role": "system", "content": system_prompt})
    return listed


#: litellm parameters that ask the model to call functions: the reply would be tool calls,
#: which a ChatResponse has no place for.
_FUNCTION_CALLING = ("tools", "tool_choice", "functions", "function_call", "parallel_tool_calls")


def refuse_function_calling(params: Mapping[str, Any]) -> None:
    """Raise ConfigurationError when `params` ask for function calling: art.chat returns
    text, and a reply of tool calls would otherwise come back as empty content."""
    asked = [name for name in _FUNCTION_CALLING if params.get(name) is not None]
    if asked:
        raise ConfigurationError(
            f"art.chat does not do function calling ({', '.join(asked)} in llm_params): "
            "its reply is text, so tool calls would be lost. Give the tools to an "
            "instance (create_art_instance(tools=[...])) and use process(), whose planner "
            "calls them; or call litellm directly for raw tool calls"
        )


@dataclass
class _ChatScope:
    """The `CallScope` of a chat call: no thread, no run, events of its own."""

    config: ExecutionConfig
    span: SpanContext = field(default_factory=SpanContext.root)
    events: EventBus = field(default_factory=EventBus)
    stats: RunStats = field(default_factory=RunStats)
    thread_id: str | None = None
    run_id: str | None = None

    @property
    def trace_id(self) -> str:
        return self.span.trace_id


def _response(result: LLMResult) -> ChatResponse:
    return ChatResponse(
        content=result.content,
        model=result.model,
        finish_reason=result.finish_reason,
        usage=result.usage,
        thinking=result.thinking,
        cost=result.cost,
    )


async def achat(
    llm: LLMClient,
    config: ExecutionConfig,
    model: str,
    messages: Sequence[Message],
    *,
    response_format: dict[str, JsonValue] | None = None,
) -> ChatResponse:
    """One call, not streamed; raises ModelError."""
    scope = _ChatScope(config)
    with secrets_in_use(llm.secrets):
        result = await llm.complete(
            scope,
            phase="chat",
            model=model,
            messages=messages,
            span=scope.span,
            response_format=response_format,
        )
    return _response(result)


async def chat_stream(
    llm: LLMClient,
    config: ExecutionConfig,
    model: str,
    messages: Sequence[Message],
) -> AsyncIterator[ChatStreamChunk]:
    """One streamed call: its chunks as they arrive, ending with the `done` one; raises
    ModelError (after the chunks delivered before the failure)."""
    scope = _ChatScope(config)
    events: asyncio.Queue[Event | None] = asyncio.Queue()
    scope.events.subscribe(events.put_nowait)  # a listener: the call streams

    async def call() -> LLMResult:
        try:
            with secrets_in_use(llm.secrets):  # the call's own task: its logs mask its keys
                return await llm.complete(
                    scope,
                    phase="chat",
                    model=model,
                    messages=messages,
                    span=scope.span,
                    stream=True,
                )
        finally:
            events.put_nowait(None)

    task = asyncio.ensure_future(call())
    try:
        while (event := await events.get()) is not None:
            if event.name == "chunk:after":
                yield _chunk(event.data)
        await task  # raises the call's error
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def _chunk(data: Mapping[str, Any]) -> ChatStreamChunk:
    usage = data.get("usage")
    return ChatStreamChunk(
        content=str(data.get("chunk") or ""),
        thinking=data.get("thinking"),
        done=bool(data.get("done")),
        finish_reason=data.get("finish_reason"),
        usage=TokenUsage.model_validate(usage) if usage is not None else None,
        model=data.get("model"),
    )
