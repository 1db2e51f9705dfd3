"""ServerThread: a socketserver TCP server's request loop in a daemon thread that stops the
moment it is closed."""

from __future__ import annotations

import selectors
import socket
import socketserver
import threading
from typing import Generic, TypeVar

_Server = TypeVar("_Server", bound=socketserver.TCPServer)


class ServerThread(Generic[_Server]):
    """Serves `server` in a daemon thread until `close()` (a context manager).

    `serve_forever` notices `shutdown()` only at its next poll, so every close would
    wait up to a poll interval; this loop waits on the listening socket and a wake-up
    socket together, and `close()` wakes it at once. `close()` also closes the server.
    """

    def __init__(self, server: _Server) -> None:
        self.server = server
        self._wake_reader, self._wake_writer = socket.socketpair()
        self._thread = threading.Thread(target=self._serve, name="art-test-server", daemon=True)

    def start(self) -> ServerThread[_Server]:
        """Start answering requests."""
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop answering, wait for the loop to end and close the server (idempotent)."""
        if self._wake_writer.fileno() != -1:
            self._wake_writer.send(b"\0")
        if self._thread.is_alive():
            self._thread.join()
        self._wake_writer.close()
        self._wake_reader.close()
        self.server.server_close()

    def __enter__(self) -> ServerThread[_Server]:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _serve(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self.server.socket, selectors.EVENT_READ)
            selector.register(self._wake_reader, selectors.EVENT_READ)
            while True:
                ready = {key.fileobj for key, _ in selector.select()}
                if self._wake_reader in ready:
                    return
                # The listening socket is readable, so this accepts without blocking.
                self.server.handle_request()
