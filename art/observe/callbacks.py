"""AgentCallbacks (seed 000): lifecycle callbacks with a SpanContext, over the event stream.

All callbacks are optional. Pass an `AgentCallbacks` subclass, or any object with some
of these methods (UI callbacks alone are enough), as `ArtInstanceConfig.callbacks`; the
instance has a `CallbackAdapter` observe its events. A callback may be a plain `def` or
an `async def`, which is awaited. Each lifecycle callback receives the span of what it
reports (run, LLM call or tool call), whose `parent_span_id` follows the
run → step → tool/LLM nesting, also for steps running at the same time; the UI callbacks
(spinner, answer stream) and the logging ones (`on_debug`, `on_trace`) get no span, as
in the seed.

Event → callback:

    session:start           on_agent_start(ctx, query)
    session:end             on_agent_end(ctx, answer)
    message:before          on_llm_start(ctx, model, messages)
    chunk:after             on_llm_stream(ctx, chunk)
    message:after           on_llm_end(ctx, response, usage)
    tool:update stage=start on_tool_start(ctx, tool_name, args)  (not a reasoning step's)
    tool:after              on_tool_end(ctx, tool_name, result)
    error                   on_error(ctx, error)
    everything else         on_debug(message, data)   (except chunk:before, buffer:flush,
                                                       tool:update)
    every event             on_trace(message, data)

and, for a UI:

    on_spinner_start(message)   the run starts waiting on something: "Planning" (after
                                on_agent_start), "Running 3 steps", "Writing the answer"
                                (a later call changes the message of the spinner shown)
    on_spinner_stop()           once per run: when the answer starts to stream, or when
                                the run ends without one (before on_agent_end)
    on_answer_stream(stream)    when the answer starts: `stream` is an async iterator of
                                its text chunks, ending with the answer. An `async def`
                                callback runs as a task of its own (it may read the whole
                                stream); the run waits for it before on_agent_end.

A callback that raises does not stop the run: it is reported as an `error` event
(`source="callbacks"`), and logged.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from art.core.log import get_logger
from art.core.usage import TokenUsage
from art.errors import ConfigurationError
from art.observe.errors import error_data
from art.observe.events import scope_of

if TYPE_CHECKING:
    from collections.abc import Callable

    from art.core.spans import SpanContext
    from art.observe.events import EventBus, EventContext
    from art.tooling.contract import ToolResult

__all__ = ["CALLBACK_NAMES", "AgentCallbacks", "AnswerStream", "CallbackAdapter"]

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
    "on_trace",
    "on_spinner_start",
    "on_spinner_stop",
    "on_answer_stream",
)
_QUIET = frozenset({"run:before", "chunk:before", "buffer:flush", "tool:update"})
_ANSWER_PHASE = "synthesis"


class AgentCallbacks:
    """Seed 000's callbacks. Subclass and override what you need; the rest do nothing.

    Any of them may be overridden with an `async def`."""

    def on_agent_start(self, ctx: SpanContext, query: str) -> object:
        """The run started processing `query`."""

    def on_agent_end(self, ctx: SpanContext, answer: str) -> object:
        """The run ended; `answer` is the final text (empty when it failed)."""

    def on_llm_start(
        self, ctx: SpanContext, model: str, messages: list[dict[str, object]]
    ) -> object:
        """An LLM call is about to be sent."""

    def on_llm_stream(self, ctx: SpanContext, chunk: str) -> object:
        """A streamed chunk of an LLM answer (the synthesis streams)."""

    def on_llm_end(self, ctx: SpanContext, response: str, usage: TokenUsage | None) -> object:
        """An LLM call returned `response`."""

    def on_tool_start(self, ctx: SpanContext, tool_name: str, args: dict[str, object]) -> object:
        """A tool is about to run with `args` (after `tool:before` hooks)."""

    def on_tool_end(self, ctx: SpanContext, tool_name: str, result: ToolResult) -> object:
        """A tool call ended with `result` (an error result when it failed or was cancelled)."""

    def on_error(self, ctx: SpanContext, error: dict[str, object]) -> object:
        """Something failed; `error` has `message`, and `code`, `source` where known."""

    def on_debug(self, message: str, data: object = None) -> object:
        """Everything else the run reports (plans, step status, suspensions...)."""

    def on_trace(self, message: str, data: object = None) -> object:
        """Every event, token chunks and tool progress included (the most verbose level)."""

    def on_spinner_start(self, message: str) -> object:
        """Show (or relabel) a busy indicator: the run is waiting on `message`."""

    def on_spinner_stop(self) -> object:
        """Hide the busy indicator."""

    def on_answer_stream(self, stream: AsyncIterator[str]) -> object:
        """The answer is being written: iterate `stream` for its chunks."""


class AnswerStream(AsyncIterator[str]):
    """The chunks of one answer as they arrive; ends when the answer is complete."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[str | None] = asyncio.Queue()
        self._ended = False

    def __aiter__(self) -> AnswerStream:
        return self

    async def __anext__(self) -> str:
        if self._ended and self._queue.empty():
            raise StopAsyncIteration
        chunk = await self._queue.get()
        if chunk is None:
            raise StopAsyncIteration
        return chunk

    def put(self, chunk: str) -> None:
        if not self._ended:
            self._queue.put_nowait(chunk)

    def end(self) -> None:
        if not self._ended:
            self._ended = True
            self._queue.put_nowait(None)


