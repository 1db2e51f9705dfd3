"""http_get: fetch a URL over HTTP(S) with a total timeout, a size limit and an address check.

Every hop is checked before it is fetched: the host is resolved, and a host with any
address that is not public (loopback, private, link-local, shared, multicast, reserved,
unspecified, or a public form of one of these such as `::ffff:127.0.0.1`) is refused,
so a plan cannot reach internal services (server-side request forgery). The request
then goes to the address that was checked, not to a second lookup of the name (which
DNS could answer differently), with the name kept for the `Host` header and TLS.
Redirects are followed here, hop by hop, each hop checked the same way.
`allow_private=True`, or a host named in `allowed_hosts`, opens local addresses.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
import threading
from collections.abc import Collection
from typing import Any, Required, TypedDict

import httpx

from art.errors import ConfigurationError, ToolErrorCode
from art.tooling.contract import ExecutionContext, IToolExecutor, ToolResult, ToolSchema
from art.tools._common import failure, success

__all__ = ["HttpGet", "address_refusal"]

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
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
# Addresses that carry an IPv4 address inside an IPv6 one (NAT64's well-known prefix).
_NAT64 = ipaddress.ip_network("64:ff9b::/96")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def address_refusal(address: IPAddress) -> str | None:
    """Why `address` is not a public one (e.g. "a loopback address"), or None when it is."""
    embedded = _embedded_ipv4(address)
    if embedded is not None:
        reason = address_refusal(embedded)
        return f"{reason} inside an IPv6 address" if reason else None
    for flag, reason in (
        ("is_loopback", "a loopback address"),
        ("is_link_local", "a link-local address"),
        ("is_multicast", "a multicast address"),
        ("is_unspecified", "an unspecified address"),
        ("is_private", "a private address"),
        ("is_reserved", "a reserved address"),
    ):
        if getattr(address, flag):
            return reason
    if not address.is_global:
        return "a non-public address"  # 100.64.0.0/10 (carrier-grade NAT) and the like
    return None


def _embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


class _Refused(Exception):
    """A hop that may not be fetched; `code` says why (PERMISSION_DENIED, VALIDATION_ERROR...)."""

    def __init__(self, code: ToolErrorCode, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.retryable = retryable


class HttpGet(IToolExecutor):
    """GET a URL; the body is read up to `max_bytes` and cut there (`truncated: true`).

    Only public addresses are fetched unless `allow_private=True`; `allowed_hosts`
    limits the hosts every hop may name, and those hosts may be local.
    """

    def __init__(
        self,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_bytes: int = DEFAULT_MAX_BYTES,
        allowed_hosts: Collection[str] | None = None,
        allow_private: bool = False,
        headers: dict[str, str] | None = None,
        max_redirects: int = 5,
    ) -> None:
        if timeout_s <= 0 or max_bytes < 1 or max_redirects < 0:
            raise ConfigurationError(
                "HttpGet needs timeout_s > 0, max_bytes >= 1 and max_redirects >= 0"
            )
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        self.allowed_hosts = (
            frozenset(_normal_host(h) for h in allowed_hosts) if allowed_hosts else None
        )
        self.allow_private = allow_private
        self.headers = {"user-agent": "art-http-get/0.1", **(headers or {})}
        self.max_redirects = max_redirects
        self._tls: ssl.SSLContext | None = None
        self._tls_lock = threading.Lock()
        self.schema = ToolSchema(
            name="http_get",
            description=(
                "Fetches a web page or API endpoint with an HTTP GET request and returns the "
                "response. Use it when the answer needs the current content of a specific "
                "URL. Returns an object with url (after redirects), status_code, headers "
                "(content-type and a few others), text (the body, cut at "
                f"{max_bytes:,} bytes) and truncated (true when the body was cut). "
                "HTTP errors (4xx/5xx) come back as errors with the response attached."
                + ("" if allow_private else " Local and private network addresses are refused.")
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
        # The caller's headers, without Host: the tool sets it to the hop's host.
        headers = {
            **self.headers,
            **{k: v for k, v in input.get("headers", {}).items() if k.lower() != "host"},
        }
        hops = [url]
        try:
            async with asyncio.timeout(self.timeout_s):
                response = await self._follow(hops, headers)
        except _Refused as refused:
            return failure(
                self,
                context,
                refused.code,
                str(refused),
                retryable=refused.retryable,
                **_where(hops),
            )
        except TimeoutError:
            return failure(
                self,
                context,
                ToolErrorCode.TIMEOUT,
                f"GET {hops[-1]} did not finish within {self.timeout_s:g} s",
                retryable=True,
                **_where(hops),
            )
        except httpx.TimeoutException as exc:
            return failure(
                self,
                context,
                ToolErrorCode.TIMEOUT,
                f"GET {hops[-1]} timed out: {exc}",
                retryable=True,
                **_where(hops),
            )
        except httpx.InvalidURL as exc:
            return failure(self, context, ToolErrorCode.VALIDATION_ERROR, f"invalid URL: {exc}")
        except httpx.TransportError as exc:
            return failure(
                self,
                context,
                ToolErrorCode.IO_ERROR,
                f"GET {hops[-1]} failed: {type(exc).__name__}: {exc}",
                retryable=True,
                **_where(hops),
            )

        if response["status_code"] >= 400:
            code, retryable = _error_code(response["status_code"])
            return failure(
                self,
                context,
                code,
                f"GET {hops[-1]} returned HTTP {response['status_code']} {response['reason']}",
                retryable=retryable,
                output=response,
                **_where(hops),
            )
        return success(self, context, response, **_where(hops))

    async def _follow(self, hops: list[str], headers: dict[str, str]) -> _Page:
        """Fetch `hops[-1]`, appending each redirect's target to `hops` and checking it."""
        tls = self._tls if self._tls is not None else await asyncio.to_thread(self._build_tls)
        async with httpx.AsyncClient(
            timeout=self.timeout_s, follow_redirects=False, verify=tls
        ) as client:
            while True:
                url = httpx.URL(hops[-1])
                address = await self._checked_address(url)
                request = client.build_request(
                    "GET",
                    url.copy_with(host=str(address)),
                    headers={**headers, "host": _host_header(url)},
                    # TLS checks the certificate against the name, not the address.
                    extensions={"sni_hostname": url.host} if url.scheme == "https" else {},
                )
                response = await client.send(request, stream=True)
                try:
                    location = response.headers.get("location")
                    if response.status_code not in _REDIRECTS or location is None:
                        return await self._read(str(url), response)
                finally:
                    await response.aclose()
                if len(hops) > self.max_redirects:
                    raise _Refused(
                        ToolErrorCode.IO_ERROR,
                        f"GET {hops[0]} was redirected more than {self.max_redirects} times",
                    )
                hops.append(str(url.join(location)))

    def _build_tls(self) -> ssl.SSLContext:
        """The TLS settings every call shares, built once (loading the CA bundle takes
        tens of milliseconds, so it runs in a worker thread, not on the event loop)."""
        with self._tls_lock:
            if self._tls is None:
                self._tls = httpx.create_ssl_context()
            return self._tls

    async def _checked_address(self, url: httpx.URL) -> IPAddress:
        """The address to connect to for `url`, after checking the URL and every address
        its host resolves to."""
        if url.scheme not in ("http", "https"):
            raise _Refused(
                ToolErrorCode.VALIDATION_ERROR, f"only http and https URLs are fetched, not {url}"
            )
        host = _normal_host(url.host)
        if not host:
            raise _Refused(ToolErrorCode.VALIDATION_ERROR, f"no host in {str(url)!r}")
        if self.allowed_hosts is not None and host not in self.allowed_hosts:
            allowed = ", ".join(sorted(self.allowed_hosts))
            raise _Refused(
                ToolErrorCode.PERMISSION_DENIED,
                f"host {host!r} is not allowed (allowed: {allowed})",
            )
        addresses = await _resolve(url)
        if not (self.allow_private or self.allowed_hosts is not None):
            for address in addresses:
                reason = address_refusal(address)
                if reason is not None:
                    shown = "" if host == str(address) else f" resolves to {address}, which is"
                    raise _Refused(
                        ToolErrorCode.PERMISSION_DENIED,
                        f"host {host!r}{shown} {reason}: http_get only fetches public "
                        "addresses (HttpGet(allow_private=True), or the host in "
                        "allowed_hosts, allows local ones)",
                    )
        return addresses[0]

    async def _read(self, url: str, response: httpx.Response) -> _Page:
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
            "url": url,
            "status_code": response.status_code,
            "reason": response.reason_phrase,
            "headers": {k: response.headers[k] for k in KEPT_HEADERS if k in response.headers},
            "text": text,
            "truncated": truncated,
        }


