"""The `mcp` extra the MCP support needs: what to install when it is missing."""

__all__ = ["INSTALL_HINT"]

INSTALL_HINT = 'the MCP support needs the mcp extra: pip install -c constraints.txt "art-pes[mcp]"'
