"""Who may call the API, and what a request may be: bearer keys, bounded requests, hosts.

`RequestGuard` is plain ASGI middleware: it refuses a request before any route sees it
when its URL is too long (414), its body too large (413, read at most once and replayed
to the route), or its Host header not one the server answers to (400; only when running
without keys, against DNS rebinding). Who the caller is: `art.server.principals`.
"""

from __future__ import annotations

from fastapi.security import HTTPBearer
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from art.server.problems import Problem, problem_response
from art.server.settings import ServerSettings, is_loopback

__all__ = ["LOOPBACK_HOSTS", "PUBLIC_ROUTES", "RequestGuard", "allowed_hosts", "bearer_scheme"]

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1", "[::1]")
#: The only routes that answer without a key when keys are set: the inspector's page and
#: files (they hold no data; the page asks for a key) and the liveness check. Every other
#: route, the OpenAPI document included, needs a key.
PUBLIC_ROUTES = ("/", "/favicon.ico", "/static", "/healthz")
_NO_BODY_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

bearer_scheme = HTTPBearer(
    auto_error=False,
    description="An API key given to `art serve` (--api-key or ART_API_KEYS).",
)


def allowed_hosts(settings: ServerSettings) -> frozenset[str] | None:
    """The Host names the server answers to, or None for any."""
    if settings.allowed_hosts:
        return frozenset(h.lower() for h in settings.allowed_hosts)
    if not settings.auth_required and is_loopback(settings.host):
        return frozenset(LOOPBACK_HOSTS)
    return None


class RequestGuard:
    """Refuses over-long URLs, over-large bodies and unknown hosts with problem documents."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_body_bytes: int,
        max_url_chars: int,
        hosts: frozenset[str] | None,
    ) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.max_url_chars = max_url_chars
        self.hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self._refusal(scope)
        if refusal is not None:
            await problem_response(refusal, scope.get("path"))(scope, receive, send)
            return
        if scope["method"] in _NO_BODY_METHODS:
            await self.app(scope, receive, send)
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if len(body) > self.max_body_bytes:
                await problem_response(self._too_large(), scope.get("path"))(scope, receive, send)
                return
            if not message.get("more_body", False):
                break
        await self.app(scope, _replay(bytes(body), receive), send)

    def _refusal(self, scope: Scope) -> Problem | None:
        path = scope.get("raw_path") or scope["path"].encode()
        if len(path) + len(scope.get("query_string", b"")) > self.max_url_chars:
            return Problem(414, f"the URL is longer than {self.max_url_chars} characters")
        headers = dict(scope.get("headers") or [])
        if self.hosts is not None:
            host = headers.get(b"host", b"").decode("latin-1").lower()
            name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
            if name not in self.hosts:
                return Problem(
                    400,
                    f"this server does not answer to the host {host!r} (it runs without API "
                    "keys, so it only answers to its loopback names; see --allowed-host)",
                    code="INVALID_HOST",
                )
        declared = headers.get(b"content-length")
        if declared is not None:
            try:
                too_large = int(declared) > self.max_body_bytes
            except ValueError:
                return Problem(400, "the Content-Length header is not a number")
            if too_large:
                return self._too_large()
        return None

    def _too_large(self) -> Problem:
        return Problem(413, f"the request body is larger than {self.max_body_bytes} bytes")


def _replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` that gives the body read already, then waits as the original does
    (for the client going away)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
