"""Webhooks: the server calls a URL when a run it executes, or queues, ends or suspends.

A delivery is a POST of JSON, signed with HMAC-SHA256 over `<timestamp>.<body>` in the
`X-Art-Signature: t=<timestamp>,v1=<hex>` header (the scheme Stripe's receivers know),
sent in the background so it never holds a run up, retried with doubling delays on a
network error or a 5xx/429 answer, and recorded in the thread's event log as one
`webhook:delivery` event saying how it ended.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import time
import uuid
from dataclasses import dataclass
from typing import Any

import httpx
import pydantic_core

from art.core.log import get_logger
from art.responses import AgentFinalResponse, RunError
from art.server.journal import EventJournal
from art.storage.contract import RunRecord, RunState, StoredEvent

__all__ = ["DELIVERY_EVENT", "WebhookSender", "sign", "verify_signature"]

log = get_logger("art.server")

#: The event each delivery leaves in the thread's event log.
DELIVERY_EVENT = "webhook:delivery"
_RETRIED_STATUSES = frozenset({408, 425, 429})
# A stored run's state as the status its response has.
_RESPONSE_STATUS: dict[RunState, str] = {
    "running": "running",
    "suspended": "suspended",
    "completed": "success",
    "partial": "partial",
    "failed": "error",
    "abandoned": "error",
}


def sign(secret: str, body: bytes, timestamp: int) -> str:
    """The `X-Art-Signature` header of `body` sent at `timestamp` (Unix seconds)."""
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={digest.hexdigest()}"


def verify_signature(secret: str, body: bytes, header: str, *, tolerance_s: float = 300.0) -> bool:
    """Whether `header` signs `body` with `secret`, made at most `tolerance_s` ago (a
    receiver's check; an old signature is refused so a captured delivery cannot be
    replayed later)."""
    fields = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
    try:
        timestamp = int(fields["t"])
    except (KeyError, ValueError):
        return False
    if abs(time.time() - timestamp) > tolerance_s:
        return False
    expected = sign(secret, body, timestamp).split("v1=", 1)[1]
    return hmac.compare_digest(expected, fields.get("v1", ""))


@dataclass(frozen=True)
class WebhookPolicy:
    """Where deliveries go and how hard they are tried (the operator's settings)."""

    url: str | None = None
    secret: str | None = None
    #: URL prefixes a run's own `webhook` must start with (none: runs cannot name one).
    allowed_prefixes: tuple[str, ...] = ()
    attempts: int = 5
    first_delay_s: float = 1.0
    timeout_s: float = 10.0

    def allows(self, url: str) -> bool:
        return any(url.startswith(prefix) for prefix in self.allowed_prefixes)


class WebhookSender:
    """Delivers run ends in background tasks; `aclose` waits for them a little."""

    def __init__(self, policy: WebhookPolicy, journal: EventJournal) -> None:
        self.policy = policy
        self._journal = journal
        self._client: httpx.AsyncClient | None = None
        self._deliveries: set[asyncio.Task[None]] = set()

    def urls_for(self, run_url: str | None) -> list[str]:
        """The URLs a run's end goes to: the server's, and the run's own."""
        return [url for url in (self.policy.url, run_url) if url]

    def run_ended(self, response: AgentFinalResponse, run_url: str | None) -> None:
        """Send the end (or suspension) of a run to its URLs, in the background."""
        meta = response.metadata
        answer = response.response.content if meta.status != "suspended" else None
        self._send(
            run_url,
            thread_id=meta.thread_id,
            run_id=meta.run_id,
            status=meta.status,
            answer=answer,
            error=meta.error,
            suspension_ids=meta.suspension_ids,
        )

    def run_stored(self, record: RunRecord, suspension_ids: list[str], run_url: str | None) -> None:
        """Send the end (or suspension) of a run a queue worker executed, as stored."""
        status = _RESPONSE_STATUS[record.status]
        self._send(
            run_url,
            thread_id=record.thread_id,
            run_id=record.run_id,
            status=status,
            answer=record.answer if status != "suspended" else None,
            error=record.error,
            suspension_ids=suspension_ids,
        )

    def _send(
        self,
        run_url: str | None,
        *,
        thread_id: str,
        run_id: str | None,
        status: str,
        answer: str | None,
        error: RunError | None,
        suspension_ids: list[str],
    ) -> None:
        urls = self.urls_for(run_url)
        if not urls:
            return
        body = pydantic_core.to_json(
            {
                "event": "run.suspended" if status == "suspended" else "run.ended",
                "threadId": thread_id,
                "runId": run_id,
                "status": status,
                "answer": answer,
                "error": error.model_dump(mode="json", by_alias=True) if error else None,
                "suspensionIds": suspension_ids,
            }
        )
        for url in urls:
            task = asyncio.get_running_loop().create_task(
                self._deliver(url, body, thread_id, run_id), name=f"art-webhook-{run_id}"
            )
            self._deliveries.add(task)
            task.add_done_callback(self._deliveries.discard)

    async def _deliver(self, url: str, body: bytes, thread_id: str, run_id: str | None) -> None:
        policy = self.policy
        delivery = uuid.uuid4().hex
        outcome: dict[str, Any] = {"url": url, "delivery_id": delivery, "delivered": False}
        delay = policy.first_delay_s
        for attempt in range(1, policy.attempts + 1):
            outcome["attempts"] = attempt
            try:
                answer = await self._post(url, body, delivery)
            except httpx.HTTPError as exc:
                outcome["error"] = f"{type(exc).__name__}: {exc}"[:500]
                outcome.pop("status_code", None)
            else:
                outcome["status_code"] = answer.status_code
                outcome.pop("error", None)
                if answer.is_success:
                    outcome["delivered"] = True
                    break
                if answer.status_code < 500 and answer.status_code not in _RETRIED_STATUSES:
                    break  # the receiver refused it: sending it again will not help
            if attempt < policy.attempts:
                await asyncio.sleep(delay)
                delay *= 2
        if not outcome["delivered"]:
            log.warning("webhook not delivered", **outcome)
        await self._journal.append(
            StoredEvent(thread_id=thread_id, run_id=run_id, name=DELIVERY_EVENT, data=outcome)
        )

    async def _post(self, url: str, body: bytes, delivery: str) -> httpx.Response:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self.policy.timeout_s)
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "art-webhooks",
            "X-Art-Delivery": delivery,
        }
        if self.policy.secret:
            headers["X-Art-Signature"] = sign(self.policy.secret, body, int(time.time()))
        return await self._client.post(url, content=body, headers=headers)

    async def aclose(self, grace_s: float) -> None:
        """Give deliveries under way `grace_s` to finish, then drop them."""
        if self._deliveries:
            _, late = await asyncio.wait(set(self._deliveries), timeout=grace_s)
            for task in late:
                task.cancel()
            if late:
                await asyncio.wait(late)
        if self._client is not None:
            await self._client.aclose()
