"""AttachedServers: the MCP servers one `ArtInstance` uses (`mcp_servers=`).

The instance imports this module only when MCP servers are configured: the client needs
the optional `mcp` extra.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import Any

from art.adapters.mcp.client import MCPClient
from art.adapters.mcp.config import MCPConfig
from art.adapters.mcp.sampling import Sampler
from art.llm.model import LiteLLMModel, Model
from art.tooling.registry import ToolRegistry

__all__ = ["AttachedServers"]


class AttachedServers:
    """An instance's MCP client (the one given, or one made from a config, which the
    instance then owns and closes), whose servers' sampling requests are answered by the
    instance's model and whose tools join the instance's registry."""

    def __init__(
        self,
        servers: MCPClient | MCPConfig | Mapping[str, Any] | str | os.PathLike[str],
        model: Model | str,
        llm_params: Mapping[str, Any],
    ) -> None:
        self.client = servers if isinstance(servers, MCPClient) else MCPClient(servers)
        self._owned = self.client is not servers
        self._lock = threading.Lock()  # runs on two loops may register tools at once
        if isinstance(model, str):
            model = LiteLLMModel(model)
        self.client.attach_sampler(Sampler(model, dict(llm_params)))

    async def start(self, registry: ToolRegistry) -> None:
        """Start the servers not running yet (one that fails is left out, with a warning,
        and tried again by a later call) and register their tools on `registry` once."""
        tools = await self.client.astart(strict=False)
        with self._lock:
            for tool in tools:
                if registry.get(tool.name) is not tool:
                    registry.register(tool)

    async def aclose(self) -> None:
        """Stop the servers if the instance started the client."""
        if self._owned:
            await self.client.aclose()
