"""FakeProvider: an HTTP model provider on 127.0.0.1 that answers from a queue of replies
and faults and logs every request.

It speaks the OpenAI chat completions API (any path ending in `/chat/completions`, so
`openai/`, `azure/`, `hosted_vllm/` and `litellm_proxy/` models reach it), Anthropic's
`/v1/messages` and Ollama's `/api/chat`, streamed or not. litellm's real client code
(request building, httpx, SSE parsing, error mapping) runs against it, so retries,
timeouts, error codes and streaming are tested over real HTTP. Standard library only.
"""

from __future__ import annotations

import contextlib
import json
import re
import select
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from art.core.json import JsonObject
from art.testing._serving import ServerThread

__all__ = ["Answer", "FakeProvider", "HTTPStatus", "Hang", "Malformed", "ProviderRequest"]

_WORD = re.compile(r"\S+\s*|\s+")
# Anthropic's stop reasons for the OpenAI finish reasons a test names.
_ANTHROPIC_STOP = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}
_ANTHROPIC_ERRORS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
    529: "overloaded_error",
}


@dataclass(frozen=True)
class Answer:
    """A model reply. Streamed word by word when the request asks for a stream.

    `finish_reason=None` ends the reply (or stream) without a finish reason;
    `chunk_delay_s` waits before each streamed chunk; `cut_after_chunks` drops the
    connection after that many chunks, mid-body, as a failing network or server does;
    `stall_after_chunks` sends nothing more after that many (the connection stays open).
    `reasoning` is the model's thinking, sent before the reply as the OpenAI-compatible
    API's `reasoning_content` (as DeepSeek and vLLM send it).
    """

    content: str = "ok"
    finish_reason: str | None = "stop"
    chunk_delay_s: float = 0.0
    cut_after_chunks: int | None = None
    stall_after_chunks: int | None = None
    reasoning: str | None = None


@dataclass(frozen=True)
class HTTPStatus:
    """An error response: `status` with `headers` (e.g. `Retry-After`) and a JSON error
    body in the API's own shape, or `body` as given."""

    status: int
    headers: Mapping[str, str] = field(default_factory=dict)
    message: str = "fake provider error"
    body: str | None = None


@dataclass(frozen=True)
class Hang:
    """Send nothing for `seconds` (the connection stays open), then answer `then`."""

    seconds: float
    then: Answer = field(default_factory=Answer)


@dataclass(frozen=True)
class Malformed:
    """A response whose body the client cannot parse."""

    body: str = "this is not JSON"
    status: int = 200
    content_type: str = "application/json"


Reply = Answer | HTTPStatus | Hang | Malformed


