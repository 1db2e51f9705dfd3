"""An MCP server built on the official SDK's `MCPServer` that reports what reached it, for
the client tests that must see the server's side: the HTTP headers a request carried, and
whether a call was cancelled with MCP's `notifications/cancelled`.

    python tests/mcp_probe.py stdio
    python tests/mcp_probe.py streamable-http PORT
    python tests/mcp_probe.py sse PORT

MCP_PROBE_LOG names a file that gets one line per cancelled call: `cancelled <tag>`.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ToolAnnotations

server = MCPServer("probe")


# Read-only, so art's MCP client calls them without asking a person first.
@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def request_headers(ctx: Context) -> dict[str, str]:
    """The HTTP headers of the request that called this tool (empty over stdio)."""
    return dict(ctx.headers or {})


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def wait(tag: str, seconds: float) -> str:
    """Waits `seconds`, writing `cancelled <tag>` to MCP_PROBE_LOG if cancelled first."""
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        with Path(os.environ["MCP_PROBE_LOG"]).open("a", encoding="utf-8") as log:  # noqa: ASYNC230
            log.write(f"cancelled {tag}\n")
        raise
    return f"waited {seconds:g} s"


# Not idempotent: a call that failed half-way must not be repeated by a retry.
@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False))
async def wait_and_count(seconds: float) -> str:
    """Waits `seconds`, then says so; each call counts (MCP_PROBE_LOG gets `started`)."""
    with Path(os.environ["MCP_PROBE_LOG"]).open("a", encoding="utf-8") as log:  # noqa: ASYNC230
        log.write("started\n")
    await asyncio.sleep(seconds)
    return f"waited {seconds:g} s"


if __name__ == "__main__":
    transport = sys.argv[1]
    if transport == "stdio":
        server.run()
    else:
        server.run(transport, host="127.0.0.1", port=int(sys.argv[2]))  # type: ignore[call-overload]
