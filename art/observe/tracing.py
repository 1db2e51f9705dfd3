"""OpenTelemetry tracing (optional extra `art-pes[otel]`): art's span tree as OTel spans.

Every art event carries a `SpanContext` (`trace_id`, `span_id`, `parent_span_id`) placing
it in the run → step → tool / LLM tree. `enable_tracing` subscribes to an instance's
events and turns that tree into OpenTelemetry spans, giving each span an explicit parent
looked up by art's own ids. Parents therefore never depend on which asyncio task or
worker thread emitted an event, and steps running at the same time cannot be confused.

Spans: `art.run` (one `process` or resume), `art.plan` (the planning call and its
repairs, or a replan), `art.step <id>`, `art.tool <name>` and `art.llm <phase>` (one
per LLM call). Start and end times are the events' timestamps.
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from art.core.serialization import safe_stringify
from art.core.version import __version__
from art.errors import ConfigurationError

if TYPE_CHECKING:
    from contextvars import Token
    from types import ModuleType

    from opentelemetry.context import Context
    from opentelemetry.trace import Link, Span, Tracer, TracerProvider
    from opentelemetry.trace import SpanContext as OtelSpanContext
    from opentelemetry.util.types import AttributeValue

    from art.core.spans import SpanContext
    from art.observe.events import Event, EventBus

__all__ = ["TracingSubscription", "enable_tracing"]

INSTALL_HINT = "pip install 'art-pes[otel]'"
_TERMINAL_STEP_STATUSES = frozenset({"completed", "failed", "skipped", "waiting", "cancelled"})
_PLANNING_PHASES = frozenset({"planning", "replan"})
# Per-token events would bloat every trace; they are summed on the LLM span instead.
_UNRECORDED_EVENTS = frozenset({"chunk:before", "chunk:after", "buffer:flush"})
_REMEMBERED_ENDED_SPANS = 10_000


def _require_otel() -> ModuleType:
    try:
        from opentelemetry import trace
    except ImportError as exc:
        raise ConfigurationError(
            f"tracing needs OpenTelemetry, which is not installed: {INSTALL_HINT}"
        ) from exc
    return trace


class Traceable(Protocol):
    """What `enable_tracing` records: anything with an event bus (an `ArtInstance`)."""

    @property
    def events(self) -> EventBus: ...


def enable_tracing(
    instance: Traceable,
    tracer_provider: TracerProvider | None = None,
    *,
    capture_content: bool = False,
) -> TracingSubscription:
    """Record the instance's runs as OpenTelemetry spans; returns a handle to stop.

    `tracer_provider` defaults to the global one (`opentelemetry.trace.set_tracer_provider`).
    A run started inside an active OTel span (a web request, say) becomes its child.
    `capture_content=True` also records the query and tool arguments, which may hold
    personal data; they are off by default.
    Raises ConfigurationError when OpenTelemetry is not installed.
    """
    trace = _require_otel()
    provider = tracer_provider if tracer_provider is not None else trace.get_tracer_provider()
    mapper = SpanMapper(provider.get_tracer("art", __version__), capture_content=capture_content)
    unsubscribe = instance.events.subscribe(mapper.handle)
    return TracingSubscription(mapper, unsubscribe)


class TracingSubscription:
    """What `enable_tracing` returns: `disable()` stops recording new spans."""

    def __init__(self, mapper: SpanMapper, unsubscribe: Callable[[], None]) -> None:
        self.mapper = mapper
        self._unsubscribe = unsubscribe

    def disable(self) -> None:
        """Stop listening and end every span still open (they would otherwise never export)."""
        self._unsubscribe()
        self.mapper.end_all()


@dataclass
class _Entry:
    span: Span
    kind: str  # run | plan | step | tool | llm
    art_trace_id: str
    run_id: str | None
    ended: bool = False
    children: list[str] = field(default_factory=list)
    context_token: Token[Context] | None = None


class SpanMapper:
    """Turns a stream of art events into OTel spans. Thread-safe; never raises into a run."""

    def __init__(self, tracer: Tracer, *, capture_content: bool = False) -> None:
        self._trace = _require_otel()
        self._tracer = tracer
        self._capture_content = capture_content
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}
        self._run_span_ids: dict[str, str] = {}  # art run_id -> key of its run span
        self._plan_keys: dict[str, str] = {}  # run key -> key of its open plan span
        # Ended spans' OTel contexts, so a late child (after a resume) keeps its parent.
        self._ended: OrderedDict[str, OtelSpanContext] = OrderedDict()

    # -- entry point --------------------------------------------------------------
    def handle(self, event: Event) -> None:
        if event.span is None or event.name in _UNRECORDED_EVENTS:
            return
        with self._lock:
            handler = getattr(self, "_on_" + event.name.replace(":", "_"), None)
            if handler is not None:
                handler(event, event.span, event.data or {})
            else:
                self._add_event(event)

    def end_all(self) -> None:
        with self._lock:
            for key in list(self._entries):
                self._end(key, None)
            self._entries.clear()
            self._run_span_ids.clear()
            self._plan_keys.clear()

    # -- run ----------------------------------------------------------------------
    def _on_session_start(self, event: Event, span: SpanContext, data: dict[str, object]) -> None:
        attributes: dict[str, str | bool] = {
            "art.thread_id": event.thread_id or "",
            "art.run_id": event.run_id or "",
            "art.trace_id": span.trace_id,
        }
        query = data.get("query")
        if self._capture_content and isinstance(query, str):
            attributes["art.query"] = query
        links: list[Link] = []
        if data.get("resumed") or data.get("suspension_id"):
            attributes["art.resumed"] = True
        first = _span_context_of(data.get("trace_parent"))
        if first is not None:  # a later part: link to the span the run's first part had
            links.append(self._trace.Link(first, {"art.link": "resumes"}))
        key = span.span_id
        self._start(key, "run", "art.run", event, span, attributes, parent_key=None, links=links)
        if event.run_id:
            self._run_span_ids[event.run_id] = key
        # Current in the run's task, so the run records this span's traceparent for its
        # later parts, and spans the application opens during the run nest under it.
        self._make_current(key)

    def _on_session_end(self, event: Event, span: SpanContext, data: dict[str, object]) -> None:
        key = self._run_key(event, span)
        if key is None:
            return
        entry = self._entries[key]
        status = _first(data, "status") or _first(data.get("metadata") or {}, "status")
        if status:
            entry.span.set_attribute("art.status", str(status))
        for name, attr in (("llm_calls", "art.llm_calls"), ("tool_calls", "art.tool_calls")):
            value = _first(data, name) or _first(data.get("metadata") or {}, name)
            if isinstance(value, int):
                entry.span.set_attribute(attr, value)
        if status == "error":
            self._set_error(entry.span, _error_text(data) or "the run failed")
        self._end_tree(key, event.timestamp)

    # -- plan ---------------------------------------------------------------------
    def _plan_parent_key(self, event: Event, span: SpanContext, phase: str) -> str | None:
        """The plan span an LLM call of a planning phase belongs to, opened on demand."""
        parent = self._entries.get(span.parent_span_id or "")
        if parent is not None and parent.kind == "plan" and not parent.ended:
            return span.parent_span_id
        run_key = self._run_key(event, span)
        if parent is not None and parent.kind == "run":
            run_key = span.parent_span_id
        if run_key is None:
            return None
        plan_key = self._plan_keys.get(run_key)
        if plan_key is not None and not self._entries[plan_key].ended:
            return plan_key
        # The planner may have a span of its own that no event announced yet.
        parent_id = span.parent_span_id
        unknown_parent = parent_id is not None and parent_id not in self._entries
        plan_key = parent_id if parent_id and unknown_parent else f"plan:{span.span_id}"
        self._start(
            plan_key,
            "plan",
            "art.plan",
            event,
            span,
            {"art.phase": phase},
            parent_key=run_key,
        )
        self._plan_keys[run_key] = plan_key
        return plan_key

    def _on_plan_created(self, event: Event, span: SpanContext, data: dict[str, object]) -> None:
        self._close_plan(event, span, data)

    def _on_plan_updated(self, event: Event, span: SpanContext, data: dict[str, object]) -> None:
        self._close_plan(event, span, data)

    def _close_plan(self, event: Event, span: SpanContext, data: dict[str, object]) -> None:
        plan = data.get("plan")
        if not isinstance(plan, dict):
            plan = {}
        own = self._entries.get(span.span_id)
        if own is not None and own.kind == "plan":
            key: str | None = span.span_id
        else:
            run_key = self._run_key(event, span)
            key = self._plan_keys.get(run_key) if run_key else None
        target = self._entries.get(key) if key else None
        steps = plan.get("steps")
        if target is not None and not target.ended:
            if isinstance(steps, list):
                target.span.set_attribute("art.plan.steps", len(steps))
            if plan.get("title"):
                target.span.set_attribute("art.plan.title", str(plan["title"]))
            self._end(key, event.timestamp)
        else:
            self._add_event(event, {"art.plan.steps": len(steps) if steps else 0})

    # -- steps --------------------------------------------------------------------
    def _on_step_status(self, event: Event, span: SpanContext, data: dict[str, object]) -> None:
        status = str(data.get("status") or "")
        step_id = str(data.get("step_id") or "")
        key = self._own_key(span, "step", f"step:{event.run_id}:{step_id}")
        entry = self._entries.get(key)
        if status == "in_progress":
            if entry is not None and not entry.ended:
                entry.span.add_event("art.step.retry", {"art.attempt": _attempt(data) or 1})
                return
            attributes: dict[str, str | int] = {
                "art.step_id": step_id,
                "art.tool": str(data.get("tool") or ""),
            }
            if attempt := _attempt(data):
                attributes["art.attempt"] = attempt
            self._open_at(key, "step", f"art.step {step_id}", event, span, attributes)
        elif status in _TERMINAL_STEP_STATUSES:
            if entry is None or entry.ended:
                # Skipped and restored steps never ran: a zero-length span keeps them visible.
                attributes = {"art.step_id": step_id, "art.tool": str(data.get("tool") or "")}
                self._open_at(key, "step", f"art.step {step_id}", event, span, attributes)
                entry = self._entries[key]
            entry.span.set_attribute("art.step.status", status)
            if status == "failed":
                self._set_error(entry.span, str(data.get("reason") or "step failed"))
            elif data.get("reason"):
                entry.span.set_attribute("art.step.reason", str(data["reason"]))
            self._end(key, event.timestamp)
        else:
            self._add_event(event)

    # -- tools --------------------------------------------------------------------
    def _on_tool_update(self, event: Event, span: SpanContext, data: dict[str, object]) -> None:
        if data.get("reasoning"):
            return  # a reasoning step's block: its LLM call has the span
        stage = data.get("stage")
        call_id = str(data.get("call_id") or "")
        key = self._own_key(span, "tool", f"tool:{call_id or span.span_id}")
        tool = str(data.get("tool") or data.get("name") or "")
        if stage == "start":
            attributes: dict[str, AttributeValue] = {
                "art.tool": tool,
                "art.call_id": call_id,
                "art.step_id": str(data.get("step_id") or ""),
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": tool,
                "gen_ai.tool.call.id": call_id,
            }
            if self._capture_content and data.get("args") is not None:
                attributes["art.tool.args"] = _short_json(data["args"])
            self._open_at(key, "tool", f"art.tool {tool}", event, span, attributes)
            self._make_current(key)
        elif stage == "end":
            entry = self._entries.get(key)
            if entry is None or entry.ended:
                return
            status = data.get("status")
            if status:
                entry.span.set_attribute("art.tool.status", str(status))
            if status == "error" or data.get("error"):
                self._set_error(entry.span, str(data.get("error") or "tool error"))
            self._end(key, event.timestamp)
        else:
            entry = self._entries.get(key)
            if entry is not None and not entry.ended:
                title = data.get("title")
                attrs = {"art.stage": str(stage)}
                if title:
                    attrs["art.title"] = str(title)
                entry.span.add_event("art.tool.update", attrs, timestamp=_ns(event.timestamp))

    # -- LLM calls ----------------------------------------------------------------
    def _on_message_before(self, event: Event, span: SpanContext, data: dict[str, object]) -> None:
        phase = str(data.get("phase") or "")
        model = str(data.get("model") or "")
        key = self._own_key(span, "llm", f"llm:{span.span_id}:{data.get('call_id', '')}")
        parent_key = None
        if phase in _PLANNING_PHASES:
            parent_key = self._plan_parent_key(event, span, phase)
        attributes = {
            "art.phase": phase,
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": model,
        }
        name = f"art.llm {phase}" if phase else "art.llm"
        self._open_at(key, "llm", name, event, span, attributes, parent_key=parent_key)
        self._make_current(key)

    def _on_message_after(self, event: Event, span: SpanContext, data: dict[str, object]) -> None:
        key = self._own_key(span, "llm", f"llm:{span.span_id}:{data.get('call_id', '')}")
        entry = self._entries.get(key)
        if entry is None or entry.ended:
            return
        usage = data.get("usage") or {}
        if isinstance(usage, dict):
            prompt = usage.get("prompt_tokens", usage.get("promptTokens"))
            completion = usage.get("completion_tokens", usage.get("completionTokens"))
            if isinstance(prompt, int):
                entry.span.set_attribute("gen_ai.usage.input_tokens", prompt)
            if isinstance(completion, int):
                entry.span.set_attribute("gen_ai.usage.output_tokens", completion)
        if data.get("model"):
            entry.span.set_attribute("gen_ai.response.model", str(data["model"]))
        cost = data.get("cost")
        if isinstance(cost, int | float):
            entry.span.set_attribute("art.llm.cost", float(cost))
        if data.get("error"):
            self._set_error(entry.span, str(data["error"]))
        self._end(key, event.timestamp)

    # -- errors and everything else ----------------------------------------------
    def _on_error(self, event: Event, span: SpanContext, data: dict[str, object]) -> None:
        entry = self._entries.get(span.span_id)
        message = _error_text(data) or "error"
        if entry is not None and not entry.ended:
            attributes = {"art.error.message": message}
            if data.get("code"):
                attributes["art.error.code"] = str(data["code"])
            entry.span.add_event("art.error", attributes, timestamp=_ns(event.timestamp))
            if not data.get("recoverable"):
                self._set_error(entry.span, message)
            if entry.kind == "llm":  # a failed call gets no message:after
                self._end(span.span_id, event.timestamp)

    def _add_event(
        self, event: Event, attributes: Mapping[str, AttributeValue] | None = None
    ) -> None:
        span = event.span
        entry = self._entries.get(span.span_id) if span else None
        if entry is None or entry.ended:
            run_key = self._run_key(event, span) if span else None
            entry = self._entries.get(run_key) if run_key else None
        if entry is not None and not entry.ended:
            attrs = dict(attributes or {})
            for name in ("step_id", "tool", "status", "suspension_id", "stage"):
                if isinstance(event.data.get(name), str):
                    attrs[f"art.{name}"] = event.data[name]
            entry.span.add_event(event.name, attrs, timestamp=_ns(event.timestamp))

    # -- bookkeeping --------------------------------------------------------------
    def _own_key(self, span: SpanContext, kind: str, fallback: str) -> str:
        """The event's own span id, unless that span is already something else (then a
        synthetic child key, e.g. a tool call reported on its step's span)."""
        entry = self._entries.get(span.span_id)
        if entry is None or entry.kind == kind:
            return span.span_id
        return fallback

    def _run_key(self, event: Event, span: SpanContext | None) -> str | None:
        if span is not None:
            own = self._entries.get(span.span_id)
            if own is not None and own.kind == "run":
                return span.span_id
        if event.run_id and event.run_id in self._run_span_ids:
            return self._run_span_ids[event.run_id]
        return None

    def _open_at(
        self,
        key: str,
        kind: str,
        name: str,
        event: Event,
        span: SpanContext,
        attributes: Mapping[str, AttributeValue | None],
        parent_key: str | None = None,
    ) -> None:
        if parent_key is None and key != span.span_id:
            parent_key = span.span_id  # a synthetic child of the event's span
        self._start(key, kind, name, event, span, attributes, parent_key=parent_key)

    def _start(
        self,
        key: str,
        kind: str,
        name: str,
        event: Event,
        span: SpanContext,
        attributes: Mapping[str, AttributeValue | None],
        *,
        parent_key: str | None,
        links: list[Link] | None = None,
    ) -> None:
        trace = self._trace
        parent_id = parent_key or span.parent_span_id
        parent = self._entries.get(parent_id) if parent_id else None
        if parent is not None:
            context = trace.set_span_in_context(parent.span)
        elif parent_id and parent_id in self._ended:
            context = trace.set_span_in_context(trace.NonRecordingSpan(self._ended[parent_id]))
        elif parent_id is None and kind != "run" and event.run_id in self._run_span_ids:
            context = trace.set_span_in_context(
                self._entries[self._run_span_ids[event.run_id]].span
            )
        else:
            context = None  # the caller's current context: a request span, or a new trace
        otel_span = self._tracer.start_span(
            name,
            context=context,
            attributes={k: v for k, v in attributes.items() if v is not None},
            start_time=_ns(event.timestamp),
            links=links or None,
        )
        self._entries[key] = _Entry(otel_span, kind, span.trace_id, event.run_id)
        if parent is not None:
            parent.children.append(key)

    def _make_current(self, key: str) -> None:
        """Make the span current in the emitting task, so spans the tool or LLM client
        create themselves (httpx, litellm, a database driver) nest under it."""
        from opentelemetry import context as otel_context

        entry = self._entries[key]
        entry.context_token = otel_context.attach(self._trace.set_span_in_context(entry.span))

    def _end(self, key: str | None, timestamp: datetime | None) -> None:
        entry = self._entries.get(key) if key else None
        if key is None or entry is None or entry.ended:
            return
        entry.ended = True
        if entry.context_token is not None:
            _reset_quietly(entry.context_token)
            entry.context_token = None
        entry.span.end(end_time=_ns(timestamp) if timestamp else None)
        self._ended[key] = entry.span.get_span_context()
        while len(self._ended) > _REMEMBERED_ENDED_SPANS:
            self._ended.popitem(last=False)

    def _end_tree(self, key: str, timestamp: datetime) -> None:
        """End a run span and whatever under it is still open, then forget them."""
        entry = self._entries.get(key)
        if entry is None:
            return
        for child in list(entry.children):
            self._end_tree(child, timestamp)
        self._end(key, timestamp)
        self._entries.pop(key, None)
        if entry.kind == "run":
            self._plan_keys.pop(key, None)
            if entry.run_id and self._run_span_ids.get(entry.run_id) == key:
                del self._run_span_ids[entry.run_id]

    def _set_error(self, span: Span, message: str) -> None:
        span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, message))


