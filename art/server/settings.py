"""ServerSettings: how `art serve` listens, who may call it, and the limits it enforces."""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from art.errors import ConfigurationError

__all__ = [
    "API_KEYS_ENV",
    "THREAD_ID_PATTERN",
    "USER_KEYS_ENV",
    "WEBHOOK_SECRET_ENV",
    "ServerSettings",
    "is_loopback",
    "keys_from_env",
    "parse_user_keys",
    "user_keys_from_env",
    "valid_thread_id",
]

#: Comma-separated API keys, read when no key is given on the command line.
API_KEYS_ENV = "ART_API_KEYS"
#: The key `art serve` signs its webhook deliveries with.
WEBHOOK_SECRET_ENV = "ART_WEBHOOK_SECRET"
#: Comma-separated `user=key` pairs, read when no user key is given on the command line.
USER_KEYS_ENV = "ART_USER_KEYS"
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


def parse_user_keys(pairs: Sequence[str]) -> dict[str, str]:
    """`user=key` pairs as {key: user}; ConfigurationError names a malformed pair (never
    the key itself)."""
    keys: dict[str, str] = {}
    for number, pair in enumerate(pairs, start=1):
        user, sep, key = pair.partition("=")
        user, key = user.strip(), key.strip()
        if not sep or not user or not key:
            raise ConfigurationError(f"user key {number} is not of the form user=key")
        if not _USER.match(user):
            raise ConfigurationError(
                f"user key {number}: a user name is 1-64 letters, digits and ._@-"
            )
        if key in keys:
            raise ConfigurationError(f"user key {number}: the same key is given twice")
        keys[key] = user
    return keys


def user_keys_from_env() -> dict[str, str]:
    """The `user=key` pairs in `ART_USER_KEYS` (comma-separated; blanks ignored)."""
    raw = os.environ.get(USER_KEYS_ENV, "")
    return parse_user_keys([pair for pair in raw.split(",") if pair.strip()])


_USER = re.compile(r"^[A-Za-z0-9._@-]{1,64}$")


@dataclass(frozen=True)
class ServerSettings:
    """Everything `create_app` needs besides the engine's own configuration.

    With keys set, every API call needs `Authorization: Bearer <key>`: an `api_keys` key
    is an admin's (every thread), a `user_keys` key a user's (their own threads). Without
    keys the server refuses to listen beyond loopback unless `allow_unauthenticated` says
    so explicitly.
    """

    host: str = "127.0.0.1"
    port: int = 8000
    api_keys: Sequence[str] = ()
    #: {key: user}: each key names the user whose threads it reaches (`parse_user_keys`).
    user_keys: Mapping[str, str] = field(default_factory=dict)
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
    #: `multitaskStrategy: enqueue` puts the run in the instance's run queue (`art worker`
    #: runs it; on SQLite this process too) instead of waiting in this server process.
    enqueue_to_queue: bool = False
    #: A URL called when any run this server executes ends or suspends.
    webhook_url: str | None = None
    #: The key of each delivery's HMAC signature (X-Art-Signature); None: unsigned.
    webhook_secret: str | None = None
    #: URL prefixes a run's own `webhook` must start with; none: runs cannot name one.
    webhook_allowed_prefixes: Sequence[str] = ()
    #: Tries of a delivery (network errors, 5xx, 408, 425 and 429 are tried again).
    webhook_attempts: int = 5
    #: The wait before the second try; it doubles after each.
    webhook_first_delay_s: float = 1.0

    def __post_init__(self) -> None:
        keys = [key for key in [*self.api_keys, *self.user_keys] if key]
        if len(keys) != len(self.api_keys) + len(self.user_keys):
            raise ConfigurationError("an API key must not be empty")
        if set(self.api_keys) & set(self.user_keys):
            raise ConfigurationError("a key cannot be both an admin's and a user's")
        short = [key for key in keys if len(key) < 16]
        if short:
            raise ConfigurationError(
                "API keys must be at least 16 characters long (use e.g. "
                "`python -c 'import secrets; print(secrets.token_urlsafe(32))'`)"
            )
        for name in ("max_body_bytes", "max_query_chars", "max_url_chars"):
            if getattr(self, name) < 1:
                raise ConfigurationError(f"{name} must be at least 1")
        for url in [self.webhook_url or "http://", *self.webhook_allowed_prefixes]:
            if not url.startswith(("http://", "https://")):
                raise ConfigurationError(
                    "a webhook URL (or prefix) starts with http:// or https://"
                )
        for prefix in self.webhook_allowed_prefixes:
            if not urlsplit(prefix).path.startswith("/"):
                # "https://hooks.example" would also allow https://hooks.example.evil.test
                raise ConfigurationError(
                    f"a webhook prefix names a path after its host ({prefix}/, not {prefix})"
                )
        if self.webhook_attempts < 1 or self.webhook_first_delay_s < 0:
            raise ConfigurationError("webhook_attempts must be >= 1, webhook_first_delay_s >= 0")
        if self.grace_s < 0 or self.poll_interval_s <= 0 or self.ping_interval_s <= 0:
            raise ConfigurationError("grace_s must be >= 0; the intervals must be > 0")
        if self.request_timeout_s <= 0 or self.keep_alive_s <= 0:
            raise ConfigurationError("request_timeout_s and keep_alive_s must be > 0")

    @property
    def auth_required(self) -> bool:
        return bool(self.api_keys or self.user_keys)

    def check_exposure(self) -> None:
        """Refuse to listen beyond loopback without keys unless explicitly allowed."""
        if self.auth_required or self.allow_unauthenticated or is_loopback(self.host):
            return
        raise ConfigurationError(
            f"refusing to listen on {self.host} without API keys: anyone who can reach it "
            f"could run the agent. Give --api-key (or set {API_KEYS_ENV}), or pass "
            "--no-auth if a proxy in front authenticates every request"
        )
