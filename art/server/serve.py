"""serve: run an app on uvicorn, draining its runs on SIGTERM before stopping."""

from __future__ import annotations

import asyncio
import contextlib
import math
import socket
import sys
import threading
from collections.abc import Iterator
from typing import TypedDict, Unpack

import h11
import uvicorn
from fastapi import FastAPI
from uvicorn.protocols.http.h11_impl import H11Protocol

from art.server.context import ServerContext
from art.server.settings import ServerSettings

__all__ = ["serve", "serve_in_thread"]

# How long shutdown waits for open event streams to end their bodies.
_STREAMS_CLOSE_S = 2.0


class _Server(uvicorn.Server):
    """uvicorn's server, telling the app's runs to drain the moment shutdown begins (new
    runs get 503 while open streams and waiting requests finish)."""

    def __init__(
        self, config: uvicorn.Config, context: ServerContext, announcement: str | None = None
    ) -> None:
        super().__init__(config)
        self.context = context
        self.announcement = announcement

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        # Only once it accepts connections: whoever reads the URL may connect at once.
        if self.started and self.announcement:
            print(self.announcement, file=sys.stderr, flush=True)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.context.runs.begin_drain(self.context.settings.grace_s)
        # Streams end their bodies before uvicorn closes the connections under them.
        await self.context.streams.close(timeout_s=_STREAMS_CLOSE_S)
        await super().shutdown(sockets)


class _ConfigOptions(TypedDict, total=False):
    """The uvicorn settings `serve` and `serve_in_thread` choose."""

    log_level: str
    proxy_headers: bool
    forwarded_allow_ips: str | None
    timeout_graceful_shutdown: int


def _config(app: FastAPI, **options: Unpack[_ConfigOptions]) -> uvicorn.Config:
    settings: ServerSettings = app.state.context.settings
    return uvicorn.Config(
        app,
        http=_timed_protocol(settings.request_timeout_s),
        timeout_keep_alive=math.ceil(settings.keep_alive_s),
        server_header=False,
        lifespan="on",
        **options,
    )


def _timed_protocol(request_timeout_s: float) -> type[H11Protocol]:
    """uvicorn's h11 protocol, closing a connection whose client takes longer than
    `request_timeout_s` to send a request (head and body) after connecting or after its
    first byte: uvicorn itself waits for ever (only idle keep-alive connections time out)."""

    class TimedH11Protocol(H11Protocol):
        _request_timer: asyncio.TimerHandle | None = None

        # uvicorn narrows BaseProtocol's transport to asyncio.Transport, as this does.
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state in (h11.IDLE, h11.SEND_BODY):
                self._arm()  # a request is coming: the clock runs from its first byte
            else:
                self._disarm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self.conn.their_state is h11.IDLE:
                self._disarm()  # idle between requests: the keep-alive timeout applies

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            if self._request_timer is None:
                self._request_timer = self.loop.call_later(request_timeout_s, self._too_slow)

        def _disarm(self) -> None:
            if self._request_timer is not None:
                self._request_timer.cancel()
                self._request_timer = None

        def _too_slow(self) -> None:
            self._request_timer = None
            if not self.transport.is_closing():
                self.transport.close()

    return TimedH11Protocol


def serve(
    app: FastAPI,
    *,
    log_level: str = "info",
    proxy_headers: bool = False,
    forwarded_allow_ips: str | None = None,
) -> None:
    """Serve `app` (from `create_app`) until SIGTERM or SIGINT, on the host and port of its
    settings (port 0: a free one). Runs get `grace_s` to finish; the rest are interrupted
    so that the same query continues them."""
    context: ServerContext = app.state.context
    settings: ServerSettings = context.settings
    family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((settings.host.strip("[]"), settings.port))
    port = listener.getsockname()[1]
    config = _config(
        app,
        log_level=log_level,
        proxy_headers=proxy_headers,
        forwarded_allow_ips=forwarded_allow_ips,
        timeout_graceful_shutdown=math.ceil(settings.grace_s),
    )
    host = f"[{settings.host}]" if family == socket.AF_INET6 else settings.host
    keys = "required" if settings.auth_required else "not required"
    announcement = (
        f"art serve: http://{host}:{port}{settings.root_path}/ (the inspector; the API is "
        f"described at /openapi.json, API keys {keys}). Stop with Ctrl+C or SIGTERM."
    )
    _Server(config, context, announcement).run(sockets=[listener])


@contextlib.contextmanager
def serve_in_thread(app: FastAPI, *, log_level: str = "warning") -> Iterator[str]:
    """Serve `app` on a free loopback port in a background thread (tests, notebooks);
    yields its base URL and stops it (draining its runs) on exit."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    config = _config(app, log_level=log_level)
    server = _Server(config, app.state.context)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [listener]}, name="art-serve", daemon=True
    )
    thread.start()
    try:
        while not server.started:
            if not thread.is_alive():
                raise RuntimeError("the server failed to start (see its log)")
            thread.join(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join()
        listener.close()
