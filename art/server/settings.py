"""ServerSettings: how `art serve` listens, who may call it, and the limits it enforces."""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

from art.errors import ConfigurationError

__all__ = [
    "API_KEYS_ENV",
    "THREAD_ID_PATTERN",
    "ServerSettings",
    "is_loopback",
    "keys_from_env",
    "valid_thread_id",
]

#: Comma-separated API keys, read when no key is given on the command line.
API_KEYS_ENV = "ART_API_KEYS"
#: What a thread id may look like in a URL: 1-128 letters, digits and `._:-`, starting with
#: a letter or digit (no slashes, spaces or control characters to smuggle into paths or logs).
THREAD_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"
_THREAD_ID = re.compile(THREAD_ID_PATTERN)
_LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


def is_loopback(host: str) -> bool:
    """Whether listening on `host` reaches only this machine."""
    name = host.strip().strip("[]").lower()
    if name in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def valid_thread_id(thread_id: str) -> bool:
    return bool(_THREAD_ID.match(thread_id))


def keys_from_env() -> list[str]:
    """The keys in `ART_API_KEYS` (comma-separated; blanks ignored)."""
    raw = os.environ.get(API_KEYS_ENV, "")
    return [key.strip() for key in raw.split(",") if key.strip()]


@dataclass(frozen=True)
class ServerSettings:
    """Everything `create_app` needs besides the engine's own configuration.

    With `api_keys` set, every API call needs `Authorization: Bearer <one of them>`.
    Without keys the server refuses to listen beyond loopback unless
    `allow_unauthenticated` says so explicitly.
    """

    host: str = "127.0.0.1"
    port: int = 8000
    api_keys: Sequence[str] = ()
    allow_unauthenticated: bool = False
    #: Origins allowed to call the API from a browser page served elsewhere ("*" for any).
    cors_origins: Sequence[str] = ()
    #: Host headers accepted when the server runs without keys (a defence against DNS
    #: rebinding: a web page must not reach an unauthenticated loopback server through a
    #: name of its own). Empty: the loopback names only.
    allowed_hosts: Sequence[str] = ()
    max_body_bytes: int = 1_048_576
    max_query_chars: int = 32_000
    max_url_chars: int = 8_192
    #: Seconds a SIGTERM leaves runs to finish before they are interrupted (left as a
    #: crash leaves them: the same query continues them).
    grace_s: float = 25.0
    #: How often an event stream looks for events another process wrote.
    poll_interval_s: float = 0.5
    #: Seconds between SSE keep-alive comments (proxies close idle connections).
    ping_interval_s: float = 15.0
    #: The path prefix a reverse proxy serves the app under (ASGI root_path).
    root_path: str = ""
    #: Seconds a client has to send a whole request (head and body) once it connected or
    #: sent its first byte; a slower one is disconnected (slow clients hold no connection).
    request_timeout_s: float = 10.0
    #: Seconds an idle keep-alive connection stays open between requests.
    keep_alive_s: float = 5.0

    def __post_init__(self) -> None:
        keys = [key for key in self.api_keys if key]
        if len(keys) != len(self.api_keys):
            raise ConfigurationError("an API key must not be empty")
        short = [key for key in keys if len(key) < 16]
        if short:
            raise ConfigurationError(
                "API keys must be at least 16 characters long (use e.g. "
                "`python -c 'import secrets; print(secrets.token_urlsafe(32))'`)"
            )
        for name in ("max_body_bytes", "max_query_chars", "max_url_chars"):
            if getattr(self, name) < 1:
                raise ConfigurationError(f"{name} must be at least 1")
        if self.grace_s < 0 or self.poll_interval_s <= 0 or self.ping_interval_s <= 0:
            raise ConfigurationError("grace_s must be >= 0; the intervals must be > 0")
        if self.request_timeout_s <= 0 or self.keep_alive_s <= 0:
            raise ConfigurationError("request_timeout_s and keep_alive_s must be > 0")

    @property
    def auth_required(self) -> bool:
        return bool(self.api_keys)

    def check_exposure(self) -> None:
        """Refuse to listen beyond loopback without keys unless explicitly allowed."""
        if self.api_keys or self.allow_unauthenticated or is_loopback(self.host):
            return
        raise ConfigurationError(
            f"refusing to listen on {self.host} without API keys: anyone who can reach it "
            f"could run the agent. Give --api-key (or set {API_KEYS_ENV}), or pass "
            "--no-auth if a proxy in front authenticates every request"
        )
