"""Webhooks: a receiver on 127.0.0.1 gets each run's end and suspension, signed, retried
after failures, without holding the run up; each delivery is recorded in the thread's
event log; a run may name its own URL only under a prefix the operator allows."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from art.server import ServerSettings
from art.server.webhooks import sign, verify_signature
from art.testing._serving import ServerThread  # private: FakeProvider's server loop; unexported

from .conftest import APPROVAL_PLAN, GATE_PLAN, Server

# Each test runs a real server (uvicorn on 127.0.0.1): `pytest --slow` runs them.
pytestmark = pytest.mark.slow

SECRET = "whsec-0123456789abcdef"


@dataclass
class Receiver:
    """An HTTP server that records deliveries and answers with the statuses it is given."""

    url: str
    deliveries: list[dict[str, Any]] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)  # answered in order; then 200
    hold: threading.Event = field(default_factory=threading.Event)  # set: answer at once
    arrived: threading.Condition = field(default_factory=threading.Condition)

    def wait_for(self, count: int, timeout: float = 15) -> list[dict[str, Any]]:
        with self.arrived:
            assert self.arrived.wait_for(lambda: len(self.deliveries) >= count, timeout), (
                self.deliveries
            )
            return list(self.deliveries)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    state: dict[str, Receiver] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            got = state["r"]
            got.hold.wait(30)
            with got.arrived:
                got.deliveries.append(
                    {"path": self.path, "headers": dict(self.headers), "body": body}
                )
                status = got.statuses.pop(0) if got.statuses else 200
                got.arrived.notify_all()
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    serving = ServerThread(httpd)
    serving.start()
    state["r"] = Receiver(f"http://127.0.0.1:{httpd.server_address[1]}")
    state["r"].hold.set()
    yield state["r"]
    state["r"].hold.set()
    serving.close()


def settings(receiver: Receiver, **fields: Any) -> ServerSettings:
    return ServerSettings(
        poll_interval_s=0.1,
        webhook_url=f"{receiver.url}/server",
        webhook_secret=SECRET,
        webhook_first_delay_s=0.05,
        **fields,
    )


def test_a_runs_end_and_suspension_are_delivered_signed(
    make_server: Callable[..., Server], receiver: Receiver
) -> None:
    server = make_server(APPROVAL_PLAN, settings=settings(receiver))
    client = server.client()

    suspended = client.post(
        "/threads/t-hook/runs", params={"wait": "true"}, json={"query": "17 * 23 + 12?"}
    ).json()
    first = receiver.wait_for(1)[0]
    body = json.loads(first["body"])
    assert first["path"] == "/server"
    assert body["event"] == "run.suspended"
    assert (body["threadId"], body["runId"]) == ("t-hook", suspended["metadata"]["runId"])
    assert body["suspensionIds"] == suspended["metadata"]["suspensionIds"]
    assert verify_signature(SECRET, first["body"], first["headers"]["X-Art-Signature"])
    assert not verify_signature(
        "another-secret-0123", first["body"], first["headers"]["X-Art-Signature"]
    )
    assert not verify_signature(SECRET, first["body"] + b" ", first["headers"]["X-Art-Signature"])

    suspension = body["suspensionIds"][0]
    client.post(
        f"/threads/t-hook/suspensions/{suspension}/decision",
        params={"wait": "true"},
        json={"approved": True},
    )
    second = json.loads(receiver.wait_for(2)[1]["body"])
    assert (second["event"], second["status"], second["runId"]) == (
        "run.ended",
        "success",
        body["runId"],
    )
    assert second["answer"] == "The answer is 403."


def test_failed_deliveries_are_retried_and_each_is_recorded(
    make_server: Callable[..., Server], receiver: Receiver
) -> None:
    receiver.statuses[:] = [500, 503]  # the third try succeeds
    server = make_server(settings=settings(receiver))
    client = server.client()

    client.post("/threads/t-retry/runs", params={"wait": "true"}, json={"query": "17 * 23?"})

    deliveries = receiver.wait_for(3)
    ids = {d["headers"]["X-Art-Delivery"] for d in deliveries}
    assert len(ids) == 1  # one delivery, tried three times
    record = _recorded(server, "t-retry", 1)[0]
    assert (record["delivered"], record["attempts"], record["status_code"]) == (True, 3, 200)
    assert record["delivery_id"] in ids


def test_a_refused_delivery_is_not_retried_and_a_dead_receiver_is_given_up(
    make_server: Callable[..., Server], receiver: Receiver
) -> None:
    receiver.statuses[:] = [410]
    dead = "http://127.0.0.1:9/nobody"  # the discard port: nothing listens
    server = make_server(
        settings=settings(
            receiver, webhook_allowed_prefixes=["http://127.0.0.1:9/"], webhook_attempts=3
        )
    )
    server.client().post(
        "/threads/t-gone/runs", params={"wait": "true"}, json={"query": "17 * 23?", "webhook": dead}
    )

    records = {r["url"]: r for r in _recorded(server, "t-gone", 2)}
    assert len(receiver.deliveries) == 1
    assert (
        records[f"{receiver.url}/server"]["delivered"],
        records[f"{receiver.url}/server"]["status_code"],
    ) == (False, 410)
    assert (records[dead]["delivered"], records[dead]["attempts"]) == (False, 3)
    assert "ConnectError" in records[dead]["error"]


def test_a_slow_receiver_never_holds_a_run_up(
    make_server: Callable[..., Server], receiver: Receiver
) -> None:
    receiver.hold.clear()  # the receiver answers only when the test says so
    server = make_server(settings=settings(receiver))

    started = time.monotonic()
    answer = server.client().post(
        "/threads/t-slow/runs", params={"wait": "true"}, json={"query": "17 * 23?"}
    )
    took = time.monotonic() - started

    assert answer.json()["metadata"]["status"] == "success"
    assert took < 5
    assert receiver.deliveries == []
    receiver.hold.set()
    assert len(receiver.wait_for(1)) == 1


def test_a_run_names_its_own_url_only_under_an_allowed_prefix(
    make_server: Callable[..., Server], receiver: Receiver
) -> None:
    server = make_server(
        settings=settings(receiver, webhook_allowed_prefixes=[f"{receiver.url}/runs/"])
    )
    client = server.client()

    refused = client.post(
        "/threads/t-own/runs", json={"query": "17 * 23?", "webhook": "http://169.254.169.254/x"}
    )
    assert refused.status_code == 422 and refused.json()["code"] == "WEBHOOK_NOT_ALLOWED"
    client.post(
        "/threads/t-own/runs",
        params={"wait": "true"},
        json={"query": "17 * 23?", "webhook": f"{receiver.url}/runs/42"},
    )
    assert sorted(d["path"] for d in receiver.wait_for(2)) == ["/runs/42", "/server"]


def test_a_run_queued_in_the_run_queue_calls_its_webhooks_when_a_worker_ends_it(
    make_server: Callable[..., Server], receiver: Receiver, tmp_path: Path
) -> None:
    server = make_server(
        GATE_PLAN,
        storage=f"sqlite:///{tmp_path / 'art.db'}",
        settings=settings(
            receiver, enqueue_to_queue=True, webhook_allowed_prefixes=[f"{receiver.url}/runs/"]
        ),
    )
    client = server.client()
    client.post("/threads/t-queued/runs", json={"query": "through the gate"})
    assert server.gate.entered.wait(10)
    queued = client.post(
        "/threads/t-queued/runs",
        json={
            "query": "the second question",
            "multitaskStrategy": "enqueue",
            "webhook": f"{receiver.url}/runs/7",
        },
    ).json()
    server.gate.opened.set()

    deliveries = receiver.wait_for(3)
    by_run: dict[str, list[str]] = {}
    for delivery in deliveries:
        body = json.loads(delivery["body"])
        assert body["event"] == "run.ended" and body["status"] == "success", body
        by_run.setdefault(body["runId"], []).append(delivery["path"])
    # The queued run's end reached the server's URL and its own; the first run's, the server's.
    assert sorted(by_run.pop(queued["runId"])) == ["/runs/7", "/server"]
    assert list(by_run.values()) == [["/server"]]


def test_signatures_are_checked_for_age() -> None:
    body = b'{"event": "run.ended"}'
    old = sign(SECRET, body, int(time.time()) - 3600)
    assert not verify_signature(SECRET, body, old)
    assert verify_signature(SECRET, body, old, tolerance_s=7200)
    assert not verify_signature(SECRET, body, "garbage")


def _recorded(server: Server, thread_id: str, count: int) -> list[dict[str, Any]]:
    """The data of the thread's `webhook:delivery` events, once `count` are stored."""
    storage = server.instance.storage  # memory storage: readable from any thread
    deadline = time.monotonic() + 15
    while True:
        events = asyncio.run(storage.query_events(thread_id, names=["webhook:delivery"]))
        if len(events) >= count:
            return [event.data for event in events]
        assert time.monotonic() < deadline, events
        time.sleep(0.05)


def test_an_allowed_prefix_must_end_its_host() -> None:
    from art.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="names a path after its host"):
        ServerSettings(webhook_allowed_prefixes=["https://hooks.example"])
    ServerSettings(webhook_allowed_prefixes=["https://hooks.example/"])
