"""art.adapters.mcp: the Model Context Protocol both ways (docs/mcp.md).

- Client: `MCPClient` connects to MCP servers (stdio, Streamable HTTP, SSE) and offers
  each of their tools as an `MCPTool`; give it, a config or a config file's path to
  `create_art_instance(mcp_servers=...)`.
- Server: `create_mcp_server(instance)` and `serve(instance, transport=...)` make an art
  agent an MCP server (`art mcp` on the command line).

It needs the `mcp` extra (`pip install "art-pes[mcp]"`). Names load on first use, so
importing this package loads neither the MCP SDK nor litellm.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from art.adapters.mcp.extra import INSTALL_HINT

_EXPORTS: dict[str, str] = {
    "MCPClient": "art.adapters.mcp.client",
    "ServerStatus": "art.adapters.mcp.client",
    "MCPConfig": "art.adapters.mcp.config",
    "MCPServerConfig": "art.adapters.mcp.config",
    "load_mcp_config": "art.adapters.mcp.config",
    "MCPServerError": "art.adapters.mcp.connection",
    "MCPTool": "art.adapters.mcp.tools",
    "tool_result": "art.adapters.mcp.tools",
    "tool_names": "art.adapters.mcp.naming",
    "create_mcp_server": "art.adapters.mcp.server",
    "serve": "art.adapters.mcp.server",
    "aserve": "art.adapters.mcp.server",
    "streamable_http_app": "art.adapters.mcp.server",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'art.adapters.mcp' has no attribute {name!r}")
    try:
        value = getattr(importlib.import_module(module), name)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] in ("mcp", "mcp_types", "httpx2"):
            from art.errors import ConfigurationError

            raise ConfigurationError(INSTALL_HINT) from exc
        raise
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])


if TYPE_CHECKING:
    from art.adapters.mcp.client import MCPClient, ServerStatus  # noqa: F401
    from art.adapters.mcp.config import (  # noqa: F401
        MCPConfig,
        MCPServerConfig,
        load_mcp_config,
    )
    from art.adapters.mcp.connection import MCPServerError  # noqa: F401
    from art.adapters.mcp.naming import tool_names  # noqa: F401
    from art.adapters.mcp.server import (  # noqa: F401
        aserve,
        create_mcp_server,
        serve,
        streamable_http_app,
    )
    from art.adapters.mcp.tools import MCPTool, tool_result  # noqa: F401
