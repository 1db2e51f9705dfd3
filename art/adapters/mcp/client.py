"""MCPClient: the MCP servers an agent uses, their sessions and their tools.

The sessions live on the client's own event loop, in a daemon thread (`art.core.sync.Portal`),
so one set of servers serves the sync and the async API and any caller's loop alike, and
`close()` works from plain sync code. A tool call crosses to that loop and back; cancelling
the caller's task cancels the call there, and the SDK then sends the server MCP's
`notifications/cancelled`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
import time
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, TypeVar

from art.adapters.mcp.config import MCPConfig, Transport, load_mcp_config
from art.adapters.mcp.connection import (
    ElicitCallback,
    LogCallback,
    MCPServerError,
    ProgressCallback,
    SampleFn,
    ServerConnection,
)
from art.adapters.mcp.extra import INSTALL_HINT
from art.adapters.mcp.naming import tool_names
from art.adapters.mcp.tools import MCPTool
from art.core.log import get_logger
from art.core.sync import Portal
from art.core.version import __version__
from art.errors import ConfigurationError

if TYPE_CHECKING:
    import mcp_types


__all__ = ["MCPClient", "ServerStatus"]

log = get_logger(__name__)
T = TypeVar("T")

ServerState = Literal["not started", "running", "failed", "disabled"]
_DONE: concurrent.futures.Future[None] = concurrent.futures.Future()
_DONE.set_result(None)


@dataclass(frozen=True)
class ServerStatus:
    """Where one configured server stands (what `art tools` shows)."""

    name: str
    state: ServerState
    transport: Transport
    target: str
    tools: list[str]
    error: str | None = None
    protocol_version: str | None = None
    #: The server's tools that are not offered (their MCP names), with the reason each.
    left_out: dict[str, str] = field(default_factory=dict)


class MCPClient:
    """Connects to the configured MCP servers and offers their tools as art tools.

    `servers` is an `MCPConfig`, a dict in the `mcpServers` file format, or the path of
    such a JSON file. Nothing starts until `astart()` (or `start()`, or an `ArtInstance`
    given this client as `mcp_servers` prepares its first run); `aclose()` stops every
    server. Use it as a context manager to do both::

        async with MCPClient("mcp.json") as mcp:
            inst = art.create_art_instance(mcp_servers=mcp, ...)
    """

    def __init__(self, servers: MCPConfig | Mapping[str, object] | str | os.PathLike[str]) -> None:
        self.config = load_mcp_config(servers)
        try:
            from mcp_types import Implementation
        except ModuleNotFoundError:
            raise ConfigurationError(INSTALL_HINT) from None

        info = Implementation(name="art", version=__version__)
        self._connections = {
            name: ServerConnection(name, server, info)
            for name, server in self.config.enabled().items()
        }
        self._tools: dict[str, list[MCPTool]] = {}
        self._left_out: dict[str, dict[str, str]] = {}
        self._portal = Portal(name="art-mcp")
        self._lock = threading.Lock()
        self._starting: concurrent.futures.Future[None] | None = None
        self._closed = False

    def __repr__(self) -> str:
        return f"MCPClient(servers={list(self.config.servers)!r})"

    # -- starting ---------------------------------------------------------------------
    async def astart(self, *, strict: bool = True) -> list[MCPTool]:
        """Start every server that is not running and return the tools of those that are.

        Concurrent callers share one start. With `strict`, a server that did not start
        raises MCPServerError (naming each failed server and why); without, it is logged
        as a warning, its tools are left out, and a later call tries it again (not
        sooner than 30 s after it failed)."""
        # Shielded: one caller's cancellation must not cancel the start the others share.
        await asyncio.shield(asyncio.wrap_future(self._start_future()))
        return self._started(strict)

    def start(self, *, strict: bool = True) -> list[MCPTool]:
        """Sync `astart`."""
        self._start_future().result()
        return self._started(strict)

    def _start_future(self) -> concurrent.futures.Future[None]:
        self._check_open()
        now = time.monotonic()
        if not any(c.should_start(now) for c in self._connections.values()):
            return _DONE  # every server runs (or waits to be retried): nothing to hop for
        with self._lock:
            future = self._starting
            if future is None or future.done():
                future = self._starting = self._portal.submit(self._start_servers())
            return future

    def _started(self, strict: bool) -> list[MCPTool]:
        if strict and (errors := self.errors()):
            raise MCPServerError("; ".join(errors.values()))
        return self.tools

    @property
    def tools(self) -> list[MCPTool]:
        """The tools of the servers that started, in config order."""
        return [tool for name in self._connections for tool in self._tools.get(name, [])]

    def errors(self) -> dict[str, str]:
        """Why each server that is not running is not: did not start, or stopped and
        could not be restarted."""
        errors = dict(self.config.refused)
        errors.update(
            (name, connection.error)
            for name, connection in self._connections.items()
            if not connection.running and connection.error is not None
        )
        return errors

    def status(self) -> list[ServerStatus]:
        """Every configured server, disabled ones included, in config order."""
        statuses = []
        for name, server in self.config.servers.items():
            connection = self._connections.get(name)
            tools = [tool.name for tool in self._tools.get(name, [])]
            target = server.describe()
            if name in self.config.refused:
                reason = self.config.refused[name]
                statuses.append(ServerStatus(name, "failed", server.kind, target, [], reason))
                continue
            if connection is None:
                statuses.append(ServerStatus(name, "disabled", server.kind, target, tools))
                continue
            error = None if connection.running else connection.error
            state: ServerState = (
                "running" if connection.running else "failed" if error else "not started"
            )
            statuses.append(
                ServerStatus(
                    name,
                    state,
                    connection.transport,
                    target,
                    tools,
                    error,
                    connection.protocol_version,
                    dict(self._left_out.get(name, {})),
                )
            )
        return statuses

    # -- calls (MCPTool) ----------------------------------------------------------------
    async def call(
        self,
        server: str,
        tool: str,
        arguments: dict[str, object],
        on_progress: ProgressCallback | None = None,
        on_log: LogCallback | None = None,
        on_elicit: ElicitCallback | None = None,
    ) -> mcp_types.CallToolResult:
        """Call `server`'s MCP tool `tool` (its MCP name) from any event loop.

        Raises MCPCallError for failures outside the tool; a tool's own failure comes
        back as a result with `isError` set."""
        self._check_open()
        connection = self._connections.get(server)
        if connection is None:
            raise ConfigurationError(f"no enabled MCP server named {server!r}")
        return await self._on_loop(connection.call(tool, arguments, on_progress, on_log, on_elicit))

    def attach_sampler(self, sampler: SampleFn) -> None:
        """Answer the servers' sampling requests with `sampler` (an `ArtInstance` attaches
        its model when given this client; a client shared by several instances keeps the
        first one's)."""
        for connection in self._connections.values():
            if connection.sampler is None:
                connection.sampler = sampler

    # -- closing ------------------------------------------------------------------------
    async def aclose(self) -> None:
        """Stop every server (their processes included) and the client's loop. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._portal.running:
            await self._on_loop(self._close_servers())
            await asyncio.to_thread(self._portal.close)

    def close(self) -> None:
        """Sync `aclose`."""
        if self._closed:
            return
        self._closed = True
        if self._portal.running:
            self._portal.run(self._close_servers())
            self._portal.close()

    async def __aenter__(self) -> MCPClient:
        try:
            await self.astart()
        except BaseException:
            await self.aclose()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __enter__(self) -> MCPClient:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- on the client's loop -----------------------------------------------------------
    async def _start_servers(self) -> None:
        now = time.monotonic()
        waiting = [c for c in self._connections.values() if c.should_start(now)]
        listings = await asyncio.gather(*(c.start() for c in waiting), return_exceptions=True)
        for connection, listing in zip(waiting, listings, strict=True):
            if isinstance(listing, BaseException):
                if not isinstance(listing, MCPServerError):
                    log.error("MCP server start failed", server=connection.name, exc_info=listing)
                    connection.error = f"MCP server {connection.name!r} did not start: {listing}"
                log.warning("MCP server did not start", server=connection.name, error=str(listing))
                continue
            if connection.name in self._tools:
                continue  # its tools were made when it first started
            left_out = self._left_out[connection.name] = _left_out(listing)
            for tool, reason in left_out.items():
                log.warning("MCP tool left out", server=connection.name, tool=tool, reason=reason)
            offered = [tool for tool in listing if tool.name not in left_out]
            server = self.config.servers[connection.name]
            listed = {tool.name for tool in listing}
            unknown = (server.approved_tools | set(server.require_approval)) - listed
            if unknown:
                log.warning(
                    "MCP approval lists name tools the server does not have",
                    server=connection.name,
                    tools=sorted(unknown),
                )
            names = tool_names(connection.name, [tool.name for tool in offered])
            self._tools[connection.name] = [
                MCPTool(
                    self,
                    connection.name,
                    tool,
                    names[tool.name],
                    asks_first=server.asks_before(tool),
                )
                for tool in offered
            ]

    async def _close_servers(self) -> None:
        await asyncio.gather(
            *(c.close() for c in self._connections.values()), return_exceptions=True
        )

    async def _on_loop(self, coro: Coroutine[object, None, T]) -> T:
        """Await `coro` on the client's loop from whichever loop the caller is on."""
        if self._portal.in_portal:
            return await coro
        return await asyncio.wrap_future(self._portal.submit(coro))

    def _check_open(self) -> None:
        if self._closed:
            raise ConfigurationError("this MCPClient is closed")


def _left_out(listing: list[mcp_types.Tool]) -> dict[str, str]:
    """The tools that cannot succeed when called, with why: a tool whose
    `execution.taskSupport` is "required" answers a plain call with an error, and the MCP
    SDK reads a task-augmented call's answer (a task, not a result) as a broken result."""
    return {
        tool.name: 'it must be called as an MCP task (execution.taskSupport "required"), '
        "which the MCP SDK art uses cannot do"
        for tool in listing
        if tool.execution is not None and tool.execution.task_support == "required"
    }
