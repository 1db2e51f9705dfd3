"""Span identity for callbacks, events and tracing (seed 000's `SpanContext`)."""

from __future__ import annotations

import random
import secrets
import sys
from typing import Protocol

from art.core.models import ArtModel, builder


def new_trace_id() -> str:
    """A 128-bit trace id as 32 lowercase hex digits."""
    return secrets.token_hex(16)


def new_span_id() -> str:
    """A 64-bit span id as 16 lowercase hex digits.

    Span ids need to be unique within a trace, not unguessable: like OpenTelemetry's
    id generator this uses `random` (reseeded in forked children), not a system call
    per id. Trace ids stay cryptographically random.
    """
    # to_bytes().hex() is the cheapest fixed-width hex formatting (two ids a step).
    return (random.getrandbits(64) or 1).to_bytes(8, "big").hex()


class SpanContext(ArtModel):
    """Where an event sits in the run → step → tool/LLM tree."""

    trace_id: str
    span_id: str
    parent_span_id: str | None = None

    @classmethod
    def root(cls, trace_id: str | None = None) -> SpanContext:
        return cls(trace_id=trace_id or new_trace_id(), span_id=new_span_id())

    def child(self) -> SpanContext:
        """A new span whose parent is this one, in the same trace."""
        return _new_span(
            {"trace_id": self.trace_id, "span_id": new_span_id(), "parent_span_id": self.span_id}
        )


_new_span = builder(SpanContext)


def current_traceparent() -> str | None:
    """The W3C traceparent of the current OpenTelemetry span, or None when there is none
    (or OpenTelemetry was never imported, as without tracing)."""
    if "opentelemetry.trace" not in sys.modules:
        return None
    from opentelemetry import trace

    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


class SpanIds(Protocol):
    """The ids of a span, which is all the event log stores of it."""

    @property
    def trace_id(self) -> str: ...

    @property
    def span_id(self) -> str: ...

    @property
    def parent_span_id(self) -> str | None: ...


class LazySpan:
    """A child span whose ids are made at once and whose `SpanContext` only when asked
    for (`context()`): a step's and a tool call's spans are usually wanted only for
    their ids (the stored event log, a child's parent), and a SpanContext costs a
    validation. Its parent is a SpanContext or another LazySpan."""

    __slots__ = ("_context", "parent_span_id", "span_id", "trace_id")

    def __init__(self, parent: SpanIds) -> None:
        self.trace_id = parent.trace_id
        self.span_id = new_span_id()
        self.parent_span_id: str | None = parent.span_id
        self._context: SpanContext | None = None

    def context(self) -> SpanContext:
        """This span as a SpanContext (made once)."""
        if self._context is None:
            self._context = _new_span(
                {
                    "trace_id": self.trace_id,
                    "span_id": self.span_id,
                    "parent_span_id": self.parent_span_id,
                }
            )
        return self._context
