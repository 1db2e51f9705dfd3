"""Who is calling: API keys (or the application's own check) name a principal, and a
thread belongs to the user who created it.

A user sees, runs, streams, decides, cancels and deletes only the threads they created;
any other thread answers 404, as one that does not exist, so ids do not leak. An admin
(a key given with `--api-key`, or anyone when the server runs without keys) sees every
thread. A thread stored outside the server (the Python API, the CLI) has no owner: only
admins see it.
"""

from __future__ import annotations

import hmac
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

from fastapi import Security
from fastapi.security import HTTPAuthorizationCredentials
from starlette.requests import Request

from art.server.problems import Problem
from art.server.security import bearer_scheme
from art.storage.contract import StorageAdapter, ThreadSummary

__all__ = ["ADMIN", "Authenticate", "KeyCheck", "Principal", "ThreadAccess", "authenticated"]


@dataclass(frozen=True)
class Principal:
    """The caller: a user who sees their own threads, or an admin who sees every thread."""

    user: str | None = None
    admin: bool = False

    def __post_init__(self) -> None:
        if not self.admin and not self.user:
            raise ValueError("a principal is an admin or names a user")

    def run_options(self, options: dict[str, object]) -> dict[str, object]:
        """`options` for a run this principal starts: a user's runs carry their name as
        `user_id`, whatever the request said."""
        return options if self.admin else {**options, "user_id": self.user}


#: The principal of a server without keys, and of an `--api-key` key.
ADMIN = Principal(admin=True)

#: An application's check of a request (its headers, cookies, ...): the principal, or None
#: to refuse it (401). It may be async.
Authenticate = Callable[[Request], "Principal | Awaitable[Principal | None] | None"]


class KeyCheck:
    """`Authorization: Bearer <key>`: an admin key or a user's key names the principal.
    Without any key configured every caller is an admin."""

    def __init__(self, admin_keys: Sequence[str], user_keys: Mapping[str, str]) -> None:
        self._keys = [(key.encode(), ADMIN) for key in admin_keys] + [
            (key.encode(), Principal(user=user)) for key, user in user_keys.items()
        ]

    async def __call__(
        self,
        request: Request,
        credentials: HTTPAuthorizationCredentials | None = Security(bearer_scheme),
    ) -> Principal:
        if not self._keys:
            return _remember(request, ADMIN)
        if credentials is None:
            raise unauthorized("this server needs an API key: send Authorization: Bearer <key>")
        given = credentials.credentials.encode()
        # Compare with every key, always: the time taken says nothing about which matched.
        found: Principal | None = None
        for key, principal in self._keys:
            if hmac.compare_digest(given, key):
                found = principal
        if found is None:
            raise unauthorized("the API key is not valid")
        return _remember(request, found)


class AuthHook:
    """The application's `Authenticate` as the API's check."""

    def __init__(self, authenticate: Authenticate) -> None:
        self._authenticate = authenticate

    async def __call__(self, request: Request) -> Principal:
        found = self._authenticate(request)
        if inspect.isawaitable(found):
            found = await found
        if found is None:
            raise unauthorized("the request is not authenticated")
        if not isinstance(found, Principal):
            raise TypeError(f"authenticate must return a Principal or None, not {found!r}")
        return _remember(request, found)


def unauthorized(detail: str) -> Problem:
    return Problem(401, detail, headers={"WWW-Authenticate": 'Bearer realm="art"'})


def _remember(request: Request, principal: Principal) -> Principal:
    request.state.principal = principal
    return principal


def authenticated(request: Request) -> Principal:
    """The principal the API's check found for `request` (a FastAPI dependency)."""
    principal: Principal = request.state.principal
    return principal


class ThreadAccess:
    """Which threads a principal may touch, from the owner storage keeps."""

    def __init__(self, storage: StorageAdapter) -> None:
        self._storage = storage

    async def visible(self, principal: Principal, thread_id: str) -> ThreadSummary | None:
        """The thread, if it exists and `principal` may see it; else None."""
        thread = await self._storage.get_thread(thread_id)
        if thread is None or principal.admin or thread.owner == principal.user:
            return thread
        return None

    async def check(self, principal: Principal, thread_id: str) -> None:
        """404 unless the thread is `principal`'s (an admin: any thread, existing or not)."""
        if principal.admin:
            return
        if await self.visible(principal, thread_id) is None:
            raise Problem(404, f"no thread {thread_id!r}")

    async def claim(self, principal: Principal, thread_id: str) -> None:
        """Make a new thread `principal`'s before a run starts on it; 404 when it exists
        and is someone else's."""
        if principal.admin:
            return
        thread = await self._storage.claim_thread(thread_id, principal.user)
        if thread.owner != principal.user:
            raise Problem(404, f"no thread {thread_id!r}")
