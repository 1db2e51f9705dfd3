"""AgentCallbacks (seed 000): lifecycle callbacks with a SpanContext, over the event stream.

Callbacks are synchronous and all optional. Pass an `AgentCallbacks` subclass, or any
object with some of these methods, as `ArtInstanceConfig.callbacks`; the instance
subscribes a `CallbackAdapter` to its events. Each callback receives the span of what
it reports (run, LLM call or tool call), whose `parent_span_id` follows the
run → step → tool/LLM nesting, also for steps running at the same time.

Event → callback:

    session:start           on_agent_start(ctx, query)
    session:end             on_agent_end(ctx, answer)
    message:before          on_llm_start(ctx, model, messages)
    chunk:after             on_llm_stream(ctx, chunk)
    message:after           on_llm_end(ctx, response, usage)
    tool:update stage=start on_tool_start(ctx, tool_name, args)
    tool:after              on_tool_end(ctx, tool_name, result)
    error                   on_error(ctx, error)
    everything else         on_debug(message, data)   (except chunk:before, buffer:flush)

A callback that raises does not stop the run: it is reported as an `error` event
(`source="callbacks"`), and logged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from art._log import get_logger
from art.usage import TokenUsage

if TYPE_CHECKING:
    from art.events import EventBus, EventContext
    from art.spans import SpanContext
    from art.tooling import ToolResult

__all__ = ["CALLBACK_NAMES", "AgentCallbacks", "CallbackAdapter"]

log = get_logger(__name__)

CALLBACK_NAMES = (
    "on_agent_start",
    "on_agent_end",
    "on_llm_start",
    "on_llm_stream",
    "on_llm_end",
    "on_tool_start",
    "on_tool_end",
    "on_error",
    "on_debug",
)
_QUIET = frozenset({"chunk:before", "buffer:flush"})


class AgentCallbacks:
    """Seed 000's callbacks. Subclass and override what you need; the rest do nothing."""

    def on_agent_start(self, ctx: SpanContext, query: str) -> None:
        """The run started processing `query`."""

    def on_agent_end(self, ctx: SpanContext, answer: str) -> None:
        """The run ended; `answer` is the final text (empty when it failed)."""

    def on_llm_start(self, ctx: SpanContext, model: str, messages: list[dict[str, Any]]) -> None:
        """An LLM call is about to be sent."""

    def on_llm_stream(self, ctx: SpanContext, chunk: str) -> None:
        """A streamed chunk of an LLM answer (the synthesis streams)."""

    def on_llm_end(self, ctx: SpanContext, response: str, usage: TokenUsage | None) -> None:
        """An LLM call returned `response`."""

    def on_tool_start(self, ctx: SpanContext, tool_name: str, args: dict[str, Any]) -> None:
        """A tool is about to run with `args` (after `tool:before` hooks)."""

    def on_tool_end(self, ctx: SpanContext, tool_name: str, result: ToolResult) -> None:
        """A tool returned `result`."""

    def on_error(self, ctx: SpanContext, error: dict[str, Any]) -> None:
        """Something failed; `error` has `message`, and `code`, `source` where known."""

    def on_debug(self, message: str, data: Any = None) -> None:
        """Everything else the run reports (plans, step status, suspensions...)."""


class CallbackAdapter:
    """Delivers events to an object's callbacks. Attach it with `attach(bus)`."""

    def __init__(self, callbacks: Any) -> None:
        found = [name for name in CALLBACK_NAMES if callable(getattr(callbacks, name, None))]
        if not found:
            from art.errors import ConfigurationError

            raise ConfigurationError(
                f"callbacks must be an AgentCallbacks or have at least one of "
                f"{', '.join(CALLBACK_NAMES)}; got {type(callbacks).__name__}"
            )
        self.callbacks = callbacks
        self._bus: EventBus | None = None

    def attach(self, bus: EventBus) -> None:
        self._bus = bus
        bus.on("*", self._hook)

    def detach(self) -> None:
        if self._bus is not None:
            self._bus.off("*", self._hook)
            self._bus = None

    async def _hook(self, data: dict[str, Any], context: EventContext) -> None:
        try:
            self.dispatch(context.name, data, context.span)
        except Exception as exc:
            # Never raise from here: on a `*:before` event that would veto the action.
            log.warning("callback failed", event_name=context.name, error=repr(exc))
            if context.name != "error" and self._bus is not None:
                await self._bus.emit(
                    "error",
                    {
                        "source": "callbacks",
                        "event": context.name,
                        "error_type": type(exc).__name__,
                        "message": str(exc),
                        "recoverable": True,
                    },
                    thread_id=context.thread_id,
                    run_id=context.run_id,
                    span=context.span,
                )

    def dispatch(self, name: str, data: dict[str, Any], span: SpanContext | None) -> None:
        """Call the callback for one event, if the object has it."""
        cb = self.callbacks
        if name == "session:start":
            self._call("on_agent_start", span, data.get("query", ""))
        elif name == "session:end":
            self._call("on_agent_end", span, data.get("answer") or "")
        elif name == "message:before":
            self._call("on_llm_start", span, data.get("model", ""), data.get("messages", []))
        elif name == "chunk:after":
            self._call("on_llm_stream", span, data.get("chunk", ""))
        elif name == "message:after":
            usage = data.get("usage")
            if isinstance(usage, dict):
                usage = TokenUsage.model_validate(usage)
            self._call("on_llm_end", span, data.get("content", ""), usage)
        elif name == "tool:update" and data.get("stage") == "start":
            self._call("on_tool_start", span, data.get("tool", ""), data.get("args", {}))
        elif name == "tool:after":
            self._call("on_tool_end", span, data.get("tool", ""), data.get("result"))
        elif name == "error":
            self._call("on_error", span, data)
        elif name not in _QUIET and name != "tool:update" and name != "chunk:after":
            method = getattr(cb, "on_debug", None)
            if callable(method):
                method(name, data)

    def _call(self, method_name: str, *args: Any) -> None:
        method = getattr(self.callbacks, method_name, None)
        if callable(method):
            method(*args)
