"""serve: run an app on uvicorn, draining its runs on SIGTERM before stopping."""

from __future__ import annotations

import contextlib
import math
import socket
import sys
import threading
from collections.abc import Iterator

import uvicorn
from fastapi import FastAPI

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
    config = uvicorn.Config(
        app,
        log_level=log_level,
        proxy_headers=proxy_headers,
        forwarded_allow_ips=forwarded_allow_ips,
        timeout_graceful_shutdown=math.ceil(settings.grace_s),
        server_header=False,
        lifespan="on",
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
    config = uvicorn.Config(app, log_level=log_level, lifespan="on", server_header=False)
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
