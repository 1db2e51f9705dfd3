"""`art serve` for a team: users with their own threads, thread metadata and search, a
second message while a run executes, a fork from a step, and a webhook when runs end.

    python examples/team_server.py

It serves an agent on a free loopback port in this process (what `art serve --user-key
alice=... --user-key bob=... --webhook URL` does in its own) and talks to it as two users
would. A small receiver in the same process plays the webhook's other end and checks each
delivery's signature. The scripted test model plays the LLM.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

from art.server import ServerSettings, create_app, serve_in_thread
from art.server.webhooks import verify_signature
from art.testing import ScriptedModel
from art.tools import Calculator

ALICE, BOB = "alice-key-0123456789abcdef", "bob-key-0123456789abcdef00"
SECRET = "whsec-example-0123456789"
PLAN = {
    "title": "Price an order",
    "steps": [
        {"id": "s1", "tool": "calculator", "args": {"expression": "3 * 40"}},
        {"id": "s2", "tool": "calculator", "args": {"expression": "{{s1.output}} * 1.2"}},
    ],
}
deliveries: list[dict[str, Any]] = []
delivered = threading.Condition()


class Receiver(BaseHTTPRequestHandler):
    """The webhook's other end: keeps each delivery whose signature holds."""

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        signed = verify_signature(SECRET, body, self.headers.get("X-Art-Signature", ""))
        with delivered:
            deliveries.append({**json.loads(body), "signed": signed})
            delivered.notify_all()
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def main() -> None:
    receiver = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    hook = f"http://127.0.0.1:{receiver.server_address[1]}/art"
    settings = ServerSettings(
        user_keys={ALICE: "alice", BOB: "bob"}, webhook_url=hook, webhook_secret=SECRET
    )
    with ScriptedModel(planning=PLAN, synthesis="The order costs $144.") as model:
        app = create_app(
            model=model.model, tools=[Calculator()], storage="memory://", settings=settings
        )
        with serve_in_thread(app) as url:
            alice = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ALICE}"})
            bob = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {BOB}"})
            tour(alice, bob)
            alice.close()
            bob.close()
    receiver.shutdown()


def tour(alice: httpx.Client, bob: httpx.Client) -> None:
    made = alice.post("/threads", json={"threadId": "order-7", "metadata": {"team": "sales"}})
    print(f"alice creates order-7 -> {made.status_code}, owner {made.json()['owner']}")
    run = alice.post(
        "/threads/order-7/runs", params={"wait": "true"}, json={"query": "Price order 7"}
    ).json()
    print(f"alice's run: {run['metadata']['status']}; {run['response']['content']}")
    print(f"bob reads order-7 -> {bob.get('/threads/order-7').status_code} (not his)")
    print(f"bob's threads: {[t['threadId'] for t in bob.get('/threads').json()['threads']]}")
    found = alice.get("/threads", params={"metadata": '{"team": "sales"}'}).json()["threads"]
    print(f"alice's sales threads: {[t['threadId'] for t in found]}")

    # A second message while nothing runs starts at once; `enqueue` would wait its turn.
    queued = alice.post(
        "/threads/order-7/runs",
        params={"wait": "true"},
        json={"query": "Price order 7 again", "multitaskStrategy": "enqueue"},
    ).json()
    print(f"the enqueued run: {queued['metadata']['status']}")

    fork = alice.post(
        f"/threads/order-7/runs/{run['metadata']['runId']}/fork",
        params={"wait": "true"},
        json={"stepId": "s2", "args": {"expression": "{{s1.output}} * 1.1"}},
    ).json()
    outputs = [step["result"]["output"] for step in fork["steps"]]
    print(
        f"fork from s2 with 10% instead of 20%: outputs {outputs}, "
        f"{fork['metadata']['toolCalls']} tool call (s1 kept)"
    )

    with delivered:
        delivered.wait_for(lambda: len(deliveries) >= 3, timeout=10)
    for delivery in deliveries:
        print(f"webhook: {delivery['event']} {delivery['status']} signed={delivery['signed']}")


if __name__ == "__main__":
    main()
