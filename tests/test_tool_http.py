import contextlib
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from art.errors import ConfigurationError
from art.invocation import invoke_tool
from art.registry import ToolRegistry
from art.tooling import ExecutionContext
from art.tools import HttpGet


class Handler(BaseHTTPRequestHandler):
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
        if self.path == "/hello":
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
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()
    thread.join(5)


def make_context() -> ExecutionContext:
    return ExecutionContext(thread_id="t1", trace_id="0" * 32, call_id="c1")


async def get(url: str, tool: HttpGet | None = None, **args):
    tool = tool or HttpGet(timeout_s=5)
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


async def test_redirects_are_followed(server):
    result = await get(f"{server}/redirect")
    assert result.output["url"] == f"{server}/hello"
    assert result.output["text"] == "héllo"
    loop = await get(f"{server}/loop", HttpGet(max_redirects=2))
    assert loop.metadata["error_code"] == "IO_ERROR"
    assert "redirected more than 2 times" in loop.error


async def test_response_size_limit_cuts_the_body(server):
    result = await get(f"{server}/big", HttpGet(max_bytes=1000))
    assert result.status == "success"
    assert result.output["text"] == "x" * 1000
    assert result.output["truncated"] is True


async def test_timeout(server):
    started = time.perf_counter()
    result = await get(f"{server}/slow", HttpGet(timeout_s=0.2))
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
