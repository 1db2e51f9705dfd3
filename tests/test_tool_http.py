import asyncio
import contextlib
import socket
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
import trustme

from art.errors import ConfigurationError
from art.testing._serving import ServerThread  # private: FakeProvider's server loop; unexported
from art.tooling.contract import ExecutionContext
from art.tooling.invocation import invoke_tool
from art.tooling.registry import ToolRegistry
from art.tools import HttpGet


class Handler(BaseHTTPRequestHandler):
    seen: list[tuple[str, str]] = []  # (path, Host header) of every request

    def log_message(self, format, *args):  # keep test output quiet
        pass

    def _send(self, status: int, body: bytes, content_type: str = "text/plain; charset=utf-8"):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Internal", "not kept")
        self.end_headers()
        # The client may stop reading (size limit, timeout): that is expected.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.wfile.write(body)

    def do_GET(self):
        Handler.seen.append((self.path, self.headers.get("Host", "")))
        if self.path.startswith("/to?"):  # /to?<url>: a redirect to <url>
            self.send_response(302)
            self.send_header("Location", self.path[len("/to?") :])
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif self.path == "/secret":
            self._send(200, b"internal secret")
        elif self.path == "/echo-host":
            self._send(200, self.headers.get("Host", "").encode())
        elif self.path == "/hello":
            self._send(200, "héllo".encode())
        elif self.path == "/echo-header":
            self._send(200, self.headers.get("X-Test", "").encode())
        elif self.path == "/json":
            self._send(200, b'{"a": 1}', "application/json")
        elif self.path == "/big":
            self._send(200, b"x" * 50_000)
        elif self.path == "/slow":
            time.sleep(1.0)
            self._send(200, b"late")
        elif self.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", "/hello")
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif self.path == "/loop":
            self.send_response(302)
            self.send_header("Location", "/loop")
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif self.path == "/busy":
            self._send(503, b"try later")
        elif self.path == "/limited":
            self._send(429, b"slow down")
        elif self.path == "/forbidden":
            self._send(403, b"no")
        else:
            self._send(404, b"nothing here")


@pytest.fixture(scope="module")
def server():
    with ServerThread(ThreadingHTTPServer(("127.0.0.1", 0), Handler)) as serving:
        yield f"http://127.0.0.1:{serving.server.server_port}"


@pytest.fixture(scope="module")
def tls_server():
    """An HTTPS server for the name `localhost`, its certificate from a test CA; yields
    the base URL and that CA."""
    ca = trustme.CA()
    family, *_, address = socket.getaddrinfo("localhost", 0, type=socket.SOCK_STREAM)[0]
    server_class = type("Server", (ThreadingHTTPServer,), {"address_family": family})
    http = server_class(address[:2], Handler)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost").configure_cert(context)
    http.socket = context.wrap_socket(http.socket, server_side=True)
    with ServerThread(http) as serving:
        yield f"https://localhost:{serving.server.server_port}", ca


def make_context() -> ExecutionContext:
    return ExecutionContext(thread_id="t1", trace_id="0" * 32, call_id="c1")


async def get(url: str, tool: HttpGet | None = None, **args):
    tool = tool or HttpGet(timeout_s=5, allow_private=True)
    return await invoke_tool(
        tool, {"url": url, **args}, make_context(), registry=ToolRegistry([tool])
    )


async def test_get_returns_status_headers_and_text(server):
    url = f"{server}/hello"
    result = await get(url)
    assert result.status == "success", result.error
    assert result.output["status_code"] == 200
    assert result.output["text"] == "héllo"
    assert result.output["url"] == url
    assert result.output["truncated"] is False
    assert result.output["headers"] == {
        "content-type": "text/plain; charset=utf-8",
        "content-length": "6",
    }
    assert result.metadata["sources"] == [{"source_name": url, "url": url}]


async def test_request_headers_are_sent(server):
    result = await get(f"{server}/echo-header", headers={"X-Test": "hi"})
    assert result.output["text"] == "hi"


