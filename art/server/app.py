"""create_app: an art engine behind an HTTP API (FastAPI), with the inspector at `/`."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import Depends, FastAPI
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.staticfiles import StaticFiles
from starlette.types import Message, Receive, Scope, Send

import art
from art.config import ArtInstanceConfig
from art.core.redaction import redact, secrets_from_params
from art.errors import ConfigurationError
from art.instance import ArtInstance
from art.server import agui, openai, queue
from art.server.api import router
from art.server.context import ServerContext
from art.server.feed import EventFeed
from art.server.journal import EventJournal, JournaledStorage
from art.server.principals import Authenticate, AuthHook, KeyCheck, ThreadAccess
from art.server.problems import install_problem_handlers
from art.server.runs import RunManager
from art.server.security import RequestGuard, allowed_hosts
from art.server.settings import ServerSettings
from art.server.sse import EventStreams
from art.server.webhooks import WebhookPolicy, WebhookSender

__all__ = ["STATIC_DIR", "create_app"]

STATIC_DIR = Path(__file__).with_name("static")
# The inspector page may load only its own files and talk only to this server.
_PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


def create_app(
    config: ArtInstanceConfig | None = None,
    *,
    settings: ServerSettings | None = None,
    authenticate: Authenticate | None = None,
    **fields: object,
) -> FastAPI:
    """An ASGI app serving an engine built from `config` and/or `fields` (what
    `art.create_art_instance` takes: model, tools, storage, ...).

    `authenticate` replaces the keys with the application's own check of a request: it
    returns the caller's `Principal` (a user, or an admin), or None for a 401.

    The engine is `app.state.context.instance` (add hooks there). Storage is opened when
    the app starts and closed when it stops, after its runs had `settings.grace_s` to end.
    """
    settings = settings or ServerSettings()
    if authenticate is None:
        settings.check_exposure()
    instance, journal = _build_instance(config, fields)
    webhooks = WebhookSender(
        WebhookPolicy(
            url=settings.webhook_url,
            secret=settings.webhook_secret,
            allowed_prefixes=tuple(settings.webhook_allowed_prefixes),
            attempts=settings.webhook_attempts,
            first_delay_s=settings.webhook_first_delay_s,
        ),
        journal,
    )
    context = ServerContext(
        settings=settings,
        instance=instance,
        journal=journal,
        feed=EventFeed(instance.storage, journal, settings.poll_interval_s),
        runs=RunManager(instance, journal, settings.poll_interval_s, webhooks),
        threads=ThreadAccess(instance.storage),
        streams=EventStreams(),
    )

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await instance.storage.open()
        if authenticate is not None or settings.user_keys:
            await _check_owners_kept(instance)
        try:
            yield
        finally:
            await context.runs.shutdown(settings.grace_s)
            await webhooks.aclose(settings.grace_s)
            await queue.close_queue(app.state)
            await instance.aclose()  # closes the storage when the instance opened it

    app = FastAPI(
        title="art",
        version=art.__version__,
        summary="A Plan-Execute-Synthesize agent engine over HTTP.",
        description=(
            "Threads, runs, live event streams (SSE with Last-Event-ID replay), human "
            "approvals, plans and tools; the AG-UI protocol at /ag-ui; an OpenAI-compatible "
            "/v1/chat/completions. Errors are problem details (RFC 9457). See docs/server.md."
        ),
        lifespan=lifespan,
        root_path=settings.root_path,
        # No Swagger UI (it loads from a public CDN); the OpenAPI document needs a key.
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.context = context
    install_problem_handlers(app)
    check = (
        AuthHook(authenticate) if authenticate else KeyCheck(settings.api_keys, settings.user_keys)
    )
    keys = [Depends(check)]
    app.include_router(router, dependencies=keys)
    app.include_router(agui.router, dependencies=keys)
    app.include_router(openai.router, dependencies=keys)
    app.include_router(queue.router, dependencies=keys)
    _add_inspector(app)

    @app.get("/openapi.json", include_in_schema=False, dependencies=keys)
    async def openapi_document() -> Response:
        return JSONResponse(app.openapi())

    @app.get("/healthz", tags=["server"], include_in_schema=True)
    async def healthz() -> Mapping[str, str]:
        """Liveness (no key needed): `ok`, or `draining` while the server shuts down."""
        return {"status": "draining" if context.runs.draining else "ok"}

    app.add_middleware(
        RequestGuard,
        max_body_bytes=settings.max_body_bytes,
        max_url_chars=settings.max_url_chars,
        hosts=allowed_hosts(settings),
    )
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(settings.cors_origins),
            allow_methods=["GET", "POST", "PATCH", "DELETE"],
            # Any request header: keys, not headers, decide who may call (the OpenAI SDK
            # alone sends a dozen x-stainless-* headers, and more with each release).
            allow_headers=["*"],
            expose_headers=["Location", "Retry-After", "X-Art-Thread-Id"],
            max_age=600,
        )
    return app


async def _check_owners_kept(instance: ArtInstance) -> None:
    """Users need a storage that keeps who owns each thread."""
    try:
        await instance.storage.get_thread("")
    except NotImplementedError:
        raise ConfigurationError(
            "users need a storage that keeps each thread's owner (StorageAdapter.get_thread); "
            "the built-in memory, sqlite and postgresql storages do"
        ) from None


def _build_instance(
    config: ArtInstanceConfig | None, fields: Mapping[str, object]
) -> tuple[ArtInstance, EventJournal]:
    """The engine, on a storage whose event log is the server's journal."""
    instance = ArtInstance(config, **fields)
    secrets = secrets_from_params(instance.config.llm_params)
    journal = EventJournal(instance.storage, functools.partial(redact, secrets=secrets))
    instance.storage = JournaledStorage(instance.storage, journal)
    instance.events.subscribe(journal.record)
    return instance, journal


def _add_inspector(app: FastAPI) -> None:
    index = STATIC_DIR / "index.html"

    @app.get("/", include_in_schema=False)
    async def inspector() -> Response:
        return FileResponse(index, headers=_PAGE_HEADERS)

    @app.get("/favicon.ico", include_in_schema=False)
    async def favicon() -> Response:
        return Response(status_code=204)

    static = StaticFiles(directory=STATIC_DIR)

    async def static_files(scope: Scope, receive: Receive, send: Send) -> None:
        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [
                    *message.get("headers", []),
                    *((k.lower().encode(), v.encode()) for k, v in _PAGE_HEADERS.items()),
                ]
            await send(message)

        await static(scope, receive, with_headers)

    app.mount("/static", static_files, name="static")