async def _resolve(url: httpx.URL) -> list[IPAddress]:
    """Every address the URL's host resolves to (the host itself when it is an address)."""
    host = url.raw_host.decode("ascii")
    try:
        return [ipaddress.ip_address(host.strip("[]"))]
    except ValueError:
        pass
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise _Refused(
            ToolErrorCode.IO_ERROR, f"cannot resolve host {url.host!r}: {exc}", retryable=True
        ) from None
    found: dict[IPAddress, None] = {}
    for _family, _type, _proto, _name, sockaddr in infos:
        found[ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])] = None
    if not found:
        raise _Refused(ToolErrorCode.IO_ERROR, f"host {url.host!r} has no address", retryable=True)
    return list(found)


def _normal_host(host: str) -> str:
    return host.strip("[]").rstrip(".").lower()


def _host_header(url: httpx.URL) -> str:
    host = url.raw_host.decode("ascii")
    if ":" in host:
        host = f"[{host}]"
    return host if url.port is None else f"{host}:{url.port}"


class _Page(TypedDict):
    """A fetched page: the tool's output."""

    url: str
    status_code: int
    reason: str
    headers: dict[str, str]
    text: str
    truncated: bool


class _Source(TypedDict):
    source_name: str
    url: str


class _Where(TypedDict, total=False):
    """Result metadata: where the data came from."""

    sources: Required[list[_Source]]
    redirects: list[str]


def _where(hops: list[str]) -> _Where:
    """Result metadata: the URL finally fetched as the source, and the redirects taken."""
    final = hops[-1]
    where: _Where = {"sources": [{"source_name": final, "url": final}]}
    if len(hops) > 1:
        where["redirects"] = list(hops)
    return where


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
