"""The server under clients that misbehave: ones that connect and send nothing (or half a
request), ones that drop an event stream mid-replay, and a request that fails
unexpectedly on a pooled connection. Other clients keep being answered."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import httpx
import pytest

from art.adapters.memory import MemoryStorage


def _raw_request(sock: socket.socket, path: str) -> bytes:
    """Send GET `path` on `sock` (keep-alive) and read its whole response."""
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        body += sock.recv(65536)
    return head


@pytest.mark.slow
def test_a_client_that_sends_nothing_or_half_a_request_is_disconnected(make_server: Any) -> None:
    from art.server import ServerSettings

    server = make_server(settings=ServerSettings(poll_interval_s=0.1, request_timeout_s=1.0))
    port = int(server.url.rsplit(":", 1)[1])
    silent = socket.create_connection(("127.0.0.1", port))
    half = socket.create_connection(("127.0.0.1", port))
    half.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never ends its head
    started = time.monotonic()
    for sock in (silent, half):
        sock.settimeout(10)
        assert sock.recv(1024) == b""  # closed by the server
        assert time.monotonic() - started < 5
        sock.close()
    assert server.client().get("/healthz").status_code == 200


def test_an_unexpected_500_keeps_the_keep_alive_connection_open(make_server: Any) -> None:
    class Failing(MemoryStorage):
        async def list_runs(self, thread_id: str) -> list[Any]:
            if thread_id == "boom":
                raise RuntimeError("a storage fault")
            return await super().list_runs(thread_id)

    server = make_server(storage=Failing())
    port = int(server.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        failed = _raw_request(sock, "/threads/boom/runs")
        assert failed.startswith(b"HTTP/1.1 500")
        assert b"connection: close" not in failed.lower()
        again = _raw_request(sock, "/healthz")  # the same connection
        assert again.startswith(b"HTTP/1.1 200"), again


@pytest.mark.slow
def test_dropped_event_streams_stop_their_replay_and_healthz_stays_quick(
    make_server: Any,
) -> None:
    steps = [{"id": f"s{i}", "tool": "calculator", "args": {"expression": "1"}} for i in range(800)]
    server = make_server({"steps": steps}, synthesis="done")
    client = server.client()
    run = client.post("/threads/t-replay/runs?wait=true", json={"query": "go"}).json()
    assert run["metadata"]["status"] == "success"
    run_id = run["metadata"]["runId"]
    stored = client.get(f"/threads/t-replay/runs/{run_id}").json()
    assert len(stored["steps"]) == 800

    port = int(server.url.rsplit(":", 1)[1])
    slowest: list[float] = []
    stop = threading.Event()

    def probe() -> None:
        with httpx.Client(base_url=server.url, timeout=30) as probe_client:
            while not stop.is_set():
                started = time.monotonic()
                assert probe_client.get("/healthz").status_code == 200
                slowest.append(time.monotonic() - started)
                time.sleep(0.01)

    prober = threading.Thread(target=probe)
    prober.start()
    try:
        for _ in range(30):  # each reads a little of the replay, then hangs up
            with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                path = f"/threads/t-replay/runs/{run_id}/events"
                sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
                assert sock.recv(4096).startswith(b"HTTP/1.1 200")
    finally:
        time.sleep(0.5)
        stop.set()
        prober.join()
    slowest.sort()
    assert slowest[len(slowest) // 2] < 0.2 and slowest[-1] < 1.0, slowest
