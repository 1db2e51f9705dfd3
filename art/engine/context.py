"""RunContext: what every phase of one run shares (ids, config, counters, events)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from art.core.spans import SpanContext
from art.core.usage import TokenUsage
from art.tooling.contract import CancellationToken

if TYPE_CHECKING:
    from art.config import ExecutionConfig
    from art.observe.events import EventBus, RunEvents


@dataclass
class RunStats:
    """Honest counters for the response; safe to update from worker threads."""

    llm_calls: int = 0
    tool_calls: int = 0
    usage: TokenUsage = field(default_factory=TokenUsage)
    llm_cost: float | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add_llm_call(self, usage: TokenUsage, cost: float | None) -> None:
        with self._lock:
            self.llm_calls += 1
            self.usage = self.usage + usage
            if cost is not None:
                self.llm_cost = (self.llm_cost or 0.0) + cost

    def add_tool_call(self) -> None:
        with self._lock:
            self.tool_calls += 1


@dataclass
class RunContext:
    """Identity and shared state of one run; passed to planning, execution and synthesis."""

    thread_id: str
    run_id: str
    span: SpanContext
    config: ExecutionConfig
    events: EventBus | RunEvents
    user_id: str | None = None
    session_id: str | None = None
    # The answer's message id, the agent's name (the persona's), the application's
    # metadata (tools see it as `context.extra`) and the LLM calls' context variables.
    message_id: str | None = None
    agent: str = "art"
    metadata: dict[str, Any] = field(default_factory=dict)
    system_context: dict[str, Any] = field(default_factory=dict)
    stats: RunStats = field(default_factory=RunStats)
    cancellation: CancellationToken = field(default_factory=CancellationToken)

    @property
    def trace_id(self) -> str:
        return self.span.trace_id
