"""Span identity for callbacks, events and tracing (seed 000's `SpanContext`)."""

from __future__ import annotations

import random
import secrets

from pydantic import BaseModel

from art._models import ArtModel


def new_trace_id() -> str:
    """A 128-bit trace id as 32 lowercase hex digits."""
    return secrets.token_hex(16)


def new_span_id() -> str:
    """A 64-bit span id as 16 lowercase hex digits.

    Span ids need to be unique within a trace, not unguessable: like OpenTelemetry's
    id generator this uses `random` (reseeded in forked children), not a system call
    per id. Trace ids stay cryptographically random.
    """
    return f"{random.getrandbits(64) or 1:016x}"


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
        # Every step and tool call makes one: fill the model's slots directly instead of
        # re-validating ids this span already holds.
        span = _new(SpanContext)
        _set_dict(span, "__dict__", {
            "trace_id": self.trace_id,
            "span_id": new_span_id(),
            "parent_span_id": self.span_id,
        })  # fmt: skip
        _fields_set.__set__(span, {"trace_id", "span_id", "parent_span_id"})
        _extra.__set__(span, None)
        _private.__set__(span, None)
        return span


_new = SpanContext.__new__
_set_dict = object.__setattr__
_fields_set = BaseModel.__pydantic_fields_set__
_extra = BaseModel.__pydantic_extra__
_private = BaseModel.__pydantic_private__
