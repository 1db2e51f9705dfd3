"""http_get: fetch a URL over HTTP(S) with a total timeout and a response size limit."""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from typing import Any
from urllib.parse import urlsplit

import httpx

from art.errors import ConfigurationError, ToolErrorCode
from art.tooling import ExecutionContext, IToolExecutor, ToolResult, ToolSchema
from art.tools._common import failure, success

__all__ = ["HttpGet"]

DEFAULT_TIMEOUT_S = 15.0
DEFAULT_MAX_BYTES = 2_000_000
KEPT_HEADERS = (
    "content-type",
    "content-length",
    "content-language",
    "last-modified",
    "etag",
    "cache-control",
    "retry-after",
)


class HttpGet(IToolExecutor):
    """GET a URL; the body is read up to `max_bytes` and cut there (`truncated: true`)."""

    def __init__(
        self,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_bytes: int = DEFAULT_MAX_BYTES,
        allowed_hosts: Collection[str] | None = None,
        headers: dict[str, str] | None = None,
        max_redirects: int = 5,
    ) -> None:
        if timeout_s <= 0 or max_bytes < 1:
            raise ConfigurationError("HttpGet needs timeout_s > 0 and max_bytes >= 1")
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        self.allowed_hosts = {h.lower() for h in allowed_hosts} if allowed_hosts else None
        self.headers = {"user-agent": "art-http-get/0.1", **(headers or {})}
        self.max_redirects = max_redirects
        self.schema = ToolSchema(
            name="http_get",
            description=(
                "Fetches a web page or API endpoint with an HTTP GET request and returns the "
                "response. Use it when the answer needs the current content of a specific "
                "URL. Returns an object with url (after redirects), status_code, headers "
                "(content-type and a few others), text (the body, cut at "
                f"{max_bytes:,} bytes) and truncated (true when the body was cut). "
                "HTTP errors (4xx/5xx) come back as errors with the response attached."
            ),
            input_schema={
                "type": "object",
                "properties": {
                    "url": {
                        "type": "string",
                        "description": "Absolute http:// or https:// URL.",
                        "pattern": "^[hH][tT][tT][pP][sS]?://",
                    },
                    "headers": {
                        "type": "object",
                        "additionalProperties": {"type": "string"},
                        "description": "Extra request headers, e.g. {'accept': 'text/html'}.",
                    },
                },
                "required": ["url"],
                "additionalProperties": False,
            },
            examples=[
                {
                    "input": {"url": "https://example.org/status.json"},
                    "description": "What does https://example.org/status.json report?",
                }
            ],
        )

    async def execute(self, input: dict[str, Any], context: ExecutionContext) -> ToolResult:
        url = input["url"]
        sources = [{"source_name": url, "url": url}]
        host = (urlsplit(url).hostname or "").lower()
        if not host:
            return failure(self, context, ToolErrorCode.VALIDATION_ERROR, f"no host in {url!r}")
        if self.allowed_hosts is not None and host not in self.allowed_hosts:
            return failure(
                self,
                context,
                ToolErrorCode.PERMISSION_DENIED,
                f"host {host!r} is not allowed (allowed: {', '.join(sorted(self.allowed_hosts))})",
            )
        try:
            async with asyncio.timeout(self.timeout_s):
                response = await self._fetch(url, {**self.headers, **input.get("headers", {})})
        except TimeoutError:
            return failure(
                self,
                context,
                ToolErrorCode.TIMEOUT,
                f"GET {url} did not finish within {self.timeout_s:g} s",
                retryable=True,
                sources=sources,
            )
        except httpx.TimeoutException as exc:
            return failure(
                self, context, ToolErrorCode.TIMEOUT, f"GET {url} timed out: {exc}", retryable=True
            )
        except httpx.TooManyRedirects:
            return failure(
                self,
                context,
                ToolErrorCode.IO_ERROR,
                f"GET {url} was redirected more than {self.max_redirects} times",
            )
        except httpx.InvalidURL as exc:
            return failure(self, context, ToolErrorCode.VALIDATION_ERROR, f"invalid URL: {exc}")
        except httpx.TransportError as exc:
            return failure(
                self,
                context,
                ToolErrorCode.IO_ERROR,
                f"GET {url} failed: {type(exc).__name__}: {exc}",
                retryable=True,
            )

        if response["status_code"] >= 400:
            code, retryable = _error_code(response["status_code"])
            return failure(
                self,
                context,
                code,
                f"GET {url} returned HTTP {response['status_code']} {response['reason']}",
                retryable=retryable,
                output=response,
                sources=sources,
            )
        return success(self, context, response, sources=sources)

    async def _fetch(self, url: str, headers: dict[str, str]) -> dict[str, Any]:
        async with (
            httpx.AsyncClient(
                timeout=self.timeout_s,
                follow_redirects=True,
                max_redirects=self.max_redirects,
            ) as client,
            client.stream("GET", url, headers=headers) as response,
        ):
            body = bytearray()
            truncated = False
            async for chunk in response.aiter_bytes():
                body.extend(chunk)
                if len(body) > self.max_bytes:
                    del body[self.max_bytes :]
                    truncated = True
                    break
            encoding = response.encoding or "utf-8"
            try:
                text = bytes(body).decode(encoding, errors="replace")
            except LookupError:  # an unknown charset in the content-type header
                text = bytes(body).decode("utf-8", errors="replace")
            return {
                "url": str(response.url),
                "status_code": response.status_code,
                "reason": response.reason_phrase,
                "headers": {k: response.headers[k] for k in KEPT_HEADERS if k in response.headers},
                "text": text,
                "truncated": truncated,
            }


def _error_code(status: int) -> tuple[ToolErrorCode, bool]:
    if status == 404 or status == 410:
        return ToolErrorCode.NOT_FOUND, False
    if status in (401, 403):
        return ToolErrorCode.PERMISSION_DENIED, False
    if status == 429:
        return ToolErrorCode.RATE_LIMITED, True
    if status >= 500:
        return ToolErrorCode.IO_ERROR, True
    return ToolErrorCode.VALIDATION_ERROR, False