@dataclass
class ProviderRequest:
    """One request the provider received."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    received_at: float
    # When the client closed the connection before the reply was complete (a cancelled
    # call, a client-side timeout): time.monotonic(), or None while it stays.
    dropped_at: float | None = None

    @property
    def api(self) -> str:
        """`openai`, `anthropic`, `ollama` or `other`, from the path."""
        return _api_of(urlsplit(self.path).path)


def _api_of(path: str) -> str:
    if path.endswith("/chat/completions"):
        return "openai"
    if path.endswith("/messages"):
        return "anthropic"
    if path.endswith("/api/chat"):
        return "ollama"
    return "other"


def _words(text: str) -> list[str]:
    return _WORD.findall(text) or [""]


def _prompt_words(body: object) -> int:
    messages = body.get("messages") if isinstance(body, dict) else None
    count = 0
    for message in messages or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            content = " ".join(
                str(part.get("text", "")) for part in content if isinstance(part, dict)
            )
        count += len(str(content or "").split())
    return count


class FakeProvider:
    """An OpenAI-, Anthropic- and Ollama-compatible server on 127.0.0.1 (a context manager).

    Replies are taken from a queue (`queue(...)`, or the positional arguments), in the
    order requests arrive, whatever the API; when the queue is empty every request gets
    `default`. `requests` logs every request received. `api_key`, when set, is required
    (a 401 otherwise, whose message echoes the end of the key that was sent, as real
    providers do); `rejects_response_format` answers 400 to any request carrying a
    `response_format`.
    """

    def __init__(
        self,
        *replies: Reply,
        default: Reply | None = None,
        model: str | None = None,
        api_key: str | None = None,
        rejects_response_format: bool = False,
    ) -> None:
        self.default: Reply = default if default is not None else Answer()
        self.model = model
        self.api_key = api_key
        self.rejects_response_format = rejects_response_format
        self.requests: list[ProviderRequest] = []
        self._queue: deque[Reply] = deque(replies)
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._serving: ServerThread[ThreadingHTTPServer] | None = None
        # Open client connections, shut on close (a keep-alive one would outlive the server).
        self._connections: set[socket.socket] = set()

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> FakeProvider:
        """Listen on a free port of 127.0.0.1 (done by `with` too)."""
        if self._serving is not None:
            return self
        provider = self

        class Handler(_Handler):
            owner = provider

        self._closing.clear()
        self._serving = ServerThread(ThreadingHTTPServer(("127.0.0.1", 0), Handler)).start()
        return self

    def close(self) -> None:
        """Stop the server; requests still hanging are released."""
        self._closing.set()
        serving, self._serving = self._serving, None
        if serving is not None:
            serving.close()
        with self._lock:
            connections, self._connections = self._connections, set()
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    def __enter__(self) -> FakeProvider:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def url(self) -> str:
        """`http://127.0.0.1:<port>`: the `api_base` of Anthropic and Ollama models."""
        if self._serving is None:
            raise RuntimeError("the FakeProvider is not started: use `with` or start()")
        return f"http://127.0.0.1:{self._serving.server.server_port}"

    @property
    def openai_base(self) -> str:
        """`<url>/v1`: the `api_base` of OpenAI-compatible models."""
        return f"{self.url}/v1"

    # -- script --------------------------------------------------------------------------

    def queue(self, *replies: Reply) -> None:
        """Answer the next requests with `replies`, in order."""
        with self._lock:
            self._queue.extend(replies)

    @property
    def dropped(self) -> list[ProviderRequest]:
        """The requests whose client hung up before their reply was complete."""
        return [request for request in self.requests if request.dropped_at is not None]

    def requests_to(self, api: str) -> list[ProviderRequest]:
        """The logged requests of one API (`openai`, `anthropic` or `ollama`)."""
        return [request for request in self.requests if request.api == api]

    def _take(self, request: ProviderRequest) -> Reply | None:
        """Log `request`; the reply for it (None for a path of no API: it takes none)."""
        with self._lock:
            self.requests.append(request)
            if request.api == "other":
                return None
            return self._queue.popleft() if self._queue else self.default

    def _wait(self, seconds: float) -> bool:
        """Sleep; False when the server is closing (the caller stops answering)."""
        return not self._closing.wait(seconds) if seconds > 0 else not self._closing.is_set()


#: How often a reply that waits (a Hang, a slow or stalled stream) looks for a client
#: that hung up.
_DROP_POLL_S = 0.01


class _Handler(BaseHTTPRequestHandler):
    owner: FakeProvider
    protocol_version = "HTTP/1.1"
    # Headers, body and each streamed chunk are separate writes: with Nagle's algorithm
    # each would wait for the client's delayed ACK of the one before (40 ms a request).
    disable_nagle_algorithm = True

    def setup(self) -> None:
        super().setup()
        with self.owner._lock:
            self.owner._connections.add(self.connection)

    def finish(self) -> None:
        with self.owner._lock:
            self.owner._connections.discard(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    def log_message(self, format: str, *args: object) -> None:
        pass  # tests read `requests`; stderr stays quiet

    def do_GET(self) -> None:
        self._send_json(200, {"object": "list", "data": []})

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        path = urlsplit(self.path).path
        request = ProviderRequest(
            method="POST",
            path=self.path,
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
            received_at=time.monotonic(),
        )
        reply = self.owner._take(request)
        self._request = request
        try:
            if reply is None:  # e.g. Ollama's /api/show, which litellm asks for model info
                self._send_json(404, {"error": f"no route {path}"})
                return
            self._answer(_api_of(path), request, reply)
        except (BrokenPipeError, ConnectionResetError):
            self._dropped()  # the client gave up (a timeout, a cancel): nothing to do

    def _wait(self, seconds: float) -> bool:
        """Wait `seconds` for the reply's next part; False when the server is closing or
        the client hung up (then noted on the request): the caller stops answering."""
        deadline = time.monotonic() + seconds
        while True:
            if self._client_gone():
                self._dropped()
                return False
            left = deadline - time.monotonic()
            if left <= 0:
                return self.owner._wait(0)
            if not self.owner._wait(min(left, _DROP_POLL_S)):
                self.close_connection = True
                return False

    def _client_gone(self) -> bool:
        """Whether the client closed its end (it sends nothing while it waits for us)."""
        connection = self.connection
        try:
            readable, _, _ = select.select([connection], [], [], 0)
            return bool(readable) and connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    def _dropped(self) -> None:
        self.close_connection = True
        request = getattr(self, "_request", None)
        if request is not None and request.dropped_at is None:
            request.dropped_at = time.monotonic()

    # -- replies -------------------------------------------------------------------------

    def _answer(self, api: str, request: ProviderRequest, reply: Reply) -> None:
        owner = self.owner
        if owner.api_key is not None and not self._authorised(request):
            self._send_error(api, HTTPStatus(401, message=self._bad_key_message(request)))
            return
        body = request.body if isinstance(request.body, dict) else {}
        if owner.rejects_response_format and body.get("response_format") is not None:
            message = "response_format is not supported by this server"
            self._send_error(api, HTTPStatus(400, message=message))
            return
        if isinstance(reply, Hang):
            if not self._wait(reply.seconds):
                self.close_connection = True
                return
            reply = reply.then
        if isinstance(reply, HTTPStatus):
            self._send_error(api, reply)
        elif isinstance(reply, Malformed):
            self._send_raw(reply.status, reply.body.encode(), reply.content_type)
        elif body.get("stream") or (api == "ollama" and body.get("stream") is not False):
            self._stream(api, body, reply)
        else:
            self._send_json(200, _complete(api, self._model(body), body, reply))

    def _model(self, body: Mapping[str, object]) -> str:
        return self.owner.model or str(body.get("model") or "fake-model")

    def _authorised(self, request: ProviderRequest) -> bool:
        key = self.owner.api_key
        headers = request.headers
        sent = headers.get("authorization", "").removeprefix("Bearer ").strip()
        return key in (sent, headers.get("x-api-key"), headers.get("api-key"))

    @staticmethod
    def _bad_key_message(request: ProviderRequest) -> str:
        headers = request.headers
        sent = (
            headers.get("authorization", "").removeprefix("Bearer ").strip()
            or headers.get("x-api-key")
            or headers.get("api-key")
            or ""
        )
        # Providers echo the key's last characters; art must mask them.
        return f"Incorrect API key provided: ...{sent[-20:]}"

    def _send_error(self, api: str, status: HTTPStatus) -> None:
        if status.body is not None:
            data = status.body.encode()
        elif api == "anthropic":
            kind = _ANTHROPIC_ERRORS.get(status.status, "api_error")
            data = json.dumps(
                {"type": "error", "error": {"type": kind, "message": status.message}}
            ).encode()
        elif api == "ollama":
            data = json.dumps({"error": status.message}).encode()
        else:
            data = json.dumps(
                {"error": {"message": status.message, "type": "fake_error", "code": None}}
            ).encode()
        self._send_raw(status.status, data, "application/json", status.headers)

    def _send_json(self, status: int, payload: object) -> None:
        self._send_raw(status, json.dumps(payload).encode(), "application/json")

    def _send_raw(
        self,
        status: int,
        data: bytes,
        content_type: str,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _stream(self, api: str, body: Mapping[str, object], reply: Answer) -> None:
        self.send_response(200)
        ndjson = api == "ollama"
        self.send_header("content-type", "application/x-ndjson" if ndjson else "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        events = _stream_events(api, self._model(body), body, reply)
        sent = 0
        for is_content, payload in events:
            if is_content:
                if reply.cut_after_chunks is not None and sent >= reply.cut_after_chunks:
                    self.close_connection = True  # no terminating chunk: the body is cut
                    return
                if reply.stall_after_chunks is not None and sent >= reply.stall_after_chunks:
                    while self._wait(3600):  # silent until the server closes or the client goes
                        pass
                    self.close_connection = True
                    return
                if not self._wait(reply.chunk_delay_s):
                    self.close_connection = True
                    return
                sent += 1
            self._write_chunk(payload.encode())
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


# -- wire formats ------------------------------------------------------------------------


def _usage(body: Mapping[str, object], content: str) -> tuple[int, int]:
    return _prompt_words(body), len(content.split())


def _complete(api: str, model: str, body: Mapping[str, object], reply: Answer) -> JsonObject:
    prompt, completion = _usage(body, reply.content)
    if api == "anthropic":
        return {
            "id": f"msg_{uuid.uuid4().hex[:12]}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [{"type": "text", "text": reply.content}],
            "stop_reason": _anthropic_stop(reply.finish_reason),
            "stop_sequence": None,
            "usage": {"input_tokens": prompt, "output_tokens": completion},
        }
    if api == "ollama":
        return {
            "model": model,
            "created_at": "2024-01-01T00:00:00Z",
            "message": {"role": "assistant", "content": reply.content},
            "done": True,
            "done_reason": reply.finish_reason,
            "prompt_eval_count": prompt,
            "eval_count": completion,
        }
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": reply.content,
                    **({"reasoning_content": reply.reasoning} if reply.reasoning else {}),
                },
                "finish_reason": reply.finish_reason,
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }


def _anthropic_stop(finish_reason: str | None) -> str | None:
    if finish_reason is None:
        return None
    return _ANTHROPIC_STOP.get(finish_reason, finish_reason)


def _sse(data: object, event: str | None = None) -> str:
    prefix = f"event: {event}\n" if event else ""
    text = data if isinstance(data, str) else json.dumps(data)
    return f"{prefix}data: {text}\n\n"


def _stream_events(
    api: str, model: str, body: Mapping[str, object], reply: Answer
) -> Iterator[tuple[bool, str]]:
    """The stream's pieces, each marked True when it carries content."""
    prompt, completion = _usage(body, reply.content)
    words = _words(reply.content)
    if api == "anthropic":
        start = {
            "type": "message_start",
            "message": {
                "id": f"msg_{uuid.uuid4().hex[:12]}",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": prompt, "output_tokens": 0},
            },
        }
        yield False, _sse(start, "message_start")
        block = {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "text", "text": ""},
        }
        yield False, _sse(block, "content_block_start")
        for word in words:
            delta = {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": word},
            }
            yield True, _sse(delta, "content_block_delta")
        yield False, _sse({"type": "content_block_stop", "index": 0}, "content_block_stop")
        end = {
            "type": "message_delta",
            "delta": {"stop_reason": _anthropic_stop(reply.finish_reason), "stop_sequence": None},
            "usage": {"output_tokens": completion},
        }
        yield False, _sse(end, "message_delta")
        yield False, _sse({"type": "message_stop"}, "message_stop")
        return
    if api == "ollama":
        for word in words:
            line = {
                "model": model,
                "created_at": "2024-01-01T00:00:00Z",
                "message": {"role": "assistant", "content": word},
                "done": False,
            }
            yield True, json.dumps(line) + "\n"
        last = {
            "model": model,
            "created_at": "2024-01-01T00:00:00Z",
            "message": {"role": "assistant", "content": ""},
            "done": True,
            "done_reason": reply.finish_reason,
            "prompt_eval_count": prompt,
            "eval_count": completion,
        }
        yield False, json.dumps(last) + "\n"
        return
    ident = f"chatcmpl-{uuid.uuid4().hex[:12]}"
    created = int(time.time())

    def chunk(delta: Mapping[str, object], finish_reason: str | None, **extra: object) -> str:
        choice = {"index": 0, "delta": delta, "finish_reason": finish_reason}
        payload = {
            "id": ident,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [choice],
            **extra,
        }
        return _sse(payload)

    thoughts = _words(reply.reasoning) if reply.reasoning else []
    for index, word in enumerate(thoughts):
        yield (
            True,
            chunk(
                {"reasoning_content": word, **({"role": "assistant"} if index == 0 else {})}, None
            ),
        )
    for index, word in enumerate(words):
        first = index == 0 and not thoughts
        delta = {"content": word, **({"role": "assistant"} if first else {})}
        yield True, chunk(delta, None)
    if reply.finish_reason is not None:
        yield False, chunk({}, reply.finish_reason)
    options = body.get("stream_options") or {}
    if isinstance(options, dict) and options.get("include_usage"):
        usage = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
        payload = {
            "id": ident,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [],
            "usage": usage,
        }
        yield False, _sse(payload)
    yield False, _sse("[DONE]")
