"""Token usage, normalized across providers (seeds 000 and 002)."""

from __future__ import annotations

from art.core.models import ArtModel


class TokenUsage(ArtModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cached_tokens: int = 0

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
            cached_tokens=self.cached_tokens + other.cached_tokens,
        )

    @classmethod
    def from_provider(cls, usage: object) -> TokenUsage:
        """Normalize OpenAI-style (`prompt_tokens`) and Anthropic-style (`input_tokens`) usage:
        a dict, a pydantic model or an object whose attributes are the counts."""
        if usage is None:
            return cls()
        if not isinstance(usage, dict):
            usage = usage.model_dump() if hasattr(usage, "model_dump") else dict(vars(usage))
        prompt = usage.get("prompt_tokens") or usage.get("input_tokens") or 0
        completion = usage.get("completion_tokens") or usage.get("output_tokens") or 0
        total = usage.get("total_tokens") or prompt + completion
        details = usage.get("prompt_tokens_details") or {}
        if not isinstance(details, dict):
            details = getattr(details, "__dict__", {}) or {}
        cached = (
            details.get("cached_tokens")
            or usage.get("cache_read_input_tokens")
            or usage.get("cached_tokens")
            or 0
        )
        return cls(
            prompt_tokens=int(prompt),
            completion_tokens=int(completion),
            total_tokens=int(total),
            cached_tokens=int(cached),
        )
