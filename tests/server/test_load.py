"""A bounded load test of `art serve` (a process of its own, on 127.0.0.1): slow clients
that connect and send nothing or half a request, and clients that open a long run's
event stream and drop it, while a normal client keeps asking. The normal client's p99
stays under P99_BOUND_S. It runs for DURATION_S and stops by itself."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import httpx
import pytest

from .test_processes import ServeProcess, start_server

pytestmark = pytest.mark.slow

DURATION_S = 8.0
SLOW_CLIENTS = 100
STREAM_DROPPERS = 8
DROP_PAUSE_S = 0.25
# On this project's 2-core machine, shared with other work: with the misbehaving clients
# the normal client's p99 measured 1.0-1.5 s (median 0.05 s); before the server bounded
# request time and stopped dropped replays, one request in the 8 s took 14 s.
P99_BOUND_S = 2.0
# A chain of 300 `work` steps of no duration: about 2,000 stored events to replay.
LONG_RUN = "work " + " ".join(["0"] * 300)


@pytest.fixture
def serve_process(tmp_path: Path) -> ServeProcess:
    server = start_server("memory://", tmp_path / "work.log", "--request-timeout", "2")
    try:
        yield server
    finally:
        server.stop()


def _port(server: ServeProcess) -> int:
    return int(server.url.rsplit(":", 1)[1])


def test_a_normal_client_keeps_its_p99_under_slow_clients_and_dropped_streams(
    serve_process: ServeProcess,
) -> None:
    server = serve_process
    run = server.client.post("/threads/t-long/runs?wait=true", json={"query": LONG_RUN}).json()
    assert run["metadata"]["status"] == "success", run["metadata"]
    run_id = run["metadata"]["runId"]
    port = _port(server)
    deadline = time.monotonic() + DURATION_S
    dropped_closed = [0]
    slow_closed = [0]

    def slow_client(index: int) -> None:
        while time.monotonic() < deadline:
            with socket.create_connection(("127.0.0.1", port), timeout=DURATION_S) as sock:
                if index % 2:
                    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # no end
                try:
                    if sock.recv(1024) == b"":
                        slow_closed[0] += 1  # the server let go of it
                except TimeoutError:
                    return

    def stream_dropper() -> None:
        path = f"/threads/t-long/runs/{run_id}/events"
        request = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()
        while time.monotonic() < deadline:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                sock.sendall(request)
                sock.recv(4096)  # the head and the first events, then hang up
                dropped_closed[0] += 1
            time.sleep(DROP_PAUSE_S)

    workers = [threading.Thread(target=slow_client, args=(i,)) for i in range(SLOW_CLIENTS)]
    workers += [threading.Thread(target=stream_dropper) for _ in range(STREAM_DROPPERS)]
    for worker in workers:
        worker.start()
    latencies: list[float] = []
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            n = 0
            while time.monotonic() < deadline:
                started = time.monotonic()
                if n % 10 == 0:
                    body = {"query": "work 0"}
                    answered = client.post(f"/threads/t-normal-{n}/runs?wait=true", json=body)
                else:
                    answered = client.get("/healthz" if n % 2 else "/threads?limit=5")
                latencies.append(time.monotonic() - started)
                assert answered.status_code == 200, answered.text
                n += 1
    finally:
        for worker in workers:
            worker.join(timeout=30)
    latencies.sort()
    p99 = latencies[int(len(latencies) * 0.99)]
    assert slow_closed[0] >= SLOW_CLIENTS, "slow clients were held, not disconnected"
    assert dropped_closed[0] >= STREAM_DROPPERS
    assert p99 < P99_BOUND_S, f"p99 {p99:.3f} s over {len(latencies)} requests"