def _reset_quietly(token: Token[Context]) -> None:
    # A token can only be reset in the context that created it; an end event emitted from
    # another task leaves that task's context as it was, which is harmless.
    with contextlib.suppress(AttributeError, ValueError, RuntimeError):
        token.var.reset(token)


def _span_context_of(traceparent: object) -> OtelSpanContext | None:
    """The remote OTel SpanContext a W3C traceparent names, or None if it is not one."""
    if not isinstance(traceparent, str):
        return None
    parts = traceparent.split("-")
    if len(parts) != 4 or parts[0] != "00" or len(parts[1]) != 32 or len(parts[2]) != 16:
        return None
    try:
        trace_id, span_id, flags = int(parts[1], 16), int(parts[2], 16), int(parts[3], 16)
    except ValueError:
        return None
    trace = _require_otel()
    context = trace.SpanContext(
        trace_id, span_id, is_remote=True, trace_flags=trace.TraceFlags(flags)
    )
    valid: bool = context.is_valid
    return context if valid else None


def _ns(timestamp: datetime) -> int:
    return int(timestamp.timestamp() * 1_000_000_000)


def _first(data: object, name: str) -> object:
    return data.get(name) if isinstance(data, dict) else None


def _error_text(data: Mapping[str, object]) -> str:
    error = data.get("error")
    if isinstance(error, dict):
        code, message = error.get("code"), error.get("message")
        return f"{code}: {message}" if code else str(message or "")
    return str(error or data.get("message") or "")


def _short_json(value: object, limit: int = 2000) -> str:
    return safe_stringify(value, max_length=limit)


def _attempt(data: Mapping[str, object]) -> int | None:
    """A step status's attempt number, when it has one."""
    attempt = data.get("attempt")
    return int(attempt) if isinstance(attempt, int | float | str) and attempt else None