async def test_redirects_are_followed_and_sources_name_the_final_url(server):
    result = await get(f"{server}/redirect")
    assert result.output["url"] == f"{server}/hello"
    assert result.output["text"] == "héllo"
    final = f"{server}/hello"
    assert result.metadata["sources"] == [{"source_name": final, "url": final}]
    assert result.metadata["redirects"] == [f"{server}/redirect", final]
    loop = await get(f"{server}/loop", HttpGet(max_redirects=2, allow_private=True))
    assert loop.metadata["error_code"] == "IO_ERROR"
    assert "redirected more than 2 times" in loop.error


async def test_response_size_limit_cuts_the_body(server):
    result = await get(f"{server}/big", HttpGet(max_bytes=1000, allow_private=True))
    assert result.status == "success"
    assert result.output["text"] == "x" * 1000
    assert result.output["truncated"] is True


async def test_timeout(server):
    started = time.perf_counter()
    result = await get(f"{server}/slow", HttpGet(timeout_s=0.2, allow_private=True))
    assert time.perf_counter() - started < 0.9
    assert result.metadata["error_code"] == "TIMEOUT"
    assert result.retryable is True


@pytest.mark.parametrize(
    ("path", "code", "retryable"),
    [
        ("/missing", "NOT_FOUND", False),
        ("/forbidden", "PERMISSION_DENIED", False),
        ("/limited", "RATE_LIMITED", True),
        ("/busy", "IO_ERROR", True),
    ],
)
async def test_http_errors_keep_the_response(server, path, code, retryable):
    result = await get(f"{server}{path}")
    assert result.status == "error"
    assert result.metadata["error_code"] == code
    assert result.retryable is retryable
    assert f"returned HTTP {result.output['status_code']}" in result.error
    assert result.output["text"]
    assert result.metadata["sources"][0]["url"] == f"{server}{path}"


async def test_connection_refused_is_a_retryable_io_error():
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = await get(f"http://127.0.0.1:{port}/")
    assert result.metadata["error_code"] == "IO_ERROR"
    assert result.retryable is True


async def test_https_goes_to_the_checked_address_and_checks_the_certificate_by_name(
    tls_server, tmp_path, monkeypatch
):
    url, ca = tls_server
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))  # httpx trusts it
    result = await get(f"{url}/echo-host", HttpGet(timeout_s=5, allowed_hosts=["localhost"]))
    assert result.status == "success", result.error
    assert result.output["text"] == url.removeprefix("https://")


async def test_https_with_an_untrusted_certificate_is_an_io_error(tls_server, monkeypatch):
    url, _ca = tls_server
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    result = await get(f"{url}/hello", HttpGet(timeout_s=5, allowed_hosts=["localhost"]))
    assert result.metadata["error_code"] == "IO_ERROR"
    assert "CERTIFICATE_VERIFY_FAILED" in result.error


async def test_tls_settings_are_built_once_per_tool_off_the_event_loop(server, monkeypatch):
    built_on: list[int] = []
    create = httpx.create_ssl_context

    def counted(*args, **kwargs):
        built_on.append(threading.get_ident())
        return create(*args, **kwargs)

    monkeypatch.setattr(httpx, "create_ssl_context", counted)
    tool = HttpGet(timeout_s=5, allow_private=True)
    results = await asyncio.gather(*(get(f"{server}/hello", tool) for _ in range(5)))
    results.append(await get(f"{server}/hello", tool))
    assert [r.status for r in results] == ["success"] * 6
    assert len(built_on) == 1
    assert built_on[0] != threading.get_ident()  # not the event loop's thread


async def test_allowed_hosts(server):
    tool = HttpGet(allowed_hosts=["example.org"])
    result = await get(f"{server}/hello", tool)
    assert result.metadata["error_code"] == "PERMISSION_DENIED"
    assert "'127.0.0.1' is not allowed" in result.error
    assert (await get(f"{server}/hello", HttpGet(allowed_hosts=["127.0.0.1"]))).status == "success"


@pytest.mark.parametrize("url", ["ftp://example.org/file", "file:///etc/passwd", "example.org"])
async def test_only_http_urls_are_accepted(url):
    result = await get(url)
    assert result.metadata["error_code"] == "VALIDATION_ERROR"


def test_configuration_is_checked():
    with pytest.raises(ConfigurationError):
        HttpGet(timeout_s=0)
    assert "2,000,000 bytes" in HttpGet().schema.description


