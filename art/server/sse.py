"""Server-sent events as every stream of the server writes them: lines end in LF, and the
streams open when the server shuts down end with a clean close.

sse-starlette ends lines in CRLF by default, which the SSE standard allows but clients
that split events on a blank line (`\\n\\n`), such as `@ag-ui/client`, cannot read. And a
stream still open when uvicorn shuts down is cut mid-body (the client reads a broken
chunked body); so shutdown first asks every stream to end, which ends its body properly,
and the client reconnects with `Last-Event-ID`, to this server or another.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterable, AsyncIterator, Mapping
from typing import TypeVar

import anyio
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.types import Receive, Scope, Send

__all__ = ["SEPARATOR", "EventStreams", "sse_event"]

SEPARATOR = "\n"
# How long a stream has to end by itself once sse-starlette sees the exit signal (ours end
# at once); below uvicorn's graceful-shutdown timeout.
_SIGNAL_GRACE_S = 1.0

T = TypeVar("T")


def sse_event(data: str, *, event: str | None = None, id: str | None = None) -> ServerSentEvent:
    """One event, its lines ending in LF."""
    return ServerSentEvent(data=data, event=event, id=id, sep=SEPARATOR)


class EventStreams:
    """The server's open event streams: made by `response`, ended together by `close`."""

    def __init__(self) -> None:
        self._closing = asyncio.Event()
        self._open = 0
        self._idle = asyncio.Event()
        self._idle.set()

    def response(
        self,
        events: AsyncIterable[ServerSentEvent],
        *,
        ping_s: float,
        headers: Mapping[str, str] | None = None,
    ) -> EventSourceResponse:
        """A `text/event-stream` response of `events`, pings included, lines in LF."""
        # sse-starlette sets `signalled` when it sees the server's exit signal, then gives
        # the stream _SIGNAL_GRACE_S to end by itself before cutting it.
        signalled = anyio.Event()
        events = _until(events, (self._closing, signalled))
        return _Stream(self, events, ping_s, headers, signalled)

    async def close(self, timeout_s: float) -> None:
        """End every open stream (each sends the end of its body), waiting up to
        `timeout_s` for them; later streams end as soon as they start."""
        self._closing.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), timeout_s)

    def _opened(self) -> None:
        self._open += 1
        self._idle.clear()

    def _ended(self) -> None:
        self._open -= 1
        if self._open == 0:
            self._idle.set()


class _Stream(EventSourceResponse):
    """An EventSourceResponse counted among its EventStreams until it has ended."""

    def __init__(
        self,
        streams: EventStreams,
        events: AsyncIterator[ServerSentEvent],
        ping_s: float,
        headers: Mapping[str, str] | None,
        signalled: anyio.Event,
    ) -> None:
        super().__init__(
            events,
            ping=ping_s,
            sep=SEPARATOR,
            headers=headers,
            shutdown_event=signalled,
            shutdown_grace_period=_SIGNAL_GRACE_S,
        )
        self._streams = streams

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self._streams._opened()
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._streams._ended()


async def _until(
    events: AsyncIterable[T], stops: tuple[asyncio.Event | anyio.Event, ...]
) -> AsyncIterator[T]:
    """`events` until they end or one of `stops` is set, whichever comes first."""
    iterator = aiter(events)
    waits = [asyncio.ensure_future(stop.wait()) for stop in stops]
    stopped = asyncio.ensure_future(asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED))
    try:
        while not any(stop.is_set() for stop in stops):
            step = asyncio.ensure_future(anext(iterator))
            await asyncio.wait({step, stopped}, return_when=asyncio.FIRST_COMPLETED)
            if not step.done():
                step.cancel()
                with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                    await step
                return
            try:
                item = step.result()
            except StopAsyncIteration:
                return
            yield item
    finally:
        stopped.cancel()
        for wait in waits:
            wait.cancel()
        closing = getattr(iterator, "aclose", None)
        if closing is not None:
            with contextlib.suppress(RuntimeError):
                await closing()
