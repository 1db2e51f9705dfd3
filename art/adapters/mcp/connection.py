"""One MCP server's session: started on first use, restarted once after a crash or when it
stops answering, stopped cleanly. Everything here runs on the MCP client's own event loop
(see `client.py`).

The SDK's `Client` is an async context manager whose task groups must be left by the task
that entered them, so each session lives in a holder task that enters it, hands the
connected client over, and waits to be told to stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TextIO, TypeVar, cast

from art.adapters.mcp.config import MCPServerConfig, Transport
from art.adapters.mcp.sampling import SamplingLimit
from art.core.log import get_logger
from art.errors import ArtError, ToolErrorCode

if TYPE_CHECKING:
    import mcp_types
    from mcp import Client
    from mcp.client.context import ClientRequestContext

__all__ = ["MCPCallError", "MCPServerError", "ServerConnection"]

log = get_logger(__name__)

#: A server that failed to start, or to restart after a crash, is not tried again sooner
#: than this: until then its calls fail at once with the reason (each run would otherwise
#: wait out a hanging server's start, and a crashing one would be restarted in a loop).
RETRY_START_AFTER_S = 30.0
_STDERR_TAIL = 1500
#: After a call times out (or is cancelled), the server is pinged; a session that does not
#: answer a ping within this is hung (a stopped or wedged process) and is restarted like a
#: crashed one, so later calls do not each wait out their own timeout on it.
PING_TIMEOUT_S = 5.0

ProgressCallback = Callable[[float, float | None, str | None], None]
#: Called with a log notification's level, logger and data.
LogCallback = Callable[[str, str | None, object], None]
#: Answers an elicitation request of the call it belongs to.
ElicitCallback = Callable[["mcp_types.ElicitRequestParams"], Awaitable["mcp_types.ElicitResult"]]
#: Answers a sampling request: (server, params, max_tokens) -> the result.
SampleFn = Callable[
    [str, "mcp_types.CreateMessageRequestParams", int],
    Awaitable["mcp_types.CreateMessageResult"],
]
_E = TypeVar("_E", bound=BaseException)


class MCPServerError(ArtError):
    """An MCP server could not be started (or restarted); the message says which and why."""

    code = "MCP_SERVER_UNAVAILABLE"


class MCPCallError(Exception):
    """A tool call that failed outside the tool (transport, protocol, timeout, crash)."""

    def __init__(self, message: str, code: ToolErrorCode, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.retryable = retryable


class ServerConnection:
    """The session with one MCP server, shared by every call to its tools."""

    def __init__(
        self, name: str, config: MCPServerConfig, client_info: mcp_types.Implementation
    ) -> None:
        self.name = name
        self.config = config
        self._client_info = client_info
        self._client: Client | None = None
        self._stop: asyncio.Event | None = None
        self._holder: asyncio.Task[None] | None = None
        self._lock: asyncio.Lock | None = None
        self._stderr: TextIO | None = None
        #: The tools the server listed when it first started.
        self.tools: list[mcp_types.Tool] | None = None
        #: The transport in use (`sse` after the Streamable HTTP fallback).
        self.transport: Transport = config.kind
        self.protocol_version: str | None = None
        #: Why the last start (or restart) failed; None once it runs.
        self.error: str | None = None
        self._why = ""
        self._failed_at: float | None = None
        self.restarts = 0
        #: The liveness check after a call that timed out; calls wait for it to finish.
        self._check: asyncio.Task[None] | None = None
        #: The log listeners of the calls in flight (a server's log notification carries
        #: no request id, so each call running on the server reports it).
        self._log_listeners: set[LogCallback] = set()
        #: The elicitation handlers of the calls in flight.
        self._elicit_listeners: set[ElicitCallback] = set()
        #: What answers the server's sampling requests (set by the instance using it).
        self.sampler: SampleFn | None = None
        self._sampling_limit = SamplingLimit(config)

    # -- state ------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._client is not None

    def should_start(self, now: float) -> bool:
        """Not running, and not failed within the last RETRY_START_AFTER_S."""
        if self._client is not None:
            return False
        return self._failed_at is None or now - self._failed_at >= RETRY_START_AFTER_S

    # -- lifecycle --------------------------------------------------------------------
    async def start(self) -> list[mcp_types.Tool]:
        """Connect (if not connected) and return the tools the server lists."""
        async with self._guard():
            if self._client is None:
                await self._connect()
            assert self.tools is not None
            return self.tools

    async def close(self) -> None:
        """Stop the session (a stdio server's process tree included). Idempotent."""
        if self._check is not None:
            self._check.cancel()
            await asyncio.gather(self._check, return_exceptions=True)
        async with self._guard():
            await self._disconnect()

    async def call(
        self,
        tool: str,
        arguments: dict[str, object],
        on_progress: ProgressCallback | None,
        on_log: LogCallback | None = None,
        on_elicit: ElicitCallback | None = None,
    ) -> mcp_types.CallToolResult:
        """Call `tool`; raises MCPCallError for failures outside the tool itself."""
        if on_log is not None:
            self._log_listeners.add(on_log)
        if on_elicit is not None:
            self._elicit_listeners.add(on_elicit)
        try:
            return await self._call(tool, arguments, on_progress)
        finally:
            if on_log is not None:
                self._log_listeners.discard(on_log)
            if on_elicit is not None:
                self._elicit_listeners.discard(on_elicit)

    async def _call(
        self,
        tool: str,
        arguments: dict[str, object],
        on_progress: ProgressCallback | None,
    ) -> mcp_types.CallToolResult:
        client = await self._connected()

        forward = None
        if on_progress is not None:
            report = on_progress

            async def forward(progress: float, total: float | None, message: str | None) -> None:
                report(progress, total, message)

        try:
            return await client.call_tool(
                tool,
                arguments,
                read_timeout_seconds=self.config.timeout_s,
                progress_callback=forward,
            )
        except asyncio.CancelledError:
            self._check_alive(client)  # the step's timeout, or the run was cancelled
            raise
        except Exception as exc:
            if not _session_lost(exc, self.transport):
                error = _call_error(self.name, tool, exc, self.config.timeout_s)
                if error.code is ToolErrorCode.TIMEOUT:
                    self._check_alive(client)
                raise error from None
        # The server went away (a stdio process that exited, an HTTP server that is gone
        # or was replaced and no longer knows the session).
        await self._restart(client)
        raise MCPCallError(
            f"MCP server {self.name!r} stopped while running {tool!r}; it was restarted, "
            "so running the step again may succeed",
            ToolErrorCode.IO_ERROR,
            retryable=True,
        )

    # -- requests and notifications from the server -----------------------------------------
    async def _on_log(self, params: mcp_types.LoggingMessageNotificationParams) -> None:
        """A log notification: into art's log, and to every call running on the server."""
        level = str(params.level)
        log.info(
            "MCP server log", server=self.name, level=level, logger=params.logger, data=params.data
        )
        for listener in list(self._log_listeners):
            try:
                listener(level, params.logger, params.data)
            except Exception:  # a listener's failure must not break the session
                log.debug("MCP log listener failed", server=self.name, exc_info=True)

    async def _on_elicit(
        self, context: ClientRequestContext, params: mcp_types.ElicitRequestParams
    ) -> mcp_types.ElicitResult | mcp_types.ErrorData:
        """An elicitation: handled by the call it belongs to, which must be the only one
        running on the server (the request names no call); otherwise declined."""
        from mcp_types import ElicitResult

        listeners = list(self._elicit_listeners)
        if len(listeners) != 1:
            log.warning(
                "MCP elicitation declined: it cannot be matched to one call",
                server=self.name,
                calls_running=len(listeners),
            )
            return ElicitResult(action="decline")
        return await listeners[0](params)

    async def _on_sample(
        self, context: ClientRequestContext, params: mcp_types.CreateMessageRequestParams
    ) -> mcp_types.CreateMessageResult | mcp_types.ErrorData:
        """A sampling request, answered by art's model within the server's limits."""
        from mcp_types import INVALID_REQUEST, ErrorData

        if self.sampler is None:
            why = "no model: this MCP client serves no art instance"
            return ErrorData(code=INVALID_REQUEST, message=f"sampling refused: {why}")
        max_tokens, refused = self._sampling_limit.admit(params.max_tokens)
        if refused is not None:
            log.warning("MCP sampling refused", server=self.name, reason=refused)
            return ErrorData(code=INVALID_REQUEST, message=f"sampling refused: {refused}")
        try:
            return await self.sampler(self.name, params, max_tokens)
        except Exception as exc:
            log.warning("MCP sampling failed", server=self.name, error=_reason(exc))
            return ErrorData(code=INVALID_REQUEST, message=f"sampling failed: {_reason(exc)}")

    # -- internals ----------------------------------------------------------------------
    def _guard(self) -> asyncio.Lock:
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock

    def _check_alive(self, client: Client) -> None:
        """Ping `client`'s server in the background, restarting it when it does not answer."""
        if self._check is None or self._check.done():
            self._check = asyncio.get_running_loop().create_task(self._ping_or_restart(client))

    async def _ping_or_restart(self, client: Client) -> None:
        try:
            async with asyncio.timeout(PING_TIMEOUT_S):
                await client.send_ping()
            return
        except Exception as exc:
            if self._client is not client:
                return  # already replaced
            log.warning(
                "MCP server does not answer a ping; restarting it",
                server=self.name,
                error=_reason(exc) if not isinstance(exc, TimeoutError) else "no answer",
            )
        with contextlib.suppress(MCPCallError):
            await self._restart(client)

    async def _connected(self) -> Client:
        check = self._check
        if check is not None and not check.done():
            # A session that may be hung: wait to know (and for its replacement).
            await asyncio.shield(check)
        client = self._client
        if client is not None:
            return client
        async with self._guard():
            if self._client is None:
                if self.error is not None and not self.should_start(time.monotonic()):
                    raise MCPCallError(self.error, ToolErrorCode.IO_ERROR)
                try:
                    await self._connect()
                except MCPServerError as exc:
                    raise MCPCallError(exc.message, ToolErrorCode.IO_ERROR) from None
            assert self._client is not None
            return self._client

    async def _restart(self, crashed: Client) -> None:
        """Replace a session that went away with a new one, once; after a failed restart
        calls fail at once with the reason for RETRY_START_AFTER_S."""
        async with self._guard():
            if self._client is not crashed:
                return  # another call restarted it already
            tail = self._stderr_tail()
            await self._disconnect()
            self.restarts += 1
            log.warning("MCP server stopped; restarting it", server=self.name)
            try:
                await self._connect()
            except MCPServerError:
                error = f"MCP server {self.name!r} stopped and could not be restarted: {self._why}"
                if tail and tail not in error:
                    error += f"; before it stopped, its stderr ended with: {tail}"
                self.error = error
                log.error("MCP server could not be restarted", server=self.name, error=error)
                raise MCPCallError(error, ToolErrorCode.IO_ERROR) from None

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[Client] = loop.create_future()
        stop = asyncio.Event()
        if self.config.kind == "stdio":
            # Closed by _close_stderr when the session ends.
            self._stderr = cast(
                TextIO,
                tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace"),  # noqa: SIM115
            )
        holder = loop.create_task(self._hold(ready, stop), name=f"art-mcp-{self.name}")
        started = time.monotonic()
        try:
            async with asyncio.timeout(self.config.startup_timeout_s):
                client = await ready
                listing = await _list_all_tools(client)
        except BaseException as exc:
            ready.cancel()
            stop.set()
            holder.cancel()
            await asyncio.gather(holder, return_exceptions=True)
            self._why = self._start_failure(exc)
            await self._stop_leftovers()
            self._close_stderr()
            if isinstance(exc, asyncio.CancelledError):
                raise
            self.error = f"MCP server {self.name!r} ({self.config.describe()}) did not start: "
            self.error += self._why
            self._failed_at = time.monotonic()
            raise MCPServerError(self.error) from None
        self._client, self._stop, self._holder = client, stop, holder
        self.tools = self.tools if self.tools is not None else listing
        self.protocol_version = client.protocol_version
        self.error = self._failed_at = None
        log.info(
            "MCP server started",
            server=self.name,
            transport=self.transport,
            protocol=self.protocol_version,
            tools=len(listing),
            seconds=round(time.monotonic() - started, 3),
        )

    async def _hold(self, ready: asyncio.Future[Client], stop: asyncio.Event) -> None:
        """Enter the session, hand it over through `ready`, and leave it when `stop` is set."""
        try:
            async with contextlib.AsyncExitStack() as stack:
                client = await self._enter(stack)
                if ready.done():  # the start was abandoned (timed out) meanwhile
                    return
                ready.set_result(client)
                await stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            elif not isinstance(exc, asyncio.CancelledError):
                log.debug("MCP session ended with an error", server=self.name, exc_info=exc)
            if isinstance(exc, asyncio.CancelledError):
                raise

    async def _enter(self, stack: contextlib.AsyncExitStack) -> Client:
        """The connected client; Streamable HTTP falls back to SSE when the server refuses it."""
        from mcp import MCPError

        try:
            return await stack.enter_async_context(self._client_for(self.config.kind, stack))
        except Exception as exc:
            if self.config.kind != "http" or _find(exc, MCPError) is None:
                raise
            log.info("Streamable HTTP refused; trying SSE", server=self.name, error=_reason(exc))
            self.transport = "sse"
            return await stack.enter_async_context(self._client_for("sse", stack))

    def _client_for(self, transport: Transport, stack: contextlib.AsyncExitStack) -> Client:
        from mcp import Client, StdioServerParameters

        config = self.config
        if transport == "stdio":
            from mcp.client.stdio import stdio_client

            assert config.command is not None and self._stderr is not None
            params = StdioServerParameters(
                command=config.command, args=config.args, env=config.env or None, cwd=config.cwd
            )
            server: Any = stdio_client(params, errlog=self._stderr)
        elif transport == "sse":
            from mcp.client.sse import sse_client

            assert config.url is not None
            server = sse_client(config.url, headers=config.headers or None)
        else:
            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            assert config.url is not None
            http = httpx2.AsyncClient(
                headers=config.headers, timeout=httpx2.Timeout(30.0, read=300.0)
            )
            stack.push_async_callback(http.aclose)
            server = streamable_http_client(config.url, http_client=http)
        return Client(
            server,
            client_info=self._client_info,
            logging_callback=self._on_log,
            elicitation_callback=self._on_elicit if config.elicitation else None,
            # Declared only when allowed: a server offers sampling tools to clients that do.
            sampling_callback=self._on_sample if config.sampling else None,
        )

    async def _disconnect(self) -> None:
        stop, holder = self._stop, self._holder
        self._client = self._stop = self._holder = None
        if stop is not None:
            stop.set()
        if holder is not None:
            await asyncio.gather(holder, return_exceptions=True)
        await self._stop_leftovers()
        self._close_stderr()

    async def _stop_leftovers(self) -> None:
        """Stop what a stdio server left running when it exited: the SDK stops the server's
        process group only when the server itself does not exit once its stdin closes."""
        if self._stderr is None:
            return
        pids = _writing_to(self._stderr)
        if pids:
            log.warning("stopping processes the MCP server left running", server=self.name)
            await _terminate(pids)

    def _start_failure(self, exc: BaseException) -> str:
        """Why a start failed, in words (with the tail of a stdio server's stderr)."""
        config = self.config
        if isinstance(exc, TimeoutError):
            why = f"no answer within {config.startup_timeout_s:g} s (startup_timeout_s)"
        elif isinstance(leaf := _leaf(exc), FileNotFoundError) and config.command:
            why = f"command not found: {config.command}"
        else:
            why = _reason(leaf)
        if tail := self._stderr_tail():
            why += f"; its stderr ended with: {tail}"
        return why

    def _stderr_tail(self) -> str:
        stream = self._stderr
        if stream is None:
            return ""
        try:
            stream.flush()
            stream.seek(0, 2)
            size = stream.tell()
            stream.seek(max(0, size - _STDERR_TAIL * 2))
            text = stream.read()
        except (OSError, ValueError):
            return ""
        lines = [line.rstrip() for line in text.splitlines() if line.strip()]
        return " | ".join(lines)[-_STDERR_TAIL:]

    def _close_stderr(self) -> None:
        stream, self._stderr = self._stderr, None
        if stream is not None:
            stream.close()


def _writing_to(stream: TextIO) -> list[int]:
    """The processes whose stderr is `stream`'s file: a stdio server's descendants inherit
    the file art gave it, which is how they are found (Linux's /proc; none elsewhere)."""
    try:
        target = os.fstat(stream.fileno())
        entries = os.listdir("/proc")
    except (OSError, ValueError):
        return []
    me = os.getpid()
    found = []
    for entry in entries:
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            info = os.stat(f"/proc/{entry}/fd/2")
        except OSError:
            continue
        if (info.st_dev, info.st_ino) == (target.st_dev, target.st_ino):
            found.append(int(entry))
    return found


async def _terminate(pids: list[int], grace_s: float = 2.0) -> None:
    """SIGTERM `pids`, then SIGKILL them if any is still there after `grace_s`."""
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
    poll_s = 0.02
    for _ in range(round(grace_s / poll_s)):
        if not any(_running(pid) for pid in pids):
            return
        await asyncio.sleep(poll_s)
    for pid in filter(_running, pids):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _running(pid: int) -> bool:
    """Exists and is not a zombie (a zombie is dead, waiting for its parent to reap it)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


async def _list_all_tools(client: Client) -> list[mcp_types.Tool]:
    tools: list[mcp_types.Tool] = []
    cursor: str | None = None
    for _ in range(100):  # a paginator that never ends cannot hang the start
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            break
    return tools


def _call_error(
    server: str, tool: str, exc: BaseException, timeout_s: float | None
) -> MCPCallError:
    """The MCPCallError of a call that failed outside the tool."""
    from mcp import MCPError
    from mcp_types import INVALID_PARAMS, METHOD_NOT_FOUND, REQUEST_TIMEOUT
    from pydantic import ValidationError

    mcp_error = _find(exc, MCPError)
    where = f"MCP server {server!r}, tool {tool!r}"
    if mcp_error is not None:
        if mcp_error.code == REQUEST_TIMEOUT:
            return MCPCallError(
                f"{where}: no answer within {timeout_s:g} s (timeout)",
                ToolErrorCode.TIMEOUT,
                retryable=True,
            )
        if mcp_error.code == INVALID_PARAMS:
            return MCPCallError(f"{where}: {mcp_error.message}", ToolErrorCode.VALIDATION_ERROR)
        if mcp_error.code == METHOD_NOT_FOUND:
            return MCPCallError(f"{where}: {mcp_error.message}", ToolErrorCode.NOT_FOUND)
        return MCPCallError(
            f"{where}: MCP error {mcp_error.code}: {mcp_error.message}", ToolErrorCode.UNKNOWN
        )
    leaf = _leaf(exc)
    if isinstance(leaf, ValidationError | RuntimeError):
        # The SDK checks results against the protocol and the tool's outputSchema.
        return MCPCallError(
            f"{where}: the server's result broke the protocol or the tool's outputSchema: "
            f"{_reason(leaf)}",
            ToolErrorCode.CONTRACT_VIOLATION,
        )
    return MCPCallError(f"{where}: {_reason(leaf)}", ToolErrorCode.IO_ERROR, retryable=True)


def _session_lost(exc: BaseException, transport: Transport) -> bool:
    """The session is gone: the connection closed, an HTTP server refuses connections, or
    answers the session's requests with an HTTP error (a new process that does not know
    the session: the spec's 404, or another 4xx/5xx without a JSON-RPC error)."""
    import httpx2
    from mcp import MCPError
    from mcp_types import CONNECTION_CLOSED, INTERNAL_ERROR, INVALID_REQUEST

    mcp_error = _find(exc, MCPError)
    if mcp_error is not None:
        if mcp_error.code == CONNECTION_CLOSED:
            return True
        # The SDK's stand-ins for HTTP errors that carried no JSON-RPC error body.
        http_error = (mcp_error.code, mcp_error.message) in (
            (INVALID_REQUEST, "Session terminated"),
            (INTERNAL_ERROR, "Server returned an error response"),
        )
        return transport != "stdio" and http_error
    return _find(exc, httpx2.TransportError) is not None or isinstance(_leaf(exc), ConnectionError)


def _find(exc: BaseException, kind: type[_E]) -> _E | None:
    """The first `kind` in `exc`, looking inside exception groups and causes."""
    if isinstance(exc, kind):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            if (found := _find(inner, kind)) is not None:
                return found
    if exc.__cause__ is not None and exc.__cause__ is not exc:
        return _find(exc.__cause__, kind)
    return None


def _leaf(exc: BaseException) -> BaseException:
    """The first exception inside (nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _reason(exc: BaseException) -> str:
    from mcp import MCPError

    exc = _leaf(exc)
    if isinstance(exc, MCPError):
        return f"MCP error {exc.code}: {exc.message}"
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