# -- server-side request forgery -------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "reason"),
    [
        ("127.0.0.1", "a loopback address"),
        ("localhost", "which is a loopback address"),  # a name: resolved, then checked
        ("2130706433", "resolves to 127.0.0.1"),  # 127.0.0.1 as one number
        ("0x7f000001", "resolves to 127.0.0.1"),
        ("127.1", "resolves to 127.0.0.1"),
        ("[::1]", "a loopback address"),
        ("[::ffff:127.0.0.1]", "a loopback address inside an IPv6 address"),
        ("169.254.169.254", "a link-local address"),  # cloud metadata
        ("10.1.2.3", "a private address"),
        ("192.168.0.1", "a private address"),
        ("172.16.0.1", "a private address"),
        ("100.64.0.1", "a non-public address"),
        ("0.0.0.0", "an unspecified address"),
        ("224.0.0.1", "a multicast address"),
        ("[fd00::1]", "a private address"),
        ("[fe80::1]", "a link-local address"),
    ],
)
async def test_local_and_private_addresses_are_refused_by_default(server, host, reason):
    port = server.rsplit(":", 1)[1]
    Handler.seen.clear()
    result = await get(f"http://{host}:{port}/secret", HttpGet(timeout_s=5))
    assert result.status == "error"
    assert result.metadata["error_code"] == "PERMISSION_DENIED"
    assert reason in result.error
    assert "allow_private=True" in result.error
    assert result.output is None
    assert Handler.seen == []  # nothing was sent


async def test_allow_private_opens_local_addresses(server):
    assert (await get(f"{server}/secret", HttpGet(timeout_s=5))).status == "error"
    opened = await get(f"{server}/secret", HttpGet(timeout_s=5, allow_private=True))
    assert opened.output["text"] == "internal secret"


async def test_a_host_in_allowed_hosts_may_be_local(server):
    result = await get(f"{server}/secret", HttpGet(allowed_hosts=["127.0.0.1"]))
    assert result.output["text"] == "internal secret"


async def test_every_redirect_hop_is_checked(server):
    port = server.rsplit(":", 1)[1]
    Handler.seen.clear()
    tool = HttpGet(allowed_hosts=["127.0.0.1"])
    # The first hop is allowed; it redirects to a host that is not.
    result = await get(f"{server}/to?http://localhost:{port}/secret", tool)
    assert result.metadata["error_code"] == "PERMISSION_DENIED"
    assert "'localhost' is not allowed" in result.error
    assert [path for path, _ in Handler.seen] == [f"/to?http://localhost:{port}/secret"]
    assert result.metadata["sources"][0]["url"] == f"http://localhost:{port}/secret"
    # A redirect may not leave http(s) either.
    scheme = await get(f"{server}/to?file:///etc/passwd", tool)
    assert scheme.metadata["error_code"] == "VALIDATION_ERROR"
    # A hop that is allowed is followed, and the result names it.
    fine = await get(f"{server}/to?{server}/hello", tool)
    assert fine.output["text"] == "héllo"
    hello = f"{server}/hello"
    assert fine.metadata["sources"] == [{"source_name": hello, "url": hello}]


async def test_the_request_goes_to_the_checked_address_with_the_name_as_host(server):
    port = server.rsplit(":", 1)[1]
    result = await get(f"http://localhost:{port}/echo-host", HttpGet(allow_private=True))
    assert result.output["text"] == f"localhost:{port}"
    spoofed = await get(
        f"{server}/echo-host", HttpGet(allow_private=True), headers={"Host": "internal"}
    )
    assert spoofed.output["text"] == f"127.0.0.1:{port}"


@pytest.mark.parametrize(
    ("address", "refused"),
    [
        ("8.8.8.8", None),
        ("2606:4700::1111", None),
        ("2002:7f00:1::", "a loopback address inside an IPv6 address"),  # 6to4 of 127.0.0.1
        ("64:ff9b::a00:1", "a private address inside an IPv6 address"),  # NAT64 of 10.0.0.1
        ("2001:0:4136:e378:8000:63bf:80ff:fffe", "a loopback address inside an IPv6 address"),
        ("255.255.255.255", "a private address"),
    ],
)
def test_address_refusal(address, refused):
    import ipaddress

    from art.tools.http import address_refusal

    assert address_refusal(ipaddress.ip_address(address)) == refused
