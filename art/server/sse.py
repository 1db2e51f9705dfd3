"""Server-sent events as every stream of the server writes them: lines end in LF.

sse-starlette ends lines in CRLF by default, which the SSE standard allows but clients
that split events on a blank line (`\\n\\n`), such as `@ag-ui/client`, cannot read.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Mapping
from typing import Any

from sse_starlette import EventSourceResponse, ServerSentEvent

__all__ = ["SEPARATOR", "sse_event", "sse_response"]

SEPARATOR = "\n"


def sse_event(data: str, *, event: str | None = None, id: str | None = None) -> ServerSentEvent:
    """One event, its lines ending in LF."""
    return ServerSentEvent(data=data, event=event, id=id, sep=SEPARATOR)


def sse_response(
    events: AsyncIterable[Any], *, ping_s: float, headers: Mapping[str, str] | None = None
) -> EventSourceResponse:
    """A `text/event-stream` response of `events`, pings included, lines ending in LF."""
    return EventSourceResponse(events, ping=ping_s, sep=SEPARATOR, headers=headers)
