"""MCP sampling: a server's `sampling/createMessage` answered with art's own model.

An `ArtInstance` given MCP servers attaches a `Sampler` over its model to the
`MCPClient`; each server's config bounds what it may ask for (`MCPServerConfig.sampling`,
`sampling_max_tokens`, `sampling_per_minute`). Text messages only: a request carrying
images, audio or tools is refused with the reason.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING

from art.core.log import get_logger

if TYPE_CHECKING:
    import mcp_types

    from art.adapters.mcp.config import MCPServerConfig
    from art.llm.model import Message, Model

__all__ = ["Sampler", "SamplingLimit"]

log = get_logger(__name__)

#: The `art_phase` of a sampling call (what `ScriptedModel` and litellm callbacks see).
SAMPLING_PHASE = "sampling"


class Sampler:
    """Makes the LLM call a sampling request asks for, with `model` and `llm_params`."""

    def __init__(self, model: Model, llm_params: Mapping[str, object] | None = None) -> None:
        self.model = model
        self.llm_params = dict(llm_params or {})

    async def __call__(
        self, server: str, params: mcp_types.CreateMessageRequestParams, max_tokens: int
    ) -> mcp_types.CreateMessageResult:
        """The model's reply; raises ValueError for content it cannot send."""
        from mcp_types import CreateMessageResult, TextContent

        from art.llm.model import ModelRequest

        messages: list[Message] = []
        if params.system_prompt:
            messages.append({"role": "system", "content": params.system_prompt})
        for message in params.messages:
            blocks = message.content if isinstance(message.content, list) else [message.content]
            texts = [getattr(block, "text", None) for block in blocks]
            if any(text is None for text in texts):
                raise ValueError("only text messages can be sampled")
            messages.append({"role": message.role, "content": "\n".join(map(str, texts))})
        settings: dict[str, object] = {**self.llm_params, "max_tokens": max_tokens}
        settings.pop("metadata", None)  # a sampling call's metadata is its own
        if params.temperature is not None:
            settings["temperature"] = params.temperature
        if params.stop_sequences:
            settings["stop"] = params.stop_sequences
        timeout = settings.pop("timeout", None)
        seconds = timeout if isinstance(timeout, int | float) else None
        if timeout is not None and seconds is None:
            settings["timeout"] = timeout  # e.g. an httpx.Timeout the provider SDK applies
        reply = await self.model.request(
            ModelRequest(
                messages=messages,
                timeout=None if seconds is None else float(seconds),
                params=settings,
                metadata={"art_phase": SAMPLING_PHASE, "mcp_server": server},
            )
        )
        stop = {"length": "maxTokens", "stop": "endTurn"}.get(reply.finish_reason or "")
        return CreateMessageResult(
            role="assistant",
            content=TextContent(type="text", text=reply.content),
            model=reply.model or self.model.model,
            stop_reason=stop,
        )


class SamplingLimit:
    """One server's sampling budget: requests per minute, tokens per request."""

    def __init__(self, config: MCPServerConfig) -> None:
        self.max_tokens = config.sampling_max_tokens
        self.per_minute = config.sampling_per_minute
        self._recent: deque[float] = deque()

    def admit(self, asked_tokens: int) -> tuple[int, str | None]:
        """The max_tokens to use and None, or 0 and why the request is refused."""
        now = time.monotonic()
        while self._recent and now - self._recent[0] >= 60:
            self._recent.popleft()
        if len(self._recent) >= self.per_minute:
            return 0, f"sampling limit reached ({self.per_minute} requests a minute)"
        self._recent.append(now)
        return min(asked_tokens, self.max_tokens), None