@dataclass
class _RunUi:
    """The UI callbacks' state of one run (runs of one instance may overlap)."""

    spinning: bool = False
    stopped: bool = False
    answer: AnswerStream | None = None
    readers: list[asyncio.Task[object]] = field(default_factory=list)


class CallbackAdapter:
    """Delivers events to an object's callbacks. Attach it with `attach(bus)`."""

    def __init__(self, callbacks: object) -> None:
        found = [name for name in CALLBACK_NAMES if callable(getattr(callbacks, name, None))]
        if not found:
            raise ConfigurationError(
                f"callbacks must be an AgentCallbacks or have at least one of "
                f"{', '.join(CALLBACK_NAMES)}; got {type(callbacks).__name__}"
            )
        self.callbacks = callbacks
        self._has = frozenset(found)
        self._bus: EventBus | None = None
        self._stop_observing: Callable[[], None] | None = None
        self._runs: dict[str, _RunUi] = {}

    def attach(self, bus: EventBus) -> None:
        self._bus = bus
        self._stop_observing = bus.observe(self._hook)

    def detach(self) -> None:
        if self._stop_observing is not None:
            self._stop_observing()
            self._stop_observing = None
        self._bus = None

    async def _hook(self, data: dict[str, object], context: EventContext) -> None:
        try:
            await self.dispatch(context, data)
        except Exception as exc:
            # Never raise from here: on a `*:before` event that would veto the action.
            await self._report(exc, context)

    async def _report(self, exc: BaseException, context: EventContext) -> None:
        log.warning("callback failed", event_name=context.name, error=repr(exc))
        if context.name != "error" and self._bus is not None:
            await self._bus.emit(
                "error",
                error_data(
                    "callbacks",
                    "CALLBACK_FAILED",
                    str(exc),
                    recoverable=True,
                    event_type=context.name,
                    suggestion="fix the callback; the run went on without it",
                    event=context.name,
                    error_type=type(exc).__name__,
                ),
                thread_id=context.thread_id,
                run_id=context.run_id,
                span=context.span,
                scope=scope_of(context),
            )

    async def dispatch(self, context: EventContext, data: dict[str, object]) -> None:
        """Call the callbacks for one event, if the object has them."""
        name, span = context.name, context.span
        if "on_trace" in self._has:
            await self._call("on_trace", name, data)
        starting = name == "session:start"
        if starting:  # seed 000: the agent starts, then its spinner
            await self._call("on_agent_start", span, data.get("query", ""))
        if context.run_id is not None and self._has & _UI_CALLBACKS:
            await self._ui_callbacks(context, data)
        if starting:
            return
        if name == "session:end":
            await self._call("on_agent_end", span, data.get("answer") or "")
        elif name == "message:before":
            await self._call("on_llm_start", span, data.get("model", ""), data.get("messages", []))
        elif name == "chunk:after":
            if data.get("chunk"):  # not a thinking chunk, nor the closing one with usage
                await self._call("on_llm_stream", span, data["chunk"])
        elif name == "message:after":
            usage = data.get("usage")
            if isinstance(usage, dict):
                usage = TokenUsage.model_validate(usage)
            await self._call("on_llm_end", span, data.get("content", ""), usage)
        elif name == "tool:update" and data.get("stage") == "start" and not data.get("reasoning"):
            await self._call("on_tool_start", span, data.get("tool", ""), data.get("args", {}))
        elif name == "tool:after":
            await self._call("on_tool_end", span, data.get("tool", ""), data.get("result"))
        elif name == "error":
            await self._call("on_error", span, data)
        elif name not in _QUIET:
            await self._call("on_debug", name, data)

    # -- the UI callbacks -------------------------------------------------------------
    async def _ui_callbacks(self, context: EventContext, data: dict[str, object]) -> None:
        """The UI callbacks an event calls for (before its lifecycle callback)."""
        name, run_id = context.name, context.run_id
        assert run_id is not None
        ui = self._runs.get(run_id)
        if ui is None:
            if name != "session:start":
                return
            ui = self._runs[run_id] = _RunUi()
        if name == "session:start":
            await self._spin(ui, "Resuming" if data.get("continued") else "Planning")
        elif name == "tool:loop:before":
            steps = data.get("steps") or 0  # 0 while an eagerly run plan is still written
            label = f"{steps} step{'s' if steps != 1 else ''}" if steps else "the steps"
            await self._spin(ui, f"Running {label}")
        elif name == "session:end":
            del self._runs[run_id]
            await self._end(ui, context)
        elif data.get("phase") != _ANSWER_PHASE:
            return
        elif name == "message:before":
            await self._spin(ui, "Writing the answer")
            await self._open_answer(ui)
        elif name == "chunk:after":
            await self._stop_spinner(ui)
            if ui.answer is not None and data.get("chunk"):
                ui.answer.put(str(data["chunk"]))
        elif name == "message:after" and ui.answer is not None:
            ui.answer.end()

    async def _spin(self, ui: _RunUi, message: str) -> None:
        if ui.stopped:
            return
        ui.spinning = True
        await self._call("on_spinner_start", message)

    async def _stop_spinner(self, ui: _RunUi) -> None:
        if ui.spinning and not ui.stopped:
            ui.stopped = True
            await self._call("on_spinner_stop")

    async def _open_answer(self, ui: _RunUi) -> None:
        if ui.answer is not None or "on_answer_stream" not in self._has:
            return
        ui.answer = AnswerStream()
        returned = self._method("on_answer_stream")(ui.answer)
        if inspect.isawaitable(returned):
            # Awaited at the run's end: awaiting it here would wait for chunks that come
            # only after this event.
            ui.readers.append(asyncio.ensure_future(returned))

    async def _end(self, ui: _RunUi, context: EventContext) -> None:
        """At `session:end`: the answer stream ends, its readers finish, the spinner stops."""
        if ui.answer is not None:
            ui.answer.end()
        for reader in ui.readers:
            try:
                await reader
            except Exception as exc:  # reported like any failing callback; the rest go on
                await self._report(exc, context)
        await self._stop_spinner(ui)

    async def _call(self, method_name: str, *args: object) -> None:
        if method_name not in self._has:
            return
        returned = self._method(method_name)(*args)
        if inspect.isawaitable(returned):
            await returned

    def _method(self, name: str) -> Callable[..., object]:
        """The callbacks object's method `name` (one of `self._has`)."""
        method: Callable[..., object] = getattr(self.callbacks, name)
        return method


_UI_CALLBACKS = frozenset({"on_spinner_start", "on_spinner_stop", "on_answer_stream"})
