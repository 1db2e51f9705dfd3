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
from typing import TYPE_CHECKING, Any

from art.core.log import get_logger

if TYPE_CHECKING:
    import mcp_types

    from art.adapters.mcp.config import MCPServerConfig
    from art.llm.model import Model

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

        messages: list[dict[str, str]] = []
        if params.system_prompt:
            messages.append({"role": "system", "content": params.system_prompt})
        for message in params.messages:
            blocks = message.content if isinstance(message.content, list) else [message.content]
            texts = [getattr(block, "text", None) for block in blocks]
            if any(text is None for text in texts):
                raise ValueError("only text messages can be sampled")
            messages.append({"role": message.role, "content": "\n".join(map(str, texts))})
        request: dict[str, Any] = {
            **self.llm_params,
            "model": self.model.model,
            "messages": messages,
            "max_tokens": max_tokens,
            "metadata": {"art_phase": SAMPLING_PHASE, "mcp_server": server},
        }
        if params.temperature is not None:
            request["temperature"] = params.temperature
        if params.stop_sequences:
            request["stop"] = params.stop_sequences
        reply = await self.model.acompletion(**request)
        choice = reply.choices[0]
        stop = {"length": "maxTokens", "stop": "endTurn"}.get(choice.finish_reason or "")
        return CreateMessageResult(
            role="assistant",
            content=TextContent(type="text", text=choice.message.content or ""),
            model=getattr(reply, "model", None) or self.model.model,
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
