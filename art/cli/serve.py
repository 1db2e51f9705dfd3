"""The `art serve` command (registered in art/cli/app.py). Imports the server (fastapi,
uvicorn) only when run: they are an optional extra and slow to import."""

from __future__ import annotations

import importlib.util
import os
from typing import TYPE_CHECKING, Annotated

import typer

from art.cli.common import CliError, instance_fields

if TYPE_CHECKING:
    from art.config import ExecutionConfig

__all__ = ["serve_command"]


def serve_command(
    host: Annotated[
        str,
        typer.Option(
            "--host",
            metavar="HOST",
            help="Address to listen on. Beyond loopback, API keys are required.",
        ),
    ] = "127.0.0.1",
    port: Annotated[
        int,
        typer.Option(
            "--port", "-p", metavar="PORT", min=0, max=65535, help="Port (0: a free one)."
        ),
    ] = 8000,
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            "-m",
            metavar="MODEL",
            help="litellm model name, or module:ATTR / file.py:ATTR naming one "
            "(default: $ART_MODEL).",
        ),
    ] = None,
    storage: Annotated[
        str | None,
        typer.Option(
            "--storage",
            "-s",
            metavar="URL",
            help="memory://, sqlite:///path.db or postgresql://... (default: $ART_STORAGE). "
            "Several servers on one PostgreSQL serve the same threads.",
        ),
    ] = None,
    tools: Annotated[
        list[str] | None,
        typer.Option(
            "--tools",
            "-t",
            metavar="MODULE:ATTR",
            help="module:attr (or file.py:attr): a tool, a list of tools or a factory. "
            "Repeatable. Replaces the built-in tools.",
        ),
    ] = None,
    api_keys: Annotated[
        list[str] | None,
        typer.Option(
            "--api-key",
            metavar="KEY",
            help="A key clients send as 'Authorization: Bearer KEY' (16+ characters). "
            "Repeatable. Default: $ART_API_KEYS (comma-separated).",
            show_default=False,
        ),
    ] = None,
    user_keys: Annotated[
        list[str] | None,
        typer.Option(
            "--user-key",
            metavar="USER=KEY",
            help="A user's key (16+ characters): its holder sees only the threads they "
            "created; --api-key keys see all. Repeatable. Default: $ART_USER_KEYS "
            "(comma-separated).",
            show_default=False,
        ),
    ] = None,
    webhook: Annotated[
        str | None,
        typer.Option(
            "--webhook",
            metavar="URL",
            help="Called (POST, JSON) when a run ends or suspends; signed with "
            "$ART_WEBHOOK_SECRET when set.",
        ),
    ] = None,
    webhook_allow: Annotated[
        list[str] | None,
        typer.Option(
            "--webhook-allow",
            metavar="PREFIX",
            help="A URL prefix a run's own `webhook` may start with. Repeatable. "
            "Default: runs cannot name one.",
        ),
    ] = None,
    enqueue_to_queue: Annotated[
        bool,
        typer.Option(
            "--enqueue-to-queue",
            help="multitaskStrategy enqueue puts runs in the run queue, for `art worker` "
            "(default: they wait in this process).",
        ),
    ] = False,
    no_auth: Annotated[
        bool,
        typer.Option(
            "--no-auth",
            help="Listen beyond loopback without keys (only behind a proxy that "
            "authenticates every request).",
        ),
    ] = False,
    cors_origins: Annotated[
        list[str] | None,
        typer.Option(
            "--cors-origin",
            metavar="ORIGIN",
            help="A web origin allowed to call the API from its pages ('*': any). Repeatable.",
        ),
    ] = None,
    allowed_hosts: Annotated[
        list[str] | None,
        typer.Option(
            "--allowed-host",
            metavar="NAME",
            help="A Host name the server answers to (default without keys: loopback "
            "names only). Repeatable.",
        ),
    ] = None,
    grace: Annotated[
        float,
        typer.Option(
            "--grace",
            metavar="SECONDS",
            help="On SIGTERM, how long runs may take to finish before they are "
            "interrupted (the same query continues an interrupted run).",
        ),
    ] = 25.0,
    max_body_bytes: Annotated[
        int, typer.Option("--max-body-bytes", metavar="N", help="Largest request body.")
    ] = 1_048_576,
    max_query_chars: Annotated[
        int, typer.Option("--max-query-chars", metavar="N", help="Longest query.")
    ] = 32_000,
    request_timeout: Annotated[
        float,
        typer.Option(
            "--request-timeout",
            metavar="SECONDS",
            help="How long a client may take to send a whole request; a slower one is "
            "disconnected.",
        ),
    ] = 10.0,
    keep_alive: Annotated[
        float,
        typer.Option(
            "--keep-alive", metavar="SECONDS", help="How long an idle connection stays open."
        ),
    ] = 5.0,
    execution_config: Annotated[
        str | None,
        typer.Option(
            "--execution-config",
            metavar="JSON",
            help="The engine's limits as a JSON object, e.g. '{\"max_plan_attempts\": 2}' "
            "(see ExecutionConfig); a client's executionConfig may lower them, not raise them.",
        ),
    ] = None,
    root_path: Annotated[
        str,
        typer.Option(
            "--root-path", metavar="PATH", help="The path prefix a proxy serves art under."
        ),
    ] = "",
    proxy_headers: Annotated[
        bool,
        typer.Option(
            "--proxy-headers",
            help="Trust X-Forwarded-For/-Proto from the addresses of --forwarded-allow-ips.",
        ),
    ] = False,
    forwarded_allow_ips: Annotated[
        str | None,
        typer.Option(
            "--forwarded-allow-ips",
            metavar="IPS",
            help="Comma-separated proxy addresses trusted with --proxy-headers.",
        ),
    ] = None,
    log_level: Annotated[
        str,
        typer.Option(
            "--log-level", metavar="LEVEL", help="uvicorn's log level (info, warning, ...)."
        ),
    ] = "info",
) -> None:
    """Serve the agent over HTTP: a REST API with live event streams (SSE), the AG-UI
    protocol at /ag-ui, an OpenAI-compatible /v1/chat/completions, and the run inspector
    at /. Docs: docs/server.md"""
    from art.errors import ConfigurationError

    try:
        if not all(importlib.util.find_spec(m) for m in ("fastapi", "uvicorn", "sse_starlette")):
            raise CliError(
                "CONFIG_ERROR", 'art serve needs the server extra: pip install "art-pes[server]"'
            )
        from art.server.app import create_app
        from art.server.settings import (
            WEBHOOK_SECRET_ENV,
            ServerSettings,
            keys_from_env,
            parse_user_keys,
            user_keys_from_env,
        )

        settings = ServerSettings(
            host=host,
            port=port,
            api_keys=list(api_keys or keys_from_env()),
            user_keys=parse_user_keys(user_keys) if user_keys else user_keys_from_env(),
            webhook_url=webhook,
            enqueue_to_queue=enqueue_to_queue,
            webhook_secret=os.environ.get(WEBHOOK_SECRET_ENV) or None,
            webhook_allowed_prefixes=list(webhook_allow or []),
            allow_unauthenticated=no_auth,
            cors_origins=list(cors_origins or []),
            allowed_hosts=list(allowed_hosts or []),
            grace_s=grace,
            max_body_bytes=max_body_bytes,
            max_query_chars=max_query_chars,
            root_path=root_path.rstrip("/"),
            request_timeout_s=request_timeout,
            keep_alive_s=keep_alive,
        )
        fields = instance_fields(model, storage, tools)
        if execution_config:
            fields["execution_config"] = _execution_config(execution_config)
        app = create_app(settings=settings, **fields)
    except (CliError, ConfigurationError) as exc:
        code = exc.code if isinstance(exc, CliError) else str(exc.code)
        typer.echo(f"error {code}: {exc.message}", err=True)
        raise typer.Exit(2) from None

    from art.server.serve import serve

    serve(
        app,
        log_level=log_level,
        proxy_headers=proxy_headers,
        forwarded_allow_ips=forwarded_allow_ips,
    )


def _execution_config(text: str) -> ExecutionConfig:
    import json

    from art.config import ExecutionConfig

    try:
        return ExecutionConfig.model_validate(json.loads(text))
    except ValueError as exc:  # bad JSON, or a pydantic ValidationError
        raise CliError("CONFIG_ERROR", f"--execution-config: {exc}") from None
